package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// The Telegram bot as a demanding user and a hostile one use it: two
// prompts open, a group, the agent's text dressed as the bot's, edits
// Telegram refuses, a chat that blocked the bot, a thousand approvals.

// tgAsk asks a tool approval from the control socket; its id.
func tgAsk(t *testing.T, d *testDaemon, tool string, input map[string]any, extra map[string]any) string {
	t.Helper()
	p := map[string]any{"kind": "tool", "tool_name": tool, "tool_input": input}
	for k, v := range extra {
		p[k] = v
	}
	var r struct {
		ID string `json:"id"`
	}
	d.mustCall("approval.request", p, &r)
	return r.ID
}

func tgGet(t *testing.T, d *testDaemon, id string) api.Approval {
	t.Helper()
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	d.mustCall("approval.get", map[string]any{"id": id}, &res)
	return res.Approval
}

// Two prompts open in a chat (Reply tapped on A, then on B): a text that
// replies to neither answers neither (the chat is told to reply to the
// prompt); the reply to A's prompt answers A, not the last one asked;
// with one prompt left, the next message answers it.
func TestTelegramTwoPrompts(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, _ := tgDaemon(t, tg, shortTemp(t), "")
	a := tgAsk(t, d, "Bash", map[string]any{"command": "make a"}, nil)
	b := tgAsk(t, d, "Bash", map[string]any{"command": "make b"}, nil)
	tg.tap(111, tg.messageTo(111, a), "reply")
	pa := tg.messageTo(111, "instead? ("+a+")")
	tg.tap(111, tg.messageTo(111, b), "reply")
	tg.messageTo(111, "instead? ("+b+")")
	tg.sayAs(111, 111, 0, "which one?")
	d.waitEvent("telegram.answered", func(e map[string]any) bool { return e["outcome"] == "ambiguous" && e["chat_id"] == float64(111) })
	tg.messageTo(111, "2 requests wait for a text here")
	tg.sayAs(111, 111, pa.ID, "for A")
	d.waitEvent("approval.resolved", func(e map[string]any) bool { return e["id"] == a })
	if ga, gb := tgGet(t, d, a), tgGet(t, d, b); ga.State != api.ApprovalReplied || ga.Resolution.UserMessage != "for A" ||
		gb.State != api.ApprovalPending {
		t.Fatalf("A %s %+v, B %s", ga.State, ga.Resolution, gb.State)
	}
	tg.sayAs(111, 111, 0, "for B")
	d.waitEvent("approval.resolved", func(e map[string]any) bool { return e["id"] == b })
	if gb := tgGet(t, d, b); gb.State != api.ApprovalReplied || gb.Resolution.UserMessage != "for B" {
		t.Fatalf("B %s %+v", gb.State, gb.Resolution)
	}
}

// In a group chat anyone in it may answer. The approval and its events
// name the chat and the user by their ids ("<chat>:<user>"), never a
// name or a text; a member's chatter is not taken for another's Reply,
// a reply to the prompt is.
func TestTelegramGroupChat(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, _ := tgDaemonChats(t, tg, shortTemp(t), "-100777, 111", "")
	a := tgAsk(t, d, "Bash", map[string]any{"command": "make a"}, nil)
	m := tg.messageTo(-100777, a)
	tg.tapAs(-100777, 333, m, "allow")
	d.waitEvent("approval.resolved", func(e map[string]any) bool { return e["id"] == a && e["by_session"] == "-100777:333" })
	if r := tgGet(t, d, a).Resolution; r.By != "telegram" || r.BySession != "-100777:333" {
		t.Fatalf("resolution %+v", r)
	}
	d.waitEvent("telegram.answered", func(e map[string]any) bool {
		return e["approval_id"] == a && e["user_id"] == float64(333) && e["outcome"] == "resolved"
	})
	tg.editOf(m.ID, "Allowed by telegram chat -100777 user 333")

	b := tgAsk(t, d, "Bash", map[string]any{"command": "make b"}, nil)
	tg.tapAs(-100777, 333, tg.messageTo(-100777, b), "reply")
	p := tg.messageTo(-100777, "instead? ("+b+")")
	tg.sayAs(-100777, 444, 0, "chatter from another member")
	tg.sayAs(-100777, 444, p.ID, "from 444")
	d.waitEvent("approval.resolved", func(e map[string]any) bool { return e["id"] == b })
	if r := tgGet(t, d, b).Resolution; r.UserMessage != "from 444" || r.BySession != "-100777:444" {
		t.Fatalf("resolution %+v", r)
	}
	for _, e := range d.events() {
		if s := fmt.Sprint(e); strings.Contains(strings.ToLower(s), "mallory") || strings.Contains(s, "chatter") {
			t.Fatalf("a name or a text in an event: %v", e)
		}
	}
}

