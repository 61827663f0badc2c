package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSON-RPC 2.0 (https://www.jsonrpc.org/specification) over newline-delimited
// JSON, one message per line: the daemon<->executor protocol of Agor
// (../shared/specs/001_*.txt). Both ends send requests, notifications and
// responses on the same connection, so one decoder serves both directions.
// The error codes are the ones of control.go: CodeParseError,
// CodeInvalidRequest, CodeMethodNotFound, CodeInvalidParams, CodeInternal.

// DefaultMaxRPCLine is the longest JSON-RPC line accepted unless configured:
// an executor's report_message carries whole SDK events (a tool result can
// be a file's contents), so it is larger than the control socket's.
const DefaultMaxRPCLine = 8 << 20

// NewRPCLineReader reads JSON-RPC lines of at most max bytes (0 means
// DefaultMaxRPCLine). It is a LineReader: a line over the maximum is refused
// with an error wrapping ErrLineTooLong, without more than max+1 of its
// bytes being held, and the stream is unusable after that.
func NewRPCLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxRPCLine
	}
	lr := newLineReaderSize(r, max, rpcReaderBufSize)
	lr.what = "JSON-RPC line"
	return lr
}

// rpcReaderBufSize is a JSON-RPC reader's buffer: larger than a control
// connection's, since an executor streams (a read a 64 KiB, not a 4 KiB),
// and executors are few.
const rpcReaderBufSize = 64 << 10

// RPCKind is which of the four JSON-RPC messages a line is.
type RPCKind uint8

const (
	// RPCKindRequest: {"jsonrpc":"2.0","id":..,"method":..,"params"?:..}.
	RPCKindRequest RPCKind = iota + 1
	// RPCKindNotification: a request without an id; it gets no answer.
	RPCKindNotification
	// RPCKindResult: {"jsonrpc":"2.0","id":..,"result":..}.
	RPCKindResult
	// RPCKindError: {"jsonrpc":"2.0","id":..,"error":{code,message,data?}}.
	RPCKindError
)

func (k RPCKind) String() string {
	switch k {
	case RPCKindRequest:
		return "request"
	case RPCKindNotification:
		return "notification"
	case RPCKindResult:
		return "result"
	case RPCKindError:
		return "error"
	}
	return "RPCKind(" + strconv.Itoa(int(k)) + ")"
}

// RPCID is a JSON-RPC id: a string, a number, or null (the zero value).
// A number is kept as the exact text it was sent as, so integers of any
// size survive; two number ids are equal when their texts are (1 and 1.0
// differ). A string is kept decoded, so "a" and "\u0061" are the same id.
// RPCID is comparable and can key a map of pending requests.
type RPCID struct {
	kind uint8 // idNull, idNumber, idString
	s    string
}

const (
	idNull uint8 = iota
	idNumber
	idString
)

// RPCIntID is the id n.
func RPCIntID(n int64) RPCID { return RPCID{idNumber, strconv.FormatInt(n, 10)} }

// RPCStringID is the id "s". Bytes of s that are not UTF-8 are replaced by
// U+FFFD, one each, as they would be on the wire.
func RPCStringID(s string) RPCID {
	if !utf8.ValidString(s) {
		s = string([]rune(s))
	}
	return RPCID{idString, s}
}

// IsNull reports whether id is null (the zero RPCID).
func (id RPCID) IsNull() bool { return id.kind == idNull }

// IsString reports whether id is a string id.
func (id RPCID) IsString() bool { return id.kind == idString }

// Int64 returns a number id's value when it is an integer that fits.
func (id RPCID) Int64() (int64, bool) {
	if id.kind != idNumber {
		return 0, false
	}
	n, err := strconv.ParseInt(id.s, 10, 64)
	return n, err == nil
}

// AppendJSON appends id as JSON: the number's text, the quoted string, or
// null.
func (id RPCID) AppendJSON(dst []byte) []byte {
	switch id.kind {
	case idNumber:
		return append(dst, id.s...)
	case idString:
		return appendJSONString(dst, id.s)
	}
	return append(dst, "null"...)
}

