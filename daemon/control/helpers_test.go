package control

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/api"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
	"github.com/orchestrd/orchestrd/wire"
)

func TestMain(m *testing.M) {
	if p := os.Getenv(peerEnv); p != "" {
		os.Exit(peerClientMain(p)) // acting as another user's client; see peer_test.go
	}
	if p := os.Getenv(callEnv); p != "" {
		os.Exit(callClientMain(p)) // a client the "daemon" started; see person_test.go
	}
	goleak.VerifyTestMain(m,
		// protoactor starts this timer goroutine when it logs a dead letter
		// and it ends by itself a second later. Dead letters are inherent:
		// stopping the conns actor sends Stop to every child it knows,
		// including one that is stopping on its own (its client hung up).
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// ---- a domain ----

// testDomain registers methods with the server as a domain does, to
// exercise what a method can do: answer at once, later from another
// goroutine, or never (until its connection closes).
type testDomain struct {
	mu      sync.Mutex
	pending map[api.Call]bool // test.later calls not answered yet
	closed  int               // OnClose functions run
	big     string            // test.big's answer
	wg      sync.WaitGroup    // goroutines answering test.async
}

type textParams struct {
	Text string `json:"text"`
}

func newTestDomain() *testDomain { return &testDomain{pending: map[api.Call]bool{}} }

func (d *testDomain) register(mux api.Mux) {
	// test.echo answers at once with its params.
	mux.Handle("test.echo", func(call api.Call) {
		var p textParams
		if err := call.Decode(&p); err != nil {
			call.Fail(err)
			return
		}
		if p.Text == "" {
			call.Fail(api.Errorf(api.CodeNotFound, "nothing to echo"))
			return
		}
		call.Respond(p)
	})
	// test.panic panics, as a domain's bug would.
	mux.Handle("test.panic", func(api.Call) { panic("test.panic") })
	// test.later answers when release is called, or never: its OnClose
	// then counts it and forgets it.
	mux.Handle("test.later", func(call api.Call) {
		if err := call.Decode(&api.NoParams{}); err != nil {
			call.Fail(err)
			return
		}
		d.mu.Lock()
		d.pending[call] = true
		d.mu.Unlock()
		call.OnClose(func() {
			d.mu.Lock()
			delete(d.pending, call)
			d.closed++
			d.mu.Unlock()
		})
	})
	// test.async fails from a goroutine of its own, as a job actor answers.
	mux.Handle("test.async", func(call api.Call) {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			call.Fail(&api.Error{Code: api.CodeInvalidState, Message: "answered later", Data: map[string]int{"n": 1}})
		}()
	})
	// test.person, only a person may call, answers with its origin.
	api.HandlePerson(mux, "test.person", func(call api.Call) { call.Respond(api.OriginOf(call)) })
	// test.big answers with d.big.
	mux.Handle("test.big", func(call api.Call) {
		d.mu.Lock()
		big := d.big
		d.mu.Unlock()
		call.Respond(textParams{Text: big})
	})
}

// pendingCount is how many test.later calls are neither answered nor
// closed.
func (d *testDomain) pendingCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

func (d *testDomain) closedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// release answers every pending test.later call with {"text":"done"}, from
// the calling goroutine.
func (d *testDomain) release() {
	d.mu.Lock()
	calls := d.pending
	d.pending = map[api.Call]bool{}
	d.mu.Unlock()
	for call := range calls {
		call.Respond(textParams{Text: "done"})
	}
}

func (d *testDomain) setBig(s string) {
	d.mu.Lock()
	d.big = s
	d.mu.Unlock()
}

// ---- events ----

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
	dom  *testDomain
	srv  *Server
	rec  *eventlogtest.Recorder

	serveDone chan error
	stopOnce  sync.Once
}

func newHarness(t testing.TB, mod func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, dir: testio.ShortTemp(t, "ctl"), dom: newTestDomain(), rec: eventlogtest.NewRecorder(), serveDone: make(chan error, 1)}
	h.path = filepath.Join(h.dir, "home", "daemon.sock")
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	h.bus = bus
	bus.Subscribe([]string{"conn.*", "subscriber.*"}, h.rec)
	h.sys = actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	opts := Options{Path: h.path, Version: "test-1", Bus: bus, System: h.sys, Logger: zerolog.Nop()}
	if mod != nil {
		mod(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		h.sys.Shutdown()
		t.Fatal(err)
	}
	h.srv = srv
	h.dom.register(srv)
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
		h.dom.wg.Wait()
		h.sys.Shutdown()
		h.bus.Close()
	})
}

func (h *harness) client() *client.Client {
	h.t.Helper()
	c, err := client.Dial(h.path)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func (h *harness) call(c *client.Client, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Call(ctx, method, params, result)
}

// mustCall calls and fails the test on any error.
func (h *harness) mustCall(c *client.Client, method string, params, result any) {
	h.t.Helper()
	if err := h.call(c, method, params, result); err != nil {
		h.t.Fatalf("%s: %v", method, err)
	}
}

// callErr calls and returns the remote error, failing if there is none.
func (h *harness) callErr(c *client.Client, method string, params any) *wire.Error {
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

// inParallel runs work in n goroutines at once, waits for all of them, and
// fails t with the first error one returned.
func inParallel(t testing.TB, n int, work func() error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
