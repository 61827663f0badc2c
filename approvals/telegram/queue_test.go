package telegram

import (
	"fmt"
	"regexp"
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
	spawner
	as []api.Approval
}

func (m *many) PendingApprovals() []api.Approval { return m.as }

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
	url := botAPI(t, func(p map[string]any) {
		txt, _ := p["text"].(string)
		mu.Lock()
		if m := idRe.FindStringSubmatch(txt); m != nil {
			sent[fmt.Sprint(p["chat_id"], "/", m[1])]++
		}
		mu.Unlock()
	})

	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	ans := &many{spawner: spawner{sys: sys, refs: make(chan actors.Ref, 1)}}
	for i := range n {
		ans.as = append(ans.as, api.Approval{ID: fmt.Sprintf("a-%d", i), State: api.ApprovalPending, Kind: api.KindTool,
			ToolName: "Bash", Deadline: time.Now().Add(time.Hour)})
	}
	_, err := Start(Options{Config: approvals.TelegramConfig{AllowedChatIDs: []int64{1, 2}, APIURL: url},
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
	stopBot(t, sys, ref)
	mu.Lock()
	defer mu.Unlock()
	for k, c := range sent {
		if c != 1 {
			t.Fatalf("%s sent %d times", k, c)
		}
	}
}