// String is id's JSON text, for logs and errors.
func (id RPCID) String() string { return string(id.AppendJSON(nil)) }

// MarshalJSON implements json.Marshaler.
func (id RPCID) MarshalJSON() ([]byte, error) { return id.AppendJSON(nil), nil }

// UnmarshalJSON implements json.Unmarshaler: a string, a number or null.
func (id *RPCID) UnmarshalJSON(data []byte) error {
	if !ValidJSON(data) {
		return fmt.Errorf("decoding JSON-RPC id: not valid JSON: %s", excerpt(data))
	}
	v, ok := parseRPCID(trimJSONSpace(data))
	if !ok {
		return fmt.Errorf("decoding JSON-RPC id: want a string, a number or null, got %s", excerpt(data))
	}
	*id = v
	return nil
}

// parseRPCID reads an id from a valid JSON value without surrounding space.
func parseRPCID(raw []byte) (RPCID, bool) {
	switch c := raw[0]; {
	case c == 'n':
		return RPCID{}, true
	case c == '"':
		s, ok := decodeMethod(raw) // unquotes any JSON string
		return RPCID{idString, s}, ok
	case c == '-' || c >= '0' && c <= '9':
		return RPCID{idNumber, string(raw)}, true
	}
	return RPCID{}, false
}

// RPCError is a JSON-RPC error object. Data, when present, is raw JSON.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// RPCErrorf builds an *RPCError with a formatted message.
func RPCErrorf(code int, format string, args ...any) *RPCError {
	return &RPCError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// RPCMessage is one decoded JSON-RPC line. Which fields are set depends on
// Kind. Params, Result and Error.Data are copies: the message stays valid
// after the line's buffer is reused.
type RPCMessage struct {
	Kind RPCKind
	// ID: requests and responses. Null only in an error response (the
	// answer to a line whose id could not be read).
	ID RPCID
	// Method: requests and notifications.
	Method string
	// Params: requests and notifications; an object or an array, nil when
	// absent or null.
	Params json.RawMessage
	// Result: results; any JSON value, null included (never nil).
	Result json.RawMessage
	// Error: error responses.
	Error *RPCError
}

// RPCDecodeError is why ParseRPC refused a line. Code is CodeParseError or
// CodeInvalidRequest; Message names the problem.
//
// Answer it, unless Response is set, with AppendRPCError(dst, e.ID,
// &e.RPCError): ID is the line's id when it had exactly one valid id, else
// null, as the JSON-RPC spec asks. Response says the line had no method and
// a result or an error: a broken response, which gets no answer (a pending
// request with ID, if any, should fail instead).
type RPCDecodeError struct {
	RPCError
	ID       RPCID
	Response bool
}

// knownRPCMethods interns the methods of Agor's executor protocol so that
// decoding them does not allocate.
var knownRPCMethods = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		"execute_prompt", "spawn_terminal", "stop_task", "shutdown",
		"get_api_key", "request_permission", "get_execution_context", "create_message",
		"report_message", "report_progress", "report_error",
		"pause_notifications", "resume_notifications", "cancel_task",
	} {
		m[s] = s
	}
	return m
}()

func decodeRPCMethod(raw []byte) (string, bool) {
	if len(raw) > 2 && raw[0] == '"' {
		if m, ok := knownRPCMethods[string(raw[1:len(raw)-1])]; ok {
			return m, true
		}
	}
	return decodeMethod(raw)
}

// ParseRPC decodes one line (without its newline; JSON whitespace around
// the object is allowed) into exactly one of the four kinds, or refuses it:
//
//   - -32700: the line is not JSON (an empty line included).
//   - -32600: a batch (a JSON array: not supported, Agor sends none); not
//     an object; a member among jsonrpc, id, method, params, result, error
//     given twice; jsonrpc missing or not "2.0"; an id that is not a
//     string, a number or null; a method that is not a non-empty string;
//     a request or notification with result or error; a request with a
//     null id; params that are not an object, an array or null; neither
//     method nor result nor error; a response with both result and error,
//     without an id, or a result with a null id; an error that is not an
//     object with an integer code and a string message (each once).
//
// Other members are ignored, in the message and in its error object.
// params null is taken as absent.
func ParseRPC(line []byte) (RPCMessage, *RPCDecodeError) { return parseRPC(line, true) }

