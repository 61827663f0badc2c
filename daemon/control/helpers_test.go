package control

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

func TestMain(m *testing.M) {
	if p := os.Getenv(peerEnv); p != "" {
		os.Exit(peerClientMain(p)) // acting as another user's client; see peer_test.go
	}
	goleak.VerifyTestMain(m,
		// protoactor starts this timer goroutine when it logs a dead letter
		// and it ends by itself a second later. Dead letters are inherent:
		// stopping the conns actor sends Stop to every child it knows,
		// including one that is stopping on its own (its client hung up).
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// ---- fake backend ----

type fakeBackend struct {
	mu          sync.Mutex
	jobs        map[string]*api.JobRecord
	order       []string
	waiters     map[string]map[int]func(api.JobRecord)
	nextWaiter  int
	next        int
	queueLimit  int
	cancelAsync bool // reply to Cancel from another goroutine
	wg          sync.WaitGroup
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{jobs: map[string]*api.JobRecord{}, waiters: map[string]map[int]func(api.JobRecord){}, queueLimit: 1000}
}

var fakeLanes = map[string]string{"no-net": "none", "net": "full"}

func (b *fakeBackend) Submit(spec api.JobSpec) (string, *wire.Error) {
	if _, ok := fakeLanes[spec.Lane]; !ok {
		return "", wire.Errorf(wire.CodeNotFound, "lane %s not found", spec.Lane)
	}
	if spec.Command == "" && len(spec.Argv) == 0 {
		return "", wire.Errorf(wire.CodeInvalidParams, "invalid params for job.submit: command or argv is required")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	queued := 0
	for _, j := range b.jobs {
		if j.State == api.StateQueued {
			queued++
		}
	}
	if queued >= b.queueLimit {
		return "", wire.Errorf(wire.CodeQueueFull, "lane %s queue is full (%d jobs)", spec.Lane, queued)
	}
	b.next++
	id := fmt.Sprintf("j-%d", b.next)
	b.jobs[id] = &api.JobRecord{ID: id, Lane: spec.Lane, State: api.StateQueued, Command: spec.Command,
		Argv: spec.Argv, Cwd: spec.Cwd, CreatedAt: time.Now()}
	b.order = append(b.order, id)
	return id, nil
}

func (b *fakeBackend) Get(id string) (api.JobRecord, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok {
		return api.JobRecord{}, false
	}
	return *j, true
}

func (b *fakeBackend) List(f api.Filter) []api.JobRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []api.JobRecord
	for _, id := range b.order {
		j := b.jobs[id]
		if (f.State == "" || string(j.State) == f.State) && (f.Lane == "" || j.Lane == f.Lane) {
			out = append(out, *j)
		}
	}
	return out
}

func (b *fakeBackend) Cancel(id string, reply func(bool, *wire.Error)) {
	b.mu.Lock()
	j, ok := b.jobs[id]
	var (
		was bool
		err *wire.Error
		fns []func(api.JobRecord)
		rec api.JobRecord
	)
	switch {
	case !ok:
		err = wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	case j.State.Terminal():
		err = wire.Errorf(wire.CodeInvalidState, "job %s is already %s", id, j.State)
	default:
		was = j.State == api.StateRunning
		j.State, j.WasCancelled, j.Error = api.StateCancelled, true, api.ErrCancelled
		rec = *j
		fns = b.takeWaitersLocked(id)
	}
	async := b.cancelAsync
	b.mu.Unlock()
	for _, fn := range fns {
		fn(rec)
	}
	if async {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); reply(was, err) }()
		return
	}
	reply(was, err)
}

func (b *fakeBackend) takeWaitersLocked(id string) []func(api.JobRecord) {
	var fns []func(api.JobRecord)
	for _, fn := range b.waiters[id] {
		fns = append(fns, fn)
	}
	delete(b.waiters, id)
	return fns
}

func (b *fakeBackend) Wait(id string, fn func(api.JobRecord)) (func(), *wire.Error) {
	b.mu.Lock()
	j, ok := b.jobs[id]
	if !ok {
		b.mu.Unlock()
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	if j.State.Terminal() {
		rec := *j
		b.mu.Unlock()
		fn(rec)
		return func() {}, nil
	}
	b.nextWaiter++
	n := b.nextWaiter
	if b.waiters[id] == nil {
		b.waiters[id] = map[int]func(api.JobRecord){}
	}
	b.waiters[id][n] = fn
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		delete(b.waiters[id], n)
		if len(b.waiters[id]) == 0 {
			delete(b.waiters, id)
		}
		b.mu.Unlock()
	}, nil
}

func (b *fakeBackend) waiterCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range b.waiters {
		n += len(m)
	}
	return n
}

func (b *fakeBackend) setState(id string, s api.State, exit *int32) {
	b.mu.Lock()
	j := b.jobs[id]
	j.State = s
	j.ExitCode = exit
	rec := *j
	var fns []func(api.JobRecord)
	if s.Terminal() {
		fns = b.takeWaitersLocked(id)
	}
	b.mu.Unlock()
	for _, fn := range fns {
		fn(rec)
	}
}

