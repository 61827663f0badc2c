package telegram

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// kick starts the call at the head of the queue unless one runs or a
// backoff waits. Sends of approvals over, and edits of ones forgotten,
// are dropped here.
func (a *botActor) kick() {
	for !a.busy && !a.waiting && len(a.queue) > 0 {
		o := a.queue[0]
		it := a.items[o.id]
		switch o.kind {
		case "send":
			if it == nil || it.ended != nil {
				a.queue = a.queue[1:]
				if it != nil {
					a.forgetIfDone(o.id, it)
				}
				continue
			}
			if _, sent := it.msgs[o.chat]; sent {
				a.queue = a.queue[1:]
				continue
			}
			it.sending++
		case "edit":
			if it == nil {
				a.queue = a.queue[1:]
				continue
			}
		}
		a.busy = true
		go a.run(o, it)
		return
	}
}

// run makes o's call, off the actor; its result comes back as callDoneMsg.
func (a *botActor) run(o *op, it *item) {
	ctx, cancel := context.WithTimeout(a.ctx, callTimeout)
	defer cancel()
	cl := a.b.cl
	done := callDoneMsg{op: o}
	var sent Message
	switch o.kind {
	case "send":
		ap := it.a
		if planIsDocument(ap) && !o.docSent {
			var doc Message
			done.err = cl.sendDocument(ctx, o.chat, "plan.md", clip("📋 Plan "+ap.ID, MaxCaption), []byte(ap.Content), &doc)
			if done.err != nil {
				break
			}
			o.docSent = true
		}
		done.err = cl.call(ctx, "sendMessage", map[string]any{"chat_id": o.chat, "text": text(ap),
			"reply_markup": keyboard(ap, it.token)}, &sent)
		done.msgID = sent.MessageID
	case "edit":
		done.err = cl.call(ctx, "editMessageText", map[string]any{"chat_id": o.chat, "message_id": it.msgs[o.chat],
			"text": edited(*it.ended)}, nil)
	case "answer":
		done.err = cl.call(ctx, "answerCallbackQuery", map[string]any{"callback_query_id": o.cbID, "text": clip(o.text, 190)}, nil)
	case "ask":
		done.err = cl.call(ctx, "sendMessage", map[string]any{"chat_id": o.chat, "text": o.text,
			"reply_markup": map[string]any{"force_reply": true, "input_field_placeholder": "your answer"}}, &sent)
		done.msgID = sent.MessageID
	}
	a.tell(done)
}

var methods = map[string]string{"send": "sendMessage", "edit": "editMessageText", "answer": "answerCallbackQuery", "ask": "sendMessage"}

func (a *botActor) callDone(d callDoneMsg) {
	a.busy = false
	o := d.op
	it := a.items[o.id]
	if o.kind == "send" && it != nil {
		it.sending--
	}
	if d.err != nil && a.ctx.Err() == nil {
		o.attempts++
		ev := TelegramFailed{Method: methods[o.kind], ApprovalID: o.id, ChatID: o.chat, Error: d.err.Error(), Attempt: o.attempts}
		var ae *apiError
		errors.As(d.err, &ae)
		if !transient(d.err) || (o.kind == "answer" && o.attempts >= 3) || (o.kind == "edit" && ae != nil && ae.Status == 400) {
			// Refused for good (a message gone, a chat that blocked the
			// bot, a callback too old to answer): not tried again.
			ev.GaveUp = true
			a.emit(ev)
			a.b.opts.Logger.Warn().Str("method", ev.Method).Str("error", ev.Error).Msg("Telegram refused a call")
			a.queue = a.queue[1:]
			if it != nil {
				if o.kind == "edit" {
					it.edits--
				}
				a.forgetIfDone(o.id, it)
			}
			a.kick()
			return
		}
		wait := a.backoff(o.attempts)
		if ae != nil && ae.RetryAfter > 0 {
			wait = ae.RetryAfter
			ev.RetryAfterMs = wait.Milliseconds()
		}
		a.emit(ev)
		a.b.opts.Logger.Warn().Str("method", ev.Method).Str("error", ev.Error).Dur("retry_in", wait).Msg("Telegram call failed")
		a.waiting = true
		a.after(wait, kickMsg{})
		return
	}
	if d.err != nil {
		return // stopping
	}
	a.queue = a.queue[1:]
	switch o.kind {
	case "send":
		if it != nil {
			it.msgs[o.chat] = d.msgID
			a.emit(TelegramSent{ApprovalID: o.id, ChatID: o.chat, MessageID: d.msgID, Document: o.docSent})
			if st := a.b.opts.Store; st != nil {
				st.SaveMessage(Msg{ApprovalID: o.id, ChatID: o.chat, MessageID: d.msgID, Token: it.token}, func(err error) {
					if err != nil {
						a.b.opts.Logger.Warn().Err(err).Str("approval", o.id).Msg("recording a Telegram message")
					}
				})
			}
			if it.ended != nil { // answered while it was being sent
				it.edits++
				a.queue = append(a.queue, &op{kind: "edit", id: o.id, chat: o.chat})
			}
		}
	case "edit":
		if it != nil {
			a.emit(TelegramEdited{ApprovalID: o.id, ChatID: o.chat, MessageID: it.msgs[o.chat], State: string(it.ended.State)})
			it.edits--
			a.forgetIfDone(o.id, it)
		}
	case "ask":
		if w, ok := a.await[o.chat]; ok && w.id == o.id {
			w.promptID = d.msgID
			a.await[o.chat] = w
		}
	}
	a.kick()
}

