package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// TestForgery (issue 37): a client with node B's real credentials (its
// key, its certificate, the fleet's route password: all its cluster.creds
// holds), logged in to B's server, tries to forge A's work. A job A runs
// (its real end: failed) is rewritten succeeded, exit 0, in every way B
// can: as A, as B, unsealed, with B's key under A's name; A's heartbeat
// is rewritten; the job's take is claimed again; A's events and cancels
// are published and subscribed to; the take claims are purged. Each
// fails: the values are refused by every reader (cluster.record_refused),
// the rest by the server. The waiter on the submitting node is told the
// real end, from A.
func TestForgery(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1}, nodeSpec{})
	sub, a, b := ns[0], ns[1], ns[2]

	id := a.holdOn(t, sub, "gpu")
	ended := make(chan api.JobRecord, 4)
	stop, err := sub.f.Wait(id, func(r api.JobRecord) { ended <- r })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	// The attacker: B's credentials file, B's server.
	bid, err := readIdentity(b.f.cfg.Credentials, "")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var violations []string
	opts := append(loginOpts(t, b.f.cfg.Credentials), nats.NoReconnect(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		violations = append(violations, err.Error())
		mu.Unlock()
	}))
	nc, err := nats.Connect(b.f.URL(), opts...)
	if err != nil {
		t.Fatalf("B's credentials at B's server: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	jobs, err := js.KeyValue(ctx, jobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := js.KeyValue(ctx, nodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	cur, _, found, err := sub.f.getJob(ctx, id)
	if err != nil || !found || cur.Record.Node != a.name {
		t.Fatalf("the job's record before: %+v %v %v", cur.Record, found, err)
	}
	won := func(node string) []byte {
		e := cur
		now := time.Now().UTC()
		code := int32(0)
		e.Record.State, e.Record.ExitCode, e.Record.FinishedAt, e.Record.Node = api.StateSucceeded, &code, &now, node
		v, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sealAs := func(by, bucket, key string, v []byte) []byte {
		// B's key and certificate under the name by.
		s, err := json.Marshal(sealed{V: v, By: by, Key: bid.pub, Cert: bid.cert, Sig: bid.sign(sealMsg(bucket, key, by, v))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	bSealed := func(bucket, key string, v []byte) []byte {
		s, err := bid.seal(bucket, key, v)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	forgeries := []struct {
		what, why string
		value     []byte
	}{
		{"succeeded on A, sealed by B", "written by another node", bSealed(sealJobs, id, won(a.name))},
		{"succeeded on B, sealed by B", "a record of a job taken by " + a.name, bSealed(sealJobs, id, won(b.name))},
		{"succeeded on A, not sealed (the attack before)", "not sealed", won(a.name)},
		{"succeeded on A, B's key under A's name", "certificate", sealAs(a.name, sealJobs, id, won(a.name))},
	}
	for _, fg := range forgeries {
		if _, err := jobs.Put(ctx, id, fg.value); err != nil {
			t.Fatalf("%s: the bucket took no write from B: %v", fg.what, err)
		}
		// Every reader refuses it: a read is an error, never the forgery.
		for _, n := range []*testNode{sub, a} {
			rec, _, err := n.f.Get(id)
			if err == nil || rec.State == api.StateSucceeded {
				t.Fatalf("%s: %s reads %s, %v", fg.what, n.name, rec.State, err)
			}
		}
		waitFor(t, fg.what+": told as cluster.record_refused", func() bool {
			return refusedBy(sub, id, "", fg.why)
		})
		select {
		case rec := <-ended:
			t.Fatalf("%s: the waiter was told %s on %s", fg.what, rec.State, rec.Node)
		default:
		}
	}

	// A's heartbeat, written by B: alive without its lanes, and stopped.
	for _, st := range []string{nodeAlive, nodeStopped} {
		n := a.f.nodeInfo(st)
		n.Lanes, n.Free = nil, nil
		v, _ := json.Marshal(n)
		if _, err := nodes.Put(ctx, a.name, bSealed(sealNodes, a.name, v)); err != nil {
			t.Fatalf("B's write of A's heartbeat: %v", err)
		}
		waitFor(t, "B's "+st+" heartbeat of A refused", func() bool {
			return refusedBy(sub, a.name, b.name, "")
		})
		sub.f.mu.Lock()
		p := sub.f.peers[a.name]
		sub.f.mu.Unlock()
		if p == nil || p.info.State != nodeAlive || !slices.Contains(p.info.Lanes, "gpu") {
			t.Fatalf("after B wrote A %s, the submitter sees A as %+v", st, p)
		}
	}

	// The job's take, claimed again by B: the stream keeps A's.
	v, _ := json.Marshal(takeClaim{ID: id, Node: b.name, Incarnation: b.f.inc})
	if _, err := js.Publish(ctx, takeSubjPfx+id, bSealed(sealTakes, id, v)); err == nil {
		t.Fatal("a second take claim was stored")
	}
	if c, found, err := sub.f.readClaim(ctx, id); err != nil || !found || c.Node != a.name {
		t.Fatalf("the job's claim: %+v %v %v", c, found, err)
	}
	// The server refuses B: A's events, A's cancels, purging the claims,
	// deleting the jobs bucket.
	if err := nc.Publish(eventsSubjPfx+a.name, []byte(`{"kind":"cluster.node_lost"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync(nodeSubjPfx + a.name + ".cancel"); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"$JS.API.STREAM.PURGE." + takesStream, "$JS.API.STREAM.DELETE.KV_" + jobsBucket} {
		if m, err := nc.Request(subj, nil, time.Second); err == nil {
			t.Fatalf("%s answered: %s", subj, m.Data)
		}
	}
	_ = nc.Flush()
	want := []string{"publish to \"" + eventsSubjPfx + a.name, "subscription to \"" + nodeSubjPfx + a.name + ".cancel",
		"stream.purge." + takesStream, "stream.delete.kv_" + jobsBucket}
	deadline := time.Now().Add(testWait)
	for {
		mu.Lock()
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool {
			return slices.ContainsFunc(violations, func(v string) bool {
				v = strings.ToLower(v)
				return strings.Contains(v, "permissions violation") && strings.Contains(v, strings.ToLower(w))
			})
		})
		got := slices.Clone(violations)
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not refuse %q; its refusals: %q", missing, got)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The real end, from A, over the last forgery: the waiter is told it.
	a.local.release(id, api.StateFailed)
	select {
	case rec := <-ended:
		if rec.State != api.StateFailed || rec.Node != a.name {
			t.Fatalf("the waiter was told %s on %s, not A's end (failed)", rec.State, rec.Node)
		}
	case <-time.After(testWait):
		t.Fatalf("no end after %v", testWait)
	}
	if rec := record(t, sub, id); rec.State != api.StateFailed || rec.Node != a.name {
		t.Fatalf("the record after A's end: %s on %s", rec.State, rec.Node)
	}
	if d := a.ev.kinds("cluster.result_dropped"); len(d) > 0 {
		t.Fatalf("A dropped its real end: %+v", d)
	}
}

// refusedBy: n told cluster.record_refused of key (by writer, and why
// containing why, when given).
func refusedBy(n *testNode, key, writer, why string) bool {
	return slices.ContainsFunc(n.ev.kinds("cluster.record_refused"), func(e eventlog.Event) bool {
		r := e.(ClusterRecordRefused)
		return r.Key == key && (writer == "" || r.Writer == writer) && strings.Contains(r.Why, why)
	})
}

// attacker is a client with node b's real credentials (all its
// cluster.creds holds) at b's server, and the server's refusals of it.
type attacker struct {
	id *identity
	nc *nats.Conn
	js jetstream.JetStream

	mu         sync.Mutex
	violations []string
}

func newAttacker(t *testing.T, b *testNode) *attacker {
	t.Helper()
	a := &attacker{}
	var err error
	if a.id, err = readIdentity(b.f.cfg.Credentials, ""); err != nil {
		t.Fatal(err)
	}
	opts := append(loginOpts(t, b.f.cfg.Credentials), nats.NoReconnect(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		a.mu.Lock()
		a.violations = append(a.violations, err.Error())
		a.mu.Unlock()
	}))
	if a.nc, err = nats.Connect(b.f.URL(), opts...); err != nil {
		t.Fatalf("B's credentials at B's server: %v", err)
	}
	t.Cleanup(a.nc.Close)
	if a.js, err = jetstream.New(a.nc); err != nil {
		t.Fatal(err)
	}
	return a
}

// refusedAll waits for the server to have refused each of want (parts
// of its permissions violations).
func (a *attacker) refusedAll(t *testing.T, want ...string) {
	t.Helper()
	_ = a.nc.Flush()
	deadline := time.Now().Add(testWait)
	for {
		a.mu.Lock()
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool {
			return slices.ContainsFunc(a.violations, func(v string) bool {
				v = strings.ToLower(v)
				return strings.Contains(v, "permissions violation") && strings.Contains(v, strings.ToLower(w))
			})
		})
		got := slices.Clone(a.violations)
		a.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not refuse %q; its refusals: %q", missing, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outputRefused: n told cluster.output_refused of job id (why containing
// why).
func outputRefused(n *testNode, id, why string) bool {
	return slices.ContainsFunc(n.ev.kinds("cluster.output_refused"), func(e eventlog.Event) bool {
		r := e.(ClusterOutputRefused)
		return r.JobID == id && strings.Contains(r.Why, why)
	})
}

// TestForgeryOutput (issue 37): node B, with its real credentials, tries
// to write the output of a job A took, before A writes it (the readers
// kept the first piece at each offset: B's would have been the job's
// output). Its client may not publish on A's subject (the server refuses
// it); on its own, nobody reads it for A's job. What B's route password
// lets it put on A's subject at the storage level (a server of its own
// routed into the fleet) is dropped by every reader, told as
// cluster.output_refused: unsigned, and signed by B's key. The follower
// and the reader of the ended job get A's bytes byte for byte.
func TestForgeryOutput(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1}, nodeSpec{})
	sub, a, b := ns[0], ns[1], ns[2]
	id := a.holdOn(t, sub, "gpu")
	real := "held " + id // what A's job writes at its release
	type followed struct {
		out string
		rec api.JobRecord
		err error
	}
	fctx, fcancel := context.WithTimeout(context.Background(), testWait)
	defer fcancel()
	fol := make(chan followed, 1)
	go func() {
		var out strings.Builder
		rec, err := sub.f.Follow(fctx, id, func(_ string, d []byte) error { out.Write(d); return nil })
		fol <- followed{out.String(), rec, err}
	}()

	at := newAttacker(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	forged := strings.Repeat("X", len(real))
	piece := func(node string, sign *identity) *nats.Msg {
		m := nats.NewMsg(outSubj(id, node))
		m.Header.Set(hdrStream, "stdout")
		m.Header.Set(hdrOffset, "0")
		if sign != nil {
			// B's key, over A's name: what A's signature would cover.
			m.Header.Set(hdrSig, sign.sign(pieceMsg(id, a.name, 0, "stdout", []byte(forged))))
		}
		m.Data = []byte(forged)
		return m
	}
	// B's client: A's subject refused by the server; its own taken, and
	// never read for A's job.
	if err := at.nc.PublishMsg(piece(a.name, at.id)); err != nil {
		t.Fatal(err)
	}
	if _, err := at.js.PublishMsg(ctx, piece(b.name, at.id)); err != nil {
		t.Fatalf("B's output on its own subject: %v", err)
	}
	at.refusedAll(t, "publish to \""+outSubj(id, a.name))

	// B's route password: a server of B's routed into the fleet, whose
	// clients it admits as it likes.
	rogue, err := server.NewServer(&server.Options{ServerName: "rogue", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: clusterName, Host: "127.0.0.1", Port: server.RANDOM_PORT},
		Routes:  []*url.URL{{Scheme: "nats-route", User: url.UserPassword(routeUser, at.id.route), Host: b.f.cfg.ClusterListen}}})
	if err != nil {
		t.Fatal(err)
	}
	rogue.Start()
	defer func() { rogue.Shutdown(); rogue.WaitForShutdown() }()
	if !rogue.ReadyForConnections(10 * time.Second) {
		t.Fatal("the rogue server is not up")
	}
	waitFor(t, "the rogue server routed into the fleet", func() bool { return rogue.NumRoutes() > 0 })
	rc, err := nats.Connect(rogue.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// Both stored on A's subject, before A writes (else the test proves
	// nothing): published again until they are (a message published
	// before the fleet's interest reached the new route goes nowhere).
	outS, err := at.js.Stream(ctx, outputStream)
	if err != nil {
		t.Fatal(err)
	}
	waitEvery(t, 250*time.Millisecond, "the forged pieces stored on A's subject", func() bool {
		if m, err := outS.GetLastMsgForSubject(ctx, outSubj(id, a.name)); err == nil && m.Header.Get(hdrSig) != "" {
			return true
		}
		for _, m := range []*nats.Msg{piece(a.name, nil), piece(a.name, at.id)} {
			if err := rc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		_ = rc.Flush()
		return false
	})

	a.local.release(id, api.StateSucceeded)
	var f followed
	select {
	case f = <-fol:
	case <-time.After(testWait):
		t.Fatalf("the follow has not ended after %v", testWait)
	}
	if f.err != nil || f.rec.State != api.StateSucceeded || f.out != real {
		t.Fatalf("followed %q, %s, %v; want A's %q", f.out, f.rec.State, f.err, real)
	}
	for _, n := range []*testNode{sub, a, b} {
		if rec := record(t, n, id); rec.Output != real || rec.State != api.StateSucceeded {
			t.Fatalf("%s reads %q (%s); want A's %q", n.name, rec.Output, rec.State, real)
		}
	}
	for _, why := range []string{"not signed (", "not signed by the job's taker " + a.name} {
		if !outputRefused(sub, id, why) {
			t.Fatalf("the submitter did not tell cluster.output_refused %q: %+v", why, sub.ev.kinds("cluster.output_refused"))
		}
	}
	// Told once per job and reason, by each reader.
	if got := len(sub.ev.kinds("cluster.output_refused")); got != 2 {
		t.Fatalf("the submitter told %d refusals, want 2: %+v", got, sub.ev.kinds("cluster.output_refused"))
	}
}

// TestForgeryLane (issue 37): node B's certificate lists lane cpu only.
// A node configured to serve gpu with such credentials does not start.
// B's client may not pull gpu's queue (the server refuses it). B takes a
// queued gpu job by writing its record, its claim and its end itself:
// every reader refuses them, the waiter is never told B's end, and A,
// taking the job from the queue, goes over B's record and ends it not_run
// (B's claim, written once, stands in the stream). B rewriting another
// queued gpu job's lane to cpu first is refused too (the id is tagged
// with its lane). A job B took without claiming it, A runs. B serves cpu
// as any node.
func TestForgeryLane(t *testing.T) {
	t.Parallel()
	r := newRuns()
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1},
		nodeSpec{lanes: []string{"cpu"}, slots: 1, certLanes: []string{"cpu"}})
	sub, a, b := ns[0], ns[1], ns[2]

	// With B's credentials, serving gpu is refused at the start.
	_, err := Start(context.Background(), Options{Config: Config{Enabled: true, Listen: "127.0.0.1:0", Credentials: b.f.cfg.Credentials},
		Home: t.TempDir(), Local: newFakeLocal("b2", []string{"cpu", "gpu"}, 1, r), Logger: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), "serve only lanes cpu") {
		t.Fatalf("B's credentials serving gpu: %v", err)
	}

	// B serves cpu.
	cid := submit(t, sub, api.JobSpec{Lane: "cpu", Command: "echo"})
	if rec := waitEnd(t, sub, cid); rec.State != api.StateSucceeded || rec.Node != b.name || rec.Output != outputBytes(cid) {
		t.Fatalf("a cpu job: %s on %s, %d bytes", rec.State, rec.Node, len(rec.Output))
	}

	hold := a.holdOn(t, sub, "gpu")
	stolen := submit(t, sub, api.JobSpec{Lane: "gpu", Command: "hold"})
	relaned := submit(t, sub, api.JobSpec{Lane: "gpu", Command: "hold"})
	unclaimed := submit(t, sub, api.JobSpec{Lane: "gpu", Command: "echo"})
	ends := map[string]chan api.JobRecord{}
	for _, id := range []string{stolen, relaned, unclaimed} {
		ch := make(chan api.JobRecord, 4)
		stop, err := sub.f.Wait(id, func(r api.JobRecord) { ch <- r })
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		ends[id] = ch
	}

	at := newAttacker(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	// The server: no pull of gpu's queue.
	if m, err := at.nc.Request("$JS.API.CONSUMER.MSG.NEXT."+laneStreamPfx+"gpu."+workers, []byte(`{"batch":1,"expires":100000000}`), time.Second); err == nil {
		t.Fatalf("B pulled gpu's queue: %q", m.Data)
	}
	at.refusedAll(t, "publish to \"$JS.API.CONSUMER.MSG.NEXT."+laneStreamPfx+"gpu."+workers)

	jobs, err := at.js.KeyValue(ctx, jobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	take := func(id, lane string, claim bool) {
		t.Helper()
		kv, err := jobs.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		e, err := b.f.readJob(id, kv.Value())
		if err != nil || e.Record.State != api.StateQueued {
			t.Fatalf("%s before B's take: %+v %v", id, e.Record, err)
		}
		now := time.Now().UTC()
		e.Record.Lane, e.Record.State, e.Record.Node, e.Record.DispatchedAt, e.Incarnation = lane, api.StateDispatched, b.name, &now, b.f.inc
		v, _ := json.Marshal(e)
		s, err := at.id.seal(sealJobs, id, v)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := jobs.Update(ctx, id, s, kv.Revision())
		if err != nil {
			t.Fatalf("B's take of %s: %v", id, err)
		}
		if claim {
			c, _ := json.Marshal(takeClaim{ID: id, Node: b.name, Incarnation: b.f.inc})
			s, _ := at.id.seal(sealTakes, id, c)
			if _, err := at.js.Publish(ctx, takeSubjPfx+id, s); err != nil {
				t.Fatalf("B's claim of %s: %v", id, err)
			}
		}
		// Its end, succeeded.
		code := int32(0)
		e.Record.State, e.Record.ExitCode, e.Record.FinishedAt = api.StateSucceeded, &code, &now
		v, _ = json.Marshal(e)
		s, _ = at.id.seal(sealJobs, id, v)
		if _, err := jobs.Update(ctx, id, s, rev); err != nil {
			t.Fatalf("B's end of %s: %v", id, err)
		}
	}
	take(stolen, "gpu", true)
	take(relaned, "cpu", true)
	take(unclaimed, "gpu", false)
	waitFor(t, "B's take of a gpu job refused", func() bool { return refusedBy(sub, stolen, b.name, "does not list the lane") })
	waitFor(t, "B's take of a gpu job made cpu refused", func() bool { return refusedBy(sub, relaned, b.name, "submitted to another lane") })
	waitFor(t, "B's unclaimed take of a gpu job refused", func() bool { return refusedBy(sub, unclaimed, b.name, "does not list the lane") })
	for _, id := range []string{stolen, relaned, unclaimed} {
		for _, n := range []*testNode{sub, a} {
			if rec, _, err := n.f.Get(id); err == nil || rec.State == api.StateSucceeded {
				t.Fatalf("%s reads B's take of %s: %s on %s, %v", n.name, id, rec.State, rec.Node, err)
			}
		}
	}

	// A frees its slot and takes both from gpu's queue.
	a.local.release(hold, api.StateSucceeded)
	for id, ch := range ends {
		var rec api.JobRecord
		select {
		case rec = <-ch:
		case <-time.After(testWait):
			var b strings.Builder
			for _, j := range []string{stolen, relaned, unclaimed} {
				fmt.Fprintf(&b, "\n  %s ran %d times", j, r.count(j))
				for _, n := range []*testNode{sub, a} {
					jr, found, err := n.f.Get(j)
					fmt.Fprintf(&b, "; %s reads it %s on %q (%s), found %v, %v", n.name, jr.State, jr.Node, jr.Error, found, err)
				}
			}
			t.Fatalf("%s has not ended after %v; the three jobs B took:%s", id, testWait, b.String())
		}
		switch {
		case rec.Node != a.name:
			t.Fatalf("%s ended %s on %s, not on A", id, rec.State, rec.Node)
		case id != unclaimed && (rec.State != api.StateError || !strings.HasPrefix(rec.Error, "not_run")):
			t.Fatalf("a job B claimed (%s) ended %s %q, want error not_run", id, rec.State, rec.Error)
		case id == unclaimed && (rec.State != api.StateSucceeded || rec.Output != outputBytes(id)):
			t.Fatalf("the job B took without a claim ended %s with %d bytes, want A's run", rec.State, len(rec.Output))
		}
	}
	for _, id := range []string{stolen, relaned} {
		if n := r.count(id); n != 0 {
			t.Fatalf("a job B claimed (%s) ran %d times", id, n)
		}
	}
}
