package main

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

// A scripted Telegram Bot API on loopback: what the daemon's bot sends is
// kept, updates (taps, messages) are put in by the test, and the server
// can be taken down (connections closed unanswered), made to answer 429
// with retry_after, or 5xx.

const tgToken = "123456789:AAH-secret-TOKEN-never-logged_xyz"

type tgSent struct {
	ID       int64
	Chat     int64
	Text     string // a document's: its content
	Caption  string
	Markup   map[string]any
	Document bool
	At       time.Time
}

type tgServer struct {
	t   *testing.T
	srv *http.Server
	url string

	mu        sync.Mutex
	cond      *sync.Cond
	updates   []map[string]any
	nextUpd   int64
	nextMsg   int64
	sent      []tgSent
	edits     map[int64][]string // message id -> texts
	answers   map[string]string  // callback query id -> text
	down      bool
	refuseN   int // the next refuseN sendMessage calls get 429
	retryS    int
	fiveN     int // the next fiveN sendMessage calls get 502
	downCalls int // calls refused while down
	offsets   []int64
	closed    bool
	// editErr answers an edit of a message id with a 400 of this
	// description; blockChat answers every send to a chat with 403.
	editErr   map[int64]string
	editCalls map[int64]int
	blockChat map[int64]bool
	blockedN  map[int64]int // calls refused with 403, by chat
	handlers  sync.WaitGroup
}

func startTG(t *testing.T) *tgServer {
	t.Helper()
	s := &tgServer{t: t, edits: map[int64][]string{}, answers: map[string]string{}, nextUpd: 1000, nextMsg: 1,
		editErr: map[int64]string{}, editCalls: map[int64]int{}, blockChat: map[int64]bool{}, blockedN: map[int64]int{}}
	s.cond = sync.NewCond(&s.mu)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s}
	go func() { _ = s.srv.Serve(ln) }()
	stopWake := make(chan struct{})
	go func() { // wakes long polls so they see down and deadlines
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopWake:
				return
			case <-tk.C:
				s.cond.Broadcast()
			}
		}
	}()
	t.Cleanup(func() {
		s.set(func(s *tgServer) { s.closed = true })
		_ = s.srv.Close()
		s.handlers.Wait()
		close(stopWake)
	})
	return s
}

