package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// renderMessages is what prompt and session write for a run of messages.
func renderMessages(verbose bool, msgs ...[2]string) string {
	var out bytes.Buffer
	f := &taskFollower{stdout: &out, stderr: &out, verbose: verbose, lineStart: true}
	for _, m := range msgs {
		f.print(m[0], json.RawMessage(m[1]))
	}
	f.endLine()
	return out.String()
}

func TestRenderMessage(t *testing.T) {
	t.Parallel()
	m := func(typ, data string) [2]string { return [2]string{typ, data} }
	for _, c := range []struct {
		name    string
		msgs    [][2]string
		verbose bool
		want    string
	}{
		{"content deltas are text as it comes", []([2]string){m("content_block_delta", `{"delta":{"text":"Hello, "}}`),
			m("content_block_delta", `{"delta":{"text":"world"}}`)}, false, "Hello, world\n"},
		{"text messages are streamed: no newline per piece", []([2]string){m("text", `{"text":"Hel"}`), m("text", `{"text":"lo"}`),
			m("tool_call", `{"id":"t1","name":"Bash","input":{"command":"ls -la"}}`)}, false, "Hello\n> Bash ls -la\n"},
		{"a plain text line is a block", []([2]string){m("text", `{"type":"text","text":"plain"}`), m("text", `{"type":"text","text":"again"}`)},
			false, "plain\nagain\n"},
		{"a tool call is one line", []([2]string){m("tool_call", `{"tool":"Bash","input":{"command":"ls -la\nwc"}}`)}, false, "> Bash ls -la ⏎ wc\n"},
		{"claude stream-json text", []([2]string){m("assistant", `{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]}}`)},
			false, "Done.\n"},
		{"claude stream-json tool use after text", []([2]string){m("assistant",
			`{"type":"assistant","message":{"content":[{"type":"text","text":"Reading."},{"type":"tool_use","name":"Read","input":{"file_path":"/etc/hosts"}}]}}`)},
			false, "Reading.\n> Read /etc/hosts\n"},
		{"a denial says so, never as if the tool ran", []([2]string){m("tool_call", `{"id":"t1","name":"Bash","input":{"command":"rm -rf build"}}`),
			m("permission_denied", `{"id":"t1","name":"Bash","input":{"command":"rm -rf build"},"reason":"not the build dir"}`)},
			false, "> Bash rm -rf build\n! denied Bash rm -rf build: not the build dir\n"},
		{"a denial is said once: the error result the model read of it is not said again", []([2]string){
			m("tool_call", `{"id":"t1","name":"Bash","input":{"command":"rm -rf build"}}`),
			m("permission_denied", `{"id":"t1","name":"Bash","reason":"user_denied: not the build dir"}`),
			m("tool_result", `{"id":"t1","output":"user_denied: not the build dir","is_error":true}`),
			m("text", `{"text":"OK."}`)},
			false, "> Bash rm -rf build\n! denied Bash: user_denied: not the build dir\nOK.\n"},
		{"a denial names its call", []([2]string){m("tool_call", `{"id":"t1","name":"Write","input":{"file_path":"/x"}}`),
			m("permission_denied", `{"id":"t1","reason":"no"}`)}, false, "> Write /x\n! denied Write: no\n"},
		{"claude's own denial: a tool result that is an error", []([2]string){
			m("assistant", `{"message":{"content":[{"type":"tool_use","id":"tu","name":"Bash","input":{"command":"ls"}}]}}`),
			m("user", `{"message":{"content":[{"type":"tool_result","tool_use_id":"tu","is_error":true,"content":"Claude requested permissions to use Bash, but you haven't granted it yet."}]}}`)},
			false, "> Bash ls\n! Bash failed: Claude requested permissions to use Bash, but you haven't granted it yet.\n"},
		{"tool results only with --verbose", []([2]string){m("tool_result", `{"id":"t1","output":"a.go\nb.go"}`)}, false, ""},
		{"tool results with --verbose", []([2]string){m("tool_call", `{"id":"t1","name":"Bash","input":{"command":"ls"}}`),
			m("tool_result", `{"id":"t1","output":"a.go\nb.go"}`)}, true, "> Bash ls\n< Bash: a.go ⏎ b.go\n"},
		{"thinking only with --verbose", []([2]string){m("thinking", `{"text":"let me"}`), m("text", `{"text":"Hi"}`)}, false, "Hi\n"},
		{"thinking with --verbose, set apart", []([2]string){m("thinking", `{"text":"let "}`), m("thinking", `{"text":"me"}`), m("text", `{"text":"Hi"}`)},
			true, "[thinking] let me\nHi\n"},
		{"the result's line", []([2]string){m("text", `{"text":"ok"}`),
			m("result", `{"text":"ok","denied":2,"usage":{"input_tokens":120,"output_tokens":30,"cost_usd":0.0042}}`)},
			false, "ok\n-- result: 2 tool uses denied, 120 tokens in, 30 out, $0.0042\n"},
		{"claude's result line", []([2]string){m("result", `{"type":"result","result":"x","total_cost_usd":0.5,"usage":{"input_tokens":1,"output_tokens":2},"permission_denials":[{}]}`)},
			false, "-- result: 1 tool use denied, 1 tokens in, 2 out, $0.5000\n"},
		{"an error result", []([2]string){m("result", `{"is_error":true,"text":"API Error: 429"}`)}, false, "-- result: error: API Error: 429\n"},
		{"an error", []([2]string){m("error", `{"message":"rate limited"}`)}, false, "error: rate limited\n"},
		{"usage is left out", []([2]string){m("usage", `{"input_tokens":1}`)}, false, ""},
		{"usage with --verbose", []([2]string){m("usage", `{"input_tokens":1,"output_tokens":2}`)}, true, "[usage] 1 tokens in, 2 out\n"},
		{"other types are left out", []([2]string){m("progress", `{"p":1}`)}, false, ""},
		{"other types with --verbose", []([2]string){m("progress", `{"p": 1}`)}, true, "[progress] {\"p\":1}\n"},
		{"data that is not JSON with --verbose", []([2]string){m("tool_result", `not json`)}, true, "[tool_result] not json\n"},
		{"control characters in lines are spaces", []([2]string){m("permission_denied", "{\"name\":\"Bash\\u001b[31m\",\"reason\":\"a\\u001b]0;x\\u0007b\"}")},
			false, "! denied Bash [31m: a ]0;x b\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := renderMessages(c.verbose, c.msgs...); got != c.want {
				t.Fatalf("got %q\nwant %q", got, c.want)
			}
		})
	}
}

