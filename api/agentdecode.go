package api

import (
	"bytes"
	"encoding/json"
	"strings"
)

// The one reading of an agent's messages (a report_message's event_type
// and event_data, as stored) that every front-end shows: orchestrd prompt
// and session, the chat, the dashboard. It knows the Msg* types of the
// built-in agent kinds and what a command executor's agent prints:
// Agor's content_block_delta {delta: {text | thinking}}, tool_use /
// tool_call {id, name | tool, input}, tool_result {id | tool_use_id,
// name | tool, output | content | result, is_error}, error {message}, a
// plain {"type":"text","text"} line, and Claude Code's stream-json lines
// passed through with their type as event_type (assistant and user
// {message: {content: text | [text | thinking | tool_use | tool_result]}},
// result {result, is_error, total_cost_usd, usage, permission_denials,
// session_id, num_turns}).

// Kinds of an AgentPart beyond the Msg* ones (MsgText, MsgThinking,
// MsgToolCall, MsgToolResult, MsgPermissionDenied, MsgUsage, MsgResult,
// MsgAgentLine).
const (
	PartError = "error" // Text: an error the agent (or its executor) reported
	PartUser  = "user"  // Text: a user turn's text echoed by the agent
)

// AgentPart is one thing a person reads of an agent's message. What an
// agent wrote is hostile: a front-end escapes Text, Tool and Input for
// where it shows them, and bounds them.
type AgentPart struct {
	Kind string
	// Text: MsgText and MsgThinking the text (a streamed piece, unless
	// Block); MsgToolResult the output; MsgPermissionDenied the reason;
	// MsgResult the result's text; MsgAgentLine the line (compact JSON);
	// PartError, PartUser the text.
	Text string
	// Block: Text is a whole block (a plain text line, a Claude Code
	// assistant message's text), shown ending a line, not a streamed
	// piece.
	Block bool
	ID    string          // the tool use's id (tool call, result, denial)
	Tool  string          // the tool's name (MsgAgentLine: the agent)
	Input json.RawMessage // MsgToolCall, MsgPermissionDenied: a JSON value ({} when none)
	// IsError: a tool result that is an error (Claude Code's own denial
	// is one), a result that is.
	IsError bool
	// AfterDenial: a tool result that is the error of a tool use already
	// said denied (ToolNames.Part sets it): what the model read of the
	// denial, which a front-end need not say a second time.
	AfterDenial bool
	Usage       *TokenUsage // MsgUsage, MsgResult (nil when the result has none)
	// MsgResult's: tool uses denied in the run, its turns, the agent's
	// session.
	Denied       int
	Turns        int
	SDKSessionID string
}