// backoff is the wait before attempt n+1: doubling from MinBackoff, at
// most MaxBackoff.
func (a *botActor) backoff(n int) time.Duration {
	d := a.b.opts.MinBackoff
	for i := 1; i < n && d < a.b.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, a.b.opts.MaxBackoff)
}

// after sends msg to the actor after d (the actor's own timer, cancelled
// when it stops).
func (a *botActor) after(d time.Duration, msg any) {
	t := time.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C:
			a.tell(msg)
		case <-a.ctx.Done():
		}
	}()
}

// poll asks for the next updates, unless a poll runs or a batch's answers
// are not recorded yet.
func (a *botActor) poll() {
	if a.polling || a.inFlight > 0 || a.ctx.Err() != nil {
		return
	}
	a.polling = true
	off, wait := a.offset, a.b.opts.PollTimeout
	go func() {
		ctx, cancel := context.WithTimeout(a.ctx, wait+callTimeout)
		defer cancel()
		var raw rawMessage
		err := a.b.cl.call(ctx, "getUpdates", map[string]any{"offset": off, "limit": maxUpdates,
			"timeout": int(wait / time.Second), "allowed_updates": []string{"message", "callback_query"}}, &raw)
		var us []Update
		if err == nil {
			us, err = DecodeUpdates(raw)
		}
		a.tell(polledMsg{updates: us, err: err})
	}()
}

type rawMessage []byte

func (r *rawMessage) UnmarshalJSON(b []byte) error { *r = append((*r)[:0], b...); return nil }

func (a *botActor) polled(p polledMsg) {
	a.polling = false
	if p.err != nil {
		if a.ctx.Err() != nil {
			return
		}
		a.pollFails++
		wait := a.backoff(a.pollFails)
		var ae *apiError
		if errors.As(p.err, &ae) && ae.RetryAfter > 0 {
			wait = ae.RetryAfter
		}
		ev := TelegramFailed{Method: "getUpdates", Error: p.err.Error(), Attempt: a.pollFails}
		if ae != nil && ae.RetryAfter > 0 {
			ev.RetryAfterMs = wait.Milliseconds()
		}
		a.emit(ev)
		a.b.opts.Logger.Warn().Str("error", ev.Error).Dur("retry_in", wait).Msg("Telegram getUpdates failed")
		a.after(wait, pollMsg{})
		return
	}
	a.pollFails = 0
	if len(p.updates) == 0 {
		a.poll()
		return
	}
	a.next = p.updates[len(p.updates)-1].UpdateID + 1
	for _, u := range p.updates {
		a.update(u)
	}
	a.batchDone()
}

// batchDone records the next offset once the batch's answers are
// recorded, then polls again.
func (a *botActor) batchDone() {
	if a.inFlight > 0 || a.next <= a.offset {
		return
	}
	next := a.next
	st := a.b.opts.Store
	if st == nil {
		a.offset = next
		a.poll()
		return
	}
	st.SaveOffset(next, func(err error) {
		if err != nil {
			a.b.opts.Logger.Warn().Err(err).Msg("recording the Telegram bot's offset")
		}
		a.tell(offsetSavedMsg{next: next})
	})
}

func (a *botActor) allowed(chat int64) bool {
	for _, c := range a.b.opts.Config.AllowedChatIDs {
		if c == chat {
			return true
		}
	}
	return false
}

