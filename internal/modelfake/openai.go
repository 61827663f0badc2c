// Package modelfake holds scripted model endpoints on 127.0.0.1 for the
// tests that run the real agent CLIs: no network and no key is needed, and
// each test says turn by turn what the "model" answers and asserts on
// what it was sent.
package modelfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// OpenAI is a scripted OpenAI Responses endpoint (POST /v1/responses,
// streamed as server-sent events) as Codex speaks it. A request is
// answered by the turn for its place in the conversation (Position: how
// many answers of the model its input carries): a client that sends a
// request again (Codex retries one whose stream it lost) gets the same
// answer, as from a model, not the next turn. Turns that answer with an
// HTTP error are taken in the order requests come, at their place (a
// retry after a 429 gets the turn after the 429). Past the last turn it
// answers the text "(no more turns)". Every request body is kept.
type OpenAI struct {
	// URL is the base URL, ".../v1" (a model provider's base_url,
	// OPENAI_BASE_URL).
	URL string

	srv   *http.Server
	ln    net.Listener
	done  chan struct{}
	mu    sync.Mutex
	turns []OpenAITurn
	// errServed counts the error turns served at each position.
	errServed map[int]int
	reqs      []OpenAIRequest
	other     []string // requests that are not POST /v1/responses
	wake      chan struct{}
}

// OpenAITurn is one answer of the endpoint.
type OpenAITurn struct {
	// Status, when not 0 or 200, answers with this HTTP status and Body
	// (default: an OpenAI error object naming the status) and Header.
	Status int
	Body   string
	Header map[string]string
	// Reasoning is a reasoning summary streamed before the output.
	Reasoning string
	// Text is the assistant's text, streamed in pieces of a few words.
	Text string
	// Calls are tool calls, after the text.
	Calls []OpenAICall
	// Usage is reported in response.completed (default 100 input, 10 of
	// them cached, 20 output tokens).
	Usage *OpenAIUsage
	// Func, when set, makes the turn from the request it answers.
	Func func(OpenAIRequest) OpenAITurn
}

// OpenAICall is a tool call the model makes: a function call (Name, Args
// marshalled to its JSON arguments) or, with Input set, a freeform
// custom tool call (Codex's apply_patch).
type OpenAICall struct {
	Name  string
	Args  any
	Input string
}

// OpenAIUsage is response.completed's usage.
type OpenAIUsage struct {
	Input, Cached, Output, Reasoning int64
}

// OpenAIRequest is one request the endpoint received.
type OpenAIRequest struct {
	Header http.Header
	Body   []byte
	// Model and Tools (the names of the tools offered), and Input: the
	// items of the conversation the request carries.
	Model string
	Tools []string
	Input []json.RawMessage
	// Position is its place in the conversation: how many answers of
	// the model (runs of its items: reasoning, messages, tool calls) its
	// input carries.
	Position int
}

// position counts the runs of the model's items in input: each answer
// of the model is one run, ended by what the client adds (a message of
// the user's, the developer's or the system's, a tool's output). Items
// of other types (the client's own bookkeeping) neither start nor end a
// run.
func position(input []json.RawMessage) int {
	n, inRun := 0, false
	for _, it := range input {
		var v struct {
			Type string `json:"type"`
			Role string `json:"role"`
		}
		if json.Unmarshal(it, &v) != nil {
			continue
		}
		switch {
		case v.Type == "message" && v.Role == "assistant", v.Type == "reasoning", v.Type == "function_call",
			v.Type == "custom_tool_call", v.Type == "local_shell_call", v.Type == "web_search_call":
			if !inRun {
				n++
			}
			inRun = true
		case v.Type == "message", v.Type == "function_call_output", v.Type == "custom_tool_call_output",
			v.Type == "local_shell_call_output":
			inRun = false
		}
	}
	return n
}

func (t OpenAITurn) isError() bool { return t.Status != 0 && t.Status != http.StatusOK }

// turnFor is the turn for a request at position p (o.mu held): the
// slots after the turn that answered position p-1, its error turns one
// request at a time, then its answer, again for every request at p.
func (o *OpenAI) turnFor(p int) OpenAITurn {
	i := 0
	for answered := 0; answered < p && i < len(o.turns); i++ {
		if !o.turns[i].isError() {
			answered++
		}
	}
	if j := i + o.errServed[p]; j < len(o.turns) && o.turns[j].isError() {
		o.errServed[p]++
		return o.turns[j]
	}
	for i += o.errServed[p]; i < len(o.turns); i++ {
		if !o.turns[i].isError() {
			return o.turns[i]
		}
	}
	return OpenAITurn{Text: "(no more turns)"}
}

