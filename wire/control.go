package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Control-socket error codes from the Loopr spec's TUI protocol table.
const (
	CodeParseError     = -32700 // the line is not JSON
	CodeInvalidRequest = -32600 // JSON, but not a request object
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeNotFound       = 1001 // the spec's LoopNotFound, used for any unknown id
	CodeInvalidState   = 1002 // wrong state for the action
	CodeUnauthorized   = 1003
	CodeQueueFull      = 1004 // orchestrd's: the lane's queue is full
	CodeShuttingDown   = 1005 // orchestrd's: the daemon is stopping
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

// ParseRequest decodes one line (without its newline). On failure it returns
// a *Error with the spec's code and, where the id could be read, that id so
// the answer can carry it; otherwise the id is 0.
func ParseRequest(line []byte) (Request, *Error) {
	line = bytes.TrimSpace(line)
	if !json.Valid(line) {
		return Request{}, Errorf(CodeParseError, "parse error: line is not valid JSON")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Request{}, Errorf(CodeInvalidRequest, "invalid request: want a JSON object with id, method and params")
	}
	var req Request
	idRaw, ok := raw["id"]
	if !ok {
		return req, Errorf(CodeInvalidRequest, "invalid request: missing id")
	}
	if err := json.Unmarshal(idRaw, &req.ID); err != nil {
		return req, Errorf(CodeInvalidRequest, "invalid request: id must be a non-negative integer")
	}
	mRaw, ok := raw["method"]
	if !ok {
		return req, Errorf(CodeInvalidRequest, "invalid request: missing method")
	}
	if err := json.Unmarshal(mRaw, &req.Method); err != nil || req.Method == "" {
		return req, Errorf(CodeInvalidRequest, "invalid request: method must be a non-empty string")
	}
	if p, ok := raw["params"]; ok && !bytes.Equal(p, []byte("null")) {
		if len(p) == 0 || p[0] != '{' {
			return req, Errorf(CodeInvalidParams, "invalid params for %s: params must be an object", req.Method)
		}
		req.Params = p
	}
	return req, nil
}

// DecodeParams decodes req.Params into v, refusing unknown fields; a missing
// params object decodes as {}.
func DecodeParams(req Request, v any) *Error {
	if len(req.Params) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(req.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(CodeInvalidParams, "invalid params for %s: %v", req.Method, err)
	}
	return nil
}

// ErrLineTooLong is returned by LineReader for a line over its maximum.
var ErrLineTooLong = errors.New("line too long")

// LineReader reads newline-terminated lines of bounded length.
type LineReader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

// NewLineReader reads lines of at most max bytes (0 means DefaultMaxLine).
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &LineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next line without its newline (and without a trailing
// \r). The slice is valid until the next call. A final line without a
// newline is returned before io.EOF. A line over the maximum returns an
// error wrapping ErrLineTooLong; the stream is then unusable.
func (lr *LineReader) Next() ([]byte, error) {
	lr.buf = lr.buf[:0]
	for {
		frag, err := lr.br.ReadSlice('\n')
		if len(lr.buf)+len(frag) > lr.max+1 { // +1 for the newline itself
			return nil, fmt.Errorf("control line longer than %d bytes: %w", lr.max, ErrLineTooLong)
		}
		lr.buf = append(lr.buf, frag...)
		if err == nil {
			line := lr.buf[:len(lr.buf)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return line, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(lr.buf) > 0 {
			return lr.buf, nil
		}
		return nil, err
	}
}

// AppendResponse appends one response line, newline included.
func AppendResponse(dst []byte, id uint64, result any, rerr *Error) ([]byte, error) {
	r := Response{ID: id, Error: rerr}
	if rerr == nil {
		b, err := json.Marshal(result)
		if err != nil {
			return dst, fmt.Errorf("encoding result: %w", err)
		}
		r.Result = b
	}
	b, err := json.Marshal(r)
	if err != nil {
		return dst, fmt.Errorf("encoding response: %w", err)
	}
	dst = append(dst, b...)
	return append(dst, '\n'), nil
}

// AppendEvent appends one pushed event line, newline included. data must
// already be JSON.
func AppendEvent(dst []byte, event string, data []byte) []byte {
	dst = append(dst, `{"event":`...)
	q, _ := json.Marshal(event)
	dst = append(dst, q...)
	dst = append(dst, `,"data":`...)
	dst = append(dst, data...)
	return append(dst, '}', '\n')
}