// update acts on one update.
func (a *botActor) update(u Update) {
	switch {
	case u.CallbackQuery != nil:
		q := u.CallbackQuery
		if q.Message == nil || !a.allowed(q.Message.Chat.ID) {
			var chat int64
			if q.Message != nil {
				chat = q.Message.Chat.ID
			}
			a.emit(TelegramRefused{ChatID: chat})
			return
		}
		a.callback(q)
	case u.Message != nil:
		m := u.Message
		if !a.allowed(m.Chat.ID) {
			a.emit(TelegramRefused{ChatID: m.Chat.ID})
			return
		}
		a.message(m)
	}
}

func (a *botActor) reply(cbID, s string) {
	a.enqueue(&op{kind: "answer", cbID: cbID, text: s})
	a.kick()
}

func (a *botActor) callback(q *CallbackQuery) {
	chat := q.Message.Chat.ID
	token, action, err := DecodeCallback(q.Data)
	id := ""
	if err == nil {
		id = a.byToken[token]
	}
	it := a.items[id]
	if ended, ok := a.over[token]; ok && err == nil && it == nil {
		a.emit(TelegramAnswered{ApprovalID: ended.ID, ChatID: chat, Action: action, Outcome: "over"})
		a.reply(q.ID, "Already answered: "+outcomeShort(ended))
		return
	}
	if id == "" || it == nil {
		a.emit(TelegramAnswered{ChatID: chat, Action: action, Outcome: "unknown"})
		a.reply(q.ID, "Unknown request, or one answered long ago: nothing was done.")
		return
	}
	if it.ended != nil {
		a.emit(TelegramAnswered{ApprovalID: id, ChatID: chat, Action: action, Outcome: "over"})
		a.reply(q.ID, "Already answered: "+outcomeShort(*it.ended))
		return
	}
	if action == ActReply {
		a.await[chat] = awaiting{id: id}
		a.emit(TelegramAnswered{ApprovalID: id, ChatID: chat, Action: action, Outcome: "asked"})
		a.reply(q.ID, "Send your answer as the next message.")
		what := "What should the agent do instead?"
		if it.a.Kind == api.KindPlan {
			what = "What should the planner change?"
		}
		a.enqueue(&op{kind: "ask", id: id, chat: chat, text: what + " (" + id + ")"})
		a.kick()
		return
	}
	d := map[string]api.Decision{ActAllow: api.DecisionAllow, ActDeny: api.DecisionDeny, ActAlways: api.DecisionAlwaysAllow}[action]
	a.answer(q.ID, chat, action, id, d, "")
}

// answer resolves id as chat says; the batch's offset waits for it.
func (a *botActor) answer(cbID string, chat int64, action, id string, d api.Decision, text string) {
	a.inFlight++
	res := api.Resolution{By: api.ByTelegram, BySession: strconv.FormatInt(chat, 10), UserMessage: text}
	if d == api.DecisionDeny {
		res.Message = "denied from Telegram"
	}
	a.b.opts.Approvals.Answer(id, d, res, func(ap api.Approval, err error) {
		a.tell(answeredMsg{cbID: cbID, chat: chat, action: action, id: id, a: ap, err: err})
	})
}

func (a *botActor) answered(m answeredMsg) {
	a.inFlight--
	outcome, say := "resolved", ""
	if m.err != nil {
		var ae *api.Error
		outcome, say = "refused", "Not done: "+clip(m.err.Error(), 150)
		if errors.As(m.err, &ae) && (ae.Code == api.CodeInvalidState || ae.Code == api.CodeNotFound) {
			outcome = "over"
		}
	} else {
		say = outcomeShort(m.a)
	}
	a.emit(TelegramAnswered{ApprovalID: m.id, ChatID: m.chat, Action: m.action, Outcome: outcome})
	if m.cbID != "" {
		a.reply(m.cbID, say)
	}
	a.batchDone()
}

// message takes an allowed chat's text: the answer its Reply or Iterate
// waits for.
func (a *botActor) message(m *Message) {
	w, ok := a.await[m.Chat.ID]
	if !ok || m.Text == "" {
		return
	}
	delete(a.await, m.Chat.ID)
	if it := a.items[w.id]; it == nil || it.ended != nil {
		a.emit(TelegramAnswered{ApprovalID: w.id, ChatID: m.Chat.ID, Action: ActReply, Outcome: "over"})
		return
	}
	a.answer("", m.Chat.ID, ActReply, w.id, api.DecisionReply, m.Text)
}

func outcomeShort(ap api.Approval) string {
	s := string(ap.State)
	if r := ap.Resolution; r != nil && r.By != "" {
		s += " by " + r.Who()
	}
	return s
}
