package control

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

type burstEv struct {
	N int `json:"n"`
}

func (burstEv) Kind() string { return "test.burst" }

type endEv struct{}

func (endEv) Kind() string { return "test.end" }

// A subscriber that never reads must not slow the daemon or another
// subscriber; it loses the oldest events and is told how many on resume.
func TestStalledSubscriberDropsOldest(t *testing.T) {
	h := newHarness(t, nil) // SubscriberQueue 1024, drop_oldest
	const total = 100000

	fast := h.client()
	h.mustCall(fast, "events.subscribe", subscribeParams{Kinds: []string{"test.*"}}, nil) // c1
	stalled := h.raw()                                                                    // c2
	stalled.send(`{"id":1,"method":"events.subscribe","params":{"kinds":["test.*"]}}`)
	stalled.mustLine()

	var got atomic.Int64
	fastErr := make(chan string, 1)
	fastDone := make(chan struct{})
	go func() {
		defer close(fastDone)
		next := 0
		for ev := range fast.Events() {
			if ev.Event == "test.end" {
				return
			}
			var d burstEv
			if ev.Event != "test.burst" || json.Unmarshal(ev.Data, &d) != nil || d.N != next {
				fastErr <- "fast subscriber got " + ev.Event + " " + string(ev.Data) + ", want n=" + itoa(next)
				return
			}
			next++
			got.Store(int64(next))
		}
	}()

	// Emit in steps of 512 and let the fast reader catch up after each, so
	// its own queue never passes its bound; the stalled one keeps falling
	// behind.
	start := time.Now()
	emitTimes := make([]time.Duration, 0, total)
	for i := 0; i < total; i++ {
		t0 := time.Now()
		h.bus.Emit(burstEv{N: i})
		emitTimes = append(emitTimes, time.Since(t0))
		if (i+1)%512 == 0 || i == total-1 {
			for got.Load() < int64(i+1) {
				select {
				case msg := <-fastErr:
					t.Fatal(msg)
				case <-fastDone:
					t.Fatalf("fast subscriber stopped after %d events", got.Load())
				default:
					time.Sleep(50 * time.Microsecond)
				}
			}
		}
	}
	h.bus.Emit(endEv{})
	<-fastDone
	elapsed := time.Since(start)
	slices.Sort(emitTimes)
	// Emit latency is logged, not asserted: its tail is the scheduler's and
	// the GC's (it is the same without the stalled subscriber).
	t.Logf("burst of %d events: fast subscriber got all in %v; Emit p50 %v p99 %v max %v", total, elapsed,
		emitTimes[total/2], emitTimes[total*99/100], emitTimes[total-1])
	if elapsed > 60*time.Second {
		t.Fatalf("burst took %v", elapsed)
	}
	select {
	case msg := <-fastErr:
		t.Fatal(msg)
	default:
	}

	// Resume the stalled one: whatever it did not get was counted.
	received, dropped, notices := 0, 0, 0
	last := -1
	for {
		cl := stalled.mustLine()
		if cl.Event == "test.end" {
			break
		}
		switch cl.Event {
		case "events.dropped":
			var d struct{ Dropped int }
			json.Unmarshal(cl.Data, &d)
			dropped += d.Dropped
			notices++
		case "test.burst":
			var d burstEv
			json.Unmarshal(cl.Data, &d)
			if d.N <= last {
				t.Fatalf("stalled subscriber got n=%d after n=%d", d.N, last)
			}
			last = d.N
			received++
		default:
			t.Fatalf("unexpected line %+v", cl)
		}
	}
	t.Logf("stalled subscriber: received %d, dropped %d in %d notices", received, dropped, notices)
	if notices == 0 || dropped == 0 {
		t.Fatal("the stalled subscriber was not told about dropped events")
	}
	if received+dropped != total {
		t.Fatalf("received %d + dropped %d != %d", received, dropped, total)
	}
	if last != total-1 {
		t.Fatalf("the newest events must survive: last n=%d", last)
	}

	// subscriber.overflowed: drop_oldest, for the stalled connection only,
	// adding up to what it was told.
	h.rec.Wait(t, "subscriber.overflowed", func(r *eventlog.Record) bool { return r.Kind == "subscriber.overflowed" })
	sum := uint64(0)
	for _, r := range h.rec.Records() {
		if e, ok := r.Event.(SubscriberOverflowed); ok {
			if e.ConnID != "c2" || e.Policy != OverflowDropOldest {
				t.Fatalf("subscriber.overflowed %+v", e)
			}
			sum += e.Dropped
		}
	}
	if sum != uint64(dropped) {
		t.Fatalf("subscriber.overflowed events sum to %d, the client was told %d", sum, dropped)
	}
	// Both still connected.
	h.mustCall(fast, "ping", nil, nil)
	stalled.send(`{"id":2,"method":"ping"}`)
	if cl := stalled.mustLine(); cl.ID == nil || *cl.ID != 2 {
		t.Fatalf("stalled ping answer %+v", cl)
	}
}

func TestStalledSubscriberDisconnectPolicy(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Overflow = OverflowDisconnect; o.SubscriberQueue = 16 })
	fast := h.client()
	h.mustCall(fast, "events.subscribe", subscribeParams{Kinds: []string{"test.end"}}, nil)
	stalled := h.raw()
	stalled.send(`{"id":1,"method":"events.subscribe","params":{"kinds":["test.*"]}}`)
	stalled.mustLine()
	closed := isClosed("c2")
	hasClosed := func() bool { return slices.ContainsFunc(h.rec.Records(), closed) }
	for i := 0; !hasClosed(); i += 1000 {
		if i > 10_000_000 {
			t.Fatal("the stalled subscriber was never disconnected")
		}
		for j := 0; j < 1000; j++ {
			h.bus.Emit(burstEv{N: i + j})
		}
	}
	ev := h.rec.Wait(t, "c2 closed", closed).Event.(ConnClosed)
	if ev.Reason != ReasonSubscriberOverflow {
		t.Fatalf("conn.closed = %+v", ev)
	}
	so := h.rec.Wait(t, "subscriber.overflowed", func(r *eventlog.Record) bool { return r.Kind == "subscriber.overflowed" }).Event.(SubscriberOverflowed)
	if so.ConnID != "c2" || so.Policy != OverflowDisconnect {
		t.Fatalf("subscriber.overflowed = %+v", so)
	}
	// The stalled client reads what its socket held, then EOF.
	stalled.expectEOF()
	// The other subscriber is unaffected.
	h.bus.Emit(endEv{})
	select {
	case ev := <-fast.Events():
		if ev.Event != "test.end" {
			t.Fatalf("fast got %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fast subscriber got nothing")
	}
}
