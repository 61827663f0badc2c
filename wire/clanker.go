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
// missing or not a string.
func DecodeClankerRequest(line []byte) (ClankerRequest, error) {
	var req ClankerRequest
	fields, err := clankerObject(line, "ipc request")
	if err != nil {
		return req, err
	}
	v, ok := fields["v"]
	if !ok {
		return req, &ClankerRequestError{Msg: "invalid ipc request: v is missing (this server speaks version 1)"}
	}
	if !isJSONOne(v) {
		return req, &ClankerRequestError{
			Msg: fmt.Sprintf("invalid ipc request: unsupported version v=%s (this server speaks version 1)", jsonExcerpt(v)),
			Log: fmt.Sprintf("invalid ipc request: unsupported version, %s (this server speaks version 1)", jsonKind(v))}
	}
	t, ok := fields["type"]
	if !ok {
		return req, &ClankerRequestError{Msg: "invalid ipc request: type is missing"}
	}
	if err := json.Unmarshal(t, &req.Type); err != nil || t[0] != '"' {
		return req, &ClankerRequestError{Msg: fmt.Sprintf("invalid ipc request: type must be a string, got %s", jsonExcerpt(t)),
			Log: "invalid ipc request: type must be a string, got " + jsonKind(t)}
	}
	if id, ok := fields["id"]; ok && !bytes.Equal(id, []byte("null")) {
		req.ID = id
	}
	if p, ok := fields["payload"]; ok && !bytes.Equal(p, []byte("null")) {
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
// string type; ts, when present, a string.
func DecodeSpoolLine(line []byte) (SpoolEntry, error) {
	var e SpoolEntry
	fields, err := clankerObject(line, "spool line")
	if err != nil {
		return e, err
	}
	t, ok := fields["type"]
	if !ok {
		return e, &ClankerRequestError{Msg: "invalid spool line: type is missing"}
	}
	if err := json.Unmarshal(t, &e.Type); err != nil || t[0] != '"' || e.Type == "" {
		return e, &ClankerRequestError{Msg: fmt.Sprintf("invalid spool line: type must be a non-empty string, got %s", jsonExcerpt(t)),
			Log: "invalid spool line: type must be a non-empty string, got " + jsonKind(t)}
	}
	if ts, ok := fields["ts"]; ok && !bytes.Equal(ts, []byte("null")) {
		if err := json.Unmarshal(ts, &e.TS); err != nil || ts[0] != '"' {
			return e, &ClankerRequestError{Msg: fmt.Sprintf("invalid spool line: ts must be a string, got %s", jsonExcerpt(ts)),
				Log: "invalid spool line: ts must be a string, got " + jsonKind(ts)}
		}
	}
	if p, ok := fields["payload"]; ok && !bytes.Equal(p, []byte("null")) {
		e.Payload = p
	}
	return e, nil
}

// clankerObject decodes a line that must be one JSON object into its
// members (the last of a repeated member wins, as in JavaScript).
func clankerObject(line []byte, what string) (map[string]json.RawMessage, error) {
	line = bytes.TrimSpace(line)
	if !ValidJSON(line) {
		return nil, &ClankerRequestError{Msg: fmt.Sprintf("invalid %s: not JSON: %s", what, excerpt(line)),
			Log: fmt.Sprintf("invalid %s: not JSON", what)}
	}
	if len(line) == 0 || line[0] != '{' {
		return nil, &ClankerRequestError{Msg: fmt.Sprintf("invalid %s: want a JSON object, got %s", what, excerpt(line)),
			Log: fmt.Sprintf("invalid %s: want a JSON object, got %s", what, jsonKind(line))}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		// Valid JSON that is an object: not expected; encoding/json's
		// messages may quote the line.
		return nil, &ClankerRequestError{Msg: fmt.Sprintf("invalid %s: %v", what, err),
			Log: fmt.Sprintf("invalid %s: its members cannot be read", what)}
	}
	return fields, nil
}

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
