package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/api"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

func TestConnectAndPing(t *testing.T) {
	h := newHarness(t, nil)
	c1, c2 := h.client(), h.client()
	var r1, r2 connectResult
	h.mustCall(c1, "connect", map[string]any{"version": "cli-1"}, &r1)
	h.mustCall(c2, "connect", map[string]any{"version": "cli-1"}, &r2)
	if r1.State != "ready" || !strings.HasPrefix(r1.SessionID, "s-") || r1.Version != "test-1" {
		t.Fatalf("connect = %+v", r1)
	}
	if r1.SessionID == r2.SessionID {
		t.Fatalf("two connections share session id %q", r1.SessionID)
	}
	var again connectResult
	h.mustCall(c1, "connect", nil, &again)
	if again.SessionID != r1.SessionID {
		t.Fatalf("second connect on one connection changed session id %q -> %q", r1.SessionID, again.SessionID)
	}
	var pong pongResult
	h.mustCall(c1, "ping", nil, &pong)
	if !pong.Pong {
		t.Fatal("ping: pong is false")
	}
	if e := h.callErr(c1, "connect", map[string]any{"version": "x", "bogus": 1}); e.Code != wire.CodeInvalidParams {
		t.Fatalf("unknown field: %+v", e)
	}
	if e := h.callErr(c1, "ping", map[string]any{"x": 1}); e.Code != wire.CodeInvalidParams {
		t.Fatalf("ping with params: %+v", e)
	}
}

// waitUntil polls cond (state owned by another goroutine with no event to
// wait on) until it holds or 10s pass.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !pollUntil(cond) {
		t.Fatalf("timed out waiting until %s", what)
	}
}

// pollUntil is waitUntil for a goroutine that must not fail the test
// itself: it reports whether cond came to hold within 10s.
func pollUntil(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func TestEventsSubscribe(t *testing.T) {
	h := newHarness(t, nil)
	r := h.raw()
	r.send(`{"id":1,"method":"events.subscribe","params":{"kinds":["job.*"]}}`)
	if cl := r.mustLine(); cl.ID == nil || *cl.ID != 1 || cl.Error != nil || string(cl.Result) != "{}" {
		t.Fatalf("subscribe answer = %+v", cl)
	}
	rec := h.bus.Emit(lanes.JobQueued{JobID: "j-1", Lane: "no-net", Queued: 1})
	h.bus.Emit(lanes.RunnerReady{Lane: "no-net", RunnerID: "r1"})
	h.bus.Emit(lanes.JobOutput{JobID: "j-1", Stream: "stdout", Data: "hello\n"})
	s, err := r.line()
	if err != nil || s+"\n" != string(rec.Wire()) {
		t.Fatalf("got %q (%v), want the record's wire line %q", s, err, rec.Wire())
	}
	out := r.mustLine()
	if out.Event != "job.output" {
		t.Fatalf("second event %q, want job.output (runner.ready is not subscribed)", out.Event)
	}
	var o lanes.JobOutput
	if err := json.Unmarshal(out.Data, &o); err != nil || o.Data != "hello\n" || o.Stream != "stdout" {
		t.Fatalf("job.output data %s", out.Data)
	}

	// A second subscribe replaces the first.
	r.send(`{"id":2,"method":"events.subscribe","params":{"kinds":["runner.ready"]}}`)
	if cl := r.mustLine(); cl.ID == nil || *cl.ID != 2 {
		t.Fatalf("resubscribe answer = %+v", cl)
	}
	h.bus.Emit(lanes.JobQueued{JobID: "j-2"})
	h.bus.Emit(lanes.RunnerReady{RunnerID: "r2"})
	if cl := r.mustLine(); cl.Event != "runner.ready" {
		t.Fatalf("after resubscribe got %+v, want runner.ready only", cl)
	}

	// Unsubscribe: nothing more arrives (the ping answer comes first).
	r.send(`{"id":3,"method":"events.unsubscribe"}`)
	if cl := r.mustLine(); cl.ID == nil || *cl.ID != 3 || string(cl.Result) != "{}" {
		t.Fatalf("unsubscribe answer = %+v", cl)
	}
	h.bus.Emit(lanes.RunnerReady{RunnerID: "r3"})
	r.send(`{"id":4,"method":"ping"}`)
	if cl := r.mustLine(); cl.ID == nil || *cl.ID != 4 {
		t.Fatalf("after unsubscribe got %+v, want the ping answer", cl)
	}

	// All kinds; job.finished carries the whole record.
	r.send(`{"id":5,"method":"events.subscribe","params":{}}`)
	r.mustLine()
	code := int32(0)
	h.bus.Emit(lanes.JobFinished{JobID: "j-9", State: "succeeded", Record: api.JobRecord{ID: "j-9", State: api.StateSucceeded, ExitCode: &code}})
	fin := r.mustLine()
	var fd struct{ Job api.JobRecord }
	if err := json.Unmarshal(fin.Data, &fd); fin.Event != "job.finished" || err != nil || fd.Job.ID != "j-9" {
		t.Fatalf("job.finished line %+v", fin)
	}
}

func TestEventsWithoutBus(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Bus = nil })
	c := h.client()
	if e := h.callErr(c, "events.subscribe", nil); e.Code != wire.CodeInternal {
		t.Fatalf("subscribe without a bus: %+v", e)
	}
	h.mustCall(c, "ping", nil, nil)
}

