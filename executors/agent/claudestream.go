package agent

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
	"unicode"

	"github.com/orchestrd/orchestrd/api"
)

// claudeMsg is one report_message a Claude Code line gives.
type claudeMsg struct {
	Type string
	Data any
}

// claudePermission is a can_use_tool control request: Claude Code asks
// its host whether a tool may run.
type claudePermission struct {
	RequestID string
	Tool      string
	ToolUseID string
	Input     json.RawMessage
	// Suggestions are Claude Code's permission_suggestions (each a JSON
	// object).
	Suggestions []json.RawMessage
	// Refused: its line was over LineMax; it is denied unasked.
	Refused bool
}

// claudeStream decodes Claude Code's stream-json output (`-p
// --output-format stream-json --verbose --include-partial-messages`), one
// line at a time, into the api.Msg* messages and what the adapter must
// act on. It keeps what lines tell about later ones: the session id, the
// messages whose text was streamed, the tool uses denied.
type claudeStream struct {
	SessionID string
	// Result is the result line's, once it came.
	Result *api.ResultData
	// ResultSeen: a result line came (the session is over: close stdin).
	ResultSeen bool
	// RateLimited: the endpoint said 429 / rate limit / usage limit: kill
	// the CLI at once rather than let it retry for minutes.
	RateLimited bool
	RetryAt     *time.Time
	// AuthFailed: the endpoint refused the key (401, 403) or there was none.
	AuthFailed bool
	// ErrorText is the result's text when it is an error.
	ErrorText string

	asked    map[string]bool // control request ids seen
	streamed map[string]bool // message ids whose text came as deltas
	lastMsg  string          // the id of the message being streamed
	denied   map[string]bool // tool_use ids denied (by the host or Claude Code)
	deniedN  int             // denials without a tool_use id
	now      func() time.Time
}

func newClaudeStream() *claudeStream {
	return &claudeStream{streamed: map[string]bool{}, denied: map[string]bool{}, asked: map[string]bool{}, now: time.Now}
}

// Denied is how many tool uses were refused in the run.
func (s *claudeStream) Denied() int { return len(s.denied) + s.deniedN }

// deny counts a refused tool use once, by its id.
func (s *claudeStream) deny(toolUseID string) {
	if toolUseID == "" {
		s.deniedN++
		return
	}
	s.denied[toolUseID] = true
}

// claudeLine is the part of a stream-json line the decoder reads.
type claudeLine struct {
	Type      string          `json:"type"`
	Subtype   string          `json:"subtype"`
	SessionID string          `json:"session_id"`
	Event     *claudeEvent    `json:"event"`
	APIMsgID  string          `json:"api_message_id"`
	Message   json.RawMessage `json:"message"` // an object (assistant, user) or a string (system)
	RequestID string          `json:"request_id"`
	Request   json.RawMessage `json:"request"`
	// assistant: a synthetic error message's kind (rate_limit,
	// authentication_failed...)
	Error          json.RawMessage `json:"error"`
	APIErrorStatus *int            `json:"api_error_status"`
	// system/api_retry
	Attempt      int   `json:"attempt"`
	RetryDelayMs int64 `json:"retry_delay_ms"`
	ErrorStatus  *int  `json:"error_status"`
	// system/permission_denied
	ToolName  string `json:"tool_name"`
	ToolUseID string `json:"tool_use_id"`
	// result
	IsError     bool            `json:"is_error"`
	Result      json.RawMessage `json:"result"`
	NumTurns    int             `json:"num_turns"`
	Cost        float64         `json:"total_cost_usd"`
	Usage       *claudeUsage    `json:"usage"`
	Denials     []claudeDenial  `json:"permission_denials"`
	APIErrorTyp string          `json:"api_error_type"`
}

type claudeEvent struct {
	Type    string `json:"type"`
	Message *struct {
		ID string `json:"id"`
	} `json:"message"`
	Delta *struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Thinking string `json:"thinking"`
	} `json:"delta"`
}

type claudeMessage struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string or blocks
}

type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type claudeUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

type claudeDenial struct {
	ToolName  string          `json:"tool_name"`
	ToolUseID string          `json:"tool_use_id"`
	ToolInput json.RawMessage `json:"tool_input"`
}