// The agent's text cannot pass for the bot's: each of its lines is behind
// a gutter (a fake "✅ Allowed by" or "🔑" line starts no line), and
// control, bidi and zero-width characters show as their code points.
func TestTelegramAgentTextQuoted(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, _ := tgDaemon(t, tg, shortTemp(t), "")
	fake := "ls\n\n✅ Allowed by telegram chat 111 at 2026-11-30T00:00:00Z\n🔑 a-fake · until 23:59:59Z\u202e\u200b\x1b[31m\r" +
		strings.Repeat("x", 3000)
	a := tgAsk(t, d, "Bash\n✅ Allowed", map[string]any{"command": fake},
		map[string]any{"cwd": "/work/p\u202eevil\n❌ Denied by cli"})
	m := tg.messageTo(111, a)
	for _, l := range strings.Split(m.Text, "\n") {
		if strings.HasPrefix(l, "✅") || strings.HasPrefix(l, "❌") || strings.HasPrefix(l, "🔑 a-fake") {
			t.Fatalf("the agent's line %q passes for the bot's in\n%s", l, m.Text)
		}
	}
	for _, c := range []string{"\u202e", "\u200b", "\x1b", "\r"} {
		if strings.Contains(m.Text, c) {
			t.Fatalf("%q sent raw in\n%s", c, m.Text)
		}
	}
	for _, s := range []string{"⟨U+202E⟩", "⟨U+200B⟩", "␛", "┃ ✅ Allowed by telegram chat 111", "cut:"} {
		if !strings.Contains(m.Text, s) {
			t.Fatalf("no %q in\n%s", s, m.Text)
		}
	}
	if !strings.HasSuffix(m.Text, "· until "+tgGet(t, d, a).Deadline.UTC().Format("15:04:05Z")) {
		t.Fatalf("the id line is not the last:\n%s", m.Text)
	}
}

