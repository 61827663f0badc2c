// Package reachouthook is a client of vibe-reachout's hook socket written
// as the real hook (vibe-reachout's hook mode) is: connect, write one
// request line, shut the write side, read one answer line within a
// timeout, and map the answer to Claude Code's PermissionRequest hook
// output and exit code. Tests and orchbench use it in place of the real
// hook. Unlike the real hook it forwards the hook input's
// hook_event_name in the request (an extra member the bot ignores).
package reachouthook

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

// Request is the hook's IpcRequest, as it writes it.
type Request struct {
	RequestID             string            `json:"request_id"`
	ToolName              string            `json:"tool_name"`
	ToolInput             json.RawMessage   `json:"tool_input"`
	Cwd                   string            `json:"cwd"`
	SessionID             string            `json:"session_id"`
	PermissionSuggestions []json.RawMessage `json:"permission_suggestions"`
	AssistantContext      string            `json:"assistant_context,omitempty"`
	// HookEventName is Claude Code's hook_event_name, forwarded (vibe-
	// reachout's own hook does not send it): the daemon then knows when
	// the hook runs as a hook whose answer Claude Code ignores.
	HookEventName string `json:"hook_event_name,omitempty"`
}

// Response is the IpcResponse the hook reads.
type Response struct {
	RequestID             string          `json:"request_id"`
	Decision              string          `json:"decision"`
	Message               *string         `json:"message"`
	UserMessage           *string         `json:"user_message"`
	AlwaysAllowSuggestion json.RawMessage `json:"always_allow_suggestion"`
}

// HookInput is what Claude Code writes on the hook's stdin (the fields the
// hook reads).
type HookInput struct {
	SessionID             string            `json:"session_id"`
	TranscriptPath        string            `json:"transcript_path"`
	Cwd                   string            `json:"cwd"`
	PermissionMode        string            `json:"permission_mode"`
	HookEventName         string            `json:"hook_event_name"`
	ToolName              string            `json:"tool_name"`
	ToolInput             json.RawMessage   `json:"tool_input"`
	PermissionSuggestions []json.RawMessage `json:"permission_suggestions"`
}

// NewRequestID is a random version 4 UUID, as the hook makes one.
func NewRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	id, _ := wire.ParseUUID(fmt.Sprintf("%x", b))
	return id
}

// RequestFrom is the request the hook sends for Claude Code's input.
func RequestFrom(in HookInput) Request {
	sugg := in.PermissionSuggestions
	if sugg == nil {
		sugg = []json.RawMessage{}
	}
	return Request{RequestID: NewRequestID(), ToolName: in.ToolName, ToolInput: in.ToolInput, Cwd: in.Cwd,
		SessionID: in.SessionID, PermissionSuggestions: sugg, HookEventName: in.HookEventName}
}

// Send does one exchange on the socket at path: the request line, the
// write side shut, then one answer line read within timeout. An empty
// answer (the server closed without one) is an error, as for the hook.
func Send(path string, req Request, timeout time.Duration) (Response, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return Response{}, fmt.Errorf("connecting to %s: %w", path, err)
	}
	defer c.Close()
	line, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("encoding the request: %w", err)
	}
	if _, err := c.Write(append(line, '\n')); err != nil {
		return Response{}, fmt.Errorf("sending the request: %w", err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		return Response{}, fmt.Errorf("shutting the write side: %w", err)
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	got, err := bufio.NewReader(c).ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return Response{}, fmt.Errorf("no answer within %s", timeout)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return Response{}, fmt.Errorf("reading the answer: %w", err)
	}
	if strings.TrimSpace(got) == "" {
		return Response{}, errors.New("empty response from bot")
	}
	return DecodeResponse([]byte(got))
}

// DecodeResponse reads an answer line strictly, as the hook's serde does:
// a UUID request_id, one of the five decisions.
func DecodeResponse(line []byte) (Response, error) {
	var r Response
	if err := json.Unmarshal(line, &r); err != nil {
		return r, fmt.Errorf("invalid response %q: %w", line, err)
	}
	if _, ok := wire.ParseUUID(r.RequestID); !ok {
		return r, fmt.Errorf("invalid response %q: request_id is not a UUID", line)
	}
	switch r.Decision {
	case "Allow", "Deny", "AlwaysAllow", "Reply", "Timeout":
	default:
		return r, fmt.Errorf("invalid response %q: unknown decision %q", line, r.Decision)
	}
	return r, nil
}

// Output is Claude Code's hook output for an answer: the JSON line the
// hook prints and its exit code. A Timeout prints nothing and exits 1
// (Claude Code falls back to asking in the terminal).
func Output(r Response) (stdout []byte, exit int) {
	type decision struct {
		Behavior           string            `json:"behavior"`
		Message            *string           `json:"message,omitempty"`
		UpdatedPermissions []json.RawMessage `json:"updatedPermissions,omitempty"`
	}
	type specific struct {
		HookEventName string   `json:"hookEventName"`
		Decision      decision `json:"decision"`
	}
	str := func(s string) *string { return &s }
	var d decision
	switch r.Decision {
	case "Allow":
		d = decision{Behavior: "allow"}
	case "Deny":
		msg := "Denied via Telegram"
		if r.Message != nil {
			msg = *r.Message
		}
		d = decision{Behavior: "deny", Message: str(msg)}
	case "AlwaysAllow":
		perms := []json.RawMessage{}
		if len(r.AlwaysAllowSuggestion) > 0 && string(r.AlwaysAllowSuggestion) != "null" {
			perms = append(perms, r.AlwaysAllowSuggestion)
		}
		d = decision{Behavior: "allow", UpdatedPermissions: perms}
	case "Reply":
		msg := "(no message)"
		if r.UserMessage != nil {
			msg = *r.UserMessage
		}
		d = decision{Behavior: "deny", Message: str("The user wants you to modify your approach: " + msg)}
	default:
		return nil, 1
	}
	b, _ := json.Marshal(struct {
		Out specific `json:"hookSpecificOutput"`
	}{specific{HookEventName: "PermissionRequest", Decision: d}})
	if d.UpdatedPermissions != nil && len(d.UpdatedPermissions) == 0 {
		// omitempty drops an empty list; the hook writes [].
		b = []byte(strings.Replace(string(b), `"behavior":"allow"}`, `"behavior":"allow","updatedPermissions":[]}`, 1))
	}
	return append(b, '\n'), 0
}
