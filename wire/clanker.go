package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// clanker's pod IPC (spec 003): NDJSON over a unix socket, one request
// line {"v":1,"id":...,"type":T,"payload":P} answered by one line
// {"v":1,"id":...,"ok":true,"data":D} or {"v":1,"id":...,"ok":false,
// "error":"..."}; and its spool, lines {"ts":...,"type":T,"payload":P}
// that pods append to .clanker/ipc-spool.ndjson while the socket is down.

// MaxClankerLine bounds one request line (and one spool line): a line
// over it is refused and the connection closed.
const MaxClankerLine = 1 << 20

// NewClankerLineReader reads request lines of at most MaxClankerLine bytes.
func NewClankerLineReader(r io.Reader) *LineReader {
	lr := NewLineReader(r, MaxClankerLine)
	lr.what = "ipc request line"
	return lr
}

// ClankerRequest is one request line.
type ClankerRequest struct {
	// ID is the request's id as the line spelled it (any JSON value;
	// clanker sends a string), echoed in the response; nil when absent.
	ID      json.RawMessage
	Type    string
	Payload json.RawMessage // nil when absent
}

// ClankerRequestError is a line that is not a request: it is answered
// without an id (as the real dashboard answers), but for an unknown type,
// which is answered with the line's id.
type ClankerRequestError struct {
	// Msg is the answer: it may quote the line (the pod's own bytes).
	Msg string
	// Log is Msg without any of the line's bytes, for the event log and
	// the daemon's log; "" when Msg quotes none.
	Log string
}

func (e *ClankerRequestError) Error() string { return e.Msg }

// LogText is the error without any of the line's bytes.
func (e *ClankerRequestError) LogText() string {
	if e.Log != "" {
		return e.Log
	}
	return e.Msg
}

// ClankerLogText is err as the logs may hold it: a ClankerRequestError's
// LogText, else err's text.
func ClankerLogText(err error) string {
	var e *ClankerRequestError
	if errors.As(err, &e) {
		return e.LogText()
	}
	return err.Error()
}

// DecodeClankerRequest decodes one request line. The error says what is
// wrong with the line: not JSON, not an object, v missing or not 1, type
// missing or not a string. ID and Payload are line's own bytes (no copy):
// they are valid while line is.
func DecodeClankerRequest(line []byte) (ClankerRequest, error) {
	var req ClankerRequest
	f, err := clankerObject(line, "ipc request")
	if err != nil {
		return req, err
	}
	v := f.v
	if v == nil {
		return req, &ClankerRequestError{Msg: "invalid ipc request: v is missing (this server speaks version 1)"}
	}
	if !isJSONOne(v) {
		return req, &ClankerRequestError{
			Msg: fmt.Sprintf("invalid ipc request: unsupported version v=%s (this server speaks version 1)", jsonExcerpt(v)),
			Log: fmt.Sprintf("invalid ipc request: unsupported version, %s (this server speaks version 1)", jsonKind(v))}
	}
	t := f.typ
	if t == nil {
		return req, &ClankerRequestError{Msg: "invalid ipc request: type is missing"}
	}
	typ, ok := clankerString(t)
	if !ok {
		return req, &ClankerRequestError{Msg: fmt.Sprintf("invalid ipc request: type must be a string, got %s", jsonExcerpt(t)),
			Log: "invalid ipc request: type must be a string, got " + jsonKind(t)}
	}
	req.Type = typ
	if id := f.id; id != nil && !bytes.Equal(id, []byte("null")) {
		req.ID = id
	}
	if p := f.payload; p != nil && !bytes.Equal(p, []byte("null")) {
		req.Payload = p
	}
	return req, nil
}

// SpoolEntry is one spool line.
type SpoolEntry struct {
	TS      string // ISO-8601, as the pod wrote it; "" when absent
	Type    string
	Payload json.RawMessage // nil when absent
}

// DecodeSpoolLine decodes one spool line: an object with a non-empty
// string type; ts, when present, a string. Payload is line's own bytes.
func DecodeSpoolLine(line []byte) (SpoolEntry, error) {
	var e SpoolEntry
	f, err := clankerObject(line, "spool line")
	if err != nil {
		return e, err
	}
	t := f.typ
	if t == nil {
		return e, &ClankerRequestError{Msg: "invalid spool line: type is missing"}
	}
	typ, ok := clankerString(t)
	if !ok || typ == "" {
		return e, &ClankerRequestError{Msg: fmt.Sprintf("invalid spool line: type must be a non-empty string, got %s", jsonExcerpt(t)),
			Log: "invalid spool line: type must be a non-empty string, got " + jsonKind(t)}
	}
	e.Type = typ
	if ts := f.ts; ts != nil && !bytes.Equal(ts, []byte("null")) {
		if e.TS, ok = clankerString(ts); !ok {
			return e, &ClankerRequestError{Msg: fmt.Sprintf("invalid spool line: ts must be a string, got %s", jsonExcerpt(ts)),
				Log: "invalid spool line: ts must be a string, got " + jsonKind(ts)}
		}
	}
	if p := f.payload; p != nil && !bytes.Equal(p, []byte("null")) {
		e.Payload = p
	}
	return e, nil
}

