package fleet

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// mark is where some nodes' events stood at a point of a test:
// lostEvents and lostJobs read the events those nodes emitted after it.
// A test marks before it brings a loss on: a node the loaded machine
// starved past the heartbeat earlier was declared lost then and came
// back, as it should, and that loss is not the one the test looks for.
type mark []struct {
	n    *testNode
	from int
}

// after marks ns's events as they stand now.
func after(ns ...*testNode) mark {
	m := make(mark, len(ns))
	for i, n := range ns {
		m[i].n, m[i].from = n, len(n.ev.Records())
	}
	return m
}

// all marks ns's events from their first.
func all(ns ...*testNode) mark {
	m := make(mark, len(ns))
	for i, n := range ns {
		m[i].n = n
	}
	return m
}

// kinds are the events of kind the marked nodes emitted after the mark.
func (m mark) kinds(kind string) []eventlog.Event {
	var out []eventlog.Event
	for _, at := range m {
		out = append(out, kindsOf(at.n.ev.Records()[at.from:], kind)...)
	}
	return out
}

// lostEvents are the cluster.node_lost events about node emitted after m.
func lostEvents(node string, m mark) []ClusterNodeLost {
	var out []ClusterNodeLost
	for _, e := range m.kinds("cluster.node_lost") {
		if l := e.(ClusterNodeLost); l.Node == node {
			out = append(out, l)
		}
	}
	return out
}

// lostJobs is every job of node's told lost after m: in the declaration's
// cluster.node_lost, or (a declarer slower than the sweep's grace) in a
// sweep's cluster.job_lost.
func lostJobs(node string, m mark) []string {
	var out []string
	for _, l := range lostEvents(node, m) {
		out = append(out, l.Jobs...)
	}
	for _, e := range m.kinds("cluster.job_lost") {
		if l := e.(ClusterJobLost); l.Node == node {
			out = append(out, l.JobID)
		}
	}
	slices.Sort(out)
	return out
}

// alive: n sees node alive.
func alive(n *testNode, node string) bool {
	for _, s := range n.f.Nodes() {
		if s.Name == node {
			return s.State == nodeAlive
		}
	}
	return false
}

func record(t *testing.T, n *testNode, id string) api.JobRecord {
	t.Helper()
	rec, found, err := n.f.Get(id)
	if err != nil || !found {
		t.Fatalf("getting %s on %s: found %v, %v", id, n.name, found, err)
	}
	return rec
}

// A node idle a while without heartbeats is declared lost and comes back.
// A node that stops heartbeating (as one stopped with SIGSTOP) is declared
// lost once; its running job ends node_lost; its late result is dropped
// and the record stays; it comes back. Then a node whose server dies
// abruptly (the idle one, lost before) is declared lost once, its running
// job ends node_lost, and the queued jobs run on the node that remains,
// each once.
func TestLostNodes(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{},
		nodeSpec{lanes: []string{"gpu", "bonly"}, slots: 1}, nodeSpec{lanes: []string{"gpu"}, slots: 1})
	a, b, c := ns[0], ns[1], ns[2]

	// c misses its heartbeats a while, as a node the machine starves does:
	// it is declared lost and comes back. Its loss further on (the same
	// incarnation, lost again) is told once more, once.
	m := after(a, b, c)
	c.f.hbPaused.Store(true)
	waitFor(t, "c declared lost", func() bool { return len(lostEvents(c.name, m)) > 0 })
	c.f.hbPaused.Store(false)
	waitFor(t, "c returns", func() bool { return len(m.kinds("cluster.node_returned")) == 1 })
	if l := lostEvents(c.name, m); len(l) != 1 || len(l[0].Jobs) != 0 {
		t.Fatalf("cluster.node_lost of c, idle: %+v", l)
	}
	waitFor(t, "a and b see c alive", func() bool { return alive(a, c.name) && alive(b, c.name) })

	// b stops heartbeating with a job running.
	held := b.holdOn(t, a, "bonly")
	m = after(a, b, c)
	b.f.hbPaused.Store(true)
	waitFor(t, "b declared lost", func() bool { return len(lostEvents(b.name, m)) > 0 })
	rec := waitEnd(t, a, held)
	if rec.State != api.StateFailed || rec.Error != api.ErrNodeLost || rec.Node != b.name {
		t.Fatalf("b's job after b was lost: %+v", rec)
	}
	if l := lostEvents(b.name, m); len(l) != 1 || l[0].Incarnation != b.f.inc {
		t.Fatalf("cluster.node_lost of b: %+v", l)
	}
	waitFor(t, "b's job told lost", func() bool { return len(lostJobs(b.name, m)) > 0 })
	if j := lostJobs(b.name, m); !slices.Equal(j, []string{held}) {
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
	waitFor(t, "b returns", func() bool { return len(m.kinds("cluster.node_returned")) == 1 })
	waitFor(t, "a sees b alive", func() bool { return alive(a, b.name) })

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
	m = after(a, b)
	c.f.srv.Shutdown()
	waitFor(t, "c declared lost", func() bool { return len(lostEvents(c.name, m)) > 0 })
	if rec := waitEnd(t, a, onC); rec.State != api.StateFailed || rec.Error != api.ErrNodeLost {
		t.Fatalf("c's job after c was lost: %+v", rec)
	}
	if l := lostEvents(c.name, m); len(l) != 1 {
		t.Fatalf("cluster.node_lost of c: %+v", l)
	}
	waitFor(t, "c's job told lost", func() bool { return len(lostJobs(c.name, m)) > 0 })
	if j := lostJobs(c.name, m); !slices.Equal(j, []string{onC}) {
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
	l := lostEvents("solo", all(now))
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