// ParseRPCInPlace is ParseRPC without copying: the message's Params and
// Result alias line, so they are valid only as long as line is (a
// LineReader's line: until its next call). For a reader that decodes what
// it needs at once and copies only what it keeps.
func ParseRPCInPlace(line []byte) (RPCMessage, *RPCDecodeError) { return parseRPC(line, false) }

func parseRPC(line []byte, copied bool) (RPCMessage, *RPCDecodeError) {
	keep := func(b []byte) json.RawMessage {
		if copied {
			return append(json.RawMessage(nil), b...)
		}
		return b
	}
	var m RPCMessage
	if !ValidJSON(line) {
		return m, rpcParseError(line)
	}
	i := skipJSONSpace(line, 0)
	switch line[i] {
	case '{':
	case '[':
		return m, refuseRPC(RPCID{}, false, "invalid request: batches (a JSON array) are not supported; send one JSON object per line")
	default:
		return m, refuseRPC(RPCID{}, false, "invalid request: want a JSON object, got %s", excerpt(trimJSONSpace(line)))
	}

	var version, idRaw, method, params, result, errRaw []byte
	var dup []byte // the first member seen twice
	idDup := false
	for it := members(line, i); ; {
		key, val, ok := it.next()
		if !ok {
			break
		}
		var slot *[]byte
		switch string(key) {
		case "jsonrpc":
			slot = &version
		case "id":
			slot = &idRaw
		case "method":
			slot = &method
		case "params":
			slot = &params
		case "result":
			slot = &result
		case "error":
			slot = &errRaw
		default:
			continue
		}
		if *slot != nil {
			if dup == nil {
				dup = key
			}
			idDup = idDup || slot == &idRaw
		}
		*slot = val
	}

	// The id to answer with: the line's, if it has exactly one valid id.
	var id RPCID
	idOK := idRaw != nil
	if idOK {
		id, idOK = parseRPCID(idRaw)
	}
	if !idOK || idDup {
		id = RPCID{}
	}
	resp := method == nil && (result != nil || errRaw != nil)

	switch {
	case dup != nil:
		return m, refuseRPC(id, resp, "invalid request: duplicate %q member", dup)
	case idRaw != nil && !idOK:
		return m, refuseRPC(id, resp, "invalid request: id must be a string or a number, got %s", excerpt(idRaw))
	case version == nil:
		return m, refuseRPC(id, resp, `invalid request: missing "jsonrpc":"2.0"`)
	case string(version) != `"2.0"`:
		if v, ok := decodeMethod(version); !ok || v != "2.0" {
			return m, refuseRPC(id, resp, `invalid request: jsonrpc must be "2.0", got %s`, excerpt(version))
		}
	}

	if method != nil {
		name, ok := decodeRPCMethod(method)
		switch {
		case !ok || name == "":
			return m, refuseRPC(id, false, "invalid request: method must be a non-empty string, got %s", excerpt(method))
		case result != nil:
			return m, refuseRPC(id, false, "invalid request: a request cannot carry a result")
		case errRaw != nil:
			return m, refuseRPC(id, false, "invalid request: a request cannot carry an error")
		case idRaw != nil && id.IsNull():
			return m, refuseRPC(id, false, "invalid request: id must be a string or a number; null is only for error responses (leave id out for a notification)")
		}
		if params != nil {
			switch params[0] {
			case '{', '[':
				m.Params = keep(params)
			case 'n':
			default:
				return m, refuseRPC(id, false, "invalid request: params of %s must be an object or an array, got %s", name, excerpt(params))
			}
		}
		m.Kind, m.ID, m.Method = RPCKindNotification, id, name
		if idRaw != nil {
			m.Kind = RPCKindRequest
		}
		return m, nil
	}

	switch {
	case result == nil && errRaw == nil:
		return m, refuseRPC(id, false, "invalid request: no method (for a request or notification), no result or error (for a response)")
	case result != nil && errRaw != nil:
		return m, refuseRPC(id, true, "invalid response: both result and error")
	case idRaw == nil:
		return m, refuseRPC(id, true, "invalid response: missing id")
	case result != nil:
		if id.IsNull() {
			return m, refuseRPC(id, true, "invalid response: a result must carry the id of its request, got null")
		}
		m.Kind, m.ID, m.Result = RPCKindResult, id, keep(result)
		return m, nil
	}
	e, msg := parseRPCErrorObject(errRaw)
	if e == nil {
		return m, refuseRPC(id, true, "invalid response: %s", msg)
	}
	m.Kind, m.ID, m.Error = RPCKindError, id, e
	return m, nil
}

