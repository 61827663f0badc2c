package chat

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// An agent's messages (report_message's event_type and event_data, as its
// executor sent them) become the chat's stream: text as chat.chunk, a tool
// it calls as chat.tool_call, what the tool gave back as chat.tool_result.
// The shapes known are Agor's (content_block_delta {delta: {text}},
// tool_use / tool_call {id, name | tool, input}, tool_result {tool_use_id,
// name | tool, output | content}), a plain {"type":"text","text"} line,
// and Claude Code's stream-json lines that `orchestrd executor` passes
// through (assistant {message: {content: [text | tool_use]}}, user
// {message: {content: [tool_result]}}). Anything else is not part of the
// reply (progress, usage, Claude Code's final result, which repeats the
// text). What an agent wrote is hostile: it goes to the client only, a
// tool's output cut at maxToolOutput bytes.

// itemKind is what one piece of a reply is.
type itemKind int

const (
	itemText itemKind = iota
	itemToolCall
	itemToolResult
)

// item is one piece of a reply.
type item struct {
	kind   itemKind
	text   string          // itemText
	tool   string          // itemToolCall, itemToolResult
	input  json.RawMessage // itemToolCall: a JSON value ({} when none)
	output string          // itemToolResult
}

// Bounds on what one reply keeps or sends.
const (
	maxToolOutput = 64 << 10 // a tool result's output, cut past it
	maxToolName   = 256      // a tool's name
	maxToolIDs    = 256      // tool_use ids remembered to name their results
)

// toolNames remembers the names of the tools a reply called, by tool_use
// id, so a result that gives only the id is named; bounded (the oldest is
// forgotten).
type toolNames struct {
	ids   []string
	names map[string]string
}

func (t *toolNames) add(id, name string) {
	if id == "" || name == "" {
		return
	}
	if t.names == nil {
		t.names = map[string]string{}
	}
	if _, ok := t.names[id]; !ok {
		if len(t.ids) == maxToolIDs {
			delete(t.names, t.ids[0])
			t.ids = t.ids[1:]
		}
		t.ids = append(t.ids, id)
	}
	t.names[id] = name
}

func (t *toolNames) name(id string) string { return t.names[id] }

// parseMessage turns one agent message into the pieces of the reply it
// holds (none for a message that is not part of it, or not understood).
func parseMessage(eventType string, data []byte, tools *toolNames) []item {
	var d struct {
		Delta *struct {
			Text string `json:"text"`
		} `json:"delta"`
		Text    string          `json:"text"`
		ID      string          `json:"id"`
		Name    string          `json:"name"`
		Tool    string          `json:"tool"`
		Input   json.RawMessage `json:"input"`
		UseID   string          `json:"tool_use_id"`
		Output  json.RawMessage `json:"output"`
		Content json.RawMessage `json:"content"`
		Message *struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if json.Unmarshal(data, &d) != nil {
		return nil
	}
	switch eventType {
	case "content_block_delta":
		if d.Delta != nil && d.Delta.Text != "" {
			return []item{{kind: itemText, text: d.Delta.Text}}
		}
	case "text":
		if d.Text != "" {
			return []item{{kind: itemText, text: d.Text}}
		}
	case "tool_use", "tool_call":
		name := firstOf(d.Name, d.Tool)
		tools.add(d.ID, name)
		return []item{toolCall(name, d.Input)}
	case "tool_result":
		name := firstOf(d.Name, d.Tool, tools.name(d.UseID))
		out := d.Output
		if len(out) == 0 {
			out = d.Content
		}
		return []item{toolResult(name, out)}
	case "assistant", "user":
		if d.Message != nil {
			return contentBlocks(d.Message.Content, tools)
		}
	}
	return nil
}

// contentBlocks reads a message's content: a string (text) or an array
// of blocks (text, tool_use, tool_result).
func contentBlocks(content json.RawMessage, tools *toolNames) []item {
	var s string
	if json.Unmarshal(content, &s) == nil {
		if s == "" {
			return nil
		}
		return []item{{kind: itemText, text: s}}
	}
	var blocks []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		ID      string          `json:"id"`
		Name    string          `json:"name"`
		Input   json.RawMessage `json:"input"`
		UseID   string          `json:"tool_use_id"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(content, &blocks) != nil {
		return nil
	}
	var out []item
	for _, b := range blocks {
		switch b.Type {
		case "text":
			if b.Text != "" {
				out = append(out, item{kind: itemText, text: b.Text})
			}
		case "tool_use":
			tools.add(b.ID, b.Name)
			out = append(out, toolCall(b.Name, b.Input))
		case "tool_result":
			out = append(out, toolResult(tools.name(b.UseID), b.Content))
		}
	}
	return out
}

func toolCall(name string, input json.RawMessage) item {
	in := bytes.TrimSpace(input)
	if len(in) == 0 || string(in) == "null" {
		in = json.RawMessage(`{}`)
	}
	return item{kind: itemToolCall, tool: cut(name, maxToolName), input: in}
}

// toolResult reads a tool's output: a string, an array of text blocks
// (joined), or any other JSON value as its text.
func toolResult(name string, raw json.RawMessage) item {
	return item{kind: itemToolResult, tool: cut(name, maxToolName), output: cut(outputText(raw), maxToolOutput)}
}

func outputText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
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
	if json.Unmarshal(raw, &blocks) == nil {
		var b []byte
		for _, bl := range blocks {
			if bl.Type == "text" || bl.Text != "" {
				if len(b) > 0 {
					b = append(b, '\n')
				}
				b = append(b, bl.Text...)
			}
			if len(b) > maxToolOutput {
				break
			}
		}
		return string(b)
	}
	return string(raw)
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// cut shortens s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
