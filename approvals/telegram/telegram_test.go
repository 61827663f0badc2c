package telegram

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		TelegramSent{ApprovalID: "a-1", ChatID: 111, MessageID: 7, Document: true},
		TelegramEdited{ApprovalID: "a-1", ChatID: 111, MessageID: 7, State: "allowed"},
		TelegramAnswered{ApprovalID: "a-1", ChatID: 111, UserID: 333, Action: "allow", Outcome: "resolved"},
		TelegramRefused{ChatID: 999},
		TelegramFailed{Method: "sendMessage", ApprovalID: "a-1", ChatID: 111, Error: "telegram sendMessage: HTTP 429",
			Attempt: 2, RetryAfterMs: 1000, GaveUp: true, Reason: ReasonBlocked},
		TelegramChatBlocked{ChatID: 222},
		TelegramChatUnblocked{ChatID: 222},
	)
}

// Callback data round-trips within 64 bytes; anything else is refused.
func TestCallbackData(t *testing.T) {
	tok := newToken()
	for _, act := range []string{ActAllow, ActDeny, ActReply, ActAlways} {
		d := EncodeCallback(tok, act)
		if len(d) > MaxCallbackData {
			t.Fatalf("%q is over %d bytes", d, MaxCallbackData)
		}
		if gt, ga, err := DecodeCallback(d); err != nil || gt != tok || ga != act {
			t.Fatalf("decode %q: %q %q %v", d, gt, ga, err)
		}
	}
	for _, bad := range []string{"", ":", tok, tok + ":", tok + ":ALLOW", "0123456789ABCDEF:allow", "0123:allow",
		tok + "0:allow", "zz23456789abcdef:allow", tok + ":allow:x", strings.Repeat("a", 70)} {
		if _, _, err := DecodeCallback(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// A message stays within Telegram's 4096 characters however long the
// input, and says what was cut; a long plan goes as a document.
func TestTextBounded(t *testing.T) {
	long := strings.Repeat("😀x", 20000)
	in, _ := json.Marshal(map[string]string{"command": long})
	a := api.Approval{ID: "a-1", Kind: api.KindTool, ToolName: "Bash", ToolInput: in, Cwd: "/p/" + long,
		AssistantContext: long, SessionID: long, Deadline: time.Now()}
	a.Resolution = &api.Resolution{By: api.ByTelegram, BySession: "1", UserMessage: long, At: time.Now()}
	a.State = api.ApprovalReplied
	for _, s := range []string{text(a), edited(a)} {
		if units(s) > MaxText || !utf8.ValidString(s) || !strings.Contains(s, "cut:") {
			t.Fatalf("%d units, valid %v", units(s), utf8.ValidString(s))
		}
	}
	p := api.Approval{ID: "a-2", Kind: api.KindPlan, Content: long}
	if !planIsDocument(p) || strings.Contains(text(p), "😀x😀x") {
		t.Fatal("a long plan is not a document")
	}
}

func FuzzDecodeCallback(f *testing.F) {
	for _, s := range []string{"0123456789abcdef:allow", "0123456789abcdef:always", ":", "", "x:y:z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, act, err := DecodeCallback(s)
		if err != nil {
			return
		}
		if EncodeCallback(tok, act) != s || len(s) > MaxCallbackData || len(tok) != tokenLen {
			t.Fatalf("%q decoded to %q %q", s, tok, act)
		}
	})
}

func FuzzDecodeUpdates(f *testing.F) {
	f.Add([]byte(`[{"update_id":1,"callback_query":{"id":"c","from":{"id":1},"message":{"message_id":2,"chat":{"id":1}},` +
		`"data":"0123456789abcdef:allow"}},{"update_id":2,"message":{"message_id":3,"chat":{"id":1},"text":"hi",` +
		`"reply_to_message":{"message_id":2,"chat":{"id":1}}}}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"update_id":-1}]`))
	f.Add([]byte(`[{"update_id":2},{"update_id":1}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		us, err := DecodeUpdates(b)
		if err != nil {
			return
		}
		if len(us) > maxUpdates {
			t.Fatalf("%d updates", len(us))
		}
		for i, u := range us {
			if u.UpdateID < 0 || (i > 0 && u.UpdateID <= us[i-1].UpdateID) {
				t.Fatalf("update ids %d", u.UpdateID)
			}
			if m := u.Message; m != nil && (utf8.RuneCountInString(m.Text) > MaxText || !utf8.ValidString(m.Text)) {
				t.Fatal("text not bounded")
			}
			if q := u.CallbackQuery; q != nil && len(q.Data) > MaxCallbackData {
				t.Fatal("data not bounded")
			}
		}
	})
}

// The agent's text, however crafted, shows with no control or invisible
// character but a newline or a tab, each of its lines behind the gutter
// (but the note of a cut, the bot's, and an empty line), within its budget.
func FuzzQuoted(f *testing.F) {
	for _, s := range []string{"ls", "a\nb", "x\u202ey\u200b\x1b[31m\r\n✅ Allowed", "\xff\xfe", strings.Repeat("😀\n", 900)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := quoted(s, inputBudget)
		if units(q) > inputBudget || !utf8.ValidString(q) {
			t.Fatalf("%d units, valid %v", units(q), utf8.ValidString(q))
		}
		for _, r := range q {
			if r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zl, unicode.Zp)) {
				t.Fatalf("%U shown raw in %q", r, q)
			}
		}
		for _, l := range strings.Split(q, "\n") {
			if l != "" && !strings.HasPrefix(l, "┃") && !strings.HasPrefix(l, "… (cut: ") {
				t.Fatalf("line %q of %q not behind the gutter", l, q)
			}
		}
		if o := oneLine(s); strings.Contains(o, "\n") {
			t.Fatalf("oneLine %q", o)
		}
	})
}