// DecodeAgentMessage reads one agent message into the parts a person
// reads, in order. known is false for an event type (or data) it does not
// understand: a front-end shows those, if at all, as their type and data.
// A known message may give no part (a delta without text).
func DecodeAgentMessage(eventType string, data json.RawMessage) (parts []AgentPart, known bool) {
	var d struct {
		Type  string `json:"type"`
		Delta *struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Thinking string `json:"thinking"`
		} `json:"delta"`
		Text     string          `json:"text"`
		ID       string          `json:"id"`
		UseID    string          `json:"tool_use_id"`
		Name     string          `json:"name"`
		Tool     string          `json:"tool"`
		Input    json.RawMessage `json:"input"`
		Output   json.RawMessage `json:"output"`
		Content  json.RawMessage `json:"content"`
		Result   json.RawMessage `json:"result"`
		IsError  bool            `json:"is_error"`
		Reason   string          `json:"reason"`
		Message  json.RawMessage `json:"message"`
		Agent    string          `json:"agent"`
		Line     json.RawMessage `json:"line"`
		Subtype  string          `json:"subtype"`
		ErrorMsg string          `json:"error"`
	}
	if json.Unmarshal(data, &d) != nil {
		return nil, false
	}
	switch eventType {
	case MsgText:
		if d.Text == "" {
			return nil, true
		}
		// A plain {"type":"text","text":...} line an agent printed is a
		// block; the built-in kinds' text is streamed.
		return []AgentPart{{Kind: MsgText, Text: d.Text, Block: d.Type == "text"}}, true
	case MsgThinking:
		if d.Text == "" {
			return nil, true
		}
		return []AgentPart{{Kind: MsgThinking, Text: d.Text}}, true
	case "content_block_delta":
		switch {
		case d.Delta == nil:
		case d.Delta.Thinking != "":
			return []AgentPart{{Kind: MsgThinking, Text: d.Delta.Thinking}}, true
		case d.Delta.Text != "":
			return []AgentPart{{Kind: MsgText, Text: d.Delta.Text}}, true
		}
		return nil, true
	case MsgToolCall, "tool_use":
		return []AgentPart{{Kind: MsgToolCall, ID: firstOf(d.ID, d.UseID), Tool: firstOf(d.Name, d.Tool), Input: jsonInput(d.Input)}}, true
	case MsgToolResult:
		out := d.Output
		for _, o := range []json.RawMessage{d.Content, d.Result} {
			if isNull(out) {
				out = o
			}
		}
		return []AgentPart{{Kind: MsgToolResult, ID: firstOf(d.ID, d.UseID), Tool: firstOf(d.Name, d.Tool),
			Text: AgentOutputText(out), IsError: d.IsError}}, true
	case MsgPermissionDenied:
		return []AgentPart{{Kind: MsgPermissionDenied, ID: firstOf(d.ID, d.UseID), Tool: firstOf(d.Name, d.Tool),
			Input: jsonInput(d.Input), Text: d.Reason}}, true
	case MsgUsage:
		var u TokenUsage
		if json.Unmarshal(data, &u) != nil {
			return nil, false
		}
		return []AgentPart{{Kind: MsgUsage, Usage: &u}}, true
	case MsgResult:
		return []AgentPart{decodeResult(data, d.Text, d.Result, d.IsError)}, true
	case MsgAgentLine:
		return []AgentPart{{Kind: MsgAgentLine, Tool: d.Agent, Text: compactJSON(d.Line)}}, true
	case "error":
		var msg string
		if json.Unmarshal(d.Message, &msg) != nil || msg == "" {
			msg = d.ErrorMsg
		}
		if msg == "" {
			return nil, false
		}
		return []AgentPart{{Kind: PartError, Text: msg}}, true
	case "assistant", "user":
		var m struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(d.Message, &m) != nil {
			return nil, false
		}
		return contentParts(eventType, m.Content)
	}
	return nil, false
}

// contentParts reads a Claude Code message's content: a string, or an
// array of blocks.
func contentParts(role string, content json.RawMessage) ([]AgentPart, bool) {
	textKind := MsgText
	if role == "user" {
		textKind = PartUser
	}
	var s string
	if json.Unmarshal(content, &s) == nil {
		if s == "" {
			return nil, true
		}
		return []AgentPart{{Kind: textKind, Text: s, Block: true}}, true
	}
	var blocks []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		Thinking string          `json:"thinking"`
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Input    json.RawMessage `json:"input"`
		UseID    string          `json:"tool_use_id"`
		Content  json.RawMessage `json:"content"`
		IsError  bool            `json:"is_error"`
	}
	if json.Unmarshal(content, &blocks) != nil {
		return nil, false
	}
	var out []AgentPart
	for _, b := range blocks {
		switch b.Type {
		case "text":
			if b.Text != "" {
				out = append(out, AgentPart{Kind: textKind, Text: b.Text, Block: true})
			}
		case "thinking":
			if b.Thinking != "" {
				out = append(out, AgentPart{Kind: MsgThinking, Text: b.Thinking, Block: true})
			}
		case "tool_use":
			out = append(out, AgentPart{Kind: MsgToolCall, ID: b.ID, Tool: b.Name, Input: jsonInput(b.Input)})
		case "tool_result":
			out = append(out, AgentPart{Kind: MsgToolResult, ID: b.UseID, Text: AgentOutputText(b.Content), IsError: b.IsError})
		}
	}
	return out, true
}

