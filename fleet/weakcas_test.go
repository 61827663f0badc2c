package fleet

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// A server older than 2.10 may let two nodes' CASes on one revision of a
// record both succeed, the last write standing (seen with Debian's 2.9.10
// for a declaration). With weakCAS on, a node reads its take, its end and
// its node_lost failures back before acting on them. These tests force it
// on against the embedded server and play the other node's write, landed
// last, from the hook between the CAS and the read.

// overwrite writes change over id's record as another node would: sealed
// by the node the record then names (a node_lost failure by f's).
func overwrite(t *testing.T, f *Fleet, id string, change func(*jobEntry)) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	e, rev, found, err := f.getJob(ctx, id)
	if err != nil || !found {
		t.Errorf("reading %s to overwrite it: found %v, %v", id, found, err)
		return
	}
	change(&e)
	id2 := f.id
	if w := e.Record.Node; w != "" && w != f.name && !nodeLostFailure(e) {
		id2 = identityOf(t, filepath.Dir(f.cfg.Credentials), w)
	}
	v, err := json.Marshal(e)
	if err == nil {
		var b []byte
		if b, err = id2.seal(sealJobs, id, v); err == nil {
			_, err = f.jobs.Update(ctx, id, b, rev)
		}
	}
	if err != nil {
		t.Errorf("overwriting %s: %v", id, err)
	}
}

// identityOf is node name's identity in the fleet whose key is in
// keyHome (makeCreds'), made there if it has none.
func identityOf(t *testing.T, keyHome, name string) *identity {
	for _, p := range []string{filepath.Join(keyHome, name+".creds"), filepath.Join(keyHome, CredentialsFile)} {
		if id, err := readIdentity(p, name); err == nil {
			return id
		}
	}
	p := filepath.Join(keyHome, name+".creds")
	if _, err := AddNode(keyHome, name, nil, p, false); err != nil {
		t.Errorf("making %s's credentials: %v", name, err)
	}
	id, err := readIdentity(p, name)
	if err != nil {
		t.Errorf("reading %s's credentials: %v", name, err)
	}
	return id
}

// hookOnce sets f's afterCAS to run change over the first record of kind
// what, and counts every call of each kind.
func hookOnce(t *testing.T, f *Fleet, what string, change func(*jobEntry)) map[string]*atomic.Int32 {
	calls := map[string]*atomic.Int32{"take": {}, "end": {}, "fail": {}}
	var done atomic.Bool
	fn := func(w, id string) {
		calls[w].Add(1)
		if w == what && done.CompareAndSwap(false, true) {
			overwrite(t, f, id, change)
		}
	}
	f.afterCAS.Store(&fn)
	return calls
}

