package state

import (
	"database/sql"
	"errors"
	"fmt"
)

// Telegram is the Telegram bot's part of the store: the offset of its
// next getUpdates and the messages it sent of each approval.
type Telegram struct{ s *Store }

// Telegram returns the Telegram bot's part of the store.
func (s *Store) Telegram() Telegram { return Telegram{s} }

// TelegramMessage is one message the bot sent of an approval, to a chat.
type TelegramMessage struct {
	ApprovalID string
	ChatID     int64
	MessageID  int64
	Token      string
}

// Offset is the next getUpdates offset (0: none stored).
func (t Telegram) Offset() (int64, error) {
	var next int64
	err := t.s.query("read the Telegram bot's offset", `SELECT next FROM telegram_offset WHERE id = 1`,
		func(sc scanner) error { return sc.Scan(&next) })
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return next, err
}

// Messages is every message the bot sent of an approval it has not
// forgotten yet, by approval then chat.
func (t Telegram) Messages() ([]TelegramMessage, error) {
	var out []TelegramMessage
	err := t.s.query("read the Telegram bot's messages",
		`SELECT approval_id, chat_id, message_id, token FROM telegram_messages ORDER BY approval_id, chat_id`,
		func(sc scanner) error {
			var m TelegramMessage
			if err := sc.Scan(&m.ApprovalID, &m.ChatID, &m.MessageID, &m.Token); err != nil {
				return err
			}
			out = append(out, m)
			return nil
		})
	return out, err
}

// TelegramOffsetPut records the next getUpdates offset.
func TelegramOffsetPut(next int64) Write {
	return &telegramWrite{op: "offset", m: TelegramMessage{MessageID: next}}
}

// TelegramMessagePut records a message sent.
func TelegramMessagePut(m TelegramMessage) Write { return &telegramWrite{op: "put", m: m} }

// TelegramMessagesDeleted forgets the messages of an approval.
func TelegramMessagesDeleted(approvalID string) Write {
	return &telegramWrite{op: "delete", m: TelegramMessage{ApprovalID: approvalID}}
}

type telegramWrite struct {
	op string
	m  TelegramMessage
}

func (w *telegramWrite) what() string {
	switch w.op {
	case "offset":
		return "record the Telegram bot's offset"
	case "put":
		return "record the Telegram message of approval " + w.m.ApprovalID
	}
	return "forget the Telegram messages of approval " + w.m.ApprovalID
}

func (w *telegramWrite) prepare() error {
	switch w.op {
	case "offset":
		if w.m.MessageID < 0 {
			return fmt.Errorf("an offset is >= 0, got %d", w.m.MessageID)
		}
	case "put":
		if w.m.ApprovalID == "" || w.m.Token == "" || w.m.MessageID <= 0 {
			return errors.New("a Telegram message needs an approval id, a token and a message id")
		}
	default:
		if w.m.ApprovalID == "" {
			return errors.New("no approval id")
		}
	}
	return nil
}

func (w *telegramWrite) apply(t *wtx) error {
	var err error
	switch w.op {
	case "offset":
		_, err = t.exec(`INSERT INTO telegram_offset(id, next) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET next = excluded.next`,
			w.m.MessageID)
	case "put":
		_, err = t.exec(`INSERT INTO telegram_messages(approval_id, chat_id, message_id, token) VALUES (?, ?, ?, ?)
			ON CONFLICT(approval_id, chat_id) DO UPDATE SET message_id = excluded.message_id, token = excluded.token`,
			w.m.ApprovalID, w.m.ChatID, w.m.MessageID, w.m.Token)
	default:
		_, err = t.exec(`DELETE FROM telegram_messages WHERE approval_id = ?`, w.m.ApprovalID)
	}
	return err
}
