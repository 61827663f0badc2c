package telegram

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// kick starts the first call of the queue whose turn it is, unless one
// runs or a backoff waits: calls are paced (ChatInterval between two
// about one chat, GlobalInterval between any two), and a call about a
// chat waiting its turn lets the others pass (a tap's answer does not
// wait behind a thousand sends). Sends of approvals over, edits of ones
// forgotten and calls to a blocked chat are dropped here.
func (a *botActor) kick() {
	if a.busy || a.waiting {
		return
	}
	now := time.Now()
	if wait := a.lastCall.Add(a.b.opts.GlobalInterval).Sub(now); wait > 0 {
		a.pace(wait)
		return
	}
	var next time.Duration = -1
	for i := 0; i < len(a.queue); i++ {
		o := a.queue[i]
		it := a.items[o.id]
		drop := false
		switch o.kind {
		case "send":
			_, sent := it.msgsOf(o.chat)
			drop = it == nil || it.ended != nil || sent
		case "edit":
			drop = it == nil
		}
		if o.chat != 0 && a.blocked[o.chat] {
			drop = true
		}
		if drop {
			a.queue = slices.Delete(a.queue, i, i+1)
			i--
			a.dropped(o, it)
			continue
		}
		if o.chat != 0 {
			if wait := a.lastChat[o.chat].Add(a.b.opts.ChatInterval).Sub(now); wait > 0 {
				if next < 0 || wait < next {
					next = wait
				}
				continue
			}
		}
		a.queue = slices.Delete(a.queue, i, i+1)
		if o.kind == "send" {
			it.sending++
		}
		a.busy, a.lastCall = true, now
		if o.chat != 0 {
			a.lastChat[o.chat] = now
		}
		var c callOf // what the call needs, copied: the actor goes on changing it
		if it != nil {
			c.a, c.token, c.msgID = it.a, it.token, it.msgs[o.chat]
			if it.ended != nil {
				c.ended = *it.ended
			}
		}
		go a.run(o, c)
		return
	}
	if next > 0 {
		a.pace(next)
	}
	if a.overflowed && len(a.queue) <= maxQueue/2 {
		a.tell(refillMsg{}) // not from within kick: resync kicks
	}
}

// pace kicks the queue again after d (one timer at a time).
func (a *botActor) pace(d time.Duration) {
	if !a.pacing {
		a.pacing = true
		a.after(d, pacedMsg{})
	}
}

// dropped accounts for an op dropped unmade.
func (a *botActor) dropped(o *op, it *item) {
	if it == nil {
		return
	}
	if o.kind == "edit" {
		it.edits--
	}
	a.forgetIfDone(o.id, it)
}

func (it *item) msgsOf(chat int64) (int64, bool) {
	if it == nil {
		return 0, false
	}
	id, ok := it.msgs[chat]
	return id, ok
}

// run makes o's call, off the actor; its result comes back as callDoneMsg.
// A long plan goes as a document that carries the buttons itself (its
// caption is the message): one call, so a crash cannot leave the
// document sent and its buttons not, to be sent again.
// callOf is what a call of an approval needs, taken from its item.
type callOf struct {
	a, ended api.Approval
	token    string
	msgID    int64 // the chat's message (edit)
}

func (a *botActor) run(o *op, it callOf) {
	ctx, cancel := context.WithTimeout(a.ctx, callTimeout)
	defer cancel()
	cl := a.b.cl
	done := callDoneMsg{op: o}
	var sent Message
	switch o.kind {
	case "send":
		ap := it.a
		if planIsDocument(ap) {
			done.err = cl.sendDocument(ctx, o.chat, "plan.md", caption(ap), []byte(ap.Content), keyboard(ap, it.token), &sent)
		} else {
			done.err = cl.call(ctx, "sendMessage", map[string]any{"chat_id": o.chat, "text": text(ap),
				"reply_markup": keyboard(ap, it.token)}, &sent)
		}
		done.msgID = sent.MessageID
	case "edit":
		if planIsDocument(it.a) {
			done.err = cl.call(ctx, "editMessageCaption", map[string]any{"chat_id": o.chat, "message_id": it.msgID,
				"caption": editedCaption(it.ended)}, nil)
		} else {
			done.err = cl.call(ctx, "editMessageText", map[string]any{"chat_id": o.chat, "message_id": it.msgID,
				"text": edited(it.ended)}, nil)
		}
	case "answer":
		done.err = cl.call(ctx, "answerCallbackQuery", map[string]any{"callback_query_id": o.cbID, "text": clip(o.text, 190)}, nil)
	case "ask":
		done.err = cl.call(ctx, "sendMessage", map[string]any{"chat_id": o.chat, "text": o.text,
			"reply_markup": map[string]any{"force_reply": true, "input_field_placeholder": "your answer"}}, &sent)
		done.msgID = sent.MessageID
	case "note":
		done.err = cl.call(ctx, "sendMessage", map[string]any{"chat_id": o.chat, "text": o.text}, nil)
	}
	a.tell(done)
}

