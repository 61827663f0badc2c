package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
)

// A job submitted on a node that does not serve its lane runs on one that
// does; its output is followed on the submitting node byte for byte, and
// a third node's Wait sees its end.
func TestSubmitElsewhereFollowWait(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 2}, nodeSpec{})
	a, b, c := ns[0], ns[1], ns[2]
	if !a.f.Serves("gpu") || !c.f.Serves("gpu") || a.f.Serves("cpu") {
		t.Fatalf("Serves: a gpu %v, c gpu %v, a cpu %v", a.f.Serves("gpu"), c.f.Serves("gpu"), a.f.Serves("cpu"))
	}
	id := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	if !a.f.Owns(id) {
		t.Fatalf("a does not own %s", id)
	}
	var got bytes.Buffer
	var streams []string
	rec, err := a.f.Follow(context.Background(), id, func(stream string, data []byte) error {
		got.Write(data)
		streams = append(streams, stream)
		return nil
	})
	if err != nil {
		t.Fatalf("following %s on a: %v", id, err)
	}
	if got.String() != outputBytes(id) {
		t.Fatalf("a followed %d bytes, want %d, in order", got.Len(), len(outputBytes(id)))
	}
	if rec.State != api.StateSucceeded || rec.Node != b.name {
		t.Fatalf("followed record: %+v", rec)
	}
	if r.count(id) != 1 {
		t.Fatalf("%s ran %d times", id, r.count(id))
	}
	wr := waitEnd(t, c, id)
	if wr.State != api.StateSucceeded || wr.Output != outputBytes(id) {
		t.Fatalf("c's wait: state %s, %d bytes of output", wr.State, len(wr.Output))
	}
	gr, found, err := c.f.Get(id)
	if err != nil || !found || gr.Output != outputBytes(id) || gr.Lane != "gpu" || gr.DispatchedAt == nil {
		t.Fatalf("c's get: found %v err %v record %+v", found, err, gr)
	}
	list, err := a.f.List(api.Filter{Lane: "gpu"})
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("a's list: %v %+v", err, list)
	}
	// Following an ended job still gives every byte.
	got.Reset()
	if _, err := c.f.Follow(context.Background(), id, func(_ string, d []byte) error { got.Write(d); return nil }); err != nil || got.String() != outputBytes(id) {
		t.Fatalf("c follows the ended job: %v, %d bytes", err, got.Len())
	}
	if len(b.ev.kinds("cluster.job_taken")) != 1 {
		t.Fatalf("b took %d jobs", len(b.ev.kinds("cluster.job_taken")))
	}

	// A lane nobody serves is refused, as an unknown lane is.
	_, err = trySubmit(a, api.JobSpec{Lane: "cpu", Command: "echo"})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("a lane nobody serves: %v", err)
	}

	// cluster.nodes and cluster.events.
	mux := apitest.Mux{}
	c.f.Register(mux)
	res, e := mux.Start(t, "cluster.nodes", nil).Wait(t, testWait)
	var nodes struct {
		Node  string       `json:"node"`
		Nodes []NodeStatus `json:"nodes"`
	}
	if e != nil || json.Unmarshal(res, &nodes) != nil || nodes.Node != c.name || len(nodes.Nodes) != 3 ||
		nodes.Nodes[1].Name != b.name || !slices.Equal(nodes.Nodes[1].Lanes, []string{"gpu"}) || !nodes.Nodes[2].Self {
		t.Fatalf("cluster.nodes: %v %s", e, res)
	}
	waitEvery(t, 500*time.Millisecond, "every node's cluster.started in the fleet's events", func() bool {
		call := mux.Start(t, "cluster.events", map[string]any{})
		if _, e := call.Wait(t, testWait); e != nil {
			t.Fatalf("cluster.events: %v", e)
		}
		origins := map[string]bool{}
		for _, l := range call.Lines() {
			var v struct {
				Origin string `json:"origin"`
				Kind   string `json:"kind"`
			}
			if json.Unmarshal(l.Data, &v) == nil && l.Event == "cluster.started" && v.Kind == l.Event {
				origins[v.Origin] = true
			}
		}
		return len(origins) == 3
	})
	// last counts lines, not messages (a message holds the lines a node
	// published together).
	two := mux.Start(t, "cluster.events", map[string]any{"last": 2})
	if _, e := two.Wait(t, testWait); e != nil {
		t.Fatalf("cluster.events last 2: %v", e)
	}
	if l := two.Lines(); len(l) != 2 {
		t.Fatalf("cluster.events last 2: %d lines", len(l))
	}
	// The filter comes before the count: the last 2 cluster.started
	// lines, though many lines came after them.
	started := mux.Start(t, "cluster.events", map[string]any{"last": 2, "kinds": []string{"cluster.started"}})
	if _, e := started.Wait(t, testWait); e != nil {
		t.Fatalf("cluster.events of a kind: %v", e)
	}
	if l := started.Lines(); len(l) != 2 || l[0].Event != "cluster.started" || l[1].Event != "cluster.started" {
		t.Fatalf("cluster.events last 2 cluster.started: %d lines %v", len(l), l)
	}
	bad := mux.Start(t, "cluster.events", map[string]any{"kinds": []string{strings.Repeat("k", 200)}})
	if _, e := bad.Wait(t, testWait); e == nil || e.Code != api.CodeInvalidParams {
		t.Fatalf("cluster.events with a 200-byte kind: %v", e)
	}
	follow := mux.Start(t, "cluster.events", map[string]any{"follow": true, "last": 0, "node": b.name})
	id2 := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	waitEnd(t, a, id2)
	waitFor(t, "b's cluster.job_taken followed", func() bool {
		for _, l := range follow.Lines() {
			if l.Event == "cluster.job_taken" && bytes.Contains(l.Data, []byte(id2)) {
				return true
			}
		}
		return false
	})
	follow.Close()

	// The embedded server refuses an anonymous client.
	if nc, err := nats.Connect(a.f.URL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected")
	}
}