// Line decodes one line: the messages to report (each structured one
// with raw = the line, on the first of them), and the permission asked
// for, if the line is a can_use_tool. A line that gives no message is an
// agent_line.
func (s *claudeStream) Line(line []byte) ([]claudeMsg, *claudePermission) {
	line = bytes.TrimSpace(line)
	var l claudeLine
	if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
		return []claudeMsg{agentLine(line)}, nil
	}
	// A member of an unexpected type is left out; the others are read.
	_ = json.Unmarshal(line, &l)
	raw := json.RawMessage(line)
	var msgs []claudeMsg
	var perm *claudePermission
	switch l.Type {
	case "stream_event":
		msgs = s.streamEvent(&l, raw)
	case "assistant":
		msgs = s.assistant(&l, raw)
	case "user":
		msgs = s.user(&l, raw)
	case "system":
		msgs = s.system(&l, raw)
	case "result":
		msgs = s.result(&l, raw)
	case "control_request":
		perm = s.controlRequest(&l)
	}
	if len(msgs) == 0 {
		msgs = []claudeMsg{agentLine(line)}
	}
	return msgs, perm
}

// Oversized takes a line over LineMax, refused as a message, for what it
// tells the adapter: a result (reported without the line, its text cut),
// a rate limit or a refused key, a permission asked for (returned: the
// adapter denies it rather than leave Claude Code waiting).
func (s *claudeStream) Oversized(line []byte) ([]claudeMsg, *claudePermission) {
	line = bytes.TrimSpace(line)
	var l claudeLine
	if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
		return nil, nil
	}
	_ = json.Unmarshal(line, &l)
	switch l.Type {
	case "result":
		msgs := s.result(&l, nil)
		for i, m := range msgs {
			if r, ok := m.Data.(api.ResultData); ok {
				r.Text = clean(r.Text, 4096)
				msgs[i].Data = r
				s.Result.Text = r.Text
			}
		}
		return msgs, nil
	case "control_request":
		return nil, s.controlRequest(&l)
	case "system":
		s.system(&l, nil)
	case "assistant":
		s.apiError(errorKind(l.Error), l.APIErrorStatus)
	}
	return nil, nil
}

// agentLine keeps a line that has no message of its own: as the JSON it
// is, or else as a JSON string of it.
func agentLine(line []byte) claudeMsg {
	var l json.RawMessage
	if len(line) > 0 && json.Valid(line) {
		l = append(json.RawMessage(nil), line...)
	} else {
		l, _ = json.Marshal(strings.ToValidUTF8(string(line), "\uFFFD"))
	}
	return claudeMsg{api.MsgAgentLine, api.AgentLineData{Agent: KindClaude, Line: l}}
}

func (s *claudeStream) streamEvent(l *claudeLine, raw json.RawMessage) []claudeMsg {
	e := l.Event
	if e == nil {
		return nil
	}
	if e.Type == "message_start" && e.Message != nil {
		s.lastMsg = e.Message.ID
	}
	if e.Type != "content_block_delta" || e.Delta == nil {
		return nil
	}
	id := l.APIMsgID
	if id == "" {
		id = s.lastMsg
	}
	switch e.Delta.Type {
	case "text_delta":
		s.streamed[id] = true
		return []claudeMsg{{api.MsgText, api.MsgTextData{Text: e.Delta.Text, Raw: raw}}}
	case "thinking_delta":
		s.streamed[id] = true
		return []claudeMsg{{api.MsgThinking, api.MsgTextData{Text: e.Delta.Thinking, Raw: raw}}}
	}
	return nil
}

// blocks reads a message's content: a string is one text block.
func blocks(content json.RawMessage) []claudeBlock {
	var str string
	if json.Unmarshal(content, &str) == nil {
		return []claudeBlock{{Type: "text", Text: str}}
	}
	var bs []claudeBlock
	_ = json.Unmarshal(content, &bs)
	return bs
}

// once is raw the first time (the line's first message carries the line),
// nil after.
func once(raw *json.RawMessage) json.RawMessage {
	r := *raw
	*raw = nil
	return r
}

// objectOr is b when it is a JSON object, else {}.
func objectOr(b json.RawMessage) json.RawMessage {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' && json.Valid(b) {
		return b
	}
	return json.RawMessage(`{}`)
}