func (s *tgServer) reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func (s *tgServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handlers.Add(1)
	defer s.handlers.Done()
	method, ok := strings.CutPrefix(r.URL.Path, "/bot"+tgToken+"/")
	if !ok {
		s.reply(w, 401, map[string]any{"ok": false, "error_code": 401, "description": "Unauthorized"})
		return
	}
	params := map[string]any{}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "multipart/form-data" {
		_, p, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		mr := multipart.NewReader(r.Body, p["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(part)
			if part.FormName() == "chat_id" {
				var n int64
				fmt.Sscan(string(b), &n)
				params["chat_id"] = float64(n)
			} else if part.FormName() == "reply_markup" {
				var mk map[string]any
				_ = json.Unmarshal(b, &mk)
				params["reply_markup"] = mk
			} else {
				params[part.FormName()] = string(b)
			}
		}
	} else if err := json.NewDecoder(r.Body).Decode(&params); err != nil {
		s.reply(w, 400, map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: no JSON"})
		return
	}
	s.mu.Lock()
	if s.down {
		s.downCalls++
		s.mu.Unlock()
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		return
	}
	if method == "sendMessage" || method == "sendDocument" {
		if s.refuseN > 0 {
			s.refuseN--
			s.mu.Unlock()
			s.reply(w, 429, map[string]any{"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1",
				"parameters": map[string]any{"retry_after": s.retryS}})
			return
		}
		if s.fiveN > 0 {
			s.fiveN--
			s.mu.Unlock()
			s.reply(w, 502, map[string]any{"ok": false, "error_code": 502, "description": "Bad Gateway"})
			return
		}
	}
	defer s.mu.Unlock()
	chat, _ := params["chat_id"].(float64)
	if s.blockChat[int64(chat)] && method != "getUpdates" && method != "answerCallbackQuery" {
		s.blockedN[int64(chat)]++
		s.reply(w, 403, map[string]any{"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"})
		return
	}
	switch method {
	case "getUpdates":
		off, _ := params["offset"].(float64)
		s.offsets = append(s.offsets, int64(off))
		deadline := time.Now().Add(time.Second)
		for {
			var out []map[string]any
			for _, u := range s.updates {
				if u["update_id"].(int64) >= int64(off) {
					out = append(out, u)
				}
			}
			if len(out) > 0 || time.Now().After(deadline) || s.down || s.closed {
				if out == nil {
					out = []map[string]any{}
				}
				s.reply(w, 200, map[string]any{"ok": true, "result": out})
				return
			}
			s.cond.Wait()
		}
	case "sendMessage", "sendDocument":
		m := tgSent{ID: s.nextMsg, Chat: int64(chat), Document: method == "sendDocument", At: time.Now()}
		s.nextMsg++
		m.Text, _ = params["text"].(string)
		if m.Document {
			m.Text, _ = params["document"].(string)
			m.Caption, _ = params["caption"].(string)
		}
		m.Markup, _ = params["reply_markup"].(map[string]any)
		s.sent = append(s.sent, m)
		s.reply(w, 200, map[string]any{"ok": true, "result": map[string]any{"message_id": m.ID, "chat": map[string]any{"id": m.Chat}}})
	case "editMessageText", "editMessageCaption":
		id, _ := params["message_id"].(float64)
		s.editCalls[int64(id)]++
		if d := s.editErr[int64(id)]; d != "" {
			s.reply(w, 400, map[string]any{"ok": false, "error_code": 400, "description": d})
			return
		}
		txt, _ := params["text"].(string)
		if method == "editMessageCaption" {
			txt, _ = params["caption"].(string)
			txt = "caption:" + txt
		}
		s.edits[int64(id)] = append(s.edits[int64(id)], txt)
		s.reply(w, 200, map[string]any{"ok": true, "result": true})
	case "answerCallbackQuery":
		id, _ := params["callback_query_id"].(string)
		s.answers[id], _ = params["text"].(string)
		s.reply(w, 200, map[string]any{"ok": true, "result": true})
	default:
		s.reply(w, 404, map[string]any{"ok": false, "error_code": 404, "description": "Not Found"})
	}
	s.cond.Broadcast()
}

// push queues an update (its update_id is given here) and says its id.
func (s *tgServer) push(u map[string]any) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextUpd++
	u["update_id"] = s.nextUpd
	s.updates = append(s.updates, u)
	s.cond.Broadcast()
	return s.nextUpd
}

// tap presses the button of message msg (in chat) whose callback data
// ends with ":"+action, as a person would.
func (s *tgServer) tap(chat int64, msg tgSent, action string) string {
	s.t.Helper()
	data := ""
	for _, row := range msg.Markup["inline_keyboard"].([]any) {
		for _, b := range row.([]any) {
			d := b.(map[string]any)["callback_data"].(string)
			if strings.HasSuffix(d, ":"+action) {
				data = d
			}
		}
	}
	if data == "" {
		s.t.Fatalf("message %d has no %s button: %v", msg.ID, action, msg.Markup)
	}
	return s.tapData(chat, msg.ID, data)
}

func (s *tgServer) tapData(chat, msgID int64, data string) string {
	cb := fmt.Sprintf("cb-%d-%d", chat, time.Now().UnixNano())
	s.push(map[string]any{"callback_query": map[string]any{"id": cb, "from": map[string]any{"id": chat},
		"message": map[string]any{"message_id": msgID, "chat": map[string]any{"id": chat}}, "data": data}})
	return cb
}

func (s *tgServer) say(chat int64, text string) {
	s.push(map[string]any{"message": map[string]any{"message_id": 9000 + time.Now().UnixNano()%1000,
		"chat": map[string]any{"id": chat}, "from": map[string]any{"id": chat}, "text": text}})
}

// sayAs is user's message in chat, a reply to message replyTo (0: none),
// from a user with a name (which must never be recorded).
func (s *tgServer) sayAs(chat, user, replyTo int64, text string) {
	m := map[string]any{"message_id": 9000 + time.Now().UnixNano()%1000, "chat": map[string]any{"id": chat},
		"from": map[string]any{"id": user, "username": "mallory_name", "first_name": "Mallory"}, "text": text}
	if replyTo != 0 {
		m["reply_to_message"] = map[string]any{"message_id": replyTo, "chat": map[string]any{"id": chat}, "text": "the prompt"}
	}
	s.push(map[string]any{"message": m})
}

// tapAs is tap by user (a group's member, with a name).
func (s *tgServer) tapAs(chat, user int64, msg tgSent, action string) string {
	s.t.Helper()
	for _, row := range msg.Markup["inline_keyboard"].([]any) {
		for _, b := range row.([]any) {
			if d := b.(map[string]any)["callback_data"].(string); strings.HasSuffix(d, ":"+action) {
				cb := fmt.Sprintf("cb-%d-%d", chat, time.Now().UnixNano())
				s.push(map[string]any{"callback_query": map[string]any{"id": cb,
					"from":    map[string]any{"id": user, "username": "mallory_name", "first_name": "Mallory"},
					"message": map[string]any{"message_id": msg.ID, "chat": map[string]any{"id": chat}}, "data": d}})
				return cb
			}
		}
	}
	s.t.Fatalf("message %d has no %s button: %v", msg.ID, action, msg.Markup)
	return ""
}

// messageTo waits for the message sent to chat whose text has substr.
func (s *tgServer) messageTo(chat int64, substr string) tgSent {
	s.t.Helper()
	var m tgSent
	eventually(s.t, 20*time.Second, fmt.Sprintf("a message to chat %d with %q", chat, substr), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, x := range s.sent {
			if x.Chat == chat && (strings.Contains(x.Text, substr) || strings.Contains(x.Caption, substr)) {
				m = x
				return true
			}
		}
		return false
	})
	return m
}

