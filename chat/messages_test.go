package chat

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseMessage(t *testing.T) {
	var tools toolNames
	for _, tc := range []struct {
		typ, data string
		want      string
	}{
		{"content_block_delta", `{"delta":{"text":"hi"}}`, "T:hi"},
		{"content_block_delta", `{"delta":{}}`, ""},
		{"text", `{"type":"text","text":"a line"}`, "T:a line"},
		{"tool_use", `{"id":"u1","name":"Read","input":{"path":"x"}}`, `C:Read:{"path":"x"}`},
		{"tool_call", `{"tool":"Bash"}`, `C:Bash:{}`},
		{"tool_result", `{"tool_use_id":"u1","output":"file"}`, "R:Read:file"},
		{"tool_result", `{"tool":"Bash","content":{"code":0}}`, `R:Bash:{"code":0}`},
		{"assistant", `{"message":{"content":"plain"}}`, "T:plain"},
		{"assistant", `{"message":{"content":[{"type":"text","text":"a"},{"type":"tool_use","id":"u2","name":"Grep","input":null}]}}`, "T:a|C:Grep:{}"},
		{"user", `{"message":{"content":[{"type":"tool_result","tool_use_id":"u2","content":"found"}]}}`, "R:Grep:found"},
		{"result", `{"result":"the same text again"}`, ""},
		{"progress", `{"percent":3}`, ""},
		{"content_block_delta", `not json`, ""},
		{"assistant", `{"message":{"content":7}}`, ""},
	} {
		var got []string
		for _, it := range parseMessage(tc.typ, []byte(tc.data), &tools) {
			switch it.kind {
			case itemText:
				got = append(got, "T:"+it.text)
			case itemToolCall:
				got = append(got, "C:"+it.tool+":"+string(it.input))
			case itemToolResult:
				got = append(got, "R:"+it.tool+":"+it.output)
			}
		}
		if s := strings.Join(got, "|"); s != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.typ, tc.data, s, tc.want)
		}
	}
	// Tool outputs are cut, on a rune boundary; tool ids are bounded.
	big, _ := json.Marshal(map[string]string{"tool": "x", "output": strings.Repeat("é", maxToolOutput)})
	it := parseMessage("tool_result", big, &tools)[0]
	if len(it.output) > maxToolOutput || !utf8.ValidString(it.output) {
		t.Fatalf("output of %d bytes (valid %v)", len(it.output), utf8.ValidString(it.output))
	}
	for i := 0; i < 3*maxToolIDs; i++ {
		tools.add(strings.Repeat("i", i+1), "t")
	}
	if len(tools.names) > maxToolIDs || len(tools.ids) > maxToolIDs {
		t.Fatalf("%d tool ids kept", len(tools.names))
	}
}

// An agent's message, whatever it is, never panics the decoder, and what
// comes out is bounded and well-formed.
func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{`{"delta":{"text":"hi"}}`, `{"message":{"content":[{"type":"tool_use","id":"1","name":"x","input":{}}]}}`,
		`{"tool_use_id":"1","content":[{"type":"text","text":"a"}]}`, `{"output":null}`, `[]`, `"s"`, `{"input":1e999}`} {
		for _, typ := range []string{"content_block_delta", "assistant", "user", "tool_result", "tool_use", "text"} {
			f.Add(typ, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		var tools toolNames
		for _, it := range parseMessage(typ, data, &tools) {
			switch it.kind {
			case itemToolCall:
				if len(it.tool) > maxToolName || !json.Valid(it.input) {
					t.Fatalf("tool call %q input %q", it.tool, it.input)
				}
			case itemToolResult:
				if len(it.tool) > maxToolName || len(it.output) > maxToolOutput {
					t.Fatalf("tool result %q of %d bytes", it.tool, len(it.output))
				}
			}
		}
	})
}