func (s *claudeStream) assistant(l *claudeLine, raw json.RawMessage) []claudeMsg {
	// An error Claude Code made up (the endpoint refused): its kind tells
	// a rate limit or a refused key apart.
	s.apiError(errorKind(l.Error), l.APIErrorStatus)
	var m claudeMessage
	if json.Unmarshal(l.Message, &m) != nil {
		return nil
	}
	// Text and thinking came as deltas already, unless this message was
	// not streamed (an error Claude Code wrote itself).
	streamed := m.ID != "" && s.streamed[m.ID]
	var msgs []claudeMsg
	for _, b := range blocks(m.Content) {
		switch b.Type {
		case "text":
			if !streamed && b.Text != "" {
				msgs = append(msgs, claudeMsg{api.MsgText, api.MsgTextData{Text: b.Text, Raw: once(&raw)}})
			}
		case "thinking":
			if !streamed && b.Thinking != "" {
				msgs = append(msgs, claudeMsg{api.MsgThinking, api.MsgTextData{Text: b.Thinking, Raw: once(&raw)}})
			}
		case "tool_use", "server_tool_use":
			msgs = append(msgs, claudeMsg{api.MsgToolCall, api.ToolCallData{ID: b.ID, Name: b.Name, Input: objectOr(b.Input), Raw: once(&raw)}})
		}
	}
	return msgs
}

