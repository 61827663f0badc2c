package telegram

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of what is read from and sent to the Bot API.
const (
	// MaxText is Telegram's limit on a message's text (characters).
	MaxText = 4096
	// MaxCaption is Telegram's limit on a document's caption.
	MaxCaption = 1024
	// MaxCallbackData is Telegram's limit on a button's callback data.
	MaxCallbackData = 64
	// maxResponse bounds a Bot API response read (a getUpdates batch of
	// 100 updates of 4096-character texts fits many times).
	maxResponse = 8 << 20
	// maxUpdates is the batch getUpdates asks for.
	maxUpdates = 100
)

// client calls the Bot API at base with token. Its errors never hold the
// token (net/http's name the URL, which does): they are redacted.
type client struct {
	base  string
	token string
	hc    *http.Client
}

// apiError is the Bot API's refusal (ok false) or an HTTP error status.
type apiError struct {
	Method      string
	Status      int
	Description string
	RetryAfter  time.Duration // 429's parameters.retry_after
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("telegram %s: HTTP %d", e.Method, e.Status)
	if e.Description != "" {
		s += ": " + e.Description
	}
	return s
}

// transient says whether trying again may succeed: 429, 5xx, or no
// answer at all.
func transient(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusTooManyRequests || ae.Status >= 500
	}
	return true
}

// redact removes the token from s (and the bot's path, which holds it).
func (c *client) redact(s string) string {
	if c.token != "" {
		s = strings.ReplaceAll(s, c.token, "<token>")
	}
	return s
}

// response is the Bot API's envelope.
type response struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  *struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

// call POSTs params (JSON) to method and decodes its result into out.
func (c *client) call(ctx context.Context, method string, params, out any) error {
	body, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("telegram %s: encoding the request: %w", method, err)
	}
	return c.do(ctx, method, "application/json", body, out)
}

// sendDocument sends name (content) to chat with caption and markup.
func (c *client) sendDocument(ctx context.Context, chat int64, name, caption string, content []byte, markup, out any) error {
	mk, err := json.Marshal(markup)
	if err != nil {
		return fmt.Errorf("telegram sendDocument: encoding the keyboard: %w", err)
	}
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	_ = w.WriteField("chat_id", fmt.Sprint(chat))
	_ = w.WriteField("caption", caption)
	_ = w.WriteField("reply_markup", string(mk))
	fw, err := w.CreateFormFile("document", name)
	if err == nil {
		_, err = fw.Write(content)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		return fmt.Errorf("telegram sendDocument: building the request: %w", err)
	}
	return c.do(ctx, "sendDocument", w.FormDataContentType(), b.Bytes(), out)
}