// A job's stdin streamed from the nodes: pieces sent while the job is
// queued are kept for it, as many as the stream keeps a job (one more
// waits: flow control), and the job gets every byte in order, whichever
// node sent each piece (the one that runs it too).
func TestStreamedStdin(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1})
	a, b := ns[0], ns[1]
	held := b.holdOn(t, a, "gpu")
	// A job that runs on says so (once it has run runningAfter).
	waitFor(t, "the held job's record says running", func() bool {
		rec, found, err := a.f.Get(held)
		return err == nil && found && rec.State == api.StateRunning && rec.Node == b.name
	})
	id := submit(t, a, api.JobSpec{Lane: "gpu", Command: "cat", StdinStream: true})
	stdin := func(n *testNode, data []byte, eof bool) chan error {
		ch := make(chan error, 1)
		n.f.Stdin(id, data, eof, func(err error) { ch <- err })
		return ch
	}
	piece := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i*37) }
	var want bytes.Buffer
	for i := range inputPerJob {
		if err := <-stdin(a, piece(i), false); err != nil {
			t.Fatalf("piece %d while the job is queued: %v", i, err)
		}
		want.Write(piece(i))
	}
	more := stdin(a, piece(inputPerJob), false)
	want.Write(piece(inputPerJob))
	// One call at a time per job, as on one node.
	waitFor(t, "the waiting call registered", func() bool {
		a.f.mu.Lock()
		defer a.f.mu.Unlock()
		return a.f.stdinBusy[id]
	})
	var ae *api.Error
	if err := <-stdin(a, []byte("x"), false); !errors.As(err, &ae) || ae.Code != api.CodeInvalidState {
		t.Fatalf("a second call while one waits: %v", err)
	}
	subj := inSubjPfx + id
	kept := func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		info, err := a.f.in.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatalf("reading the input stream: %v", err)
		}
		return info.State.Subjects[subj]
	}
	if n := kept(); n != inputPerJob {
		t.Fatalf("%d pieces kept for the queued job, want %d", n, inputPerJob)
	}
	select {
	case err := <-more:
		t.Fatalf("a piece beyond %d was answered while the job is queued: %v", inputPerJob, err)
	default:
	}
	// The lane's slot frees: the job starts and reads.
	if !b.local.release(held, api.StateSucceeded) {
		t.Fatal("the held job is not running")
	}
	if err := <-more; err != nil {
		t.Fatalf("piece %d once the job reads: %v", inputPerJob, err)
	}
	for i := inputPerJob + 1; i < 5*inputPerJob; i++ {
		n := a
		if i%3 == 0 {
			n = b // the node that runs it
		}
		if err := <-stdin(n, piece(i), false); err != nil {
			t.Fatalf("piece %d from %s: %v", i, n.name, err)
		}
		want.Write(piece(i))
	}
	if err := <-stdin(a, []byte("end"), true); err != nil {
		t.Fatalf("the last piece: %v", err)
	}
	want.WriteString("end")
	rec := waitEnd(t, a, id)
	if rec.State != api.StateSucceeded || rec.Output != want.String() {
		t.Fatalf("the job's output: %s, %d bytes, want %d (its stdin in order)", rec.State, len(rec.Output), want.Len())
	}
	waitFor(t, "the ended job's stdin purged", func() bool { return kept() == 0 })

	if err := <-stdin(a, []byte("late"), false); !errors.As(err, &ae) || ae.Code != api.CodeInvalidState {
		t.Fatalf("stdin of an ended job: %v", err)
	}
	plain := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	ch := make(chan error, 1)
	a.f.Stdin(plain, []byte("x"), false, func(err error) { ch <- err })
	if err := <-ch; !errors.As(err, &ae) || ae.Code != api.CodeInvalidState {
		t.Fatalf("stdin of a job not submitted with stdin_stream: %v", err)
	}
	a.f.Stdin("c-00-1", []byte("x"), false, func(err error) { ch <- err })
	if err := <-ch; !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("stdin of an unknown job: %v", err)
	}
	waitEnd(t, a, plain)
}

