// Package modelfake holds scripted model endpoints on loopback for the real
// agent CLIs the tests run: each answers from a list of turns the test
// gives and records every request it was sent.
package modelfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// GeminiTurn is one answer of the Gemini endpoint: a model turn (thought,
// text, function calls), or an HTTP error.
type GeminiTurn struct {
	Thought string
	// Text is the turn's text; streamed, it goes out in Chunks pieces
	// (default 1), one SSE event each.
	Text   string
	Chunks int
	Calls  []GeminiCall
	// Status, when not 0, answers with this HTTP status and a Google API
	// error body (429: RESOURCE_EXHAUSTED with RetryDelay, e.g. "30s").
	Status     int
	RetryDelay string
	// InputTokens/OutputTokens are the turn's usageMetadata (default
	// 10/5).
	InputTokens, OutputTokens int64
}

// GeminiCall is one functionCall part.
type GeminiCall struct {
	Name string
	Args map[string]any
}

// GeminiShell is a call of the Gemini CLI's shell tool.
func GeminiShell(command string) GeminiCall {
	return GeminiCall{Name: "run_shell_command", Args: map[string]any{"command": command}}
}

// GeminiRequest is one request the endpoint received.
type GeminiRequest struct {
	Path   string // e.g. /v1beta/models/gemini-2.5-pro:streamGenerateContent
	Model  string
	Stream bool
	Key    string // the x-goog-api-key header or ?key=
	Body   json.RawMessage
	// Turn is the index of the scripted turn that answered (-1: none, an
	// auxiliary call or the script ran out).
	Turn int
}

// Gemini is a scripted Gemini API (generativelanguage v1beta):
// models/M:streamGenerateContent?alt=sse and models/M:generateContent.
// Each conversation request takes the next turn; once the script has run
// out it answers "(end of script)". A generateContent call that asks for
// JSON (the CLI's own side questions) gets {} and takes no turn.
type Gemini struct {
	URL string // the base URL: GOOGLE_GEMINI_BASE_URL

	srv   *httptest.Server
	mu    sync.Mutex
	turns []GeminiTurn
	next  int
	reqs  []GeminiRequest
	seen  chan struct{}
}

// NewGemini starts the endpoint on 127.0.0.1 with a script.
func NewGemini(turns ...GeminiTurn) *Gemini {
	g := &Gemini{turns: turns, seen: make(chan struct{}, 1)}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	g.URL = g.srv.URL
	return g
}

// Close stops the endpoint.
func (g *Gemini) Close() { g.srv.Close() }

// Script appends turns to the script.
func (g *Gemini) Script(turns ...GeminiTurn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.turns = append(g.turns, turns...)
}

// Reset replaces what is left of the script with turns.
func (g *Gemini) Reset(turns ...GeminiTurn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.turns, g.next = turns, 0
}

// Requests is a copy of what the endpoint received, in order.
func (g *Gemini) Requests() []GeminiRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]GeminiRequest(nil), g.reqs...)
}

// Turns is the conversation requests: those a scripted turn answered or
// that found the script run out (not the CLI's side questions).
func (g *Gemini) Turns() []GeminiRequest {
	var out []GeminiRequest
	for _, r := range g.Requests() {
		if r.Turn >= 0 || r.Stream {
			out = append(out, r)
		}
	}
	return out
}

// Seen is signalled (without blocking) on each request.
func (g *Gemini) Seen() <-chan struct{} { return g.seen }

