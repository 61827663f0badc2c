package fleet

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// A live node ends its own strays, which no other node's sweep touches: a
// take whose write landed with its reply lost (never run: error not_run),
// and an end that could not be written for endRetryFor (written later, as
// it was). A job it runs meanwhile is left to its run.
func TestOwnStrays(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 2})
	a, b := ns[0], ns[1]

	// Held across b's sweeps: its record is b's, unfinished, and b runs it.
	held := b.holdOn(t, a, "gpu")

	var lose atomic.Bool
	lose.Store(true)
	lostReply := func(string) bool { return lose.CompareAndSwap(true, false) }
	b.f.lostTakeReply.Store(&lostReply)
	untold := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	rec := waitEnd(t, a, untold)
	if rec.State != api.StateError || rec.Node != b.name || !strings.HasPrefix(rec.Error, "not_run: its take was written") {
		t.Fatalf("a take whose reply was lost: %+v", rec)
	}
	if n := r.count(untold); n != 0 {
		t.Fatalf("a take whose reply was lost: ran %d times", n)
	}
	late := waitKind(t, b, "cluster.job_ended_late", 1)[0].(ClusterJobEndedLate)
	if late != (ClusterJobEndedLate{JobID: untold, State: "error", Why: "take_unconfirmed"}) {
		t.Fatalf("cluster.job_ended_late: %+v", late)
	}

	// The held job was never b's stray: it is still running, and ends as
	// its run says.
	if cur, found, err := a.f.Get(held); err != nil || !found || cur.State.Terminal() {
		t.Fatalf("the held job after b's sweep: %v %v %+v", found, err, cur)
	}
	var dropID atomic.Value
	dropID.Store(held)
	unreachable := func(id string) bool { return id == dropID.Load() }
	b.f.endUnreachable.Store(&unreachable)
	if !b.local.release(held, api.StateSucceeded) {
		t.Fatal("the held job was not holding")
	}
	drop := waitKind(t, b, "cluster.result_dropped", 1)[0].(ClusterResultDropped)
	if drop.JobID != held || !strings.HasPrefix(drop.Why, "unreachable: ") {
		t.Fatalf("cluster.result_dropped: %+v", drop)
	}
	rec = waitEnd(t, a, held)
	if rec.State != api.StateSucceeded || rec.Node != b.name || r.count(held) != 1 {
		t.Fatalf("an end written late: %+v, ran %d times", rec, r.count(held))
	}
	late = waitKind(t, b, "cluster.job_ended_late", 2)[1].(ClusterJobEndedLate)
	if late != (ClusterJobEndedLate{JobID: held, State: "succeeded", Why: "end_unrecorded"}) {
		t.Fatalf("cluster.job_ended_late: %+v", late)
	}
	b.f.mu.Lock()
	kept := len(b.f.unended)
	b.f.mu.Unlock()
	if kept != 0 {
		t.Fatalf("%d ends still kept after they were written", kept)
	}
}

// waitKind waits for n events of kind on node nd; all of them.
func waitKind(t *testing.T, nd *testNode, kind string, n int) []eventlog.Event {
	t.Helper()
	waitFor(t, kind, func() bool { return len(nd.ev.kinds(kind)) >= n })
	return nd.ev.kinds(kind)
}