// What a requester or an agent wrote reaches the approvals table, and the
// chat's lines, on one line and without a control character: a plan's
// first line (ESC, BEL) and a tool input's C1 CSI (U+009B) as spaces; a
// tool result of no tool named says "tool", as prompt's does.
func TestRenderHostileOneLine(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var out bytes.Buffer
	printApprovals(&out, []api.Approval{
		{ID: "a-1", Kind: api.KindPlan, Source: api.SourcePlan, Content: "\n# Plan\x1b]0;owned\x07 now\nstep", CreatedAt: now},
		{ID: "a-2", Kind: api.KindTool, Source: api.SourceReachout, ToolName: "Bash",
			ToolInput: json.RawMessage(`{"command":"ls \u009b2J"}`), CreatedAt: now},
	}, false, now)
	table := out.String()
	for _, want := range []string{"# Plan ]0;owned  now", "ls  2J"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	if strings.ContainsAny(table, "\x1b\x07\u009b") {
		t.Errorf("a control character reached the table: %q", table)
	}

	out.Reset()
	s := &chatSession{stdout: &out, stderr: &out, lineStart: true, streaming: "m-1"}
	s.event(wire.Event{Event: "chat.tool_result", Data: json.RawMessage(`{"message_id":"m-1","output":"a.go\nb.go"}`)})
	s.event(wire.Event{Event: "chat.tool_result", Data: json.RawMessage(`{"message_id":"m-1","tool":"Bash","output":"no","denied":true}`)})
	if got, want := out.String(), "< tool: a.go ⏎ b.go\n! denied Bash: no\n"; got != want {
		t.Errorf("chat lines %q, want %q", got, want)
	}
}