func (s *tgServer) countTo(chat int64, substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, x := range s.sent {
		if x.Chat == chat && (strings.Contains(x.Text, substr) || strings.Contains(x.Caption, substr)) {
			n++
		}
	}
	return n
}

// editOf waits until message id was edited to a text with substr.
func (s *tgServer) editOf(id int64, substr string) string {
	s.t.Helper()
	var got string
	eventuallyOr(s.t, 20*time.Second, fmt.Sprintf("message %d edited with %q", id, substr), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range s.edits[id] {
			if strings.Contains(e, substr) {
				got = e
				return true
			}
		}
		return false
	}, func() string { s.mu.Lock(); defer s.mu.Unlock(); return fmt.Sprint(s.edits[id]) })
	return got
}

func (s *tgServer) answerOf(cb string) string {
	s.t.Helper()
	var got string
	eventually(s.t, 20*time.Second, "the answer to callback "+cb, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		var ok bool
		got, ok = s.answers[cb]
		return ok
	})
	return got
}

func (s *tgServer) set(f func(s *tgServer)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
	s.cond.Broadcast()
}

// tgDaemon starts a daemon whose bot talks to tg, obeying chats 111 and
// 222, its token in secrets.toml under the name "telegram".
func tgDaemon(t *testing.T, tg *tgServer, home, extra string) (*testDaemon, string) {
	t.Helper()
	return tgDaemonChats(t, tg, home, "111, 222", extra)
}

// tgDaemonChats is tgDaemon obeying chats (a TOML list's inside).
func tgDaemonChats(t *testing.T, tg *tgServer, home, chats, extra string) (*testDaemon, string) {
	t.Helper()
	sock := filepath.Join(home, "hook.sock")
	if err := os.WriteFile(filepath.Join(home, "secrets.toml"), []byte("telegram = \""+tgToken+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("[approvals.reachout]\nsocket = %q\n[approvals.telegram]\ntoken = \"telegram\"\n"+
		"allowed_chat_ids = [%s]\napi_url = %q\n", sock, chats, tg.url) + extra
	d := startDaemonAt(t, home, cfg)
	return d, sock
}

// noToken fails t if the token is anywhere in what the daemon wrote: its
// log, its event log, its store.
func noToken(t *testing.T, d *testDaemon) {
	t.Helper()
	if strings.Contains(d.stderr.String(), tgToken) || strings.Contains(d.stderr.String(), "AAH-secret") {
		t.Fatalf("the token is in the daemon's log")
	}
	_ = filepath.Walk(d.home, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || filepath.Base(p) == "secrets.toml" {
			return nil
		}
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), "AAH-secret") {
			t.Errorf("the token is in %s", p)
		}
		return nil
	})
}