// resultText is a tool_result's content as text: a string, or its text
// blocks joined.
func resultText(c json.RawMessage) string {
	var str string
	if json.Unmarshal(c, &str) == nil {
		return str
	}
	var sb strings.Builder
	for _, b := range blocks(c) {
		if b.Type == "text" {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

func (s *claudeStream) user(l *claudeLine, raw json.RawMessage) []claudeMsg {
	var m claudeMessage
	if json.Unmarshal(l.Message, &m) != nil {
		return nil
	}
	var msgs []claudeMsg
	for _, b := range blocks(m.Content) {
		if b.Type == "tool_result" {
			msgs = append(msgs, claudeMsg{api.MsgToolResult, api.ToolResultData{ID: b.ToolUseID, Output: resultText(b.Content), IsError: b.IsError, Raw: once(&raw)}})
		}
	}
	return msgs
}

func (s *claudeStream) system(l *claudeLine, raw json.RawMessage) []claudeMsg {
	switch l.Subtype {
	case "init":
		if l.SessionID != "" {
			s.SessionID = l.SessionID
		}
	case "api_retry":
		// Claude Code retries a 429 ten times over minutes: the first one
		// ends the run. Its delay is its own backoff (500 ms doubled per
		// attempt, up to a quarter more at random) unless the endpoint
		// said when to come back (Retry-After): a delay longer than the
		// backoff can be is the endpoint's, and says when to retry.
		if (l.ErrorStatus != nil && *l.ErrorStatus == 429) || errorKind(l.Error) == "rate_limit" {
			s.RateLimited = true
			attempt := min(max(l.Attempt, 1), 20)
			backoff := int64(500) << (attempt - 1) * 5 / 4
			if l.RetryDelayMs > backoff+1 && l.RetryDelayMs < int64(48*time.Hour/time.Millisecond) {
				t := s.now().Add(time.Duration(l.RetryDelayMs) * time.Millisecond).UTC().Truncate(time.Second)
				s.RetryAt = &t
			}
		}
		if l.ErrorStatus != nil && (*l.ErrorStatus == 401 || *l.ErrorStatus == 403) {
			s.AuthFailed = true
		}
	case "permission_denied":
		// Claude Code refused a tool itself (its mode, its rules).
		var d struct {
			ToolName  string `json:"tool_name"`
			ToolUseID string `json:"tool_use_id"`
			Message   string `json:"message"`
		}
		_ = json.Unmarshal(raw, &d)
		s.deny(d.ToolUseID)
		return []claudeMsg{{api.MsgPermissionDenied, api.PermissionDeniedData{ID: d.ToolUseID, Name: d.ToolName, Reason: d.Message, Raw: raw}}}
	}
	return nil
}

// errorKind is an "error" member that is a string (an assistant's
// synthetic error, an api_retry's), else "".
func errorKind(b json.RawMessage) string {
	var s string
	_ = json.Unmarshal(b, &s)
	return s
}

// apiError notes a rate limit or a refused key told by an error's kind or
// HTTP status.
func (s *claudeStream) apiError(kind string, status *int) {
	switch kind {
	case "rate_limit", "usage_limit":
		s.RateLimited = true
	case "authentication_failed", "authentication_error", "permission_error", "billing_error":
		s.AuthFailed = true
	}
	if status != nil {
		switch *status {
		case 429:
			s.RateLimited = true
		case 401, 403:
			s.AuthFailed = true
		}
	}
}

func (s *claudeStream) result(l *claudeLine, raw json.RawMessage) []claudeMsg {
	if s.ResultSeen || (s.SessionID != "" && l.SessionID != s.SessionID) {
		// One result per run, of the session its init named: another is
		// not Claude Code's (it ends its run with the first, and the
		// adapter closes its input then), but a line someone else wrote
		// on its stdout (a tool's process can).
		return nil
	}
	s.ResultSeen = true
	if l.SessionID != "" && s.SessionID == "" {
		s.SessionID = l.SessionID
	}
	var text string
	_ = json.Unmarshal(l.Result, &text)
	for _, d := range l.Denials {
		if d.ToolUseID == "" || !s.denied[d.ToolUseID] {
			s.deny(d.ToolUseID)
		}
	}
	if l.IsError {
		s.apiError(l.APIErrorTyp, l.APIErrorStatus)
		if strings.HasPrefix(text, "Not logged in") || strings.HasPrefix(text, "Invalid API key") {
			s.AuthFailed = true
		}
		if at, ok := usageLimitReset(text); ok {
			s.RateLimited, s.RetryAt = true, &at
		}
		s.ErrorText = text
	}
	var u *api.TokenUsage
	if l.Usage != nil {
		u = &api.TokenUsage{InputTokens: l.Usage.InputTokens, OutputTokens: l.Usage.OutputTokens,
			CacheReadTokens: l.Usage.CacheReadInputTokens, CacheWriteTokens: l.Usage.CacheCreationInputTokens, CostUSD: l.Cost}
	} else if l.Cost > 0 {
		u = &api.TokenUsage{CostUSD: l.Cost}
	}
	res := api.ResultData{Text: text, IsError: l.IsError, SDKSessionID: s.SessionID, Denied: s.Denied(), Turns: l.NumTurns, Usage: u}
	s.Result = &res
	var msgs []claudeMsg
	if u != nil {
		msgs = append(msgs, claudeMsg{api.MsgUsage, api.UsageData{TokenUsage: *u, Raw: once(&raw)}})
	}
	first := res
	first.Raw = once(&raw)
	return append(msgs, claudeMsg{api.MsgResult, first})
}

// usageLimitReset reads Claude Code's "Claude AI usage limit
// reached|EPOCH" (a subscription's limit, with its reset time).
func usageLimitReset(text string) (time.Time, bool) {
	const p = "usage limit reached|"
	i := strings.Index(text, p)
	if i < 0 {
		return time.Time{}, false
	}
	rest := text[i+len(p):]
	n := 0
	var sec int64
	for n < len(rest) && n < 12 && rest[n] >= '0' && rest[n] <= '9' {
		sec = sec*10 + int64(rest[n]-'0')
		n++
	}
	if n == 0 {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

func (s *claudeStream) controlRequest(l *claudeLine) *claudePermission {
	var r struct {
		Subtype   string          `json:"subtype"`
		ToolName  string          `json:"tool_name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		// Suggestions: what an "always" could record.
		Suggestions []json.RawMessage `json:"permission_suggestions"`
	}
	if json.Unmarshal(l.Request, &r) != nil || l.RequestID == "" || s.asked[l.RequestID] || len(s.asked) >= maxRequests {
		// One answer per request id: a repeated one is not asked again.
		return nil
	}
	s.asked[l.RequestID] = true
	if r.Subtype != "can_use_tool" {
		return &claudePermission{RequestID: l.RequestID} // answered with an error
	}
	var sugg []json.RawMessage
	for _, sg := range r.Suggestions {
		if o := objectOr(sg); len(o) > 2 && len(sugg) < maxSuggestions {
			sugg = append(sugg, o)
		}
	}
	return &claudePermission{RequestID: l.RequestID, Tool: r.ToolName, ToolUseID: r.ToolUseID, Input: objectOr(r.Input), Suggestions: sugg}
}

// maxRequests bounds the control requests of one run (the ids kept).
const maxRequests = 100000

// maxSuggestions bounds the permission suggestions passed on with one
// request.
const maxSuggestions = 8

// clean makes text the agent chose safe to show as one line of a task's
// error: control characters (terminal escapes) become spaces, and it is
// cut to n bytes.
func clean(text string, n int) string {
	text = strings.ToValidUTF8(text, "\uFFFD")
	text = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, text)
	if len(text) > n {
		text = strings.ToValidUTF8(text[:n], "") + "..."
	}
	return text
}
