package daemon

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/approvals/telegram"
	"github.com/orchestrd/orchestrd/platform/secrets"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// approvalWatchers hands a new pending approval, and one that ended, to
// those who follow them: notify_command, the metrics, the Telegram bot
// (set once it is started: approvals starts first).
type approvalWatchers struct {
	notify func(api.Approval)
	ended  func(api.Approval)
	bot    *telegram.Bot
}

func (w *approvalWatchers) pending(a api.Approval) {
	w.notify(a)
	w.bot.Pending(a) // nil-safe
}

func (w *approvalWatchers) end(a api.Approval) {
	w.ended(a)
	w.bot.Ended(a)
}

// telegramToken is the bot's token: cfg.Token names it in secrets.toml.
// The error names the entry, never a value.
func telegramToken(cfg approvals.TelegramConfig, sf *secrets.File) (string, error) {
	v, _, ok := sf.Lookup(cfg.Token)
	if !ok {
		return "", fmt.Errorf("[approvals.telegram] token names %q, which %s does not hold (or its env variable is unset): "+
			"add it there (orchestrd approvals telegram import takes vibe-reachout's)", cfg.Token, SecretsFile)
	}
	return v, nil
}

// startTelegram starts the bot under m when [approvals.telegram] is set.
func startTelegram(cfg *approvals.TelegramConfig, token string, m *approvals.Manager, st *state.Store, bus *eventlog.Bus,
	sys *actors.System, log zerolog.Logger) (*telegram.Bot, error) {
	if cfg == nil {
		return nil, nil
	}
	var store telegram.Store
	if st != nil {
		store = telegramStore{st}
	}
	b, err := telegram.Start(telegram.Options{Config: *cfg, Token: token, Approvals: m, Store: store, Bus: bus, System: sys,
		Logger: log.With().Str("component", "telegram").Logger()})
	if err != nil {
		return nil, fmt.Errorf("starting the Telegram bot: %w", err)
	}
	return b, nil
}

// telegramStore is telegram.Store on the state store.
type telegramStore struct{ st *state.Store }

func (t telegramStore) Load() (int64, []telegram.Msg, error) {
	off, err := t.st.Telegram().Offset()
	if err != nil {
		return 0, nil, err
	}
	rows, err := t.st.Telegram().Messages()
	if err != nil {
		return 0, nil, err
	}
	out := make([]telegram.Msg, 0, len(rows))
	for _, r := range rows {
		out = append(out, telegram.Msg{ApprovalID: r.ApprovalID, ChatID: r.ChatID, MessageID: r.MessageID, Token: r.Token})
	}
	return off, out, nil
}

func (t telegramStore) enqueue(w state.Write, done func(error)) {
	if err := t.st.Enqueue(w, done); err != nil {
		done(err)
	}
}

func (t telegramStore) SaveOffset(next int64, done func(error)) {
	t.enqueue(state.TelegramOffsetPut(next), done)
}

func (t telegramStore) SaveMessage(m telegram.Msg, done func(error)) {
	t.enqueue(state.TelegramMessagePut(state.TelegramMessage{ApprovalID: m.ApprovalID, ChatID: m.ChatID,
		MessageID: m.MessageID, Token: m.Token}), done)
}

func (t telegramStore) Forget(id string, done func(error)) {
	t.enqueue(state.TelegramMessagesDeleted(id), done)
}
