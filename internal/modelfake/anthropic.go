// Package modelfake holds scripted model endpoints for tests: each serves
// one model API on 127.0.0.1 the way its real service answers an agent
// CLI, from a list of turns the test writes, and keeps every request it
// got so that the test can assert on what the agent sent (its history,
// its tool results). One file per API.
package modelfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Turn is one answer of a scripted endpoint: a model's message (text,
// thinking, tool calls) or an HTTP error.
type Turn struct {
	// Thinking is streamed first as a thinking block, when set.
	Thinking string
	// Text is streamed as one text block, each element one text_delta.
	Text []string
	// Tools are tool_use blocks after the text (the stop reason is then
	// tool_use).
	Tools []ToolUse
	// Status, when not 0, answers with this HTTP status and an error
	// body instead of a message (429 rate_limit_error, 401
	// authentication_error, 529 overloaded_error...).
	Status int
	// RetryAfter is the Retry-After header of an error (seconds).
	RetryAfter string
	// ErrorMessage is the error body's message (default: the status's).
	ErrorMessage string
	// Hold, when set, holds a streamed text after its first delta until
	// it is closed (2 minutes at most): what reaches a client before then
	// was streamed as it was generated, not whole.
	Hold chan struct{}
	// Usage is the tokens the message says it spent (default 10 in, 5 out).
	InputTokens, OutputTokens int64
}

// ToolUse is one tool call a turn makes.
type ToolUse struct {
	ID    string // default toolu_<n>
	Name  string
	Input any // marshalled to JSON; streamed as input_json_delta pieces
}

// Request is one request the endpoint got.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	// Messages is the request body's messages, when it has them.
	Messages []Message
	// Tools names the tools the request offered.
	Tools []string
	// Scripted: the request was answered from the script (a side call
	// such as a title or a count of tokens was not).
	Scripted bool
}

// Message is one message of a Messages request.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// Content is a message's content: a string or blocks, always as blocks.
type Content []Block

// UnmarshalJSON takes a string or an array of blocks.
func (c *Content) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*c = Content{{Type: "text", Text: s}}
		return nil
	}
	var blocks []Block
	if err := json.Unmarshal(b, &blocks); err != nil {
		return err
	}
	*c = blocks
	return nil
}

// Block is one content block of a message.
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"` // a tool_result's: a string or blocks
	IsError   bool            `json:"is_error,omitempty"`
}

// ResultText is a tool_result block's content as text.
func (b Block) ResultText() string {
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []Block
	_ = json.Unmarshal(b.Content, &parts)
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	return sb.String()
}

// AllText is the text of every text block of the message.
func (m Message) AllText() string {
	var sb strings.Builder
	for _, b := range m.Content {
		if b.Type == "text" {
			sb.WriteString(b.Text)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// Anthropic is a scripted Anthropic Messages endpoint (POST /v1/messages,
// SSE when the request streams). Requests that offer tools are answered
// from the script in order; one that offers none (a title, a summary,
// a quota check) gets a short text and takes no turn, unless the script
// says ScriptAll. Past the script's end, each request gets Default.
type Anthropic struct {
	URL string // http://127.0.0.1:PORT, for ANTHROPIC_BASE_URL

	// ScriptAll: every request takes a turn, with tools or not.
	ScriptAll bool
	// Default answers requests past the script (default: a text "done").
	Default Turn
	// Respond, when set, answers every scripted request from what it
	// holds (the agent's conversation so far), instead of the script: an
	// agent run many times (a loop's tree) gets the turn its prompt asks
	// for. Set it before the first request; it is called under no lock,
	// from the endpoint's goroutines.
	Respond func(Request) Turn

	srv  *http.Server
	ln   net.Listener
	mu   sync.Mutex
	cond *sync.Cond
	turn []Turn
	next int
	reqs []Request
	seq  int
}

// NewAnthropic starts an endpoint on 127.0.0.1 that answers turns in
// order. Close it when done.
func NewAnthropic(turns ...Turn) (*Anthropic, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("modelfake: listening on loopback: %w", err)
	}
	a := &Anthropic{URL: "http://" + ln.Addr().String(), ln: ln, turn: turns,
		Default: Turn{Text: []string{"done"}}}
	a.cond = sync.NewCond(&a.mu)
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

// Close stops the endpoint and closes its connections.
func (a *Anthropic) Close() error { return a.srv.Close() }

// Add appends turns to the script.
func (a *Anthropic) Add(turns ...Turn) {
	a.mu.Lock()
	a.turn = append(a.turn, turns...)
	a.mu.Unlock()
}

// Requests is every request received so far, in order.
func (a *Anthropic) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.reqs...)
}

// Scripted is the requests answered from the script (or its Default), in order.
func (a *Anthropic) Scripted() []Request {
	var out []Request
	for _, r := range a.Requests() {
		if r.Scripted {
			out = append(out, r)
		}
	}
	return out
}

// Served is how many turns of the script were answered.
func (a *Anthropic) Served() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.next
}

// WaitServed waits until n turns were answered, at most d.
func (a *Anthropic) WaitServed(n int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	t := time.AfterFunc(d, func() { a.mu.Lock(); a.cond.Broadcast(); a.mu.Unlock() })
	defer t.Stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.next < n && time.Now().Before(deadline) {
		a.cond.Wait()
	}
	return a.next >= n
}

// ToolResults is every tool_result block of the last scripted request's
// messages (the whole history the agent sent).
func ToolResults(r Request) []Block {
	var out []Block
	for _, m := range r.Messages {
		for _, b := range m.Content {
			if b.Type == "tool_result" {
				out = append(out, b)
			}
		}
	}
	return out
}

