package control

import (
	"github.com/orchestrd/orchestrd/platform/sockserve"

	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// An answer written by a goroutine that holds no reference on the
// connection (here the domain's, as a job actor's would be) can race the
// client hanging up. The writer role it takes must keep the connection
// counted until it is done; before it did, the server's WaitGroup could be
// released twice ("sync: negative WaitGroup counter", a daemon crash seen
// in CI) or Close could return while a writer still ran.
func TestAnswerFromAnotherGoroutineRacesHangUp(t *testing.T) {
	h := newHarness(t, nil)
	h.mustCall(h.client(), "ping", nil, nil)

	const workers, perWorker = 8, 150
	inParallel(t, workers, func() error {
		for i := 0; i < perWorker; i++ {
			nc, err := net.Dial("unix", h.path)
			if err != nil {
				return err
			}
			// The answer is written from another goroutine while this
			// client closes without reading it.
			_, err = nc.Write([]byte(`{"id":1,"method":"test.async"}` + "\n"))
			nc.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	// Every connection ends with exactly one conn.closed; then Close (in
	// stop) returns only once every reader and writer is gone.
	// (The submitting client stays open until stop.)
	total := workers * perWorker
	h.rec.Wait(t, "every hung-up connection closed", func(*eventlog.Record) bool {
		n := 0
		for _, r := range h.rec.Records() {
			if r.Kind == "conn.closed" {
				n++
			}
		}
		return n == total
	})
	h.stop()
	closed := map[string]int{}
	for _, r := range h.rec.Records() {
		if e, ok := r.Event.(ConnClosed); ok {
			closed[e.ConnID]++
		}
	}
	for id, n := range closed {
		if n != 1 {
			t.Errorf("%s: %d conn.closed events, want 1", id, n)
		}
	}
	if len(closed) != total+1 {
		t.Errorf("%d connections closed, want %d", len(closed), total+1)
	}
}

// The same race, made certain: the answer is written directly by the
// domain's goroutine, and before that writer looks at the queue again the
// client hangs up and the connection finishes completely. The writer then
// has the socket to close; it must still hold its own reference.
func TestDirectWriterOutlivesFinishedConnection(t *testing.T) {
	h := newHarness(t, nil)
	r := h.raw()
	var once sync.Once
	hookErr := make(chan string, 1)
	hook := func(c QueueConn, _ int) {
		cn := c.(*conn)
		once.Do(func() {
			r.nc.Close()
			// The reader's reference goes last, just after conn.closed.
			finished := func() bool { return cn.finished.Load() && cn.refs.Load() <= 1 }
			if !pollUntil(finished) {
				hookErr <- "the connection did not finish after its client hung up"
				return
			}
			if n := cn.refs.Load(); n != 1 {
				hookErr <- fmt.Sprintf("the direct writer holds %d references, want 1", n)
			}
		})
	}
	sockserve.TestHookDirectWritten.Store(&hook)
	defer sockserve.TestHookDirectWritten.Store(nil)

	r.send(`{"id":1,"method":"test.async"}`)
	h.rec.Wait(t, "c1 closed", isClosed("c1"))
	h.stop() // panicked ("negative WaitGroup counter") when the writer held no reference
	close(hookErr)
	for e := range hookErr {
		t.Error(e)
	}
}