// A hook's request reaches both allowed chats with Allow, Deny, Reply and
// Always Allow; a tap on Allow lets the hook's tool run, and every chat's
// message is then edited to say who allowed it, and when. A tap on the
// answered request is told so; a forged callback changes nothing.
func TestTelegramAllow(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, sock := tgDaemon(t, tg, shortTemp(t), "")
	h := startHook(t, sock, nil)
	rid := h.requestID(t)
	a := d.pendingApproval(rid)
	m1, m2 := tg.messageTo(111, a.ID), tg.messageTo(222, a.ID)
	if !strings.Contains(m1.Text, "rm -rf build") || !strings.Contains(m1.Text, "/work/p") {
		t.Fatalf("message %q", m1.Text)
	}
	for _, act := range []string{"allow", "deny", "reply", "always"} {
		found := false
		for _, b := range m1.Markup["inline_keyboard"].([]any)[0].([]any) {
			data := b.(map[string]any)["callback_data"].(string)
			if len(data) > 64 {
				t.Fatalf("callback data %q over 64 bytes", data)
			}
			found = found || strings.HasSuffix(data, ":"+act)
		}
		if !found {
			t.Fatalf("no %s button: %v", act, m1.Markup)
		}
	}
	// Forged: a token no message carries.
	forged := tg.tapData(111, m1.ID, "0123456789abcdef:allow")
	if got := tg.answerOf(forged); !strings.Contains(got, "Unknown") {
		t.Fatalf("forged tap answered %q", got)
	}
	if st := d.pendingApproval(rid).State; st != api.ApprovalPending {
		t.Fatalf("a forged tap changed the approval: %s", st)
	}
	cb := tg.tap(222, m2, "allow")
	h.answered(t, "hook", `"behavior":"allow"`)
	for _, id := range []int64{m1.ID, m2.ID} {
		if e := tg.editOf(id, "Allowed by telegram chat 222"); !strings.Contains(e, "rm -rf build") {
			t.Fatalf("edited %q", e)
		}
	}
	if got := tg.answerOf(cb); !strings.Contains(got, "allowed") {
		t.Fatalf("the tap was answered %q", got)
	}
	late := tg.tap(111, m1, "deny")
	if got := tg.answerOf(late); !strings.Contains(got, "Already answered") {
		t.Fatalf("a late tap answered %q", got)
	}
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	d.mustCall("approval.get", map[string]any{"id": a.ID}, &res)
	if r := res.Approval.Resolution; res.Approval.State != api.ApprovalAllowed || r.By != "telegram" || r.BySession != "222:222" {
		t.Fatalf("resolved %+v %+v", res.Approval, r)
	}
	d.waitEvent("telegram.answered", func(e map[string]any) bool { return e["outcome"] == "over" && e["chat_id"] == float64(111) })
	// The bot is an actor under the approvals supervisor.
	var tree struct {
		Tree []actors.TreeNode `json:"tree"`
	}
	d.mustCall("tree.get", nil, &tree)
	found := false
	for _, top := range tree.Tree {
		for _, c := range top.Children {
			found = found || (top.Kind == "approvals" && c.Kind == "telegram" && c.State == "running")
		}
	}
	if !found {
		t.Fatalf("no running telegram actor under approvals: %+v", tree.Tree)
	}
	noToken(t, d)
}

// Reply takes the chat's next message as the answer: the hook's tool is
// denied with it. A plain Deny denies.
func TestTelegramDenyAndReply(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, sock := tgDaemon(t, tg, shortTemp(t), "")
	h := startHook(t, sock, nil)
	a := d.pendingApproval(h.requestID(t))
	m := tg.messageTo(111, a.ID)
	tg.tap(111, m, "reply")
	tg.messageTo(111, "What should the agent do instead? ("+a.ID+")")
	tg.say(111, "use make clean")
	h.answered(t, "hook", `"behavior":"deny"`, "use make clean")
	tg.editOf(m.ID, "Replied by telegram chat 111")

	h2 := startHook(t, sock, nil)
	a2 := d.pendingApproval(h2.requestID(t))
	tg.tap(222, tg.messageTo(222, a2.ID), "deny")
	h2.answered(t, "second hook", `"behavior":"deny"`)
}

// Always Allow records a rule: the same request is then answered by it,
// nobody asked.
func TestTelegramAlwaysAllow(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, sock := tgDaemon(t, tg, shortTemp(t), "")
	h := startHook(t, sock, nil)
	a := d.pendingApproval(h.requestID(t))
	tg.tap(111, tg.messageTo(111, a.ID), "always")
	h.answered(t, "hook", "updatedPermissions")
	d.waitEvent("approval.rule_added", func(e map[string]any) bool { return e["from_approval"] == a.ID })
	h2 := startHook(t, sock, nil)
	h2.answered(t, "second hook", `"behavior":"allow"`)
}

