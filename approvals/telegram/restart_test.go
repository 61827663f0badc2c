package telegram

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
)

// panicky is an Answerer whose first PendingApprovals panics (inside the
// bot's Receive), as a bug would.
type panicky struct {
	spawner
	calls atomic.Int32
	a     api.Approval
}

func (p *panicky) PendingApprovals() []api.Approval {
	if p.calls.Add(1) == 1 {
		panic("a bug in the bot")
	}
	return []api.Approval{p.a}
}

// A panic in the bot restarts it: the fresh incarnation loads again and
// sends the pending approval, once to each chat; the calls of the one it
// replaced are not taken for its own.
func TestBotRestartedAfterPanic(t *testing.T) {
	var mu sync.Mutex
	sent := map[int64]int{}
	url := botAPI(t, func(p map[string]any) {
		mu.Lock()
		chat := int64(p["chat_id"].(float64))
		sent[chat]++
		mu.Unlock()
	})

	var panics atomic.Int32
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop(), OnPanic: func(actors.PanicInfo) { panics.Add(1) }})
	defer sys.Shutdown()
	ans := &panicky{spawner: spawner{sys: sys, refs: make(chan actors.Ref, 1)}, a: api.Approval{ID: "a-1", State: api.ApprovalPending,
		Kind: api.KindTool, ToolName: "Bash", Deadline: time.Now().Add(time.Hour)}}
	_, err := Start(Options{Config: approvals.TelegramConfig{AllowedChatIDs: []int64{1, 2}, APIURL: url},
		Token: "1:x", Approvals: ans, System: sys, Logger: zerolog.Nop(), PollTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ref := <-ans.refs
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		done := sent[1] == 1 && sent[2] == 1
		mu.Unlock()
		if done && panics.Load() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sent %v, %d panics", sent, panics.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if tr := sys.Tree(); len(tr) != 1 || tr[0].Kind != "telegram" || tr[0].Restarts != 1 {
		t.Fatalf("tree %+v", tr)
	}
	stopBot(t, sys, ref)
	mu.Lock()
	defer mu.Unlock()
	if sent[1] != 1 || sent[2] != 1 {
		t.Fatalf("sent %v", sent)
	}
}