func (a *Anthropic) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var req struct {
		Stream   bool      `json:"stream"`
		Messages []Message `json:"messages"`
		Tools    []struct {
			Name string `json:"name"`
		} `json:"tools"`
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &req)
	rec := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Messages: req.Messages}
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, t.Name)
	}
	messages := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages")
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		a.record(rec)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens":10}`)
		return
	}
	if !messages {
		a.record(rec)
		writeError(w, http.StatusNotFound, "", "not_found_error", "modelfake: no such endpoint "+r.URL.Path)
		return
	}
	var turn Turn
	scripted := a.ScriptAll || len(rec.Tools) > 0
	if scripted && a.Respond != nil {
		turn = a.Respond(rec)
	}
	a.mu.Lock()
	if scripted && a.Respond != nil {
		rec.Scripted = true
		a.next++
	} else if scripted {
		rec.Scripted = true
		if a.next < len(a.turn) {
			turn = a.turn[a.next]
			a.next++
		} else {
			turn = a.Default
		}
	} else {
		turn = Turn{Text: []string{"Side answer"}}
	}
	a.seq++
	seq := a.seq
	a.reqs = append(a.reqs, rec)
	a.cond.Broadcast()
	a.mu.Unlock()

	if turn.Status != 0 {
		typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
			404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}[turn.Status]
		if typ == "" {
			typ = "api_error"
		}
		msg := turn.ErrorMessage
		if msg == "" {
			msg = http.StatusText(turn.Status)
		}
		writeError(w, turn.Status, turn.RetryAfter, typ, msg)
		return
	}
	if req.Stream {
		a.stream(w, seq, req.Model, turn)
	} else {
		a.whole(w, seq, req.Model, turn)
	}
}

func (a *Anthropic) record(rec Request) {
	a.mu.Lock()
	a.reqs = append(a.reqs, rec)
	a.cond.Broadcast()
	a.mu.Unlock()
}

func writeError(w http.ResponseWriter, status int, retryAfter, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("x-should-retry", strconv.FormatBool(status == 429 || status >= 500))
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	_, _ = w.Write(b)
}

func (t Turn) usage() (in, out int64) {
	in, out = t.InputTokens, t.OutputTokens
	if in == 0 && out == 0 {
		in, out = 10, 5
	}
	return in, out
}

func (t Turn) stopReason() string {
	if len(t.Tools) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func toolID(seq, i int, tu ToolUse) string {
	if tu.ID != "" {
		return tu.ID
	}
	return fmt.Sprintf("toolu_%02d_%02d", seq, i)
}

func inputJSON(tu ToolUse) []byte {
	if tu.Input == nil {
		return []byte("{}")
	}
	if raw, ok := tu.Input.(json.RawMessage); ok {
		return raw
	}
	b, err := json.Marshal(tu.Input)
	if err != nil {
		return []byte("{}")
	}
	return b
}

// whole answers a request that does not stream with the message in one body.
func (a *Anthropic) whole(w http.ResponseWriter, seq int, model string, t Turn) {
	var content []any
	if t.Thinking != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": t.Thinking, "signature": "sig"})
	}
	if len(t.Text) > 0 {
		content = append(content, map[string]any{"type": "text", "text": strings.Join(t.Text, "")})
	}
	for i, tu := range t.Tools {
		content = append(content, map[string]any{"type": "tool_use", "id": toolID(seq, i, tu), "name": tu.Name,
			"input": json.RawMessage(inputJSON(tu))})
	}
	in, out := t.usage()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": fmt.Sprintf("msg_%04d", seq), "type": "message",
		"role": "assistant", "model": model, "content": content, "stop_reason": t.stopReason(), "stop_sequence": nil,
		"usage": map[string]int64{"input_tokens": in, "output_tokens": out}})
}

// stream answers with the message as Server-Sent Events, as the real
// service streams: message_start, per block content_block_start, deltas
// and content_block_stop, message_delta (stop reason, usage),
// message_stop.
func (a *Anthropic) stream(w http.ResponseWriter, seq int, model string, t Turn) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	ev := func(name string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if fl != nil {
			fl.Flush()
		}
	}
	in, out := t.usage()
	ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_%04d", seq), "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int64{"input_tokens": in, "output_tokens": 1}}})
	idx := 0
	if t.Thinking != "" {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": idx,
			"content_block": map[string]any{"type": "thinking", "thinking": ""}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx,
			"delta": map[string]any{"type": "thinking_delta", "thinking": t.Thinking}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx,
			"delta": map[string]any{"type": "signature_delta", "signature": "c2ln"}})
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	if len(t.Text) > 0 {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": idx,
			"content_block": map[string]any{"type": "text", "text": ""}})
		for i, s := range t.Text {
			ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx,
				"delta": map[string]any{"type": "text_delta", "text": s}})
			if i == 0 && t.Hold != nil {
				select { // the rest waits: what came so far is all there is
				case <-t.Hold:
				case <-time.After(2 * time.Minute):
				}
			}
		}
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	for i, tu := range t.Tools {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": idx,
			"content_block": map[string]any{"type": "tool_use", "id": toolID(seq, i, tu), "name": tu.Name, "input": map[string]any{}}})
		js := string(inputJSON(tu))
		// In pieces, as the service sends them (at most 64 of them).
		piece := max(16, len(js)/64+1)
		for len(js) > 0 {
			n := min(len(js), piece)
			ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": js[:n]}})
			js = js[n:]
		}
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	ev("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": t.stopReason(), "stop_sequence": nil},
		"usage": map[string]int64{"output_tokens": out}})
	ev("message_stop", map[string]any{"type": "message_stop"})
}

// Said reports whether a message of role carries text in a text block.
func (r Request) Said(role, text string) bool {
	for _, m := range r.Messages {
		if m.Role == role && strings.Contains(m.AllText(), text) {
			return true
		}
	}
	return false
}