// A chat not allowed is refused: its tap changes nothing, is answered
// nothing, and is recorded.
func TestTelegramOtherChatRefused(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, sock := tgDaemon(t, tg, shortTemp(t), "")
	h := startHook(t, sock, nil)
	rid := h.requestID(t)
	a := d.pendingApproval(rid)
	m := tg.messageTo(111, a.ID)
	cb := tg.tap(999, m, "allow") // the right callback data, from another chat
	tg.say(999, "hello")
	d.waitEvent("telegram.refused", func(e map[string]any) bool { return e["chat_id"] == float64(999) })
	eventually(t, 20*time.Second, "both updates refused", func() bool {
		return countEvents(d.events(), "telegram.refused", nil) >= 2
	})
	if st := d.pendingApproval(rid).State; st != api.ApprovalPending {
		t.Fatalf("another chat's tap changed the approval: %s", st)
	}
	tg.mu.Lock()
	_, answered := tg.answers[cb]
	tg.mu.Unlock()
	if answered {
		t.Fatal("another chat's tap was answered")
	}
	_ = h.Cmd.Process.Kill()
}

// Telegram down: the approval still answers from the CLI's door; a new
// one is sent once Telegram is back, once (the server stays down until
// the daemon recorded 3 failed attempts). 429's retry_after and a 502 are
// tried again. An approval answered while Telegram was down is not sent.
func TestTelegramOutage(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	tg.set(func(s *tgServer) { s.down = true })
	d, _ := tgDaemon(t, tg, shortTemp(t), "")
	req := func(tool string) string {
		var r struct {
			ID string `json:"id"`
		}
		d.mustCall("approval.request", map[string]any{"kind": "tool", "tool_name": tool,
			"tool_input": map[string]any{"command": "make " + tool}}, &r)
		return r.ID
	}
	gone := req("Gone")
	kept := req("Kept")
	eventually(t, 60*time.Second, "3 failed sends", func() bool {
		return countEvents(d.events(), "telegram.failed", func(e map[string]any) bool {
			return e["method"] == "sendMessage" && e["attempt"].(float64) >= 3
		}) > 0
	})
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	d.mustCall("approval.resolve", map[string]any{"id": gone, "decision": "Allow", "by": "cli"}, &res)
	tg.set(func(s *tgServer) { s.down, s.refuseN, s.retryS, s.fiveN = false, 1, 1, 1 })
	tg.messageTo(111, kept)
	tg.messageTo(222, kept)
	d.waitEvent("telegram.failed", func(e map[string]any) bool { return e["retry_after_ms"] == float64(1000) })
	d.waitEvent("telegram.failed", func(e map[string]any) bool { return strings.Contains(fmt.Sprint(e["error"]), "502") })
	d.mustCall("approval.resolve", map[string]any{"id": kept, "decision": "Deny", "by": "cli"}, &res)
	tg.editOf(tg.messageTo(111, kept).ID, "Denied by cli")
	if n, m := tg.countTo(111, kept), tg.countTo(111, gone); n != 1 || m != 0 {
		t.Fatalf("sent %d times the kept approval, %d the one answered while down", n, m)
	}
	for _, e := range d.events() {
		if e["kind"] == "telegram.failed" && strings.Contains(fmt.Sprint(e["error"]), "AAH-secret") {
			t.Fatal("the token is in an event")
		}
	}
	noToken(t, d)
}

