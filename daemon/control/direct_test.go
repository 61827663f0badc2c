package control

import (
	"github.com/orchestrd/orchestrd/platform/sockserve"

	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/lanes"
)

// A response is written directly by the goroutine that answers, when
// nothing else is queued. When the socket takes only part of it, the rest
// must go out first, whole, before the events and responses queued after
// it.
func TestDirectWriteRemainderKeepsOrder(t *testing.T) {
	h := newHarness(t, nil)
	big := strings.Repeat("line of output\n", 200000) // 3 MB: far more than a socket buffer
	h.dom.setBig(big)

	r := h.raw()
	r.send(`{"id":1,"method":"events.subscribe","params":{"kinds":["job.output"]}}`)
	if cl := r.mustLine(); cl.ID == nil || *cl.ID != 1 {
		t.Fatalf("subscribe answer %+v", cl)
	}
	// The events below are emitted once the direct write of the answer has
	// been made (the socket took what it could, far less than 3 MB), while
	// or after its rest goes back to the queue.
	written := make(chan struct{}, 1)
	hook := func(c QueueConn, n int) {
		cn := c.(*conn)
		if cn.id == "c1" && n > len(big) { // the test.big answer, not the subscribe answer
			select {
			case written <- struct{}{}:
			default:
			}
		}
	}
	sockserve.TestHookDirectWritten.Store(&hook)
	defer sockserve.TestHookDirectWritten.Store(nil)
	r.send(`{"id":2,"method":"test.big"}`)
	select {
	case <-written:
	case <-time.After(10 * time.Second):
		t.Fatal("the answer was not written directly")
	}
	for i := 0; i < 3; i++ {
		h.bus.Emit(lanes.JobOutput{JobID: "j-x", Stream: "stdout", Data: string(rune('a' + i))})
	}
	r.send(`{"id":3,"method":"ping"}`)

	cl := r.mustLine()
	if cl.ID == nil || *cl.ID != 2 {
		t.Fatalf("first line %+v, want the test.big answer", cl.ID)
	}
	var got textParams
	if err := json.Unmarshal(cl.Result, &got); err != nil || got.Text != big {
		t.Fatalf("test.big answer: %v, %d bytes, want %d", err, len(got.Text), len(big))
	}
	for i := 0; i < 3; i++ {
		ev := r.mustLine()
		var o lanes.JobOutput
		if ev.Event != "job.output" || json.Unmarshal(ev.Data, &o) != nil || o.Data != string(rune('a'+i)) {
			t.Fatalf("line %d after the answer: %+v %s", i, ev.Event, ev.Data)
		}
	}
	if cl := r.mustLine(); cl.ID == nil || *cl.ID != 3 || string(cl.Result) != `{"pong":true}` {
		t.Fatalf("last line %+v, want the pong", cl)
	}
}
