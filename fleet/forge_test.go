package fleet

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	r := &runs{n: map[string]int{}, on: map[string]string{}}
	ns := startCluster(t, testHeartbeat, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1}, nodeSpec{})
	sub, a, b := ns[0], ns[1], ns[2]

	id := submit(t, sub, api.JobSpec{Lane: "gpu", Command: "hold"})
	if got := a.waitStarted(t); got != id {
		t.Fatalf("a started %s, not %s", got, id)
	}
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