// A restart between the message and the tap: the tap still resolves the
// approval (its token is in the store), the message is not sent again,
// and the offset in the store means no tap is replayed.
func TestTelegramRestart(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	home := shortTemp(t)
	d, _ := tgDaemon(t, tg, home, "")
	var r struct {
		ID string `json:"id"`
	}
	d.mustCall("approval.request", map[string]any{"kind": "plan", "content": "# the plan\n- step one",
		"specs": []any{map[string]any{"name": "s1"}, map[string]any{"name": "s2"}}}, &r)
	m := tg.messageTo(111, r.ID)
	tg.messageTo(222, r.ID)
	if !strings.Contains(m.Text, "step one") {
		t.Fatalf("plan message %q", m.Text)
	}
	d.stop()
	d2, _ := tgDaemon(t, tg, home, "")
	d2.waitEvent("approval.recovered", func(e map[string]any) bool { return e["id"] == r.ID })
	cb := tg.tap(111, m, "allow")
	d2.waitEvent("plan.approved", func(e map[string]any) bool {
		return e["approval_id"] == r.ID && e["specs_spawned"] == float64(2) && e["by"] == "telegram"
	})
	tg.answerOf(cb)
	tg.editOf(m.ID, "Approved by telegram chat 111")
	if n := tg.countTo(111, r.ID); n != 1 {
		t.Fatalf("the plan was sent %d times to chat 111", n)
	}
	// Stopped and started again: the tap is not replayed (the offset
	// the third daemon asks from is past it).
	tg.mu.Lock()
	tapped, polls := tg.nextUpd, len(tg.offsets)
	tg.mu.Unlock()
	d2.stop()
	answered := countEvents(d2.events(), "telegram.answered", nil)
	d3, _ := tgDaemon(t, tg, home, "")
	eventually(t, 20*time.Second, "a poll from the third daemon", func() bool {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		return len(tg.offsets) > polls+1
	})
	tg.mu.Lock()
	for _, off := range tg.offsets[polls:] {
		if off <= tapped {
			t.Errorf("a poll from offset %d: the tap (update %d) again", off, tapped)
		}
	}
	tg.mu.Unlock()
	if n := countEvents(d3.events(), "telegram.answered", nil); n != answered {
		t.Fatalf("%d taps answered by the third daemon", n-answered)
	}
}

// A loop's plan gate and its merge are approvals too: the plan approved
// from the phone spawns its specs, the merge allowed from the phone
// merges the tree.
func TestTelegramPlanGate(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	repo := gitRepo(t)
	prompts := shortTemp(t)
	d, _ := tgDaemon(t, tg, shortTemp(t), loopAgent(t, prompts, treeAgent, ""))
	id := d.createLoop(api.LoopPlan, repo, "build the widget")
	d.waitStage(id, api.StageApproval, 60*time.Second)
	m := tg.messageTo(111, "Plan of loop "+id)
	if !strings.Contains(m.Text, "spec-alpha") {
		t.Fatalf("plan message %q", m.Text)
	}
	tg.tap(111, m, "allow")
	d.waitEvent("plan.approved", func(e map[string]any) bool {
		return e["id"] == id && e["by"] == "telegram" && e["specs_spawned"] == float64(2)
	})
	d.waitEvent("loop.children_spawned", func(e map[string]any) bool { return e["id"] == id })
	d.waitStage(id, api.StageMerge, 120*time.Second)
	mm := tg.messageTo(222, "Merge of loop "+id)
	tg.tap(222, mm, "allow")
	d.waitLoop(id, api.LoopComplete, 60*time.Second)
	tg.editOf(mm.ID, "Allowed by telegram chat 222")
}

// A long plan goes as one document that carries the buttons (its
// caption is the message): one call, so a crash between a document and
// its buttons cannot send the document twice. Iterate asks with a
// force-reply; the reply to it is the feedback; the document's caption
// is then edited to say so.
func TestTelegramLongPlanIterate(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	d, _ := tgDaemon(t, tg, shortTemp(t), "")
	plan := "# the plan\n" + strings.Repeat("- a step of the long plan\n", 400)
	var r struct {
		ID string `json:"id"`
	}
	d.mustCall("approval.request", map[string]any{"kind": "plan", "content": plan}, &r)
	m := tg.messageTo(111, r.ID)
	if !m.Document || m.Text != plan || len(m.Caption) > 1024 || strings.Contains(m.Caption, "a step of") {
		t.Fatalf("the plan's document: %+v", m)
	}
	d.waitEvent("telegram.sent", func(e map[string]any) bool { return e["approval_id"] == r.ID && e["chat_id"] == float64(222) })
	tg.mu.Lock()
	n := 0
	for _, x := range tg.sent {
		if x.Chat == 111 && (strings.Contains(x.Text+x.Caption, "a step of the long plan") || strings.Contains(x.Text+x.Caption, r.ID)) {
			n++
		}
	}
	tg.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d messages of the plan to chat 111, want 1 (the document with its buttons)", n)
	}
	tg.tap(111, m, "reply")
	p := tg.messageTo(111, "What should the planner change? ("+r.ID+")")
	tg.sayAs(111, 111, p.ID, "fewer steps")
	d.waitEvent("plan.iterated", func(e map[string]any) bool {
		return e["approval_id"] == r.ID && e["feedback"] == "fewer steps" && e["by"] == "telegram"
	})
	tg.editOf(m.ID, "caption:")
	tg.editOf(m.ID, "Sent back to iterate by telegram chat 111")
}