// decodeResult reads a result: the built-in kinds' ResultData, or Claude
// Code's own result line (result, total_cost_usd, usage with its own
// names, permission_denials, session_id, num_turns).
func decodeResult(data json.RawMessage, text string, result json.RawMessage, isError bool) AgentPart {
	var r struct {
		SDKSessionID string            `json:"sdk_session_id"`
		SessionID    string            `json:"session_id"`
		Denied       int               `json:"denied"`
		Denials      []json.RawMessage `json:"permission_denials"`
		Turns        int               `json:"turns"`
		NumTurns     int               `json:"num_turns"`
		Cost         float64           `json:"total_cost_usd"`
		Usage        *struct {
			TokenUsage
			CacheRead  int64 `json:"cache_read_input_tokens"`
			CacheWrite int64 `json:"cache_creation_input_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(data, &r) // fields of the wrong type are left out
	p := AgentPart{Kind: MsgResult, Text: text, IsError: isError, SDKSessionID: firstOf(r.SDKSessionID, r.SessionID),
		Denied: max(r.Denied, len(r.Denials)), Turns: max(r.Turns, r.NumTurns)}
	if p.Text == "" {
		p.Text = AgentOutputText(result)
	}
	if r.Usage != nil {
		u := r.Usage.TokenUsage
		u.CacheReadTokens = max(u.CacheReadTokens, r.Usage.CacheRead)
		u.CacheWriteTokens = max(u.CacheWriteTokens, r.Usage.CacheWrite)
		p.Usage = &u
	}
	if r.Cost > 0 {
		if p.Usage == nil {
			p.Usage = &TokenUsage{}
		}
		p.Usage.CostUSD = r.Cost
	}
	return p
}

// AgentOutputText is a tool's output (or a result) as text: a string as
// it is, an array of text blocks joined by newlines, any other JSON value
// compact.
func AgentOutputText(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil && len(blocks) > 0 {
		var b strings.Builder
		some := false
		for _, bl := range blocks {
			if bl.Type == "text" || bl.Text != "" {
				if some {
					b.WriteByte('\n')
				}
				b.WriteString(bl.Text)
				some = true
			}
		}
		if some {
			return b.String()
		}
	}
	return compactJSON(raw)
}

// ToolSummary is one line's worth of what a tool call does: a Bash
// command, the file a Read/Edit/Write touches, a URL, a search's pattern,
// else its input as compact JSON ("" when it has none). Not yet on one
// line: a front-end puts it on one, escaped for where it shows it.
func ToolSummary(tool string, input json.RawMessage) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(input, &fields) == nil {
		for _, key := range toolSummaryKeys(tool) {
			var s string
			if json.Unmarshal(fields[key], &s) == nil && s != "" {
				return s
			}
		}
		if len(fields) == 0 {
			return ""
		}
	}
	return compactJSON(input)
}

// toolSummaryKeys are the input fields that say what a tool call does.
func toolSummaryKeys(tool string) []string {
	switch tool {
	case "Bash":
		return []string{"command"}
	case "Read", "Edit", "Write", "MultiEdit":
		return []string{"file_path"}
	case "NotebookEdit":
		return []string{"notebook_path"}
	case "WebFetch":
		return []string{"url"}
	case "WebSearch":
		return []string{"query"}
	case "Glob", "Grep":
		return []string{"pattern"}
	}
	// Codex's exec_command {cmd}, Gemini's run_shell_command {command}...
	return []string{"command", "cmd", "file_path", "path", "url"}
}

// ToolNames remembers the names of the tools an agent called, by tool use
// id, so that a result or a denial that gives only the id is named;
// bounded (the oldest is forgotten). The zero value is ready.
type ToolNames struct {
	ids    []string
	names  map[string]string
	denied map[string]bool // tool use ids said denied (bounded as names)
}

// MaxToolNames is how many tool use ids a ToolNames remembers.
const MaxToolNames = 256

// Add remembers a tool call's name.
func (t *ToolNames) Add(id, name string) {
	if id == "" || name == "" {
		return
	}
	if t.names == nil {
		t.names = map[string]string{}
	}
	if _, ok := t.names[id]; !ok {
		if len(t.ids) == MaxToolNames {
			delete(t.names, t.ids[0])
			t.ids = t.ids[1:]
		}
		t.ids = append(t.ids, id)
	}
	t.names[id] = name
}

// Name is the name of the tool called as id ("" if not known).
func (t *ToolNames) Name(id string) string { return t.names[id] }

// Len is how many ids it remembers.
func (t *ToolNames) Len() int { return len(t.names) }

// Part remembers a tool call's name, and names a result or a denial
// that gives only its call's id; it marks the error result of a tool use
// said denied (AfterDenial).
func (t *ToolNames) Part(p *AgentPart) {
	switch p.Kind {
	case MsgToolCall:
		t.Add(p.ID, p.Tool)
	case MsgToolResult, MsgPermissionDenied:
		if p.Tool == "" {
			p.Tool = t.Name(p.ID)
		}
	}
	if p.ID == "" {
		return
	}
	switch {
	case p.Kind == MsgPermissionDenied:
		if t.denied == nil || len(t.denied) >= MaxToolNames {
			t.denied = map[string]bool{}
		}
		t.denied[p.ID] = true
	case p.Kind == MsgToolResult && p.IsError && t.denied[p.ID]:
		p.AfterDenial = true
	}
}

func jsonInput(in json.RawMessage) json.RawMessage {
	in = bytes.TrimSpace(in)
	if isNull(in) {
		return json.RawMessage(`{}`)
	}
	return in
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