// Many jobs submitted at once from three nodes, two of them serving the
// lane: every job runs exactly once and ends once.
func TestTakeOnce(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 3}, nodeSpec{lanes: []string{"gpu"}, slots: 3})
	const jobs = 40
	ids := make(chan string, jobs)
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := trySubmit(ns[i%3], api.JobSpec{Lane: "gpu", Command: "echo"})
			if err != nil {
				t.Errorf("submitting: %v", err)
				return
			}
			ids <- id
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("id %s given twice", id)
		}
		seen[id] = true
		rec := waitEnd(t, ns[0], id)
		if rec.State != api.StateSucceeded || rec.Node != r.node(id) {
			t.Errorf("%s: %s on %s (ran on %s)", id, rec.State, rec.Node, r.node(id))
		}
	}
	if len(seen) != jobs {
		t.Fatalf("%d jobs submitted, want %d", len(seen), jobs)
	}
	for id := range seen {
		if n := r.count(id); n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	taken := len(ns[1].ev.kinds("cluster.job_taken")) + len(ns[2].ev.kinds("cluster.job_taken"))
	if taken != jobs {
		t.Errorf("%d cluster.job_taken, want %d", taken, jobs)
	}
}

// Cancel a queued job (its record; it never runs) and a running one
// (through the node running it).
func TestCancel(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1})
	a, b := ns[0], ns[1]
	held := b.holdOn(t, a, "gpu")
	queued := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	cancel := func(id string) (bool, error) { return cancelOn(t, a, id) }
	if was, err := cancel(queued); err != nil || was {
		t.Fatalf("cancelling queued %s: %v %v", queued, was, err)
	}
	if rec := waitEnd(t, a, queued); rec.State != api.StateCancelled || !rec.WasCancelled {
		t.Fatalf("queued job cancelled: %+v", rec)
	}
	if was, err := cancel(held); err != nil || !was {
		t.Fatalf("cancelling running %s: %v %v", held, was, err)
	}
	if rec := waitEnd(t, a, held); rec.State != api.StateCancelled || rec.Node != b.name {
		t.Fatalf("running job cancelled: %+v", rec)
	}
	// The lane has room again: a job submitted now runs, and the
	// cancelled one never did.
	next := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	if rec := waitEnd(t, a, next); rec.State != api.StateSucceeded {
		t.Fatalf("next job: %+v", rec)
	}
	if r.count(queued) != 0 {
		t.Fatalf("the cancelled queued job ran %d times", r.count(queued))
	}
	_, err := cancel(queued)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidState {
		t.Fatalf("cancelling an ended job: %v", err)
	}
	_, err = cancel("c-00-1")
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("cancelling an unknown job: %v", err)
	}
}

