package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Control-socket error codes from the Loopr spec's TUI protocol table.
const (
	CodeParseError       = -32700 // the line is not JSON
	CodeInvalidRequest   = -32600 // JSON, but not a request object
	CodeMethodNotFound   = -32601
	CodeInvalidParams    = -32602
	CodeInternal         = -32603
	CodeNotFound         = 1001 // the spec's LoopNotFound, used for any unknown id
	CodeInvalidState     = 1002 // wrong state for the action
	CodeUnauthorized     = 1003
	CodeQueueFull        = 1004 // orchestrd's: the lane's queue is full
	CodeShuttingDown     = 1005 // orchestrd's: the daemon is stopping
	CodeStoreUnavailable = 1006 // orchestrd's: the state store cannot record it
)

// DefaultMaxLine is the longest control line accepted unless configured.
const DefaultMaxLine = 1 << 20

// Request is one client line: {id, method, params}.
type Request struct {
	ID     uint64          `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Error is the spec's DaemonError.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Errorf builds an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Response answers a Request with the same id: exactly one of Result, Error.
type Response struct {
	ID     uint64          `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Event is a pushed line. It carries no id.
type Event struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
	// Raw is the bytes that followed the event's line when its data
	// announced them (data_len: a binary job.stream's piece of output).
	Raw []byte `json:"-"`
}