func TestDisconnect(t *testing.T) {
	h := newHarness(t, nil)
	r := h.raw()
	r.send(`{"id":1,"method":"ping"}` + "\n" + `{"id":2,"method":"disconnect"}` + "\n" + `{"id":3,"method":"ping"}`)
	if cl := r.mustLine(); *cl.ID != 1 {
		t.Fatalf("got %+v", cl)
	}
	if cl := r.mustLine(); *cl.ID != 2 || string(cl.Result) != "{}" {
		t.Fatalf("disconnect answer %+v", cl)
	}
	if rest := r.expectEOF(); len(rest) != 0 {
		t.Fatalf("lines after disconnect: %q", rest)
	}
	ev := h.rec.Wait(t, "c1 closed", isClosed("c1")).Event.(ConnClosed)
	if ev.Reason != ReasonClientDisconnect || ev.Requests < 2 {
		t.Fatalf("conn.closed = %+v", ev)
	}
	if _, ok := h.rec.Wait(t, "c1 opened", func(r *eventlog.Record) bool { return r.Kind == "conn.opened" }).Event.(ConnOpened); !ok {
		t.Fatal("no conn.opened")
	}
}

func TestClientEOFAnswersWhatWasSent(t *testing.T) {
	h := newHarness(t, nil)
	r := h.raw()
	r.send(`{"id":1,"method":"ping"}` + "\n" + `{"id":2,"method":"ping"}`)
	r.nc.(*net.UnixConn).CloseWrite()
	rest := r.expectEOF()
	if len(rest) != 2 {
		t.Fatalf("after half-close got %q, want two answers", rest)
	}
	ev := h.rec.Wait(t, "c1 closed", isClosed("c1")).Event.(ConnClosed)
	if ev.Reason != ReasonClientClosed || ev.Requests != 2 {
		t.Fatalf("conn.closed = %+v", ev)
	}
}

