package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// show is a part as a short string for the tables.
func show(p AgentPart) string {
	s := p.Kind + ":" + p.Text
	if p.Block {
		s += "|block"
	}
	if p.ID != "" {
		s += "|id=" + p.ID
	}
	if p.Tool != "" {
		s += "|tool=" + p.Tool
	}
	if p.Kind == MsgToolCall || p.Kind == MsgPermissionDenied {
		s += "|in=" + string(p.Input)
	}
	if p.IsError {
		s += "|error"
	}
	if p.Usage != nil {
		s += fmt.Sprintf("|usage=%d/%d/%d/%d/%g", p.Usage.InputTokens, p.Usage.OutputTokens, p.Usage.CacheReadTokens,
			p.Usage.CacheWriteTokens, p.Usage.CostUSD)
	}
	if p.Denied != 0 {
		s += fmt.Sprintf("|denied=%d", p.Denied)
	}
	if p.Turns != 0 {
		s += fmt.Sprintf("|turns=%d", p.Turns)
	}
	if p.SDKSessionID != "" {
		s += "|sdk=" + p.SDKSessionID
	}
	return s
}

func TestDecodeAgentMessage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		typ, data string
		want      string // parts joined by " ; "
		unknown   bool
	}{
		// The built-in kinds' messages.
		{MsgText, `{"text":"Hel","raw":{"type":"stream_event"}}`, "text:Hel", false},
		{MsgText, `{"text":""}`, "", false},
		{MsgThinking, `{"text":"hmm"}`, "thinking:hmm", false},
		{MsgToolCall, `{"id":"t1","name":"Bash","input":{"command":"ls"}}`, `tool_call:|id=t1|tool=Bash|in={"command":"ls"}`, false},
		{MsgToolResult, `{"id":"t1","output":"needs approval","is_error":true}`, "tool_result:needs approval|id=t1|error", false},
		{MsgPermissionDenied, `{"id":"t1","name":"Bash","input":{"command":"ls"},"reason":"not now"}`,
			`permission_denied:not now|id=t1|tool=Bash|in={"command":"ls"}`, false},
		{MsgUsage, `{"input_tokens":10,"output_tokens":3,"cache_read_tokens":2,"cost_usd":0.01}`, "usage:|usage=10/3/2/0/0.01", false},
		{MsgResult, `{"text":"done","denied":2,"turns":3,"sdk_session_id":"s-9","usage":{"input_tokens":5,"output_tokens":1,"cost_usd":0.5}}`,
			"result:done|usage=5/1/0/0/0.5|denied=2|turns=3|sdk=s-9", false},
		{MsgResult, `{"is_error":true,"text":"boom"}`, "result:boom|error", false},
		{MsgAgentLine, `{"agent":"claude-code","line":{"type": "system"}}`, `agent_line:{"type":"system"}|tool=claude-code`, false},
		// Agor's and a command executor's.
		{"content_block_delta", `{"delta":{"text":"hi"}}`, "text:hi", false},
		{"content_block_delta", `{"delta":{"type":"thinking_delta","thinking":"so"}}`, "thinking:so", false},
		{"content_block_delta", `{"delta":{}}`, "", false},
		{"text", `{"type":"text","text":"a line"}`, "text:a line|block", false},
		{"tool_use", `{"id":"u1","tool":"Read","input":null}`, "tool_call:|id=u1|tool=Read|in={}", false},
		{"tool_result", `{"tool_use_id":"u1","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, "tool_result:a\nb|id=u1", false},
		{"tool_result", `{"tool":"Bash","result":{"code": 0}}`, `tool_result:{"code":0}|tool=Bash`, false},
		{"error", `{"message":"rate limited"}`, "error:rate limited", false},
		// Claude Code's stream-json lines.
		{"assistant", `{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"plan"},{"type":"text","text":"Reading."},{"type":"tool_use","id":"tu","name":"Read","input":{"file_path":"/x"}}]}}`,
			`thinking:plan|block ; text:Reading.|block ; tool_call:|id=tu|tool=Read|in={"file_path":"/x"}`, false},
		{"assistant", `{"message":{"content":"plain"}}`, "text:plain|block", false},
		{"user", `{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu","content":"Claude requested permissions to use Bash, but you haven't granted it yet.","is_error":true}]}}`,
			"tool_result:Claude requested permissions to use Bash, but you haven't granted it yet.|id=tu|error", false},
		{"user", `{"message":{"content":"the prompt"}}`, "user:the prompt|block", false},
		{"result", `{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"abc","num_turns":2,"total_cost_usd":0.0123,` +
			`"usage":{"input_tokens":100,"output_tokens":20,"cache_read_input_tokens":7,"cache_creation_input_tokens":9},` +
			`"permission_denials":[{"tool_name":"Bash","tool_use_id":"tu","tool_input":{}}]}`,
			"result:Done.|usage=100/20/7/9/0.0123|denied=1|turns=2|sdk=abc", false},
		// Not understood.
		{"progress", `{"percent":3}`, "", true},
		{"content_block_delta", `not json`, "", true},
		{"assistant", `{"message":{"content":7}}`, "", true},
		{"error", `{}`, "", true},
		{MsgText, `{"text":5}`, "", true},
	} {
		parts, known := DecodeAgentMessage(c.typ, json.RawMessage(c.data))
		var got []string
		for _, p := range parts {
			got = append(got, show(p))
		}
		if s := strings.Join(got, " ; "); s != c.want || known == c.unknown {
			t.Errorf("DecodeAgentMessage(%s, %s) = %q, known %v; want %q, known %v", c.typ, c.data, s, known, c.want, !c.unknown)
		}
	}
}

