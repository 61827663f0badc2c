package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// vibe-reachout's hook protocol (spec 002): on a unix socket, the hook
// writes one IpcRequest as a JSON line and waits for one IpcResponse line.

// MaxReachoutLine bounds a hook's request line.
const MaxReachoutLine = 1 << 20

// NewReachoutLineReader reads hook request lines of at most
// MaxReachoutLine bytes; a longer one is refused with an error wrapping
// ErrLineTooLong without being held.
func NewReachoutLineReader(r io.Reader) *LineReader {
	lr := NewLineReader(r, MaxReachoutLine)
	lr.what = "reachout request line"
	return lr
}

// ReachoutRequest is the hook's IpcRequest.
type ReachoutRequest struct {
	// RequestID is the request's UUID, canonical: lowercase, hyphenated.
	RequestID string
	ToolName  string
	ToolInput json.RawMessage // a JSON object
	Cwd       string
	SessionID string
	// PermissionSuggestions are the always-allow options offered (each a
	// JSON value as sent); nil when absent.
	PermissionSuggestions []json.RawMessage
	// AssistantContext is the agent's last words (the real hook sends it;
	// the spec does not list it); "" when absent or null.
	AssistantContext string
	// HookEventName is the hook_event_name of Claude Code's hook input, as
	// a hook that forwards it sends it (orchestrd's own, internal/
	// reachouthook; vibe-reachout's hook does not, and the bot ignores
	// it): "PermissionRequest", "PreToolUse"...; "" when absent or null.
	HookEventName string
}

// ReachoutResponse is the IpcResponse answering a hook.
type ReachoutResponse struct {
	RequestID   string
	Decision    string // Allow, Deny, AlwaysAllow, Reply, Timeout
	Message     string // omitted when ""
	UserMessage string // omitted when ""
	// AlwaysAllowSuggestion is the suggestion to apply (a JSON value);
	// omitted when empty.
	AlwaysAllowSuggestion json.RawMessage
}

// DecodeReachoutRequest decodes one request line as the real bot's serde
// does: request_id, tool_name, tool_input, cwd and session_id are required;
// permission_suggestions (an array), assistant_context and
// hook_event_name (a string or null) are optional; unknown members are ignored; a member the request
// knows given twice, or anything after the object, is refused. request_id
// must be a UUID in a form Rust's uuid crate parses (hyphenated, simple,
// braced, urn:uuid:; any version) and is returned canonical. tool_input
// must be an object. The line must be UTF-8 (the bot reads a String).
// Errors name the member and the problem.
func DecodeReachoutRequest(line []byte) (ReachoutRequest, error) {
	var r ReachoutRequest
	if !utf8.Valid(line) {
		return r, errors.New("request is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return r, fmt.Errorf("request is not JSON: %w", syntaxOnly(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return r, fmt.Errorf("request is %s, want an object", jsonKindOfToken(tok))
	}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return r, fmt.Errorf("request is not JSON: %w", syntaxOnly(err))
		}
		key, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return r, fmt.Errorf("request is not JSON: %w", syntaxOnly(err))
		}
		switch key {
		case "request_id", "tool_name", "tool_input", "cwd", "session_id", "permission_suggestions", "assistant_context", "hook_event_name":
		default:
			continue // serde ignores unknown fields
		}
		if seen[key] {
			return r, fmt.Errorf("duplicate field %s", key)
		}
		seen[key] = true
		if err := r.setField(key, raw); err != nil {
			return r, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return r, fmt.Errorf("request is not JSON: %w", syntaxOnly(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return r, errors.New("request is not JSON: data after the object")
	}
	for _, k := range []string{"request_id", "tool_name", "tool_input", "cwd", "session_id"} {
		if !seen[k] {
			return r, fmt.Errorf("missing %s", k)
		}
	}
	return r, nil
}

func (r *ReachoutRequest) setField(key string, raw json.RawMessage) error {
	str := func(dst *string) error {
		if raw[0] != '"' {
			return fmt.Errorf("%s is %s, want a string", key, jsonKind(raw))
		}
		return json.Unmarshal(raw, dst)
	}
	switch key {
	case "request_id":
		var s string
		if err := str(&s); err != nil {
			return err
		}
		id, ok := ParseUUID(s)
		if !ok {
			return fmt.Errorf("request_id %q is not a UUID", s)
		}
		r.RequestID = id
	case "tool_name":
		return str(&r.ToolName)
	case "cwd":
		return str(&r.Cwd)
	case "session_id":
		return str(&r.SessionID)
	case "assistant_context":
		if string(raw) == "null" {
			return nil
		}
		return str(&r.AssistantContext)
	case "hook_event_name":
		if string(raw) == "null" {
			return nil
		}
		return str(&r.HookEventName)
	case "tool_input":
		if raw[0] != '{' {
			return fmt.Errorf("tool_input is %s, want an object", jsonKind(raw))
		}
		r.ToolInput = append(json.RawMessage(nil), raw...)
	case "permission_suggestions":
		if raw[0] != '[' {
			return fmt.Errorf("permission_suggestions is %s, want an array", jsonKind(raw))
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return fmt.Errorf("permission_suggestions: %w", err)
		}
		if items == nil {
			items = []json.RawMessage{}
		}
		r.PermissionSuggestions = items
	}
	return nil
}

// syntaxOnly keeps a decoder error's message and drops its type: the
// caller's text already says what failed.
func syntaxOnly(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errors.New("unexpected end of input")
	}
	return err
}

