package main

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestRenderMessage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, typ, data string
		verbose         bool
		text            string
		lines           []string
	}{
		{"a content delta is text as it is", "content_block_delta", `{"delta":{"text":"Hello, "}}`, false, "Hello, ", nil},
		{"a tool call is one line", "tool_call", `{"tool":"Bash","input":{"command":"ls -la\nwc"}}`, false, "", []string{"> Bash ls -la ⏎ wc"}},
		{"claude stream-json text", "assistant", `{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]}}`, false, "Done.\n", nil},
		{"claude stream-json tool use after text", "assistant",
			`{"type":"assistant","message":{"content":[{"type":"text","text":"Reading."},{"type":"tool_use","name":"Read","input":{"file_path":"/etc/hosts"}}]}}`,
			false, "", []string{"Reading.", "> Read /etc/hosts"}},
		{"an error", "error", `{"message":"rate limited"}`, false, "", []string{"error: rate limited"}},
		{"other types are left out", "usage", `{"input_tokens":1}`, false, "", nil},
		{"other types with --verbose", "usage", `{"input_tokens": 1}`, true, "", []string{`[usage] {"input_tokens":1}`}},
		{"data that is not JSON with --verbose", "tool_result", `not json`, true, "", []string{"[tool_result] not json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			text, lines := renderMessage(c.typ, json.RawMessage(c.data), c.verbose)
			if text != c.text || !slices.Equal(lines, c.lines) {
				t.Fatalf("renderMessage(%s, %s) = %q, %q; want %q, %q", c.typ, c.data, text, lines, c.text, c.lines)
			}
		})
	}
}