func (c *client) do(ctx context.Context, method, ctype string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/bot"+c.token+"/"+method, bytes.NewReader(body))
	if err != nil {
		return errors.New(c.redact(fmt.Sprintf("telegram %s: building the request: %v", method, err)))
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := c.hc.Do(req)
	if err != nil {
		// *url.Error names the URL, and the URL holds the token: the
		// error is rebuilt from its text, redacted, never wrapped.
		return errors.New(c.redact(fmt.Sprintf("telegram %s: %v", method, err)))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return errors.New(c.redact(fmt.Sprintf("telegram %s: reading the answer: %v", method, err)))
	}
	if len(raw) > maxResponse {
		return &apiError{Method: method, Status: resp.StatusCode, Description: fmt.Sprintf("answer over %d bytes", maxResponse)}
	}
	var r response
	if err := json.Unmarshal(raw, &r); err != nil || (!r.OK && resp.StatusCode < 300) {
		ae := &apiError{Method: method, Status: resp.StatusCode, Description: "not a Bot API answer"}
		if resp.StatusCode < 300 {
			ae.Status = http.StatusBadGateway
		}
		return ae
	}
	if !r.OK || resp.StatusCode >= 300 {
		ae := &apiError{Method: method, Status: resp.StatusCode, Description: c.redact(cut(r.Description, 200))}
		if r.ErrorCode != 0 {
			ae.Status = r.ErrorCode
		}
		if r.Parameters != nil && r.Parameters.RetryAfter > 0 {
			ae.RetryAfter = time.Duration(min(r.Parameters.RetryAfter, 3600)) * time.Second
		}
		return ae
	}
	if out != nil {
		if err := json.Unmarshal(r.Result, out); err != nil {
			return &apiError{Method: method, Status: http.StatusBadGateway, Description: "a result that is not what " + method + " answers"}
		}
	}
	return nil
}

// The parts of the Bot API's objects the bot reads.
type (
	Chat struct {
		ID int64 `json:"id"`
	}
	User struct {
		ID       int64  `json:"id"`
		Username string `json:"username,omitempty"`
	}
	Message struct {
		MessageID int64    `json:"message_id"` // a reply's prompt: only this is kept
		Chat      Chat     `json:"chat"`
		From      *User    `json:"from,omitempty"`
		Text      string   `json:"text,omitempty"`
		ReplyTo   *Message `json:"reply_to_message,omitempty"`
	}
	CallbackQuery struct {
		ID      string   `json:"id"`
		From    User     `json:"from"`
		Message *Message `json:"message,omitempty"`
		Data    string   `json:"data,omitempty"`
	}
	Update struct {
		UpdateID      int64          `json:"update_id"`
		Message       *Message       `json:"message,omitempty"`
		CallbackQuery *CallbackQuery `json:"callback_query,omitempty"`
	}
)

// DecodeUpdates decodes getUpdates' result: at most maxUpdates updates,
// each with an update_id >= 0; a text is cut to MaxText characters, a
// callback's data over MaxCallbackData bytes is dropped (no button
// carries it). Anything else is an error.
func DecodeUpdates(b []byte) ([]Update, error) {
	var us []Update
	if err := json.Unmarshal(b, &us); err != nil {
		return nil, fmt.Errorf("decoding updates: %w", err)
	}
	if len(us) > maxUpdates {
		return nil, fmt.Errorf("decoding updates: %d updates, asked for at most %d", len(us), maxUpdates)
	}
	for i := range us {
		u := &us[i]
		if u.UpdateID < 0 {
			return nil, fmt.Errorf("decoding updates: update_id %d is negative", u.UpdateID)
		}
		if i > 0 && u.UpdateID <= us[i-1].UpdateID {
			return nil, fmt.Errorf("decoding updates: update_id %d after %d: not increasing", u.UpdateID, us[i-1].UpdateID)
		}
		if m := u.Message; m != nil {
			m.Text = cut(m.Text, MaxText)
			if m.ReplyTo != nil {
				m.ReplyTo.ReplyTo, m.ReplyTo.Text = nil, ""
			}
		}
		if q := u.CallbackQuery; q != nil {
			if len(q.Data) > MaxCallbackData {
				q.Data = ""
			}
			if q.Message != nil {
				q.Message.Text, q.Message.ReplyTo = "", nil
			}
		}
	}
	return us, nil
}

// Actions a button carries (callback data "<token>:<action>").
const (
	ActAllow  = "allow"
	ActDeny   = "deny"
	ActReply  = "reply"
	ActAlways = "always"
)

// tokenLen is the length of an approval's short id (hex).
const tokenLen = 16

// EncodeCallback is a button's callback data: the approval's token and
// the action (at most 23 bytes).
func EncodeCallback(token, action string) string { return token + ":" + action }

// DecodeCallback parses callback data: a 16-hex-digit token, a colon, a
// known action; anything else is an error.
func DecodeCallback(s string) (token, action string, err error) {
	if len(s) > MaxCallbackData {
		return "", "", fmt.Errorf("callback data of %d bytes (at most %d)", len(s), MaxCallbackData)
	}
	token, action, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", errors.New("callback data without a colon")
	}
	if len(token) != tokenLen || strings.ToLower(token) != token {
		return "", "", errors.New("callback data: not a token")
	}
	if _, err := hex.DecodeString(token); err != nil {
		return "", "", errors.New("callback data: not a token")
	}
	switch action {
	case ActAllow, ActDeny, ActReply, ActAlways:
	default:
		return "", "", errors.New("callback data: unknown action")
	}
	return token, action, nil
}

// cut shortens s to at most n characters (runes), at a rune boundary;
// invalid UTF-8 is replaced.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}