var methods = map[string]string{"send": "sendMessage", "edit": "editMessageText", "answer": "answerCallbackQuery",
	"ask": "sendMessage", "note": "sendMessage"}

// Reasons a call was given up (TelegramFailed.Reason).
const (
	ReasonMessageGone = "message_gone" // an edit of a message deleted (or too old): 400
	ReasonBlocked     = "blocked"      // the chat blocked or removed the bot: 403
	ReasonRefused     = "refused"      // any other refusal (4xx), or a callback too old to answer
	ReasonQueueFull   = "queue_full"   // maxQueue calls wait: sends left out are queued again later
)

// notModified says whether err is Telegram's 400 for an edit that
// changes nothing: the message says it already, which is success.
func notModified(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == 400 && strings.Contains(strings.ToLower(ae.Description), "message is not modified")
}

func (a *botActor) callDone(d callDoneMsg) {
	a.busy = false
	o := d.op
	it := a.items[o.id]
	if o.kind == "send" && it != nil {
		it.sending--
	}
	if d.err != nil && o.kind == "edit" && notModified(d.err) {
		d.err = nil
	}
	if d.err != nil && a.ctx.Err() == nil {
		o.attempts++
		ev := TelegramFailed{Method: methods[o.kind], ApprovalID: o.id, ChatID: o.chat, Error: d.err.Error(), Attempt: o.attempts}
		var ae *apiError
		errors.As(d.err, &ae)
		if !transient(d.err) || (o.kind == "answer" && o.attempts >= 3) {
			// Refused for good (a message gone, a chat that blocked the
			// bot, a callback too old to answer): not tried again.
			ev.GaveUp, ev.Reason = true, ReasonRefused
			switch {
			case ae != nil && ae.Status == 403 && o.chat != 0:
				ev.Reason = ReasonBlocked
			case ae != nil && ae.Status == 400 && o.kind == "edit":
				ev.Reason = ReasonMessageGone
			}
			a.emit(ev)
			a.b.opts.Logger.Warn().Str("method", ev.Method).Str("error", ev.Error).Msg("Telegram refused a call")
			a.dropped(o, it)
			if ev.Reason == ReasonBlocked {
				a.block(o.chat)
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
		a.queue = slices.Insert(a.queue, 0, o)
		a.waiting = true
		a.after(wait, kickMsg{})
		return
	}
	if d.err != nil {
		return // stopping
	}
	switch o.kind {
	case "send":
		if it != nil {
			it.msgs[o.chat] = d.msgID
			a.emit(TelegramSent{ApprovalID: o.id, ChatID: o.chat, MessageID: d.msgID, Document: planIsDocument(it.a)})
			if st := a.b.opts.Store; st != nil {
				st.SaveMessage(Msg{ApprovalID: o.id, ChatID: o.chat, MessageID: d.msgID, Token: it.token}, func(err error) {
					if err != nil {
						a.b.opts.Logger.Warn().Err(err).Str("approval", o.id).Msg("recording a Telegram message")
					}
				})
			}
			if it.ended != nil { // answered while it was being sent
				it.edits++
				a.enqueue(&op{kind: "edit", id: o.id, chat: o.chat})
			}
		}
	case "edit":
		if it != nil {
			a.emit(TelegramEdited{ApprovalID: o.id, ChatID: o.chat, MessageID: it.msgs[o.chat], State: string(it.ended.State)})
			it.edits--
			a.forgetIfDone(o.id, it)
		}
	case "ask":
		for i, w := range a.await[o.chat] {
			if w.id == o.id && w.promptID == 0 {
				a.await[o.chat][i].promptID = d.msgID
			}
		}
		// The replies that came before this prompt's id: those to it are
		// its answer; the others wait for another prompt still on its way,
		// or are dropped (they reply to no prompt: never taken for another).
		early := a.earlyReplies[o.chat]
		delete(a.earlyReplies, o.chat)
		var keep []*Message
		for _, m := range early {
			if m.ReplyTo.MessageID == d.msgID {
				a.message(m)
			} else {
				keep = append(keep, m)
			}
		}
		for _, w := range a.await[o.chat] {
			if w.promptID == 0 && len(keep) > 0 {
				a.earlyReplies[o.chat] = keep
				break
			}
		}
	}
	a.refill()
	a.kick()
}

// block stops sending to chat until it writes again: its calls waiting
// are dropped.
func (a *botActor) block(chat int64) {
	if a.blocked[chat] {
		return
	}
	a.blocked[chat] = true
	a.emit(TelegramChatBlocked{ChatID: chat})
	a.b.opts.Logger.Warn().Int64("chat", chat).Msg("a Telegram chat refused the bot: nothing is sent there until it writes")
	for i := 0; i < len(a.queue); i++ {
		if o := a.queue[i]; o.chat == chat {
			a.queue = slices.Delete(a.queue, i, i+1)
			i--
			a.dropped(o, a.items[o.id])
		}
	}
}

// unblock: a blocked chat wrote; it gets the approvals pending again.
func (a *botActor) unblock(chat int64) {
	if !a.blocked[chat] {
		return
	}
	delete(a.blocked, chat)
	a.emit(TelegramChatUnblocked{ChatID: chat})
	a.resync()
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
		a.unblock(q.Message.Chat.ID)
		a.callback(q)
	case u.Message != nil:
		m := u.Message
		if !a.allowed(m.Chat.ID) {
			a.emit(TelegramRefused{ChatID: m.Chat.ID})
			return
		}
		a.unblock(m.Chat.ID)
		a.message(m)
	}
}

func (a *botActor) reply(cbID, s string) {
	a.enqueue(&op{kind: "answer", cbID: cbID, text: s})
	a.kick()
}

func (a *botActor) note(chat int64, s string) {
	a.enqueue(&op{kind: "note", chat: chat, text: s})
	a.kick()
}

func (a *botActor) callback(q *CallbackQuery) {
	chat, user := q.Message.Chat.ID, q.From.ID
	token, action, err := DecodeCallback(q.Data)
	id := ""
	if err == nil {
		id = a.byToken[token]
	}
	it := a.items[id]
	if ended, ok := a.over[token]; ok && err == nil && it == nil {
		a.emit(TelegramAnswered{ApprovalID: ended.ID, ChatID: chat, UserID: user, Action: action, Outcome: "over"})
		a.reply(q.ID, "Already answered: "+outcomeShort(ended))
		return
	}
	if id == "" || it == nil {
		a.emit(TelegramAnswered{ChatID: chat, UserID: user, Action: action, Outcome: "unknown"})
		a.reply(q.ID, "Unknown request, or one answered long ago: nothing was done.")
		return
	}
	if it.ended != nil {
		a.emit(TelegramAnswered{ApprovalID: id, ChatID: chat, UserID: user, Action: action, Outcome: "over"})
		a.reply(q.ID, "Already answered: "+outcomeShort(*it.ended))
		return
	}
	if action == ActReply {
		a.closePrompt(chat, id) // tapped again: asked again
		a.await[chat] = append(a.await[chat], awaiting{id: id, user: user})
		a.emit(TelegramAnswered{ApprovalID: id, ChatID: chat, UserID: user, Action: action, Outcome: "asked"})
		a.reply(q.ID, "Reply to the prompt with your answer.")
		what := "What should the agent do instead?"
		if it.a.Kind == api.KindPlan {
			what = "What should the planner change?"
		}
		a.enqueue(&op{kind: "ask", id: id, chat: chat, text: what + " (" + id + ")\nReply to this message with your answer."})
		a.kick()
		return
	}
	d := map[string]api.Decision{ActAllow: api.DecisionAllow, ActDeny: api.DecisionDeny, ActAlways: api.DecisionAlwaysAllow}[action]
	a.answer(q.ID, chat, user, action, id, d, "")
}

// closePrompt forgets chat's open prompt of approval id, if any.
func (a *botActor) closePrompt(chat int64, id string) {
	ws := slices.DeleteFunc(a.await[chat], func(w awaiting) bool { return w.id == id })
	if len(ws) == 0 {
		delete(a.await, chat)
		return
	}
	a.await[chat] = ws
}

// BySession is how a Telegram answer names who gave it: the chat's id
// and the user's ("<chat>:<user>"), never a name.
func BySession(chat, user int64) string {
	return strconv.FormatInt(chat, 10) + ":" + strconv.FormatInt(user, 10)
}

// answer resolves id as chat's user says; the batch's offset waits for it.
func (a *botActor) answer(cbID string, chat, user int64, action, id string, d api.Decision, text string) {
	a.inFlight++
	res := api.Resolution{By: api.ByTelegram, BySession: BySession(chat, user), UserMessage: text}
	if d == api.DecisionDeny {
		res.Message = "denied from Telegram"
	}
	a.b.opts.Approvals.Answer(id, d, res, func(ap api.Approval, err error) {
		a.tell(answeredMsg{cbID: cbID, chat: chat, user: user, action: action, id: id, a: ap, err: err})
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
	a.emit(TelegramAnswered{ApprovalID: m.id, ChatID: m.chat, UserID: m.user, Action: m.action, Outcome: outcome})
	if m.cbID != "" {
		a.reply(m.cbID, say)
	}
	a.batchDone()
}

// helpText answers /start and /help.
func (a *botActor) helpText(chat int64) string {
	n := 0
	for _, it := range a.items {
		if it.ended == nil {
			n++
		}
	}
	return fmt.Sprintf("orchestrd's approvals bot. This chat (%d) is allowed: every approval the daemon holds comes here "+
		"with buttons; whoever answers first (here, the CLI, the dashboard) wins.\n\n"+
		"Reply and Iterate ask for your text: reply to their prompt with it (with one prompt open, your next "+
		"message is taken too).\n\n%d approvals pending. /help: this message.", chat, n)
}

// isCommand says whether text is the bot command cmd ("/help",
// "/help@somebot", "/help more").
func isCommand(text, cmd string) bool {
	f := strings.Fields(text)
	if len(f) == 0 {
		return false
	}
	name, _, _ := strings.Cut(f[0], "@")
	return strings.EqualFold(name, cmd)
}

// message takes an allowed chat's text: /start and /help are answered;
// any other text is the answer of the prompt it replies to or, when it
// replies to none, of the chat's one open prompt if its user tapped it.
// With several prompts open, a message that replies to none answers
// nothing: the chat is told to reply to the prompt.
// maxEarly bounds the replies a chat may have waiting for a prompt's id.
const maxEarly = 32

func (a *botActor) message(m *Message) {
	if isCommand(m.Text, "/start") || isCommand(m.Text, "/help") {
		a.emit(TelegramAnswered{ChatID: m.Chat.ID, UserID: m.userID(), Action: "help", Outcome: "helped"})
		a.note(m.Chat.ID, a.helpText(m.Chat.ID))
		return
	}
	ws := a.await[m.Chat.ID]
	if len(ws) == 0 || m.Text == "" {
		return
	}
	var w awaiting
	found := false
	if m.ReplyTo != nil {
		for _, x := range ws {
			if x.promptID != 0 && x.promptID == m.ReplyTo.MessageID {
				w, found = x, true
			}
		}
	}
	if !found && m.ReplyTo != nil {
		for _, x := range ws {
			if x.promptID == 0 {
				// It may reply to that prompt, whose id the bot has not
				// heard yet (the person was faster than its answer).
				if a.earlyReplies == nil {
					a.earlyReplies = map[int64][]*Message{}
				}
				if len(a.earlyReplies[m.Chat.ID]) < maxEarly {
					a.earlyReplies[m.Chat.ID] = append(a.earlyReplies[m.Chat.ID], m)
				}
				return
			}
		}
	}
	if !found {
		if len(ws) > 1 {
			a.emit(TelegramAnswered{ChatID: m.Chat.ID, UserID: m.userID(), Action: ActReply, Outcome: "ambiguous"})
			a.note(m.Chat.ID, fmt.Sprintf("%d requests wait for a text here: reply to the prompt of the one you answer. "+
				"Nothing was done.", len(ws)))
			return
		}
		if ws[0].user != 0 && ws[0].user != m.userID() {
			return // someone else in a group: not the answer
		}
		w = ws[0]
	}
	a.closePrompt(m.Chat.ID, w.id)
	if it := a.items[w.id]; it == nil || it.ended != nil {
		a.emit(TelegramAnswered{ApprovalID: w.id, ChatID: m.Chat.ID, UserID: m.userID(), Action: ActReply, Outcome: "over"})
		return
	}
	a.answer("", m.Chat.ID, m.userID(), ActReply, w.id, api.DecisionReply, m.Text)
}

func (m *Message) userID() int64 {
	if m.From == nil {
		return 0
	}
	return m.From.ID
}

func outcomeShort(ap api.Approval) string {
	s := string(ap.State)
	if r := ap.Resolution; r != nil && r.By != "" {
		s += " by " + r.Who()
	}
	return s
}