func (g *Gemini) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	path := r.URL.Path
	i := strings.LastIndex(path, ":")
	method := ""
	if i >= 0 {
		method = path[i+1:]
	}
	model := path
	if j := strings.LastIndex(path[:max(i, 0)], "/"); j >= 0 && i > j {
		model = path[j+1 : i]
	}
	key := r.Header.Get("x-goog-api-key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	req := GeminiRequest{Path: path, Model: model, Stream: method == "streamGenerateContent", Key: key, Body: body, Turn: -1}
	switch method {
	case "streamGenerateContent", "generateContent":
	case "countTokens":
		g.record(req)
		geminiWriteJSON(w, 200, map[string]any{"totalTokens": len(body) / 4})
		return
	default:
		g.record(req)
		geminiWriteJSON(w, 404, geminiError(404, "NOT_FOUND", "no such method: "+method, ""))
		return
	}
	var head struct {
		GenerationConfig struct {
			ResponseMimeType string `json:"responseMimeType"`
		} `json:"generationConfig"`
	}
	_ = json.Unmarshal(body, &head)
	if !req.Stream && head.GenerationConfig.ResponseMimeType == "application/json" {
		g.record(req)
		geminiWriteJSON(w, 200, geminiResponse(GeminiTurn{Text: "{}"}, "{}", nil, true))
		return
	}
	g.mu.Lock()
	turn := GeminiTurn{Text: "(end of script)"}
	if g.next < len(g.turns) {
		turn, req.Turn = g.turns[g.next], g.next
		g.next++
	}
	g.mu.Unlock()
	g.record(req)
	if turn.Status != 0 {
		status := map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
			429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}[turn.Status]
		msg := map[int]string{401: "API key not valid. Please pass a valid API key.", 403: "Permission denied on the API key.",
			429: "You exceeded your current quota, please check your plan and billing details."}[turn.Status]
		if msg == "" {
			msg = http.StatusText(turn.Status)
		}
		geminiWriteJSON(w, turn.Status, geminiError(turn.Status, status, msg, turn.RetryDelay))
		return
	}
	if !req.Stream {
		geminiWriteJSON(w, 200, geminiResponse(turn, turn.Text, turn.Calls, true))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\r\n\r\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	if turn.Thought != "" {
		send(map[string]any{"candidates": []any{map[string]any{"index": 0,
			"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": turn.Thought, "thought": true}}}}}})
	}
	n := max(turn.Chunks, 1)
	pieces := geminiSplit(turn.Text, n)
	for k, p := range pieces {
		last := k == len(pieces)-1
		var calls []GeminiCall
		if last {
			calls = turn.Calls
		}
		send(geminiResponse(turn, p, calls, last))
	}
}

func (g *Gemini) record(req GeminiRequest) {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	g.mu.Unlock()
	select {
	case g.seen <- struct{}{}:
	default:
	}
}

// splitN cuts s into n pieces of about the same size (one "" when s is
// empty).
func geminiSplit(s string, n int) []string {
	if s == "" || n <= 1 {
		return []string{s}
	}
	var out []string
	size := (len(s) + n - 1) / n
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	return append(out, s)
}

func geminiResponse(t GeminiTurn, text string, calls []GeminiCall, last bool) map[string]any {
	var parts []any
	if text != "" {
		parts = append(parts, map[string]any{"text": text})
	}
	for _, c := range calls {
		args := c.Args
		if args == nil {
			args = map[string]any{}
		}
		parts = append(parts, map[string]any{"functionCall": map[string]any{"name": c.Name, "args": args}})
	}
	if parts == nil {
		parts = []any{map[string]any{"text": ""}}
	}
	cand := map[string]any{"index": 0, "content": map[string]any{"role": "model", "parts": parts}}
	resp := map[string]any{"candidates": []any{cand}, "modelVersion": "fake-gemini"}
	if last {
		cand["finishReason"] = "STOP"
		in, out := t.InputTokens, t.OutputTokens
		if in == 0 && out == 0 {
			in, out = 10, 5
		}
		resp["usageMetadata"] = map[string]any{"promptTokenCount": in, "candidatesTokenCount": out, "totalTokenCount": in + out}
	}
	return resp
}

func geminiError(code int, status, msg, retryDelay string) map[string]any {
	e := map[string]any{"code": code, "message": msg, "status": status}
	if retryDelay != "" {
		e["details"] = []any{map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retryDelay}}
	}
	return map[string]any{"error": e}
}

func geminiWriteJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// GeminiContents is a request's conversation (its "contents").
type GeminiContent struct {
	Role  string          `json:"role"`
	Parts []GeminiPartReq `json:"parts"`
}

// GeminiPartReq is one part of a request's content.
type GeminiPartReq struct {
	Text         string `json:"text,omitempty"`
	Thought      bool   `json:"thought,omitempty"`
	FunctionCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse,omitempty"`
}

// Contents decodes a request's conversation.
func (r GeminiRequest) Contents() []GeminiContent {
	var b struct {
		Contents []GeminiContent `json:"contents"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Contents
}

// Tools lists the function declarations a request offers the model.
func (r GeminiRequest) Tools() []string {
	var b struct {
		Tools []struct {
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(r.Body, &b)
	var out []string
	for _, t := range b.Tools {
		for _, f := range t.FunctionDeclarations {
			out = append(out, f.Name)
		}
	}
	return out
}