// parseRPCErrorObject reads an error object, or says what is wrong with it.
func parseRPCErrorObject(raw []byte) (*RPCError, string) {
	if raw[0] != '{' {
		return nil, fmt.Sprintf("error must be an object with code and message, got %s", excerpt(raw))
	}
	var code, msg, data, dup []byte
	for it := members(raw, 0); ; {
		key, val, ok := it.next()
		if !ok {
			break
		}
		var slot *[]byte
		switch string(key) {
		case "code":
			slot = &code
		case "message":
			slot = &msg
		case "data":
			slot = &data
		default:
			continue
		}
		if *slot != nil && dup == nil {
			dup = key
		}
		*slot = val
	}
	if dup != nil {
		return nil, fmt.Sprintf("duplicate %q member in error", dup)
	}
	if code == nil {
		return nil, "error has no code"
	}
	n, ok := parseRPCCode(code)
	if !ok {
		return nil, fmt.Sprintf("error code must be an integer, got %s", excerpt(code))
	}
	if msg == nil {
		return nil, "error has no message"
	}
	s, ok := decodeMethod(msg) // unquotes any JSON string
	if !ok {
		return nil, fmt.Sprintf("error message must be a string, got %s", excerpt(msg))
	}
	e := &RPCError{Code: n, Message: s}
	if data != nil {
		e.Data = append(json.RawMessage(nil), data...)
	}
	return e, ""
}

// parseRPCCode reads a JSON number that is a plain integer fitting an int.
func parseRPCCode(raw []byte) (int, bool) {
	neg := raw[0] == '-'
	if neg {
		raw = raw[1:]
	}
	u, ok := parseUint64(raw)
	switch {
	case !ok:
		return 0, false
	case neg && u <= uint64(math.MaxInt)+1:
		return int(-u), true // -u wraps to the right value for MinInt
	case !neg && u <= math.MaxInt:
		return int(u), true
	}
	return 0, false
}

func refuseRPC(id RPCID, resp bool, format string, args ...any) *RPCDecodeError {
	return &RPCDecodeError{RPCError: RPCError{Code: CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}, ID: id, Response: resp}
}

// rpcParseError words a -32700 for a line ValidJSON refused.
func rpcParseError(line []byte) *RPCDecodeError {
	msg := "parse error: line is not valid JSON"
	if len(trimJSONSpace(line)) == 0 {
		msg = "parse error: empty line, want one JSON object"
	} else {
		var se *json.SyntaxError
		if err := json.Unmarshal(line, new(json.RawMessage)); errors.As(err, &se) {
			msg = fmt.Sprintf("parse error: %v (at byte %d)", se, se.Offset)
		}
	}
	return &RPCDecodeError{RPCError: RPCError{Code: CodeParseError, Message: msg}}
}