// `approvals telegram import` moves a vibe-reachout user with one command:
// the token into secrets.toml (0600, never printed), the table to add
// printed; with it the daemon's bot works. Run again, it leaves the
// entry alone; a bad file is refused without quoting it.
func TestTelegramImport(t *testing.T) {
	t.Parallel()
	tg := startTG(t)
	home := shortTemp(t)
	from := filepath.Join(shortTemp(t), "config.toml")
	if err := os.WriteFile(from, []byte("telegram_bot_token = \""+tgToken+"\"\nallowed_chat_ids = [111, 222]\n"+
		"timeout_seconds = 120\nsocket_path = \"/tmp/x.sock\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		out, errOut, code := runOut(t, exec.Command(binary, append([]string{"approvals", "telegram", "import", "--home", home}, args...)...))
		if strings.Contains(string(out)+string(errOut), "AAH-secret") {
			t.Fatalf("the token was printed: %s %s", out, errOut)
		}
		return string(out), string(errOut), code
	}
	out, errOut, code := run("--from", from)
	if code != 0 || !strings.Contains(out, "[approvals.telegram]\ntoken = \"telegram\"\nallowed_chat_ids = [111, 222]\ntimeout = \"120s\"\n") {
		t.Fatalf("import: %d\n%s\n%s", code, out, errOut)
	}
	fi, err := os.Stat(filepath.Join(home, "secrets.toml"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets.toml: %v %v", fi, err)
	}
	if out, _, code := run("--from", from); code != 0 || !strings.Contains(out, "left as it is") {
		t.Fatalf("again: %d %s", code, out)
	}
	bad := filepath.Join(shortTemp(t), "config.toml")
	_ = os.WriteFile(bad, []byte("telegram_bot_token = \""+tgToken+"\"\nallowed_chat_ids = \"AAH-secret\"\n"), 0o600)
	if _, errOut, code := run("--from", bad, "--name", "other"); code == 0 || !strings.Contains(errOut, "allowed_chat_ids") {
		t.Fatalf("a bad file: %d %s", code, errOut)
	}
	// The printed table, with the test server's URL, is a working bot.
	table := out[strings.Index(out, "[approvals.telegram]"):strings.Index(out, "\nthen stop")]
	d := startDaemonAt(t, home, table+fmt.Sprintf("api_url = %q\n", tg.url))
	var r struct {
		ID string `json:"id"`
	}
	d.mustCall("approval.request", map[string]any{"kind": "tool", "tool_name": "Bash", "tool_input": map[string]any{"command": "ls"}}, &r)
	tg.messageTo(222, r.ID)
	var a struct {
		Approval api.Approval `json:"approval"`
	}
	d.mustCall("approval.get", map[string]any{"id": r.ID}, &a)
	if got := a.Approval.Deadline.Sub(a.Approval.CreatedAt); got != 120*time.Second {
		t.Fatalf("the approval waits %s, not timeout_seconds", got)
	}
}

// A bad [approvals.telegram] stops serve with each mistake named, never a
// token: one given inline, no chats, a bad api_url; a token name the
// secrets file does not hold stops it too.
func TestTelegramConfigErrors(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	p := filepath.Join(home, "bad.toml")
	if err := os.WriteFile(p, []byte("[approvals.telegram]\ntoken = \""+tgToken+"\"\napi_url = \"ftp://x\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "serve", "--home", home, "--config", p).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || strings.Contains(string(out), "AAH-secret") {
		t.Fatalf("exit %v, want 2, no token\n%s", err, out)
	}
	for _, w := range []string{"approvals.telegram.token looks like a token", "approvals.telegram.allowed_chat_ids is required",
		"approvals.telegram.api_url must be"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
	if err := os.WriteFile(p, []byte("[approvals.telegram]\ntoken = \"tg\"\nallowed_chat_ids = [1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(binary, "serve", "--home", home, "--config", p).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `token names "tg", which secrets.toml does not hold`) {
		t.Fatalf("exit %v\n%s", err, out)
	}
}
