package chat

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
)

func TestParseMessage(t *testing.T) {
	var tools api.ToolNames
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
		// The built-in agent kinds' messages: text streamed, a tool
		// that failed or was refused said as such.
		{"thinking", `{"text":"hmm"}`, ""},
		{"text", `{"text":"pie"}`, "T:pie"},
		{"tool_call", `{"id":"u3","name":"Bash","input":{"command":"rm -rf build"}}`, `C:Bash:{"command":"rm -rf build"}`},
		{"permission_denied", `{"id":"u3","name":"Bash","input":{"command":"rm -rf build"},"reason":"not the build dir"}`, "D:Bash:not the build dir"},
		// The denied use's error result: the denial said it.
		{"tool_result", `{"id":"u3","output":"not the build dir","is_error":true}`, ""},
		{"tool_call", `{"id":"u4","name":"Bash","input":{"command":"ls"}}`, `C:Bash:{"command":"ls"}`},
		{"tool_result", `{"id":"u4","output":"needs approval","is_error":true}`, "E:Bash:needs approval"},
		{"usage", `{"input_tokens":1}`, ""},
		{"result", `{"text":"done","denied":1}`, ""},
	} {
		var got []string
		for _, it := range parseMessage(tc.typ, []byte(tc.data), &tools) {
			switch it.kind {
			case itemText:
				got = append(got, "T:"+it.text)
			case itemToolCall:
				got = append(got, "C:"+it.tool+":"+string(it.input))
			case itemToolResult:
				k := "R:"
				switch {
				case it.denied:
					k = "D:"
				case it.isError:
					k = "E:"
				}
				got = append(got, k+it.tool+":"+it.output)
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
}

// An agent's message, whatever it is, never panics the decoder, and what
// comes out is bounded and well-formed.
func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{`{"delta":{"text":"hi"}}`, `{"message":{"content":[{"type":"tool_use","id":"1","name":"x","input":{}}]}}`,
		`{"tool_use_id":"1","content":[{"type":"text","text":"a"}]}`, `{"output":null}`, `[]`, `"s"`, `{"input":1e999}`} {
		for _, typ := range []string{"content_block_delta", "assistant", "user", "tool_result", "tool_use", "text", "tool_call", "permission_denied"} {
			f.Add(typ, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		var tools api.ToolNames
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
