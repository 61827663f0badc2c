package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
)

// many is an Answerer holding n approvals pending.
type many struct {
	sys  *actors.System
	as   []api.Approval
	refs chan actors.Ref
}

func (m *many) PendingApprovals() []api.Approval                                       { return m.as }
func (m *many) Get(string) (api.Approval, bool, error)                                 { return api.Approval{}, false, nil }
func (m *many) Answer(string, api.Decision, api.Resolution, func(api.Approval, error)) {}
func (m *many) SpawnChild(pr actors.Props, done func(actors.Ref, error)) {
	r, err := m.sys.Spawn(pr)
	done(r, err)
	m.refs <- r
}

// More approvals pending than the queue holds: the queue stays within
// its bound, and every approval still reaches every chat, once (the sends
// left out are queued again as it drains).
func TestQueueBoundedNothingLost(t *testing.T) {
	defer func(n int) { maxQueue = n }(maxQueue)
	maxQueue = 20
	const n = 100
	var mu sync.Mutex
	sent := map[string]int{}
	idRe := regexp.MustCompile(`🔑 (a-\d+) `)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		switch {
		case strings.HasSuffix(r.URL.Path, "/getUpdates"):
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
			}
			_, _ = w.Write([]byte(`{"ok":true,"result":[]}`))
		case strings.HasSuffix(r.URL.Path, "/sendMessage"):
			txt, _ := p["text"].(string)
			mu.Lock()
			if m := idRe.FindStringSubmatch(txt); m != nil {
				sent[fmt.Sprint(p["chat_id"], "/", m[1])]++
			}
			mu.Unlock()
			_, _ = w.Write([]byte(`{"ok":true,"result":{"message_id":5,"chat":{"id":1}}}`))
		default:
			_, _ = w.Write([]byte(`{"ok":true,"result":true}`))
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	ans := &many{sys: sys, refs: make(chan actors.Ref, 1)}
	for i := range n {
		ans.as = append(ans.as, api.Approval{ID: fmt.Sprintf("a-%d", i), State: api.ApprovalPending, Kind: api.KindTool,
			ToolName: "Bash", Deadline: time.Now().Add(time.Hour)})
	}
	_, err = Start(Options{Config: approvals.TelegramConfig{AllowedChatIDs: []int64{1, 2}, APIURL: "http://" + ln.Addr().String()},
		Token: "1:x", Approvals: ans, System: sys, Logger: zerolog.Nop(), PollTimeout: time.Second,
		ChatInterval: time.Nanosecond, GlobalInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	ref := <-ans.refs
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(sent)
		mu.Unlock()
		if got == 2*n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages sent", got, 2*n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sys.Stop(ctx, ref); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, c := range sent {
		if c != 1 {
			t.Fatalf("%s sent %d times", k, c)
		}
	}
}