// Text is every text the request's input carries (messages' texts and
// tool outputs), one item's a line.
func (r OpenAIRequest) Text() string {
	var b strings.Builder
	for _, it := range r.Input {
		var v struct {
			Type    string          `json:"type"`
			Output  json.RawMessage `json:"output"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(it, &v) != nil {
			continue
		}
		for _, c := range v.Content {
			b.WriteString(c.Text)
			b.WriteByte('\n')
		}
		if len(v.Output) > 0 {
			var s string
			if json.Unmarshal(v.Output, &s) == nil {
				b.WriteString(s)
			} else {
				b.Write(v.Output)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// LastOutput is the output of the last tool call the request carries
// (function_call_output or custom_tool_call_output), "" if none.
func (r OpenAIRequest) LastOutput() string {
	for i := len(r.Input) - 1; i >= 0; i-- {
		var v struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		}
		if json.Unmarshal(r.Input[i], &v) != nil || !strings.HasSuffix(v.Type, "_call_output") {
			continue
		}
		var s string
		if json.Unmarshal(v.Output, &s) == nil {
			return s
		}
		return string(v.Output)
	}
	return ""
}

// NewOpenAI starts the endpoint on 127.0.0.1 with its script.
func NewOpenAI(turns ...OpenAITurn) (*OpenAI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the OpenAI fake: %w", err)
	}
	o := &OpenAI{URL: "http://" + ln.Addr().String() + "/v1", ln: ln, turns: turns, errServed: map[int]int{},
		done: make(chan struct{}), wake: make(chan struct{})}
	o.srv = &http.Server{Handler: http.HandlerFunc(o.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(o.done)
		_ = o.srv.Serve(ln)
	}()
	return o, nil
}

// Close stops the endpoint and waits for it.
func (o *OpenAI) Close() {
	_ = o.srv.Close()
	<-o.done
}

// Requests are the POST /v1/responses received so far, in the order
// they came (a request sent again included).
func (o *OpenAI) Requests() []OpenAIRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]OpenAIRequest(nil), o.reqs...)
}

// Conversation is the conversation as the model answered it: for each
// position, from 0 to the highest, the last request at it (a request
// sent again counts once; a position no request had is a zero request).
func (o *OpenAI) Conversation() []OpenAIRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []OpenAIRequest
	for _, r := range o.reqs {
		for len(out) <= r.Position {
			out = append(out, OpenAIRequest{})
		}
		out[r.Position] = r
	}
	return out
}

// Other are the other requests received ("GET /path").
func (o *OpenAI) Other() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.other...)
}

// WaitRequests waits until n requests came, at most d; it returns those
// that came.
func (o *OpenAI) WaitRequests(n int, d time.Duration) []OpenAIRequest {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		got, wake := len(o.reqs), o.wake
		o.mu.Unlock()
		if got >= n {
			return o.Requests()
		}
		select {
		case <-wake:
		case <-deadline.C:
			return o.Requests()
		}
	}
}

func (o *OpenAI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		o.mu.Lock()
		o.other = append(o.other, r.Method+" "+r.URL.Path)
		o.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := OpenAIRequest{Header: r.Header.Clone(), Body: body}
	var head struct {
		Model string            `json:"model"`
		Input []json.RawMessage `json:"input"`
		Tools []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	req.Model, req.Input, req.Position = head.Model, head.Input, position(head.Input)
	for _, t := range head.Tools {
		n := t.Name
		if n == "" {
			n = t.Type
		}
		req.Tools = append(req.Tools, n)
	}
	o.mu.Lock()
	i := len(o.reqs)
	o.reqs = append(o.reqs, req)
	close(o.wake)
	o.wake = make(chan struct{})
	turn := o.turnFor(req.Position)
	o.mu.Unlock()
	if turn.Func != nil {
		turn = turn.Func(req)
	}
	if turn.Status != 0 && turn.Status != http.StatusOK {
		for k, v := range turn.Header {
			w.Header().Set(k, v)
		}
		b := turn.Body
		if b == "" {
			b = fmt.Sprintf(`{"error":{"message":"scripted status %d","type":"scripted","code":null}}`, turn.Status)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(turn.Status)
		_, _ = io.WriteString(w, b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	send := func(ev map[string]any) {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
		if fl != nil {
			fl.Flush()
		}
	}
	o.stream(i, turn, send)
}

// stream sends one turn's events.
func (o *OpenAI) stream(n int, turn OpenAITurn, send func(map[string]any)) {
	rid := fmt.Sprintf("resp_%d", n)
	send(map[string]any{"type": "response.created", "response": map[string]any{"id": rid, "status": "in_progress"}})
	idx := 0
	if turn.Reasoning != "" {
		id := fmt.Sprintf("rs_%d", n)
		send(map[string]any{"type": "response.output_item.added", "output_index": idx,
			"item": map[string]any{"type": "reasoning", "id": id, "summary": []any{}}})
		send(map[string]any{"type": "response.reasoning_summary_part.added", "item_id": id, "output_index": idx,
			"summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}})
		for _, p := range pieces(turn.Reasoning) {
			send(map[string]any{"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": idx,
				"summary_index": 0, "delta": p})
		}
		send(map[string]any{"type": "response.output_item.done", "output_index": idx,
			"item": map[string]any{"type": "reasoning", "id": id,
				"summary": []any{map[string]any{"type": "summary_text", "text": turn.Reasoning}}}})
		idx++
	}
	if turn.Text != "" {
		id := fmt.Sprintf("msg_%d", n)
		send(map[string]any{"type": "response.output_item.added", "output_index": idx,
			"item": map[string]any{"type": "message", "id": id, "role": "assistant", "status": "in_progress", "content": []any{}}})
		for _, p := range pieces(turn.Text) {
			send(map[string]any{"type": "response.output_text.delta", "item_id": id, "output_index": idx, "content_index": 0, "delta": p})
		}
		send(map[string]any{"type": "response.output_item.done", "output_index": idx,
			"item": map[string]any{"type": "message", "id": id, "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": turn.Text, "annotations": []any{}}}}})
		idx++
	}
	for k, c := range turn.Calls {
		id, callID := fmt.Sprintf("fc_%d_%d", n, k), fmt.Sprintf("call_%d_%d", n, k)
		if c.Input != "" {
			item := map[string]any{"type": "custom_tool_call", "id": id, "call_id": callID, "name": c.Name, "input": ""}
			send(map[string]any{"type": "response.output_item.added", "output_index": idx, "item": item})
			send(map[string]any{"type": "response.custom_tool_call_input.delta", "item_id": id, "output_index": idx, "delta": c.Input})
			item["input"] = c.Input
			send(map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
		} else {
			args, _ := json.Marshal(c.Args)
			item := map[string]any{"type": "function_call", "id": id, "call_id": callID, "name": c.Name, "arguments": ""}
			send(map[string]any{"type": "response.output_item.added", "output_index": idx, "item": item})
			send(map[string]any{"type": "response.function_call_arguments.delta", "item_id": id, "output_index": idx, "delta": string(args)})
			send(map[string]any{"type": "response.function_call_arguments.done", "item_id": id, "output_index": idx, "arguments": string(args)})
			item["arguments"] = string(args)
			send(map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
		}
		idx++
	}
	u := turn.Usage
	if u == nil {
		u = &OpenAIUsage{Input: 100, Cached: 10, Output: 20}
	}
	send(map[string]any{"type": "response.completed", "response": map[string]any{"id": rid, "status": "completed",
		"usage": map[string]any{"input_tokens": u.Input, "input_tokens_details": map[string]any{"cached_tokens": u.Cached},
			"output_tokens": u.Output, "output_tokens_details": map[string]any{"reasoning_tokens": u.Reasoning},
			"total_tokens": u.Input + u.Output}}})
}

// pieces splits s into pieces of a word or two, as a model streams.
func pieces(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// Summary says, for a failing test's log, every request the endpoint
// received: its input items' types (and a call's name or output, cut
// short), and the requests that were not POST /v1/responses.
func (o *OpenAI) Summary() string {
	var b strings.Builder
	for i, r := range o.Requests() {
		fmt.Fprintf(&b, "request %d at position %d (%s):", i, r.Position, r.Header.Get("User-Agent"))
		for _, it := range r.Input {
			var v struct {
				Type   string          `json:"type"`
				Role   string          `json:"role"`
				Name   string          `json:"name"`
				Output json.RawMessage `json:"output"`
			}
			if json.Unmarshal(it, &v) != nil {
				continue
			}
			fmt.Fprintf(&b, " %s%s%s", v.Type, prefixed("/", v.Role), prefixed("/", v.Name))
			if len(v.Output) > 0 {
				fmt.Fprintf(&b, "=%.80q", v.Output)
			}
		}
		b.WriteByte('\n')
	}
	for _, r := range o.Other() {
		fmt.Fprintf(&b, "other: %s\n", r)
	}
	return b.String()
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}