// DecodeRPCParams decodes m.Params into v (a pointer), as encoding/json
// does: unknown fields are ignored, and absent params leave v as it is. A
// value of the wrong shape is a -32602 naming the field and what was
// expected, e.g. `invalid params for execute_prompt: "tools" is a number,
// want a string`.
func DecodeRPCParams(m RPCMessage, v any) *RPCError {
	if len(m.Params) == 0 {
		return nil
	}
	err := json.Unmarshal(m.Params, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	var ie *json.InvalidUnmarshalError
	switch {
	case errors.As(err, &te) && te.Type != nil:
		got, want := jsonValueWords(te.Value), jsonTypeWords(te.Type, te.Value)
		if te.Field == "" {
			return RPCErrorf(CodeInvalidParams, "invalid params for %s: params is %s, want %s", m.Method, got, want)
		}
		return RPCErrorf(CodeInvalidParams, "invalid params for %s: %q is %s, want %s", m.Method, te.Field, got, want)
	case errors.As(err, &ie):
		return RPCErrorf(CodeInternal, "decoding params for %s: %v", m.Method, err)
	}
	return RPCErrorf(CodeInvalidParams, "invalid params for %s: %v", m.Method, err)
}

// jsonValueWords names the JSON value of an UnmarshalTypeError.
func jsonValueWords(v string) string {
	switch v {
	case "string":
		return "a string"
	case "number":
		return "a number"
	case "bool":
		return "a boolean"
	case "array":
		return "an array"
	case "object":
		return "an object"
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return "the number " + n
	}
	return v
}

// jsonTypeWords names the JSON that decodes into t.
func jsonTypeWords(t reflect.Type, value string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var what string
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		what = "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		what = "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	default:
		return t.String()
	}
	// An integer given as a number: it was out of range, or not whole.
	if n, ok := strings.CutPrefix(value, "number "); ok && !strings.ContainsAny(n, ".eE") {
		return what + " that fits " + t.Kind().String()
	}
	return what
}

const rpcHead = `{"jsonrpc":"2.0"`

// AppendRPCRequest appends one request line, newline included:
// {"jsonrpc":"2.0","id":ID,"method":M,"params":P}. params is encoded as
// json.Marshal does (a json.RawMessage is checked and written as it is,
// compacted if it spans lines); it must encode as an object or an array,
// and nil or JSON null leaves params out. The id must not be null. On error
// dst is returned unchanged.
func AppendRPCRequest(dst []byte, id RPCID, method string, params any) ([]byte, error) {
	if id.IsNull() {
		return dst, fmt.Errorf("encoding JSON-RPC request %s: the id is null (use AppendRPCNotification for no answer)", method)
	}
	return appendRPCCall(dst, &id, method, params, nil)
}

// AppendRPCNotification appends one notification line, newline included:
// {"jsonrpc":"2.0","method":M,"params":P}, params as for AppendRPCRequest.
func AppendRPCNotification(dst []byte, method string, params any) ([]byte, error) {
	return appendRPCCall(dst, nil, method, params, nil)
}

// appendRPCCall writes a request (id != nil) or a notification, with params
// from raw when it is not nil, else from params.
func appendRPCCall(dst []byte, id *RPCID, method string, params any, raw json.RawMessage) ([]byte, error) {
	what := "notification"
	if id != nil {
		what = "request"
	}
	if method == "" {
		return dst, fmt.Errorf("encoding JSON-RPC %s: empty method", what)
	}
	start := len(dst)
	dst = append(dst, rpcHead...)
	if id != nil {
		dst = append(dst, `,"id":`...)
		dst = id.AppendJSON(dst)
	}
	dst = append(dst, `,"method":`...)
	dst = appendJSONString(dst, method)
	if raw != nil || params != nil {
		mark := len(dst)
		dst = append(dst, `,"params":`...)
		v := len(dst)
		var err error
		if raw != nil {
			dst, err = appendRawJSON(dst, raw)
		} else {
			dst, err = appendJSONValue(dst, params)
		}
		if err != nil {
			return dst[:start], fmt.Errorf("encoding JSON-RPC %s %s: params: %w", what, method, err)
		}
		switch dst[v] {
		case '{', '[':
		case 'n':
			dst = dst[:mark] // null params are left out
		default:
			bad := excerpt(dst[v:])
			return dst[:start], fmt.Errorf("encoding JSON-RPC %s %s: params must be an object or an array, got %s", what, method, bad)
		}
	}
	return append(dst, '}', '\n'), nil
}

// AppendRPCResult appends one result line, newline included:
// {"jsonrpc":"2.0","id":ID,"result":R}. result is encoded as params are by
// AppendRPCRequest; nil is null, which JSON-RPC allows. The id must not be
// null. On error dst is returned unchanged.
func AppendRPCResult(dst []byte, id RPCID, result any) ([]byte, error) {
	return appendRPCResult(dst, id, result, nil)
}