func TestPipelinedRequestsInOrder(t *testing.T) {
	h := newHarness(t, nil)
	r := h.raw()
	const n = 5000
	go func() {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			b.WriteString(`{"id":`)
			b.WriteString(itoa(i))
			b.WriteString(`,"method":"ping"}` + "\n")
		}
		r.nc.Write([]byte(b.String()))
	}()
	for i := 1; i <= n; i++ {
		cl := r.mustLine()
		if cl.ID == nil || int(*cl.ID) != i {
			t.Fatalf("answer %d has id %v", i, cl.ID)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestMalformedLinesKeepTheConnection(t *testing.T) {
	h := newHarness(t, nil)
	r := h.raw()
	r.send(`this is not json`)
	cl := r.mustLine()
	if cl.ID == nil || *cl.ID != 0 || errCode(cl) != wire.CodeParseError {
		t.Fatalf("malformed line answer %+v", cl)
	}
	r.send(`[1,2,3]`)
	if cl := r.mustLine(); errCode(cl) != wire.CodeInvalidRequest {
		t.Fatalf("array answer %+v", cl)
	}
	r.send(`{"id":7}`)
	if cl := r.mustLine(); errCode(cl) != wire.CodeInvalidRequest || *cl.ID != 7 {
		t.Fatalf("no method answer %+v", cl)
	}
	r.send("\r\n   \n")                       // blank lines are skipped
	r.send(`{"id":8,"method":"ping"}` + "\r") // CRLF endings are fine
	if cl := r.mustLine(); *cl.ID != 8 || errCode(cl) != 0 {
		t.Fatalf("ping after garbage %+v", cl)
	}
	pe := h.rec.Wait(t, "conn.protocol_error", func(r *eventlog.Record) bool { return r.Kind == "conn.protocol_error" }).Event.(eventlog.ConnProtocolError)
	if pe.Fatal || pe.Peer != "control" || pe.ConnID != "c1" {
		t.Fatalf("protocol error event %+v", pe)
	}
}

func TestOversizedLineClosesOnlyThatConnection(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxLine = 1024 })
	other := h.client()
	h.mustCall(other, "ping", nil, nil)
	r := h.raw()
	r.send(`{"id":1,"method":"ping"}`)
	r.mustLine()
	r.send(`{"id":2,"method":"ping","params":{"pad":"` + strings.Repeat("x", 2000) + `"}}`)
	cl := r.mustLine()
	if errCode(cl) != wire.CodeInvalidRequest || !strings.Contains(cl.Error.Message, "1024") {
		t.Fatalf("oversized line answer %+v", cl)
	}
	r.expectEOF()
	ev := h.rec.Wait(t, "c2 closed", isClosed("c2")).Event.(ConnClosed)
	if ev.Reason != ReasonLineTooLong {
		t.Fatalf("conn.closed = %+v", ev)
	}
	pe := h.rec.Wait(t, "fatal protocol error", func(r *eventlog.Record) bool {
		e, ok := r.Event.(eventlog.ConnProtocolError)
		return ok && e.Fatal
	}).Event.(eventlog.ConnProtocolError)
	if pe.ConnID != "c2" || pe.Peer != "control" {
		t.Fatalf("protocol error %+v", pe)
	}
	var pong pongResult
	h.mustCall(other, "ping", nil, &pong)
	if !pong.Pong {
		t.Fatal("the other connection is disturbed")
	}
}

// A client that pipelines requests and reads slowly is throttled, not
// dropped: its reader stops taking requests while responses are unread.
func TestSlowReaderIsThrottled(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.SubscriberQueue = 8 })
	r := h.raw()
	const n = 20000
	go func() {
		line := []byte(strings.Repeat(`{"id":1,"method":"ping"}`+"\n", 100))
		for i := 0; i < n/100; i++ {
			r.nc.SetWriteDeadline(time.Now().Add(20 * time.Second))
			if _, err := r.nc.Write(line); err != nil {
				return
			}
		}
	}()
	for i := 0; i < n; i++ {
		if cl := r.mustLine(); errCode(cl) != 0 {
			t.Fatalf("answer %d: %+v", i, cl)
		}
		if i%2000 == 0 {
			time.Sleep(20 * time.Millisecond) // let the server's writer block
		}
	}
}

// Responses that arrive on their own (calls answered later, as job.wait
// is) can still pile up
// behind a client that does not read; past the bound it is disconnected.
func TestResponseQueueFull(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.SubscriberQueue = 8 })
	c := h.client()
	h.mustCall(c, "ping", nil, nil)
	r := h.raw()
	const waits = 5000
	var b strings.Builder
	for i := 0; i < waits; i++ {
		b.WriteString(`{"id":` + itoa(i+1) + `,"method":"test.later"}` + "\n")
	}
	r.send(b.String())
	waitUntil(t, "all calls pending", func() bool { return h.dom.pendingCount() == waits })
	h.dom.release() // 5000 answers, nobody reads
	ev := h.rec.Wait(t, "c2 closed", isClosed("c2")).Event.(ConnClosed)
	if ev.Reason != ReasonResponseQueueFull {
		t.Fatalf("conn.closed = %+v", ev)
	}
	h.mustCall(c, "ping", nil, nil)
}

func TestListenChecks(t *testing.T) {
	dir := testio.ShortTemp(t, "ctl")
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, "daemon.sock")
	// A stale socket (nothing listens) is replaced.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	srv, err := New(Options{Path: path, System: sys})
	if err != nil {
		t.Fatalf("New over a stale socket: %v", err)
	}
	for p, want := range map[string]os.FileMode{home: 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	// A live one is an error.
	sys2 := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys2.Shutdown()
	if _, err := New(Options{Path: path, System: sys2}); err == nil ||
		!strings.Contains(err.Error(), "another daemon is listening on "+path) {
		t.Fatalf("New over a live socket: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind after Close: %v", err)
	}
	// Not a socket: refused.
	os.WriteFile(path, nil, 0o600)
	if _, err := New(Options{Path: path, System: sys2}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("New over a regular file: %v", err)
	}
	if _, err := New(Options{Path: path + "x", System: sys2, Overflow: "explode"}); err == nil {
		t.Fatal("bad overflow policy accepted")
	}
}

