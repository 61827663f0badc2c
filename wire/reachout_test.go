package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const testUUID = "550e8400-e29b-41d4-a716-446655440000"

func reachoutLine(id string, extra string) string {
	return `{"request_id":"` + id + `","tool_name":"Bash","tool_input":{"command":"ls"},"cwd":"/w","session_id":"s1"` + extra + `}`
}

func TestParseUUID(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{testUUID, testUUID},
		{"550E8400-E29B-41D4-A716-446655440000", testUUID},
		{"550e8400e29b41d4a716446655440000", testUUID},
		{"{550e8400-e29b-41d4-a716-446655440000}", testUUID},
		{"urn:uuid:550e8400-e29b-41d4-a716-446655440000", testUUID},
		{"00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"}, // nil UUID: any version
		{"550e8400-e29b-11d4-a716-446655440000", "550e8400-e29b-11d4-a716-446655440000"}, // v1
		{"", ""},
		{"x", ""},
		{"550e8400-e29b-41d4-a716-44665544000g", ""},
		{"550e8400-e29b-41d4-a716+446655440000", ""},
		{"550e8400e29b-41d4-a716-4466554400000", ""},
		{"{550e8400e29b41d4a716446655440000}", ""},            // braced simple: not a uuid-crate form
		{"URN:UUID:550e8400-e29b-41d4-a716-446655440000", ""}, // the prefix is case-sensitive
		{"(550e8400-e29b-41d4-a716-446655440000)", ""},
		{" 550e8400-e29b-41d4-a716-446655440000", ""},
	} {
		got, ok := ParseUUID(c.in)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("ParseUUID(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
}

func TestDecodeReachoutRequest(t *testing.T) {
	line := `{"request_id":"{550E8400-E29B-41D4-A716-446655440000}","tool_name":"Bash",` +
		`"tool_input":{"command":"rm -rf x","description":"d"},"cwd":"/w","session_id":"s1",` +
		`"permission_suggestions":[{"type":"toolAlwaysAllow","tool":"Bash"}, 3],` +
		`"assistant_context":"I will clean up","transcript_path":"ignored","extra":{"a":[1,2]}}`
	r, err := DecodeReachoutRequest([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if r.RequestID != testUUID || r.ToolName != "Bash" || r.Cwd != "/w" || r.SessionID != "s1" ||
		r.AssistantContext != "I will clean up" {
		t.Fatalf("decoded %+v", r)
	}
	if string(r.ToolInput) != `{"command":"rm -rf x","description":"d"}` {
		t.Fatalf("tool_input %s", r.ToolInput)
	}
	if len(r.PermissionSuggestions) != 2 || string(r.PermissionSuggestions[0]) != `{"type":"toolAlwaysAllow","tool":"Bash"}` ||
		string(r.PermissionSuggestions[1]) != "3" {
		t.Fatalf("suggestions %q", r.PermissionSuggestions)
	}

	// Optional members absent or null.
	r, err = DecodeReachoutRequest([]byte(reachoutLine(testUUID, `,"assistant_context":null,"hook_event_name":null`)))
	if err != nil || r.PermissionSuggestions != nil || r.AssistantContext != "" || r.HookEventName != "" {
		t.Fatalf("%+v, %v", r, err)
	}
	// The hook event a hook that forwards it names; not a string: refused.
	r, err = DecodeReachoutRequest([]byte(reachoutLine(testUUID, `,"hook_event_name":"PreToolUse"`)))
	if err != nil || r.HookEventName != "PreToolUse" {
		t.Fatalf("%+v, %v", r, err)
	}
	if _, err := DecodeReachoutRequest([]byte(reachoutLine(testUUID, `,"hook_event_name":1`))); err == nil || !strings.Contains(err.Error(), "hook_event_name is a number") {
		t.Fatalf("hook_event_name 1: %v", err)
	}
	// A final \r, whitespace around: as serde.
	if _, err := DecodeReachoutRequest([]byte(" " + reachoutLine(testUUID, "") + " \t")); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeReachoutRequestErrors(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{``, "request is not JSON: unexpected end of input"},
		{`not json`, "request is not JSON"},
		{`[1]`, "request is an array, want an object"},
		{`"x"`, "request is a string, want an object"},
		{`{"request_id":`, "request is not JSON"},
		{reachoutLine(testUUID, "") + `{}`, "request is not JSON: data after the object"},
		{reachoutLine("x", ""), `request_id "x" is not a UUID`},
		{reachoutLine(testUUID+"0", ""), `is not a UUID`},
		{`{"request_id":7,"tool_name":"Bash","tool_input":{},"cwd":"/","session_id":"s"}`, "request_id is a number, want a string"},
		{`{"request_id":"` + testUUID + `","tool_input":{},"cwd":"/","session_id":"s"}`, "missing tool_name"},
		{`{"request_id":"` + testUUID + `","tool_name":"B","cwd":"/","session_id":"s"}`, "missing tool_input"},
		{`{"request_id":"` + testUUID + `","tool_name":"B","tool_input":{},"session_id":"s"}`, "missing cwd"},
		{`{"request_id":"` + testUUID + `","tool_name":"B","tool_input":{},"cwd":"/"}`, "missing session_id"},
		{`{"tool_name":"B","tool_input":{},"cwd":"/","session_id":"s"}`, "missing request_id"},
		{`{"request_id":"` + testUUID + `","tool_name":"B","tool_input":"ls","cwd":"/","session_id":"s"}`, "tool_input is a string, want an object"},
		{`{"request_id":"` + testUUID + `","tool_name":null,"tool_input":{},"cwd":"/","session_id":"s"}`, "tool_name is null, want a string"},
		{reachoutLine(testUUID, `,"permission_suggestions":{}`), "permission_suggestions is an object, want an array"},
		{reachoutLine(testUUID, `,"permission_suggestions":null`), "permission_suggestions is null, want an array"},
		{reachoutLine(testUUID, `,"assistant_context":5`), "assistant_context is a number, want a string"},
		{reachoutLine(testUUID, `,"tool_name":"Read"`), "duplicate field tool_name"},
		{"{\"request_id\":\"" + testUUID + "\",\"tool_name\":\"\xff\"}", "request is not UTF-8"},
	} {
		_, err := DecodeReachoutRequest([]byte(c.line))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeReachoutRequest(%.60q) = %v, want an error containing %q", c.line, err, c.want)
		}
	}
	// Unknown members may repeat: serde ignores them.
	if _, err := DecodeReachoutRequest([]byte(reachoutLine(testUUID, `,"x":1,"x":2`))); err != nil {
		t.Fatal(err)
	}
}

func TestAppendReachoutResponse(t *testing.T) {
	for _, c := range []struct {
		r    ReachoutResponse
		want string
	}{
		{ReachoutResponse{RequestID: testUUID, Decision: "Allow"}, `{"request_id":"` + testUUID + `","decision":"Allow"}`},
		{ReachoutResponse{RequestID: testUUID, Decision: "Deny", Message: "no <rm>\n"},
			`{"request_id":"` + testUUID + `","decision":"Deny","message":"no <rm>\n"}`},
		{ReachoutResponse{RequestID: testUUID, Decision: "Reply", UserMessage: "use pytest"},
			`{"request_id":"` + testUUID + `","decision":"Reply","user_message":"use pytest"}`},
		{ReachoutResponse{RequestID: testUUID, Decision: "AlwaysAllow", AlwaysAllowSuggestion: json.RawMessage("{\"tool\": \"Bash\",\n \"x\":[1]}")},
			`{"request_id":"` + testUUID + `","decision":"AlwaysAllow","always_allow_suggestion":{"tool":"Bash","x":[1]}}`},
		{ReachoutResponse{RequestID: testUUID, Decision: "Timeout", Message: "m", UserMessage: "u", AlwaysAllowSuggestion: json.RawMessage(`1`)},
			`{"request_id":"` + testUUID + `","decision":"Timeout","message":"m","user_message":"u","always_allow_suggestion":1}`},
	} {
		got := string(AppendReachoutResponse([]byte("x"), c.r))
		if got != "x"+c.want+"\n" {
			t.Errorf("AppendReachoutResponse(%+v) =\n%s\nwant\n%s", c.r, got, c.want)
		}
	}
}

func TestReachoutLineReaderBound(t *testing.T) {
	long := strings.Repeat("a", MaxReachoutLine+1) + "\n"
	lr := NewReachoutLineReader(strings.NewReader(long))
	_, err := lr.Next()
	if !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), "reachout request line longer than 1048576 bytes") {
		t.Fatalf("err %v", err)
	}
	ok := strings.Repeat("a", MaxReachoutLine) + "\n"
	if line, err := NewReachoutLineReader(strings.NewReader(ok)).Next(); err != nil || len(line) != MaxReachoutLine {
		t.Fatalf("%d, %v", len(line), err)
	}
}