// One two-node cluster, weakCAS on both nodes, three cases in turn:
//   - a take that another node's take overwrote is not run here
//     (cluster.take_lost); a take that stands runs, read back first, and
//     its end is read back too;
//   - an end that a node_lost failure overwrote (this node was declared
//     lost as it ended the job) is dropped: cluster.result_dropped, and
//     the failure stands;
//   - a node_lost failure that the lost node's own end overwrote (it was
//     only stopped) is not told: the end stands, and cluster.node_lost
//     does not list the job.
func TestWeakCAS(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1})
	a, b := ns[0], ns[1]
	a.f.weakCAS.Store(true)
	b.f.weakCAS.Store(true)

	// A take overwritten.
	calls := hookOnce(t, b.f, "take", func(e *jobEntry) { e.Record.Node, e.Incarnation = "ghost", "ghost-1" })
	lost := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	waitFor(t, "b tells its take lost", func() bool { return len(b.ev.kinds("cluster.take_lost")) == 1 })
	if e := b.ev.kinds("cluster.take_lost")[0].(ClusterTakeLost); e.JobID != lost || e.Lane != "gpu" || e.TakenBy != "ghost" {
		t.Fatalf("cluster.take_lost: %+v", e)
	}
	if rec := record(t, a, lost); rec.Node != "ghost" {
		t.Fatalf("the record after the other take: %+v", rec)
	}
	ok := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	if rec := waitEnd(t, a, ok); rec.State != api.StateSucceeded || rec.Node != b.name {
		t.Fatalf("the job whose take stood: %+v", rec)
	}
	waitFor(t, "b reads its end back", func() bool { return calls["end"].Load() == 1 })
	if n := r.count(lost); n != 0 {
		t.Fatalf("the job another node took ran %d times here", n)
	}
	if n := r.count(ok); n != 1 {
		t.Fatalf("the job whose take stood ran %d times", n)
	}
	for _, e := range b.ev.kinds("cluster.job_taken") {
		if e.(ClusterJobTaken).JobID == lost {
			t.Fatalf("cluster.job_taken of the job whose take was lost: %+v", e)
		}
	}
	if d := b.ev.kinds("cluster.result_dropped"); len(d) != 0 {
		t.Fatalf("an end that stood was dropped: %+v", d)
	}
	if n := calls["take"].Load(); n != 2 {
		t.Fatalf("takes read back: %d, want 2", n)
	}

	// An end overwritten by a node_lost failure.
	hookOnce(t, b.f, "end", func(e *jobEntry) {
		now := time.Now().UTC()
		e.Record.State, e.Record.Error, e.Record.FinishedAt = api.StateFailed, api.ErrNodeLost, &now
	})
	failed := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	waitFor(t, "b drops its end", func() bool { return len(b.ev.kinds("cluster.result_dropped")) == 1 })
	d := b.ev.kinds("cluster.result_dropped")[0].(ClusterResultDropped)
	if d.JobID != failed || d.State != "succeeded" || d.Recorded != "failed" || !strings.HasPrefix(d.Why, "overwritten: node_lost") {
		t.Fatalf("cluster.result_dropped: %+v", d)
	}
	if rec := record(t, a, failed); rec.State != api.StateFailed || rec.Error != api.ErrNodeLost {
		t.Fatalf("the record: %+v", rec)
	}
	if n := r.count(failed); n != 1 {
		t.Fatalf("the job ran %d times", n)
	}

	// A node_lost failure overwritten by the lost node's own end.
	hookOnce(t, a.f, "fail", func(e *jobEntry) {
		now := time.Now().UTC()
		e.Record.State, e.Record.Error, e.Record.FinishedAt = api.StateSucceeded, "", &now
	})
	held := submit(t, a, api.JobSpec{Lane: "gpu", Command: "hold"})
	for got := ""; got != held; {
		if got = b.waitStarted(t); got != held && got != ok && got != failed {
			t.Fatalf("b started %s, want %s", got, held)
		}
	}
	m := after(a, b)
	b.f.hbPaused.Store(true)
	waitFor(t, "b declared lost", func() bool { return len(lostEvents(b.name, m)) > 0 })
	if l := lostEvents(b.name, m); len(l) != 1 || len(l[0].Jobs) != 0 {
		t.Fatalf("cluster.node_lost of b (one, listing no job: its end stood): %+v", l)
	}
	if rec := record(t, a, held); rec.State != api.StateSucceeded || rec.Node != b.name {
		t.Fatalf("the record: %+v", rec)
	}
	// b's own end, when it comes, finds the job ended; nothing changes.
	b.local.release(held, api.StateSucceeded)
	waitFor(t, "b drops its own end", func() bool { return len(b.ev.kinds("cluster.result_dropped")) == 2 })
	if d := b.ev.kinds("cluster.result_dropped")[1].(ClusterResultDropped); d.JobID != held || !strings.HasPrefix(d.Why, "already_ended") {
		t.Fatalf("cluster.result_dropped of b's own end: %+v", d)
	}
	if rec := record(t, a, held); rec.State != api.StateSucceeded {
		t.Fatalf("the record after b's end: %+v", rec)
	}
	if j := lostJobs(b.name, m); len(j) != 0 {
		t.Fatalf("jobs told lost: %v", j)
	}
	b.f.hbPaused.Store(false)
}