func appendRPCResult(dst []byte, id RPCID, result any, raw json.RawMessage) ([]byte, error) {
	if id.IsNull() {
		return dst, errors.New("encoding JSON-RPC result: the id is null (a result answers a request with an id)")
	}
	start := len(dst)
	dst = append(dst, rpcHead...)
	dst = append(dst, `,"id":`...)
	dst = id.AppendJSON(dst)
	dst = append(dst, `,"result":`...)
	var err error
	if raw != nil {
		dst, err = appendRawJSON(dst, raw)
	} else {
		dst, err = appendJSONValue(dst, result)
	}
	if err != nil {
		return dst[:start], fmt.Errorf("encoding JSON-RPC result for id %s: %w", id, err)
	}
	return append(dst, '}', '\n'), nil
}

// AppendRPCError appends one error response line, newline included:
// {"jsonrpc":"2.0","id":ID,"error":{"code":C,"message":M,"data":D}}, data
// left out when e.Data is empty. The id may be null (the answer to a line
// whose id could not be read). On error dst is returned unchanged.
func AppendRPCError(dst []byte, id RPCID, e *RPCError) ([]byte, error) {
	if e == nil {
		return dst, fmt.Errorf("encoding JSON-RPC error for id %s: no error given", id)
	}
	start := len(dst)
	dst = append(dst, rpcHead...)
	dst = append(dst, `,"id":`...)
	dst = id.AppendJSON(dst)
	dst = append(dst, `,"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(e.Code), 10)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, e.Message)
	if len(e.Data) > 0 {
		dst = append(dst, `,"data":`...)
		var err error
		if dst, err = appendRawJSON(dst, e.Data); err != nil {
			return dst[:start], fmt.Errorf("encoding JSON-RPC error for id %s: data: %w", id, err)
		}
	}
	return append(dst, '}', '}', '\n'), nil
}

// AppendRPCMessage appends m as one line, newline included, with the
// encoder of its kind. A message ParseRPC accepted always encodes, and
// decodes back to an equal message (raw JSON compared once compacted).
func AppendRPCMessage(dst []byte, m RPCMessage) ([]byte, error) {
	switch m.Kind {
	case RPCKindRequest:
		if m.ID.IsNull() {
			return dst, fmt.Errorf("encoding JSON-RPC request %s: the id is null (use AppendRPCNotification for no answer)", m.Method)
		}
		return appendRPCCall(dst, &m.ID, m.Method, nil, m.Params)
	case RPCKindNotification:
		return appendRPCCall(dst, nil, m.Method, nil, m.Params)
	case RPCKindResult:
		raw := m.Result
		if raw == nil {
			raw = json.RawMessage("null")
		}
		return appendRPCResult(dst, m.ID, nil, raw)
	case RPCKindError:
		return AppendRPCError(dst, m.ID, m.Error)
	}
	return dst, fmt.Errorf("encoding JSON-RPC message: unknown kind %d", m.Kind)
}

// appendJSONValue appends v as json.Marshal would, a json.RawMessage as
// appendRawJSON does.
func appendJSONValue(dst []byte, v any) ([]byte, error) {
	if raw, ok := v.(json.RawMessage); ok {
		if raw == nil {
			return append(dst, "null"...), nil
		}
		return appendRawJSON(dst, raw)
	}
	return appendMarshal(dst, v)
}

// appendRawJSON appends raw after checking it is one JSON value; a value
// spread over lines is compacted, so the result is one line. On error dst
// is returned unchanged.
func appendRawJSON(dst []byte, raw []byte) ([]byte, error) {
	if !ValidJSON(raw) {
		return dst, fmt.Errorf("not valid JSON: %s", excerpt(raw))
	}
	raw = trimJSONSpace(raw)
	if bytes.ContainsAny(raw, "\r\n") {
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, raw); err != nil { // cannot happen: raw is valid
			return dst, fmt.Errorf("compacting JSON: %w", err)
		}
		return buf.Bytes(), nil
	}
	return append(dst, raw...), nil
}