// Telegram's 400 "message is not modified" on an edit is success (the
// message says it already), not a failure; a message the user deleted
// (400 "message to edit not found") is given up at once, said with a
// reason, never tried again.
func TestTelegramEditRefused(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, _ := tgDaemon(t, tg, shortTemp(t), "")
	x := tgAsk(t, d, "Bash", map[string]any{"command": "make x"}, nil)
	y := tgAsk(t, d, "Bash", map[string]any{"command": "make y"}, nil)
	mx, my := tg.messageTo(111, x), tg.messageTo(111, y)
	tg.messageTo(222, y)
	tg.set(func(s *tgServer) {
		s.editErr[mx.ID] = "Bad Request: message is not modified: specified new message content and reply markup are exactly the same"
		s.editErr[my.ID] = "Bad Request: message to edit not found"
	})
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	d.mustCall("approval.resolve", map[string]any{"id": x, "decision": "Allow", "by": "cli"}, &res)
	d.mustCall("approval.resolve", map[string]any{"id": y, "decision": "Deny", "by": "cli"}, &res)
	d.waitEvent("telegram.edited", func(e map[string]any) bool { return e["approval_id"] == x && e["chat_id"] == float64(111) })
	d.waitEvent("telegram.failed", func(e map[string]any) bool {
		return e["approval_id"] == y && e["chat_id"] == float64(111) && e["gave_up"] == true && e["reason"] == "message_gone"
	})
	tg.editOf(tg.messageTo(222, y).ID, "Denied by cli") // the queue went on
	tg.editOf(tg.messageTo(222, x).ID, "Allowed by cli")
	if n := countEvents(d.events(), "telegram.failed", func(e map[string]any) bool { return e["approval_id"] == x }); n != 0 {
		t.Fatalf("%d failures of a message not modified", n)
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.editCalls[mx.ID] != 1 || tg.editCalls[my.ID] != 1 {
		t.Fatalf("edits tried: %d and %d, want 1 each", tg.editCalls[mx.ID], tg.editCalls[my.ID])
	}
}

// A chat that blocked the bot (403) is sent nothing more until it writes
// again: one refused call, not one an approval, said in an event. Its
// /start is answered with help, and the approvals pending are sent then.
func TestTelegramBlockedChat(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	tg.set(func(s *tgServer) { s.blockChat[222] = true })
	d, _ := tgDaemon(t, tg, shortTemp(t), "")
	ids := []string{tgAsk(t, d, "Bash", map[string]any{"command": "make 1"}, nil)}
	d.waitEvent("telegram.chat_blocked", func(e map[string]any) bool { return e["chat_id"] == float64(222) })
	ids = append(ids, tgAsk(t, d, "Bash", map[string]any{"command": "make 2"}, nil),
		tgAsk(t, d, "Bash", map[string]any{"command": "make 3"}, nil))
	for _, id := range ids {
		tg.messageTo(111, id)
	}
	d.waitEvent("telegram.sent", func(e map[string]any) bool { return e["approval_id"] == ids[2] && e["chat_id"] == float64(111) })
	tg.mu.Lock()
	refused := tg.blockedN[222]
	tg.blockChat[222] = false
	tg.mu.Unlock()
	if refused != 1 {
		t.Fatalf("%d calls to the chat that blocked the bot, want 1", refused)
	}
	d.waitEvent("telegram.failed", func(e map[string]any) bool { return e["chat_id"] == float64(222) && e["reason"] == "blocked" })
	tg.sayAs(222, 222, 0, "/start")
	tg.messageTo(222, "This chat (222) is allowed")
	d.waitEvent("telegram.chat_unblocked", func(e map[string]any) bool { return e["chat_id"] == float64(222) })
	for _, id := range ids {
		tg.messageTo(222, id)
	}
	tg.sayAs(111, 111, 0, "/help@orchestrd_bot")
	tg.messageTo(111, "3 approvals pending")
}

// A thousand approvals at once: the bot paces itself as Telegram asks
// (a second between two messages to a chat), and those answered while
// they wait their turn are dropped from the queue, never sent: the last
// ones, still pending, are sent soon after.
func TestTelegramThousandPending(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, _ := tgDaemon(t, tg, shortTemp(t), "")
	const n, kept = 1000, 3
	ids := make([]string, n)
	for i := range ids {
		ids[i] = tgAsk(t, d, "Bash", map[string]any{"command": fmt.Sprint("make ", i)}, nil)
	}
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	for _, id := range ids[:n-kept] {
		d.mustCall("approval.resolve", map[string]any{"id": id, "decision": "Deny", "by": "cli"}, &res)
	}
	for _, id := range ids[n-kept:] {
		tg.messageTo(111, id)
		tg.messageTo(222, id)
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for _, chat := range []int64{111, 222} {
		// Counted, not timed: the gaps the server sees depend on each
		// request's time in flight (no timing assertions).
		sent := 0
		for _, m := range tg.sent {
			if m.Chat == chat {
				sent++
			}
		}
		if sent > n/4 {
			t.Fatalf("chat %d: %d messages: the answered approvals were not dropped", chat, sent)
		}
		t.Logf("chat %d: %d messages of %d approvals", chat, sent, n)
	}
}
