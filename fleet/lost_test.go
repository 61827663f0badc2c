package fleet

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// lostEvents are the cluster.node_lost events about node that the nodes
// ns emitted.
func lostEvents(node string, ns ...*testNode) []ClusterNodeLost {
	var out []ClusterNodeLost
	for _, n := range ns {
		for _, e := range n.ev.kinds("cluster.node_lost") {
			if l := e.(ClusterNodeLost); l.Node == node {
				out = append(out, l)
			}
		}
	}
	return out
}

// lostJobs is every job of node's the nodes ns told lost: in the
// declaration's cluster.node_lost, or (a declarer slower than the sweep's
// grace) in a sweep's cluster.job_lost.
func lostJobs(node string, ns ...*testNode) []string {
	var out []string
	for _, l := range lostEvents(node, ns...) {
		out = append(out, l.Jobs...)
	}
	for _, n := range ns {
		for _, e := range n.ev.kinds("cluster.job_lost") {
			if l := e.(ClusterJobLost); l.Node == node {
				out = append(out, l.JobID)
			}
		}
	}
	slices.Sort(out)
	return out
}

func record(t *testing.T, n *testNode, id string) api.JobRecord {
	t.Helper()
	rec, found, err := n.f.Get(id)
	if err != nil || !found {
		t.Fatalf("getting %s on %s: found %v, %v", id, n.name, found, err)
	}
	return rec
}

// A node that stops heartbeating (as one stopped with SIGSTOP) is declared
// lost once; its running job ends node_lost; its late result is dropped
// and the record stays; it comes back. Then a node whose server dies
// abruptly is declared lost once, its running job ends node_lost, and the
// queued jobs run on the node that remains, each once.
func TestLostNodes(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{},
		nodeSpec{lanes: []string{"gpu", "bonly"}, slots: 1}, nodeSpec{lanes: []string{"gpu"}, slots: 1})
	a, b, c := ns[0], ns[1], ns[2]

	// b stops heartbeating with a job running.
	held := b.holdOn(t, a, "bonly")
	b.f.hbPaused.Store(true)
	waitFor(t, "b declared lost", func() bool { return len(lostEvents(b.name, a, c)) > 0 })
	rec := waitEnd(t, a, held)
	if rec.State != api.StateFailed || rec.Error != api.ErrNodeLost || rec.Node != b.name {
		t.Fatalf("b's job after b was lost: %+v", rec)
	}
	if l := lostEvents(b.name, a, b, c); len(l) != 1 || l[0].Incarnation != b.f.inc {
		t.Fatalf("cluster.node_lost of b: %+v", l)
	}
	waitFor(t, "b's job told lost", func() bool { return len(lostJobs(b.name, a, b, c)) > 0 })
	if j := lostJobs(b.name, a, b, c); !slices.Equal(j, []string{held}) {
		t.Fatalf("b's jobs told lost: %v, want [%s]", j, held)
	}
	// Its late result is dropped; the record stays as it is.
	b.local.release(held, api.StateSucceeded)
	waitFor(t, "b drops its late result", func() bool { return len(b.ev.kinds("cluster.result_dropped")) == 1 })
	if d := b.ev.kinds("cluster.result_dropped")[0].(ClusterResultDropped); d.JobID != held || d.State != "succeeded" || d.Recorded != "failed" {
		t.Fatalf("result_dropped: %+v", d)
	}
	if got := record(t, c, held); got.State != api.StateFailed || got.Error != api.ErrNodeLost {
		t.Fatalf("the record after the late result: %+v", got)
	}
	// b heartbeats again.
	b.f.hbPaused.Store(false)
	waitFor(t, "b returns", func() bool { return len(b.ev.kinds("cluster.node_returned")) == 1 })
	waitFor(t, "a sees b alive", func() bool {
		for _, s := range a.f.Nodes() {
			if s.Name == b.name {
				return s.State == nodeAlive
			}
		}
		return false
	})

	// One hold job on b, one on c (one slot each), two queued.
	h1 := submit(t, a, api.JobSpec{Lane: "gpu", Command: "hold"})
	h2 := submit(t, a, api.JobSpec{Lane: "gpu", Command: "hold"})
	onB, onC := b.waitStarted(t), c.waitStarted(t)
	if !(onB == h1 && onC == h2 || onB == h2 && onC == h1) {
		t.Fatalf("started %s on b and %s on c, want %s and %s", onB, onC, h1, h2)
	}
	q1 := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	q2 := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	// c's server dies, abruptly.
	c.f.srv.Shutdown()
	waitFor(t, "c declared lost", func() bool { return len(lostEvents(c.name, a, b)) > 0 })
	if rec := waitEnd(t, a, onC); rec.State != api.StateFailed || rec.Error != api.ErrNodeLost {
		t.Fatalf("c's job after c was lost: %+v", rec)
	}
	if l := lostEvents(c.name, a, b); len(l) != 1 {
		t.Fatalf("cluster.node_lost of c: %+v", l)
	}
	waitFor(t, "c's job told lost", func() bool { return len(lostJobs(c.name, a, b)) > 0 })
	if j := lostJobs(c.name, a, b); !slices.Equal(j, []string{onC}) {
		t.Fatalf("c's jobs told lost: %v, want [%s]", j, onC)
	}
	// b ends its job; the queued ones run on b, once each.
	b.local.release(onB, api.StateSucceeded)
	for _, id := range []string{onB, q1, q2} {
		if rec := waitEnd(t, a, id); rec.State != api.StateSucceeded || rec.Node != b.name {
			t.Fatalf("%s: %+v", id, rec)
		}
	}
	for _, id := range []string{held, h1, h2, q1, q2} {
		if n := r.count(id); n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
}

// A node that comes back under a new incarnation before anyone declared
// it lost (killed and restarted at once) fails its old incarnation's
// jobs itself, once; the old incarnation's late result is dropped. The
// new incarnation here reaches the old one's server as an external NATS.
func TestRestartedNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	creds := makeCreds(t, filepath.Join(dir, "creds"), "solo")["solo"]
	r := newRuns()
	start := func(cfg Config, local *fakeLocal, home string) *testNode { return startNode(t, cfg, local, home) }
	hb := api.Duration{Duration: testHeartbeat}
	old := start(Config{Enabled: true, Name: "solo", Listen: "127.0.0.1:0", Credentials: creds, Heartbeat: hb},
		newFakeLocal("solo", []string{"gpu"}, 1, r), filepath.Join(dir, "old"))
	held := submit(t, old, api.JobSpec{Lane: "gpu", Command: "hold"})
	old.waitStarted(t)
	old.f.hbPaused.Store(true) // killed
	now := start(Config{Enabled: true, Name: "solo", URL: old.f.URL(), Credentials: creds, Heartbeat: hb},
		newFakeLocal("solo", nil, 0, r), filepath.Join(dir, "new"))
	l := lostEvents("solo", now)
	if len(l) != 1 || l[0].Reason != "restarted" || l[0].Incarnation != old.f.inc || !slices.Equal(l[0].Jobs, []string{held}) {
		t.Fatalf("cluster.node_lost: %+v", l)
	}
	if rec := record(t, now, held); rec.State != api.StateFailed || rec.Error != api.ErrNodeLost {
		t.Fatalf("the old incarnation's job: %+v", rec)
	}
	old.local.release(held, api.StateSucceeded)
	waitFor(t, "the old incarnation drops its late result", func() bool { return len(old.ev.kinds("cluster.result_dropped")) == 1 })
	if rec := record(t, now, held); rec.State != api.StateFailed || rec.Error != api.ErrNodeLost {
		t.Fatalf("after the late result: %+v", rec)
	}
}
