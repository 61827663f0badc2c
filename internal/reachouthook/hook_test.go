package reachouthook

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

func TestOutput(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, c := range []struct {
		r    Response
		want string
		exit int
	}{
		{Response{Decision: "Allow"}, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}`, 0},
		{Response{Decision: "Deny", Message: s("no")}, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"no"}}}`, 0},
		{Response{Decision: "Deny"}, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"Denied via Telegram"}}}`, 0},
		{Response{Decision: "AlwaysAllow", AlwaysAllowSuggestion: json.RawMessage(`{"tool":"Bash"}`)},
			`{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow","updatedPermissions":[{"tool":"Bash"}]}}}`, 0},
		{Response{Decision: "AlwaysAllow"}, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow","updatedPermissions":[]}}}`, 0},
		{Response{Decision: "Reply", UserMessage: s("use pytest")},
			`{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"The user wants you to modify your approach: use pytest"}}}`, 0},
		{Response{Decision: "Timeout"}, "", 1},
	} {
		out, exit := Output(c.r)
		if strings.TrimSuffix(string(out), "\n") != c.want || exit != c.exit {
			t.Errorf("Output(%+v) = %s, %d; want %s, %d", c.r, out, exit, c.want, c.exit)
		}
	}
}

func TestDecodeResponse(t *testing.T) {
	if _, err := DecodeResponse([]byte(`{"request_id":"x","decision":"Allow"}`)); err == nil {
		t.Fatal("bad request_id accepted")
	}
	if _, err := DecodeResponse([]byte(`{"request_id":"550e8400-e29b-41d4-a716-446655440000","decision":"allow"}`)); err == nil {
		t.Fatal("lowercase decision accepted")
	}
}

// Send writes one line, shuts its write side, and reads one line.
func TestSend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	id := NewRequestID()
	if got, ok := wire.ParseUUID(id); !ok || got != id || id[14] != '4' {
		t.Fatalf("request id %q", id)
	}
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		line, err := br.ReadBytes('\n')
		if err != nil {
			done <- err
			return
		}
		req, err := wire.DecodeReachoutRequest(line)
		if err != nil {
			done <- err
			return
		}
		if _, err := br.ReadByte(); err == nil {
			t.Error("the write side was not shut after the line")
		}
		c.Write(wire.AppendReachoutResponse(nil, wire.ReachoutResponse{RequestID: req.RequestID, Decision: "Deny", Message: req.ToolName}))
		done <- nil
	}()
	resp, err := Send(path, RequestFrom(HookInput{ToolName: "Bash", ToolInput: json.RawMessage(`{}`), Cwd: "/", SessionID: "s"}), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Decision != "Deny" || resp.Message == nil || *resp.Message != "Bash" {
		t.Fatalf("response %+v", resp)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A server that reads the request and closes without answering.
	go func() {
		c, err := ln.Accept()
		if err == nil {
			bufio.NewReader(c).ReadBytes('\n')
			c.Close()
		}
		done <- err
	}()
	_, err = Send(path, RequestFrom(HookInput{ToolName: "Bash", ToolInput: json.RawMessage(`{}`)}), 10*time.Second)
	if serr := <-done; serr != nil {
		t.Fatal(serr)
	}
	if err == nil || !strings.Contains(err.Error(), "empty response") {
		t.Fatalf("closed without an answer: %v", err)
	}
}

// The hook input's hook_event_name goes with the request (the daemon
// tells a hook Claude Code ignores by it); absent, it is left out.
func TestRequestFromHookEvent(t *testing.T) {
	b, _ := json.Marshal(RequestFrom(HookInput{HookEventName: "PreToolUse", ToolName: "Bash", ToolInput: json.RawMessage(`{}`)}))
	if !strings.Contains(string(b), `"hook_event_name":"PreToolUse"`) {
		t.Fatalf("request %s", b)
	}
	b, _ = json.Marshal(RequestFrom(HookInput{ToolName: "Bash", ToolInput: json.RawMessage(`{}`)}))
	if strings.Contains(string(b), "hook_event_name") {
		t.Fatalf("request %s", b)
	}
}