// jsonKind names the kind of the JSON value raw (valid JSON).
func jsonKind(raw []byte) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

func jsonKindOfToken(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "an array"
	case string:
		return "a string"
	case nil:
		return "null"
	case bool:
		return "a boolean"
	}
	return "a number"
}

// ParseUUID parses s the way Rust's uuid crate (Uuid::parse_str) does:
// 32 hex digits, the hyphenated 8-4-4-4-12 form, that form in braces, or
// it after "urn:uuid:"; hex digits in either case, any version or variant.
// It returns the canonical form: lowercase, hyphenated.
func ParseUUID(s string) (string, bool) {
	var b [16]byte
	switch len(s) {
	case 32:
		if !hexInto(b[:], s) {
			return "", false
		}
		return canonicalUUID(b), true
	case 38:
		if s[0] != '{' || s[37] != '}' {
			return "", false
		}
		s = s[1:37]
	case 45:
		if s[:9] != "urn:uuid:" {
			return "", false
		}
		s = s[9:]
	case 36:
	default:
		return "", false
	}
	if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return "", false
	}
	if !hexInto(b[:4], s[0:8]) || !hexInto(b[4:6], s[9:13]) || !hexInto(b[6:8], s[14:18]) ||
		!hexInto(b[8:10], s[19:23]) || !hexInto(b[10:], s[24:36]) {
		return "", false
	}
	return canonicalUUID(b), true
}

func hexInto(dst []byte, s string) bool {
	for i := range dst {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func canonicalUUID(b [16]byte) string {
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

// AppendReachoutResponse appends r as one IpcResponse line: request_id,
// decision, then message, user_message and always_allow_suggestion, each
// only when set (the real bot's serde omits a None), and "\n".
func AppendReachoutResponse(dst []byte, r ReachoutResponse) []byte {
	dst = append(dst, `{"request_id":`...)
	dst = AppendJSONString(dst, r.RequestID, false)
	dst = append(dst, `,"decision":`...)
	dst = AppendJSONString(dst, r.Decision, false)
	if r.Message != "" {
		dst = append(dst, `,"message":`...)
		dst = AppendJSONString(dst, r.Message, false)
	}
	if r.UserMessage != "" {
		dst = append(dst, `,"user_message":`...)
		dst = AppendJSONString(dst, r.UserMessage, false)
	}
	if s := bytes.TrimSpace(r.AlwaysAllowSuggestion); len(s) > 0 {
		dst = append(dst, `,"always_allow_suggestion":`...)
		// A suggestion came from a decoded request (valid JSON); compact
		// it so that the line holds no newline.
		var buf bytes.Buffer
		if err := json.Compact(&buf, s); err == nil {
			dst = append(dst, buf.Bytes()...)
		} else {
			dst = append(dst, "null"...)
		}
	}
	return append(dst, "}\n"...)
}