// ClientLine is what a client reads: a Response (ID set by the server,
// Event empty) or an Event.
type ClientLine struct {
	ID     *uint64         `json:"id,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	Event  string          `json:"event,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// ParseRequest decodes one line (without its newline; surrounding JSON
// whitespace is allowed). On failure it returns a *Error with the spec's code
// and, where the id could be read, that id so the answer can carry it;
// otherwise the id is 0:
//
//   - -32700 the line is not valid JSON;
//   - -32600 it is not an object, or id is missing, duplicated, or not a
//     non-negative integer that fits in a u64 (null, strings, fractions and
//     exponents are refused, as serde refuses them for a u64), or method is
//     missing, duplicated, not a string or empty, or params is duplicated;
//   - -32602 params is present and neither an object nor null.
//
// Other top-level fields are ignored. A missing or null params leaves
// Params nil (DecodeParams then treats it as {}). Params is a copy: the
// Request stays valid after the line's buffer is reused.
func ParseRequest(line []byte) (Request, *Error) {
	if !ValidJSON(line) {
		return Request{}, Errorf(CodeParseError, "parse error: line is not valid JSON")
	}
	i := skipJSONSpace(line, 0)
	if line[i] != '{' {
		return Request{}, Errorf(CodeInvalidRequest, "invalid request: want a JSON object with id, method and params")
	}
	var (
		idRaw, mRaw, pRaw []byte
		idN, mN, pN       int // how many times each key appears
	)
	for it := members(line, i); ; {
		key, val, ok := it.next()
		if !ok {
			break
		}
		switch string(key) {
		case "id":
			idRaw, idN = val, idN+1
		case "method":
			mRaw, mN = val, mN+1
		case "params":
			pRaw, pN = val, pN+1
		}
	}

	var req Request
	if idN > 1 {
		return req, Errorf(CodeInvalidRequest, "invalid request: duplicate id")
	}
	if idN == 0 {
		return req, Errorf(CodeInvalidRequest, "invalid request: missing id")
	}
	id, ok := parseUint64(idRaw)
	if !ok {
		return req, Errorf(CodeInvalidRequest, "invalid request: id must be a non-negative integer, got %s", excerpt(idRaw))
	}
	req.ID = id
	if mN > 1 {
		return req, Errorf(CodeInvalidRequest, "invalid request: duplicate method")
	}
	if pN > 1 {
		return req, Errorf(CodeInvalidRequest, "invalid request: duplicate params")
	}
	if mN == 0 {
		return req, Errorf(CodeInvalidRequest, "invalid request: missing method")
	}
	method, ok := decodeMethod(mRaw)
	if !ok || method == "" {
		return req, Errorf(CodeInvalidRequest, "invalid request: method must be a non-empty string, got %s", excerpt(mRaw))
	}
	req.Method = method
	if pN == 1 && string(pRaw) != "null" {
		if pRaw[0] != '{' {
			return req, Errorf(CodeInvalidParams, "invalid params for %s: params must be an object, got %s", req.Method, excerpt(pRaw))
		}
		req.Params = append(json.RawMessage(nil), pRaw...)
	}
	return req, nil
}

// parseUint64 reads a JSON number that is a plain non-negative integer.
func parseUint64(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// decodeMethod unquotes a method name, without allocating for the spec's
// own methods.
func decodeMethod(raw []byte) (string, bool) { return internedString(raw, knownMethods) }

// knownMethods interns the Loopr control methods so parsing them does not
// allocate.
var knownMethods = interned("connect", "disconnect", "ping",
	"chat.send", "chat.cancel", "chat.clear",
	"loop.list", "loop.get", "loop.create_plan", "loop.start", "loop.pause",
	"loop.resume", "loop.cancel", "loop.delete",
	"plan.approve", "plan.reject", "plan.iterate", "plan.get_preview",
	"metrics.get")

// DecodeParams decodes req.Params into v, refusing unknown fields and
// trailing data; a missing params object decodes as {} (v is left as it
// is).
func DecodeParams(req Request, v any) *Error {
	if len(req.Params) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(req.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(CodeInvalidParams, "invalid params for %s: %v", req.Method, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(CodeInvalidParams, "invalid params for %s: trailing data after the params object", req.Method)
	}
	return nil
}

// ErrLineTooLong is returned by LineReader for a line over its maximum.
var ErrLineTooLong = errors.New("line too long")

// Buffer management for LineReader.
const (
	lineReaderBufSize = 4 << 10 // the bufio buffer: small, since every idle connection holds one
	// lineKeepCap: a line buffer above this is dropped before the next line,
	// so one long line does not pin its buffer for the connection's life.
	lineKeepCap = 256 << 10
)

// LineReader reads newline-terminated lines of bounded length.
//
// A line is the bytes before a '\n', minus one trailing '\r'; its length
// after that '\r' is removed must be at most the maximum. The reader never
// holds more than max+1 bytes of one line (the +1 being a '\r' that may be
// followed by '\n'), and a line that fits in its 4 KiB read buffer is
// returned without being copied.
type LineReader struct {
	br  *bufio.Reader
	max int
	buf []byte
	// partial: buf holds the start of a line whose read was interrupted by
	// an error; the next call continues it.
	partial bool
	err     error  // sticky ErrLineTooLong
	what    string // names the line in that error; "control line" when empty
}

// NewLineReader reads lines of at most max bytes (0 means DefaultMaxLine).
func NewLineReader(r io.Reader, max int) *LineReader {
	return newLineReaderSize(r, max, lineReaderBufSize)
}

func newLineReaderSize(r io.Reader, max, size int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	if max == math.MaxInt {
		max-- // keep max+1 representable
	}
	return &LineReader{br: bufio.NewReaderSize(r, size), max: max}
}

// Next returns the next line without its newline and without one trailing
// \r. The slice is valid until the next call. A final line without a
// newline is returned (also without a trailing \r) before io.EOF. A line
// over the maximum returns an error wrapping ErrLineTooLong, without more
// than max+1 of its bytes ever being copied out of the read buffer; the
// stream is then unusable and every later call returns the same error. Any other read error is returned as it
// is, and the bytes of the line read so far are kept: if the reader
// recovers (a read deadline, say), the next call continues the same line.
func (lr *LineReader) Next() ([]byte, error) {
	if lr.err != nil {
		return nil, lr.err
	}
	if !lr.partial {
		if cap(lr.buf) > lineKeepCap {
			lr.buf = nil
		}
		lr.buf = lr.buf[:0]
	}
	lr.partial = false
	for {
		frag, err := lr.br.ReadSlice('\n')
		if err == nil && len(lr.buf) == 0 {
			// The whole line is in the bufio buffer: return it in place.
			return lr.finish(frag[:len(frag)-1])
		}
		data := frag
		if err == nil {
			data = frag[:len(frag)-1]
		}
		if len(lr.buf)+len(data) > lr.max+1 {
			return lr.tooLong()
		}
		lr.buf = appendBounded(lr.buf, data, lr.max+1)
		switch {
		case err == nil:
			return lr.finish(lr.buf)
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			if len(lr.buf) == 0 {
				return nil, io.EOF
			}
			return lr.finish(lr.buf)
		default:
			lr.partial = len(lr.buf) > 0
			return nil, err
		}
	}
}

// LineBuffered reports whether a whole line is already read and waits in
// the buffer, so that Next returns it without reading: a reader that takes
// what has come in batches stops at the first line that is not complete,
// rather than wait for its end.
func (lr *LineReader) LineBuffered() bool {
	if lr.err != nil {
		return false
	}
	b, _ := lr.br.Peek(lr.br.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// ReadRaw reads the next n bytes as they are (what an event line
// announced with data_len), into a new slice.
func (lr *LineReader) ReadRaw(n int) ([]byte, error) { return lr.ReadRawInto(nil, n) }

// ReadRawInto is ReadRaw into dst's array when it holds n bytes (a
// buffer reused), else into a new slice.
func (lr *LineReader) ReadRawInto(dst []byte, n int) ([]byte, error) {
	if lr.err != nil {
		return nil, lr.err
	}
	var b []byte
	if cap(dst) >= n {
		b = dst[:n]
	} else {
		b = make([]byte, n)
	}
	if _, err := io.ReadFull(lr.br, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading %d raw bytes after an event line: %w", n, err)
	}
	return b, nil
}

func (lr *LineReader) finish(line []byte) ([]byte, error) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > lr.max {
		return lr.tooLong()
	}
	return line, nil
}

func (lr *LineReader) tooLong() ([]byte, error) {
	lr.buf = nil
	what := lr.what
	if what == "" {
		what = "control line"
	}
	lr.err = fmt.Errorf("%s longer than %d bytes: %w", what, lr.max, ErrLineTooLong)
	return nil, lr.err
}

// appendBounded appends data to buf, growing it to at most limit bytes of
// capacity; len(buf)+len(data) must not exceed limit.
func appendBounded(buf, data []byte, limit int) []byte {
	need := len(buf) + len(data)
	if need > cap(buf) {
		c := min(max(2*cap(buf), need, 4<<10), limit)
		nb := make([]byte, len(buf), c)
		copy(nb, buf)
		buf = nb
	}
	return append(buf, data...)
}

// JSONAppender is a result that appends its own JSON to a line, compact
// and valid, with no line break: AppendResponse writes it in place, with
// none of encoding/json's passes and copies (a record with megabytes of
// output, job.get's).
type JSONAppender interface {
	AppendJSON(dst []byte) []byte
}

// JSONSizer is a result that knows about how long its JSON is (a record
// with its output): a front-end may encode it into a buffer of that size
// it reuses, rather than one the runtime must allocate, fault in and zero.
type JSONSizer interface {
	JSONSize() int
}

// AppendResponse appends one response line, newline included:
// {"id":N,"result":R} or {"id":N,"error":{...}}. A result that encodes as
// null (a nil result, a nil pointer) is written as {}: the spec's client
// reads result as an Option, so null would leave a response with neither
// result nor error, and {} is the spec's result for every method without
// one. On error dst is returned unchanged.
func AppendResponse(dst []byte, id uint64, result any, rerr *Error) ([]byte, error) {
	start := len(dst)
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendUint(dst, id, 10)
	if rerr != nil {
		dst = append(dst, `,"error":{"code":`...)
		dst = strconv.AppendInt(dst, int64(rerr.Code), 10)
		dst = append(dst, `,"message":`...)
		dst = appendJSONString(dst, rerr.Message)
		if rerr.Data != nil {
			dst = append(dst, `,"data":`...)
			var err error
			if dst, err = appendMarshal(dst, rerr.Data); err != nil {
				return dst[:start], fmt.Errorf("encoding response: encoding error data: %w", err)
			}
		}
		dst = append(dst, '}')
	} else {
		dst = append(dst, `,"result":`...)
		mark := len(dst)
		var err error
		if a, ok := result.(JSONAppender); ok {
			dst = a.AppendJSON(dst)
		} else if dst, err = appendMarshal(dst, result); err != nil {
			return dst[:start], fmt.Errorf("encoding result: %w", err)
		}
		if string(dst[mark:]) == "null" {
			dst = append(dst[:mark], '{', '}')
		}
	}
	return append(dst, '}', '\n'), nil
}

// AppendEvent appends one pushed event line, newline included. data must
// already be JSON. The line is always one valid JSON object on one line:
// data containing line breaks is compacted, and data that is empty or not
// valid JSON is written as null (check with ValidJSON first if that
// matters).
func AppendEvent(dst []byte, event string, data []byte) []byte {
	dst = append(dst, `{"event":`...)
	dst = appendJSONString(dst, event)
	dst = append(dst, `,"data":`...)
	switch {
	case !ValidJSON(data):
		dst = append(dst, "null"...)
	case bytes.ContainsAny(data, "\r\n"):
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, data); err != nil { // cannot happen: data is valid
			panic(err)
		}
		dst = buf.Bytes()
	default:
		dst = append(dst, data...)
	}
	return append(dst, '}', '\n')
}