func TestToolNames(t *testing.T) {
	t.Parallel()
	var tn ToolNames
	call := AgentPart{Kind: MsgToolCall, ID: "u1", Tool: "Bash"}
	tn.Part(&call)
	res := AgentPart{Kind: MsgToolResult, ID: "u1"}
	tn.Part(&res)
	den := AgentPart{Kind: MsgPermissionDenied, ID: "u1", Tool: "Own"}
	tn.Part(&den)
	if res.Tool != "Bash" || den.Tool != "Own" {
		t.Fatalf("result named %q, denial %q", res.Tool, den.Tool)
	}
	// The error result of the denied use is marked; another's is not.
	after := AgentPart{Kind: MsgToolResult, ID: "u1", IsError: true}
	tn.Part(&after)
	other := AgentPart{Kind: MsgToolResult, ID: "u2", IsError: true}
	tn.Part(&other)
	if !after.AfterDenial || other.AfterDenial || res.AfterDenial {
		t.Fatalf("AfterDenial: the denied use's error %v, another's %v, the earlier result %v", after.AfterDenial, other.AfterDenial, res.AfterDenial)
	}
	for i := 0; i < 3*MaxToolNames; i++ {
		tn.Add(fmt.Sprint("id", i), "t")
		tn.Part(&AgentPart{Kind: MsgPermissionDenied, ID: fmt.Sprint("id", i)})
	}
	if len(tn.denied) > MaxToolNames {
		t.Fatalf("%d denied ids kept", len(tn.denied))
	}
	if tn.Len() != MaxToolNames || tn.Name("u1") != "" || tn.Name(fmt.Sprint("id", 3*MaxToolNames-1)) != "t" {
		t.Fatalf("%d ids kept", tn.Len())
	}
}

func TestToolSummary(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ tool, in, want string }{
		{"Bash", `{"command":"ls -la","description":"list"}`, "ls -la"},
		{"Write", `{"file_path":"/a","content":"x"}`, "/a"},
		{"exec_command", `{"cmd":"make"}`, "make"},
		{"Other", `{"b": 1}`, `{"b":1}`},
		{"Other", `{}`, ""},
		{"Other", ``, ""},
	} {
		if got := ToolSummary(c.tool, json.RawMessage(c.in)); got != c.want {
			t.Errorf("ToolSummary(%s, %s) = %q, want %q", c.tool, c.in, got, c.want)
		}
	}
}

// FuzzDecodeAgentMessage: whatever an agent sends, the decoder does not
// panic, says it does not know it with no parts, and a tool call's or
// denial's input is JSON.
func FuzzDecodeAgentMessage(f *testing.F) {
	for _, s := range []string{`{"delta":{"text":"hi"}}`, `{"text":"x","raw":{}}`, `{"id":"1","name":"Bash","input":{"command":"ls"}}`,
		`{"message":{"content":[{"type":"tool_use","id":"1","name":"x","input":{}},{"type":"thinking","thinking":"t"}]}}`,
		`{"tool_use_id":"1","content":[{"type":"text","text":"a"}],"is_error":true}`, `{"output":null}`, `[]`, `"s"`, `{"input":1e999}`,
		`{"result":"r","permission_denials":[{}],"usage":{"input_tokens":1,"cache_read_input_tokens":2},"total_cost_usd":1}`,
		`{"agent":"codex","line":"not json"}`, `{"message":"m"}`} {
		for _, typ := range []string{MsgText, MsgThinking, MsgToolCall, MsgToolResult, MsgPermissionDenied, MsgUsage, MsgResult,
			MsgAgentLine, "content_block_delta", "assistant", "user", "tool_use", "error", "other"} {
			f.Add(typ, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		parts, known := DecodeAgentMessage(typ, data)
		if !known && len(parts) > 0 {
			t.Fatalf("unknown with %d parts", len(parts))
		}
		var tn ToolNames
		for _, p := range parts {
			tn.Part(&p)
			switch p.Kind {
			case MsgToolCall, MsgPermissionDenied:
				if !json.Valid(p.Input) {
					t.Fatalf("%s input %q", p.Kind, p.Input)
				}
			case MsgText, MsgThinking, MsgToolResult, MsgUsage, MsgResult, MsgAgentLine, PartError, PartUser:
			default:
				t.Fatalf("a part of kind %q", p.Kind)
			}
			if p.Kind == MsgUsage && p.Usage == nil {
				t.Fatal("usage without usage")
			}
		}
	})
}