func TestCloseAnswersAndLeavesNothing(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	waitErr := make(chan error, 1)
	go func() { waitErr <- h.call(c, "test.later", nil, nil) }()
	waitUntil(t, "the call is pending", func() bool { return h.dom.pendingCount() == 1 })

	sub := h.client()
	h.mustCall(sub, "events.subscribe", nil, nil)
	stalled := h.raw()
	stalled.send(`{"id":1,"method":"events.subscribe"}`)
	stalled.mustLine()
	for i := 0; i < 20000; i++ { // fill the stalled one's socket and queue
		h.bus.Emit(lanes.JobQueued{JobID: "j-x", Lane: "no-net", Queued: i})
	}
	idle := h.raw()
	idle.send(`{"id":1,"method":"ping"}`)
	idle.mustLine()

	start := time.Now()
	h.stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	var we *wire.Error
	if err := <-waitErr; !errors.As(err, &we) || we.Code != wire.CodeShuttingDown {
		t.Fatalf("pending call at Close got %v, want code %d", err, wire.CodeShuttingDown)
	}
	closed := 0
	for _, r := range h.rec.Records() {
		if e, ok := r.Event.(ConnClosed); ok {
			closed++
			if e.Reason != ReasonDaemonStopping {
				t.Errorf("conn.closed %+v, want reason daemon_stopping", e)
			}
		}
	}
	if closed != 4 {
		t.Fatalf("%d conn.closed events, want 4", closed)
	}
	if open := h.srv.Metrics().Connections; open != 0 {
		t.Fatalf("%d connections open after Close", open)
	}
	idle.expectEOF()
	if n, closed := h.dom.pendingCount(), h.dom.closedCount(); n != 0 || closed != 1 {
		t.Fatalf("%d calls left pending, %d closed; want 0 and 1", n, closed)
	}
	// Everything the server started has ended (goleak in TestMain checks
	// the whole package at exit too).
	c.Close()
	sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.srv.Serve(ctx); err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
}

func TestServeStopsOnContext(t *testing.T) {
	dir := testio.ShortTemp(t, "ctl")
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	srv, err := New(Options{Path: filepath.Join(dir, "d.sock"), System: sys})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	c, err := client.Dial(filepath.Join(dir, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Call(context.Background(), "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v on cancel", err)
	}
	// The open connection still works until Close.
	if err := c.Call(context.Background(), "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(context.Background(), "ping", nil, nil); !errors.Is(err, client.ErrClientClosed) {
		t.Fatalf("call after Close: %v", err)
	}
	c.Close()
}

func TestClientConcurrentCalls(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	inParallel(t, 16, func() error {
		for i := 0; i < 200; i++ {
			var p pongResult
			if err := h.call(c, "ping", nil, &p); err != nil || !p.Pong {
				return fmt.Errorf("ping %d: %+v, %v", i, p, err)
			}
		}
		return nil
	})
	// A cancelled call does not confuse later ones.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Call(ctx, "ping", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	h.mustCall(c, "ping", nil, nil)
}

// Lines from the daemon are not bound by MaxLine: a job's record carries
// its whole output.
func TestClientReadsLongLines(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	big := strings.Repeat("line of output\n", 300000) // 4.5 MB, more once escaped
	h.dom.setBig(big)
	var got textParams
	h.mustCall(c, "test.big", nil, &got)
	if got.Text != big {
		t.Fatalf("output of %d bytes came back as %d", len(big), len(got.Text))
	}
}

func TestDialNoDaemon(t *testing.T) {
	dir := testio.ShortTemp(t, "ctl")
	path := filepath.Join(dir, "daemon.sock")
	_, err := client.Dial(path)
	if !errors.Is(err, client.ErrNoDaemon) || !strings.Contains(err.Error(), "no daemon at "+path) {
		t.Fatalf("Dial(missing) = %v", err)
	}
	ln, _ := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	ln.SetUnlinkOnClose(false)
	ln.Close() // stale socket: ECONNREFUSED
	if _, err := client.Dial(path); !errors.Is(err, client.ErrNoDaemon) {
		t.Fatalf("Dial(stale) = %v", err)
	}
}