// clankerFields are the members of a request or spool line that are read
// (raw values, nil when absent; the last of a repeated member wins, as in
// JavaScript).
type clankerFields struct{ v, id, typ, ts, payload []byte }

// clankerObject decodes a line that must be one JSON object into the
// members read, without decoding the others.
func clankerObject(line []byte, what string) (clankerFields, error) {
	var f clankerFields
	line = bytes.TrimSpace(line)
	if !ValidJSON(line) {
		return f, &ClankerRequestError{Msg: fmt.Sprintf("invalid %s: not JSON: %s", what, excerpt(line)),
			Log: fmt.Sprintf("invalid %s: not JSON", what)}
	}
	if len(line) == 0 || line[0] != '{' {
		return f, &ClankerRequestError{Msg: fmt.Sprintf("invalid %s: want a JSON object, got %s", what, excerpt(line)),
			Log: fmt.Sprintf("invalid %s: want a JSON object, got %s", what, jsonKind(line))}
	}
	for it := members(line, 0); ; {
		key, val, ok := it.next()
		if !ok {
			break
		}
		switch string(key) {
		case "v":
			f.v = val
		case "id":
			f.id = val
		case "type":
			f.typ = val
		case "ts":
			f.ts = val
		case "payload":
			f.payload = val
		}
	}
	return f, nil
}

// clankerString decodes a JSON string value as encoding/json does,
// without allocating for clanker's own type names; false when v is not a
// string.
func clankerString(v []byte) (string, bool) { return internedString(v, clankerTypes) }

// clankerTypes interns the request types of spec 003.
var clankerTypes = interned("hello", "heartbeat", "usage_limit", "task_create", "task_status",
	"task_request", "judge_request", "task_handoff", "task_note")

// jsonExcerpt is a JSON value as written, cut at 64 bytes.
func jsonExcerpt(v json.RawMessage) string {
	if len(v) > 64 {
		return string(v[:64]) + "…"
	}
	return string(v)
}

// isJSONOne: the JSON value is the number 1 (1, 1.0, 1e0: JavaScript's
// v === 1).
func isJSONOne(v json.RawMessage) bool {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return err == nil && f == 1
}

// AppendClankerOK appends a success response line: {"v":1,"id":ID,
// "ok":true,"data":DATA} (id omitted when nil, data when nil).
func AppendClankerOK(dst []byte, id, data json.RawMessage) []byte {
	dst = append(dst, `{"v":1`...)
	if id != nil {
		dst = append(dst, `,"id":`...)
		dst = append(dst, id...)
	}
	dst = append(dst, `,"ok":true`...)
	if data != nil {
		dst = append(dst, `,"data":`...)
		dst = append(dst, data...)
	}
	return append(dst, "}\n"...)
}

// AppendClankerError appends an error response line: {"v":1,"id":ID,
// "ok":false,"error":MSG} (id omitted when nil).
func AppendClankerError(dst []byte, id json.RawMessage, msg string) []byte {
	dst = append(dst, `{"v":1`...)
	if id != nil {
		dst = append(dst, `,"id":`...)
		dst = append(dst, id...)
	}
	dst = append(dst, `,"ok":false,"error":`...)
	dst = AppendJSONString(dst, msg, false)
	return append(dst, "}\n"...)
}

// IsClankerRequestError: err is a line that is not a request.
func IsClankerRequestError(err error) bool {
	var e *ClankerRequestError
	return errors.As(err, &e)
}

// ClankerHello is what a hello's payload says that the repo keeps: each
// member "" when absent or not a string (clanker's handler reads them so).
type ClankerHello struct {
	PodID, Role, Worktree string
}

// DecodeClankerHello decodes a hello's payload (nil: none) without
// decoding its other members; false when it is not a JSON object (the
// request is refused: see clanker/handlers.go).
func DecodeClankerHello(payload []byte) (ClankerHello, bool) {
	var h ClankerHello
	if len(payload) == 0 {
		return h, true
	}
	payload = trimJSONSpace(payload)
	if string(payload) == "null" {
		return h, true
	}
	if len(payload) == 0 || payload[0] != '{' || !ValidJSON(payload) {
		return h, false
	}
	for it := members(payload, 0); ; {
		key, val, ok := it.next()
		if !ok {
			return h, true
		}
		var dst *string
		switch string(key) {
		case "podId":
			dst = &h.PodID
		case "role":
			dst = &h.Role
		case "worktree":
			dst = &h.Worktree
		default:
			continue
		}
		*dst, _ = clankerString(val) // "" when not a string
	}
}