func (b *fakeBackend) Lanes() []api.LaneStatus {
	return []api.LaneStatus{
		{Name: "net", Network: "full", Slots: 2, QueueLimit: 10, Runners: []api.RunnerStatus{{ID: "net-1", Pid: 11, State: "ready"}}},
		{Name: "no-net", Network: "none", Slots: 4, QueueLimit: 10, Runners: []api.RunnerStatus{{ID: "no-net-1", Pid: 12, State: "ready"}}},
	}
}

func (b *fakeBackend) Metrics() api.Metrics {
	b.mu.Lock()
	defer b.mu.Unlock()
	return api.Metrics{UptimeMs: 1234, JobsSubmitted: int64(b.next), JobsByState: map[api.State]int64{}}
}

// ---- event recorder ----

// recorder is a bus sink keeping every record it gets.
type recorder struct {
	mu     sync.Mutex
	recs   []*eventlog.Record
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) Deliver(rec *eventlog.Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) all() []*eventlog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*eventlog.Record(nil), r.recs...)
}

// wait returns the first record that satisfies pred, waiting up to 10s.
func (r *recorder) wait(t testing.TB, what string, pred func(*eventlog.Record) bool) *eventlog.Record {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		for _, rec := range r.all() {
			if pred(rec) {
				return rec
			}
		}
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("timed out waiting for event: %s", what)
			return nil
		}
	}
}

func isClosed(connID string) func(*eventlog.Record) bool {
	return func(r *eventlog.Record) bool {
		e, ok := r.Event.(ConnClosed)
		return ok && e.ConnID == connID
	}
}

// ---- harness ----

type harness struct {
	t    testing.TB
	dir  string
	path string
	sys  *actors.System
	bus  *eventlog.Bus
	be   *fakeBackend
	srv  *Server
	rec  *recorder

	serveDone chan error
	stopOnce  sync.Once
}

// shortTempDir is a temp dir with a short path (unix socket paths are
// limited to 108 bytes; t.TempDir() names can be long).
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newHarness(t testing.TB, mod func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, dir: shortTempDir(t), be: newFakeBackend(), rec: newRecorder(), serveDone: make(chan error, 1)}
	h.path = filepath.Join(h.dir, "home", "daemon.sock")
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	h.bus = bus
	bus.Subscribe([]string{"conn.*", "subscriber.*"}, h.rec)
	h.sys = actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	opts := Options{Path: h.path, Version: "test-1", Backend: h.be, Bus: bus, System: h.sys, Logger: zerolog.Nop()}
	if mod != nil {
		mod(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		h.sys.Shutdown()
		t.Fatal(err)
	}
	h.srv = srv
	go func() { h.serveDone <- srv.Serve(context.Background()) }()
	t.Cleanup(h.stop)
	return h
}

// stop closes the server and everything under it.
func (h *harness) stop() {
	h.stopOnce.Do(func() {
		if err := h.srv.Close(); err != nil {
			h.t.Errorf("Close: %v", err)
		}
		select {
		case err := <-h.serveDone:
			if err != nil {
				h.t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			h.t.Errorf("Serve did not return after Close")
		}
		h.be.wg.Wait()
		h.sys.Shutdown()
		h.bus.Close()
	})
}

func (h *harness) client() *Client {
	h.t.Helper()
	c, err := Dial(h.path)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func (h *harness) call(c *Client, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Call(ctx, method, params, result)
}

// mustCall calls and fails the test on any error.
func (h *harness) mustCall(c *Client, method string, params, result any) {
	h.t.Helper()
	if err := h.call(c, method, params, result); err != nil {
		h.t.Fatalf("%s: %v", method, err)
	}
}

// callErr calls and returns the remote error, failing if there is none.
func (h *harness) callErr(c *Client, method string, params any) *wire.Error {
	h.t.Helper()
	err := h.call(c, method, params, nil)
	we, ok := err.(*wire.Error)
	if !ok {
		h.t.Fatalf("%s: want a *wire.Error, got %v", method, err)
	}
	return we
}

// ---- raw connection ----

// raw is a client speaking bytes, for protocol-level tests.
type raw struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func (h *harness) raw() *raw {
	h.t.Helper()
	nc, err := net.Dial("unix", h.path)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { nc.Close() })
	return &raw{t: h.t, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
}

func (r *raw) send(s string) {
	r.t.Helper()
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	r.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.nc.Write([]byte(s)); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// line reads one line (without the newline); "" and the error at EOF.
func (r *raw) line() (string, error) {
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	s, err := r.br.ReadString('\n')
	if err != nil {
		return s, err
	}
	return strings.TrimSuffix(s, "\n"), nil
}

func (r *raw) mustLine() wire.ClientLine {
	r.t.Helper()
	s, err := r.line()
	if err != nil {
		r.t.Fatalf("read: %v (partial %q)", err, s)
	}
	var cl wire.ClientLine
	if err := json.Unmarshal([]byte(s), &cl); err != nil {
		r.t.Fatalf("line %q is not JSON: %v", s, err)
	}
	return cl
}

// expectEOF reads until EOF, failing on anything but EOF-like endings.
func (r *raw) expectEOF() []string {
	r.t.Helper()
	var rest []string
	for {
		s, err := r.line()
		if err != nil {
			if s != "" {
				rest = append(rest, s)
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				r.t.Fatalf("connection still open (timeout); got %q", rest)
			}
			return rest
		}
		rest = append(rest, s)
	}
}

func errCode(cl wire.ClientLine) int {
	if cl.Error == nil {
		return 0
	}
	return cl.Error.Code
}