// A cancel that reaches the node between its take of a job and the lane's
// start (the lane does not know the job yet) still cancels it: the job
// ends cancelled and never starts.
func TestCancelBetweenTakeAndStart(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1})
	a, b := ns[0], ns[1]
	entered, hold := make(chan string, 1), make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold) }) }) // before the nodes stop
	fn := func(id string) {
		entered <- id
		<-hold
	}
	b.f.beforeRun.Store(&fn)
	id := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	select {
	case got := <-entered:
		if got != id {
			t.Fatalf("took %s, want %s", got, id)
		}
	case <-time.After(testWait):
		t.Fatal("b did not take the job")
	}
	if was, err := cancelOn(t, a, id); err != nil || was {
		t.Fatalf("cancelling %s between its take and its start: %v %v", id, was, err)
	}
	release.Do(func() { close(hold) })
	if rec := waitEnd(t, a, id); rec.State != api.StateCancelled || !rec.WasCancelled || rec.Node != b.name {
		t.Fatalf("the job cancelled before its start: %+v", rec)
	}
	if n := r.count(id); n != 0 {
		t.Fatalf("the job cancelled before its start ran %d times", n)
	}
}

// cancelOn cancels id through n and waits (testWait) for the answer.
func cancelOn(t *testing.T, n *testNode, id string) (bool, error) {
	t.Helper()
	type res struct {
		was bool
		err error
	}
	ch := make(chan res, 1)
	n.f.Cancel(id, false, func(w bool, err error) { ch <- res{w, err} })
	select {
	case x := <-ch:
		return x.was, x.err
	case <-time.After(testWait):
		t.Fatalf("cancel of %s not answered", id)
		return false, nil
	}
}

// A job whose lane refuses its streamed stdin (its runner takes none): the
// node that runs it records the refusal, and the next job.stdin, on any
// node, is told so, with the refusal's kind, instead of being kept for
// nothing.
func TestStdinRefused(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1})
	a, b := ns[0], ns[1]
	id := submit(t, a, api.JobSpec{Lane: "gpu", Command: "deaf", StdinStream: true})
	if got := b.waitStarted(t); got != id {
		t.Fatalf("started %s, want %s", got, id)
	}
	stdin := func(n *testNode) error {
		ch := make(chan error, 1)
		n.f.Stdin(id, []byte("input\n"), false, func(err error) { ch <- err })
		select {
		case err := <-ch:
			return err
		case <-time.After(testWait):
			t.Fatal("job.stdin: no answer")
			return nil
		}
	}
	// The first piece is kept (answered before the job's node has it);
	// once the lane refused it, a call is told.
	var refused error
	waitFor(t, "a job.stdin told the stdin is refused", func() bool {
		refused = stdin(a)
		return refused != nil
	})
	var ae *api.Error
	if !errors.As(refused, &ae) || ae.Code != api.CodeInvalidState || !strings.Contains(ae.Message, "refused its stdin") {
		t.Fatalf("the refusal: %v", refused)
	}
	if d, ok := ae.Data.(map[string]string); !ok || d["stdin"] != "unsupported" {
		t.Fatalf("the refusal's data: %#v", ae.Data)
	}
	// On the node that runs it too.
	if err := stdin(b); !errors.As(err, &ae) || ae.Code != api.CodeInvalidState {
		t.Fatalf("job.stdin on b: %v", err)
	}
	b.local.release(id, api.StateSucceeded)
	if rec := waitEnd(t, a, id); rec.State != api.StateSucceeded {
		t.Fatalf("the job: %+v", rec)
	}
}
