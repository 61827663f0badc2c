package wire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzReachoutRequest: decoding never panics; a decoded request, written
// out again as JSON and decoded, is the same request; the response line
// answering it is one valid JSON line that reads back as written.
func FuzzReachoutRequest(f *testing.F) {
	f.Add([]byte(reachoutLine(testUUID, "")))
	f.Add([]byte(reachoutLine("urn:uuid:"+testUUID, `,"permission_suggestions":[{"a":"\u2028"}],"assistant_context":"<&>"`)))
	f.Add([]byte(reachoutLine("550e8400e29b41d4a716446655440000", `,"x":[{"y":null}]`)))
	f.Add([]byte(`{"request_id":"` + testUUID + `","tool_name":"\ud800","tool_input":{"a":1e400},"cwd":"","session_id":""}`))
	f.Add([]byte(reachoutLine(testUUID, `,"hook_event_name":"PreToolUse"`)))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := DecodeReachoutRequest(line)
		if err != nil {
			return
		}
		if _, ok := ParseUUID(r.RequestID); !ok || len(r.RequestID) != 36 {
			t.Fatalf("request_id %q not canonical", r.RequestID)
		}
		if !json.Valid(r.ToolInput) || r.ToolInput[0] != '{' {
			t.Fatalf("tool_input %q", r.ToolInput)
		}
		again := map[string]any{"request_id": r.RequestID, "tool_name": r.ToolName, "tool_input": r.ToolInput,
			"cwd": r.Cwd, "session_id": r.SessionID}
		if r.PermissionSuggestions != nil {
			again["permission_suggestions"] = r.PermissionSuggestions
		}
		if r.AssistantContext != "" {
			again["assistant_context"] = r.AssistantContext
		}
		if r.HookEventName != "" {
			again["hook_event_name"] = r.HookEventName
		}
		b, err := json.Marshal(again)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", r, err)
		}
		r2, err := DecodeReachoutRequest(b)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		if r2.RequestID != r.RequestID || r2.ToolName != r.ToolName || r2.Cwd != r.Cwd || r2.SessionID != r.SessionID ||
			r2.AssistantContext != r.AssistantContext || r2.HookEventName != r.HookEventName || len(r2.PermissionSuggestions) != len(r.PermissionSuggestions) ||
			!jsonEqual(r2.ToolInput, r.ToolInput) {
			t.Fatalf("round trip:\n%+v\n%+v", r, r2)
		}
		resp := ReachoutResponse{RequestID: r.RequestID, Decision: "Deny", Message: r.ToolName, UserMessage: r.AssistantContext}
		if len(r.PermissionSuggestions) > 0 {
			resp.AlwaysAllowSuggestion = r.PermissionSuggestions[0]
		}
		out := AppendReachoutResponse(nil, resp)
		if bytes.IndexByte(out, '\n') != len(out)-1 {
			t.Fatalf("response is not one line: %q", out)
		}
		var back struct {
			RequestID             string          `json:"request_id"`
			Decision              string          `json:"decision"`
			Message               string          `json:"message"`
			UserMessage           string          `json:"user_message"`
			AlwaysAllowSuggestion json.RawMessage `json:"always_allow_suggestion"`
		}
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("response %q: %v", out, err)
		}
		if back.RequestID != resp.RequestID || back.Message != resp.Message || back.UserMessage != resp.UserMessage ||
			(len(resp.AlwaysAllowSuggestion) > 0 && !jsonEqual(back.AlwaysAllowSuggestion, resp.AlwaysAllowSuggestion)) {
			t.Fatalf("response %q reads back as %+v", out, back)
		}
	})
}

func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
