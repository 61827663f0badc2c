package telegram

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds of the Telegram bot. Never the token, never a message's
// text (it is the agent's or the person's): ids, chats and outcomes.

// TelegramSent: an approval's message went to a chat (Document: a long
// plan went first as a document).
type TelegramSent struct {
	ApprovalID string `json:"approval_id"`
	ChatID     int64  `json:"chat_id"`
	MessageID  int64  `json:"message_id"`
	Document   bool   `json:"document,omitempty"`
}

func (TelegramSent) Kind() string { return "telegram.sent" }

// TelegramEdited: an approval's message in a chat now says how it ended
// (State) and by whom.
type TelegramEdited struct {
	ApprovalID string `json:"approval_id"`
	ChatID     int64  `json:"chat_id"`
	MessageID  int64  `json:"message_id"`
	State      string `json:"state"`
}

func (TelegramEdited) Kind() string { return "telegram.edited" }

// TelegramAnswered: an allowed chat tapped a button or sent a reply
// (UserID: who, by Telegram's id; never a name); Outcome is resolved (the
// approval took it), over (it was answered already), unknown (no such
// request: forged, or forgotten), refused (the approval does not take that
// action), asked (Reply or Iterate: a prompt asks for the text),
// ambiguous (a text that replies to no prompt while several are open:
// taken by none), helped (Action help: /start or /help answered).
type TelegramAnswered struct {
	ApprovalID string `json:"approval_id,omitempty"`
	ChatID     int64  `json:"chat_id"`
	UserID     int64  `json:"user_id,omitempty"`
	Action     string `json:"action"`
	Outcome    string `json:"outcome"`
}

func (TelegramAnswered) Kind() string { return "telegram.answered" }

// TelegramRefused: a callback or a message came from a chat not in
// allowed_chat_ids: nothing was done, nothing answered.
type TelegramRefused struct {
	ChatID int64 `json:"chat_id"`
}

func (TelegramRefused) Kind() string { return "telegram.refused" }

// TelegramFailed: a Bot API call failed (Attempt in a row for that
// call); it is tried again after a backoff or RetryAfterMs (Telegram's
// 429), unless GaveUp (Telegram refused it for good, Reason says how:
// message_gone, blocked, refused, queue_full).
type TelegramFailed struct {
	Method       string `json:"method"`
	ApprovalID   string `json:"approval_id,omitempty"`
	ChatID       int64  `json:"chat_id,omitempty"`
	Error        string `json:"error"`
	Attempt      int    `json:"attempt"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	GaveUp       bool   `json:"gave_up,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

func (TelegramFailed) Kind() string { return "telegram.failed" }

// TelegramChatBlocked: a chat refused the bot (403: the user blocked it,
// a group removed it): nothing is sent there until it writes again.
type TelegramChatBlocked struct {
	ChatID int64 `json:"chat_id"`
}

func (TelegramChatBlocked) Kind() string { return "telegram.chat_blocked" }

// TelegramChatUnblocked: a blocked chat wrote again: the approvals
// pending are sent there again.
type TelegramChatUnblocked struct {
	ChatID int64 `json:"chat_id"`
}

func (TelegramChatUnblocked) Kind() string { return "telegram.chat_unblocked" }

func init() {
	eventlog.Register(TelegramSent{}, TelegramEdited{}, TelegramAnswered{}, TelegramRefused{}, TelegramFailed{},
		TelegramChatBlocked{}, TelegramChatUnblocked{})
}
