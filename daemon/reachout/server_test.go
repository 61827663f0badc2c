package reachout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
	"github.com/orchestrd/orchestrd/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle timer (a message to an actor
		// stopped, such as a hook's linked approval); it ends by itself a
		// second later.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// ---- a fake Asker: the test resolves what it was asked ----

type asked struct {
	req    approvals.Request
	answer func(api.Approval)
	id     string
	async  bool // Cancel answers from another goroutine, later

	mu      sync.Mutex
	done    bool
	cancels []string
}

func (a *asked) ID() string { return a.id }

// Cancel ends it cancelled, answering once, as approvals.Pending does.
func (a *asked) Cancel(reason string) {
	a.mu.Lock()
	a.cancels = append(a.cancels, reason)
	a.mu.Unlock()
	if a.async {
		// As the approval actor does: the answer comes later, from
		// another goroutine.
		go a.resolve(api.ApprovalCancelled, api.Resolution{By: api.ByDaemon, Reason: reason})
		return
	}
	a.resolve(api.ApprovalCancelled, api.Resolution{By: api.ByDaemon, Reason: reason})
}

func (a *asked) resolve(state api.ApprovalState, res api.Resolution) bool {
	a.mu.Lock()
	if a.done {
		a.mu.Unlock()
		return false
	}
	a.done = true
	a.mu.Unlock()
	a.answer(api.Approval{ID: a.id, State: state, Source: a.req.Source, Kind: a.req.Kind,
		RequestID: a.req.RequestID, Resolution: &res})
	return true
}

func (a *asked) cancelled() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.cancels...)
}

type fakeAsker struct {
	mu  sync.Mutex
	n   int
	err error
	// auto, when set, answers at once from inside Ask (a rule).
	auto  *api.Resolution
	async bool
	asked chan *asked
	// panicOn: Ask panics for a request of this tool, after asking.
	panicOn string
}

func newFakeAsker() *fakeAsker { return &fakeAsker{asked: make(chan *asked, 100)} }

func (f *fakeAsker) Ask(req approvals.Request, answer func(api.Approval)) (approvals.Pending, error) {
	f.mu.Lock()
	f.n++
	a := &asked{req: req, answer: answer, id: "a-test-" + string(rune('0'+f.n)), async: f.async}
	err, auto, panicOn := f.err, f.auto, f.panicOn
	f.mu.Unlock()
	if panicOn != "" && req.ToolName == panicOn {
		f.asked <- a
		panic("fake asker: " + panicOn)
	}
	if err != nil {
		return nil, err
	}
	if auto != nil {
		a.resolve(auto.Decision.State(), *auto)
	}
	f.asked <- a
	return a, nil
}

func (f *fakeAsker) next(t *testing.T) *asked {
	t.Helper()
	select {
	case a := <-f.asked:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was asked")
		return nil
	}
}

// ---- event recorder ----

// recorder is an eventlogtest.Recorder read as events.
type recorder struct{ *eventlogtest.Recorder }

func newRecorder() recorder { return recorder{eventlogtest.NewRecorder()} }

func (r recorder) wait(t *testing.T, what string, pred func(eventlog.Event) bool) eventlog.Event {
	t.Helper()
	ev, _ := r.waitFrom(t, 0, what, pred)
	return ev
}

// waitFrom is wait for an event at or after the from'th recorded; it
// returns the event and the index after it.
func (r recorder) waitFrom(t *testing.T, from int, what string, pred func(eventlog.Event) bool) (eventlog.Event, int) {
	t.Helper()
	rec, next := r.WaitFrom(t, from, what, func(rec *eventlog.Record) bool { return pred(rec.Event) })
	if rec == nil {
		return nil, next
	}
	return rec.Event, next
}

// all is every event recorded so far.
func (r recorder) all() []eventlog.Event {
	recs := r.Records()
	out := make([]eventlog.Event, len(recs))
	for i, rec := range recs {
		out[i] = rec.Event
	}
	return out
}

// ---- harness ----

type harness struct {
	sys    *actors.System
	panics chan actors.PanicInfo
	t      *testing.T
	srv    *Server
	asker  *fakeAsker
	rec    recorder
	bus    *eventlog.Bus
	path   string
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, asker: newFakeAsker(), rec: newRecorder(), bus: bus,
		panics: make(chan actors.PanicInfo, 8)}
	h.sys = actors.NewSystem(actors.Options{Logger: zerolog.Nop(), OnPanic: func(p actors.PanicInfo) { h.panics <- p }})
	opts.System = h.sys
	bus.Subscribe([]string{"reachout.*", "conn.*"}, h.rec)
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "vibe-reachout.sock")
	}
	h.path = opts.Path
	opts.Asker, opts.Bus, opts.Logger = h.asker, bus, zerolog.Nop()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	h.srv, err = Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.srv.Close(); err != nil {
			t.Error(err)
		}
		bus.Close()
		h.sys.Shutdown()
	})
	return h
}

const uuid1 = "550e8400-e29b-41d4-a716-446655440000"

func requestLine(id string) string {
	return `{"request_id":"` + id + `","tool_name":"Bash","tool_input":{"command":"rm -rf x"},"cwd":"/w","session_id":"s1",` +
		`"permission_suggestions":[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"rm:*"}]}],"assistant_context":"cleaning"}` + "\n"
}

// dial connects and sends line; half says whether to shut the write side
// after it, as the real hook does.
func (h *harness) dial(line string, half bool) *net.UnixConn {
	h.t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.path, Net: "unix"})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, line); err != nil {
		h.t.Fatal(err)
	}
	if half {
		if err := c.CloseWrite(); err != nil {
			h.t.Fatal(err)
		}
	}
	return c
}

// readAll reads what the server sends until it closes the connection.
func readAll(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if errors.Is(err, syscall.ECONNRESET) {
		// The server closed with bytes of ours unread: that is a close too.
		err = nil
	}
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return string(b)
}

func TestAsksWhatTheHookSent(t *testing.T) {
	h := newHarness(t, Options{Timeout: 42 * time.Second})
	ev := h.rec.wait(t, "reachout.listening", func(e eventlog.Event) bool { _, ok := e.(Listening); return ok }).(Listening)
	if ev.Socket != h.path || ev.TimeoutMs != 42000 {
		t.Fatalf("listening %+v", ev)
	}
	if fi, err := os.Stat(h.path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v %v", fi, err)
	}
	c := h.dial(requestLine("{"+strings.ToUpper(uuid1)+"}"), true)
	a := h.asker.next(t)
	r := a.req
	if r.Source != api.SourceReachout || r.Kind != api.KindTool || !r.Bound || r.Timeout != 42*time.Second ||
		r.RequestID != uuid1 || r.ToolName != "Bash" || string(r.ToolInput) != `{"command":"rm -rf x"}` ||
		r.Cwd != "/w" || r.SessionID != "s1" || r.AssistantContext != "cleaning" || len(r.PermissionSuggestions) != 1 {
		t.Fatalf("asked %+v", r)
	}
	a.resolve(api.ApprovalAllowed, api.Resolution{Decision: api.DecisionAllow, By: "cli"})
	if got := readAll(t, c); got != `{"request_id":"`+uuid1+`","decision":"Allow"}`+"\n" {
		t.Fatalf("answer %q", got)
	}
}

// Each terminal state is answered as the real bot answers it.
func TestAnswers(t *testing.T) {
	sugg := json.RawMessage(`{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"rm:*"}]}`)
	idx := 0
	for _, c := range []struct {
		name  string
		state api.ApprovalState
		res   api.Resolution
		want  string // "" : closed without an answer
	}{
		{"allow", api.ApprovalAllowed, api.Resolution{Decision: api.DecisionAllow, Message: "ok"}, `"decision":"Allow","message":"ok"`},
		{"deny", api.ApprovalDenied, api.Resolution{Decision: api.DecisionDeny, Message: "not <that>"}, `"decision":"Deny","message":"not <that>"`},
		{"always", api.ApprovalAlwaysAllowed, api.Resolution{Decision: api.DecisionAlwaysAllow, Suggestion: sugg, SuggestionIndex: &idx},
			`"decision":"AlwaysAllow","always_allow_suggestion":` + string(sugg)},
		{"reply", api.ApprovalReplied, api.Resolution{Decision: api.DecisionReply, UserMessage: "use pytest"}, `"decision":"Reply","user_message":"use pytest"`},
		{"timed out", api.ApprovalTimedOut, api.Resolution{Decision: api.DecisionTimeout, By: api.ByTimeout}, `"decision":"Timeout"`},
		{"daemon stopping", api.ApprovalCancelled, api.Resolution{By: api.ByDaemon, Reason: api.CancelDaemonStopped}, `"decision":"Timeout"`},
		{"cancelled", api.ApprovalCancelled, api.Resolution{By: api.ByControl, Reason: api.CancelRequested}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			conn := h.dial(requestLine(uuid1), true)
			a := h.asker.next(t)
			a.resolve(c.state, c.res)
			want := ""
			if c.want != "" {
				want = `{"request_id":"` + uuid1 + `",` + c.want + "}\n"
			}
			if got := readAll(t, conn); got != want {
				t.Fatalf("answer %q, want %q", got, want)
			}
			if cs := a.cancelled(); len(cs) != 0 {
				t.Fatalf("cancelled %v", cs)
			}
		})
	}
}

// A rule's answer comes from inside Ask: it is written all the same.
func TestAnsweredInsideAsk(t *testing.T) {
	h := newHarness(t, Options{})
	h.asker.auto = &api.Resolution{Decision: api.DecisionDeny, Message: "rule", By: api.ByRule}
	c := h.dial(requestLine(uuid1), true)
	if got := readAll(t, c); got != `{"request_id":"`+uuid1+`","decision":"Deny","message":"rule"}`+"\n" {
		t.Fatalf("answer %q", got)
	}
}

// The hook's half-close after its line is not it going away; its full
// close is, and cancels at once. Bytes after the line are ignored.
func TestHalfCloseAndClose(t *testing.T) {
	h := newHarness(t, Options{})
	half := h.dial(requestLine(uuid1), true)
	a1 := h.asker.next(t)
	// Extra bytes, then the half-close later, while the server waits.
	extra := h.dial(requestLine("00000000-0000-0000-0000-000000000001"), false)
	a2 := h.asker.next(t)
	if _, err := io.WriteString(extra, strings.Repeat("junk after the line\n", 10000)); err != nil {
		t.Fatal(err)
	}
	if err := extra.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	gone := h.dial(requestLine("00000000-0000-0000-0000-000000000002"), true)
	a3 := h.asker.next(t)
	gone.Close()
	waitFor(t, "the closed hook's cancellation", func() bool { return len(a3.cancelled()) > 0 })
	if cs := a3.cancelled(); len(cs) != 1 || cs[0] != api.CancelRequesterGone {
		t.Fatalf("closed hook: cancels %v", cs)
	}
	// A hook that closes its end after the others: its cancellation comes
	// after the server has seen theirs.
	late := h.dial(requestLine("00000000-0000-0000-0000-000000000003"), true)
	a4 := h.asker.next(t)
	late.Close()
	waitFor(t, "the late hook's cancellation", func() bool { return len(a4.cancelled()) > 0 })
	for i, a := range []*asked{a1, a2} {
		if cs := a.cancelled(); len(cs) != 0 {
			t.Fatalf("hook %d (half-closed) was cancelled: %v", i+1, cs)
		}
	}
	a1.resolve(api.ApprovalDenied, api.Resolution{Decision: api.DecisionDeny, Message: "no"})
	if got := readAll(t, half); !strings.Contains(got, `"decision":"Deny","message":"no"`) {
		t.Fatalf("half-closed hook got %q", got)
	}
	a2.resolve(api.ApprovalAllowed, api.Resolution{Decision: api.DecisionAllow})
	if got := readAll(t, extra); !strings.Contains(got, `"decision":"Allow"`) {
		t.Fatalf("hook with extra bytes got %q", got)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testio.Eventually(t, 10*time.Second, what, cond)
}

// Malformed requests are closed without an answer and say why; the other
// connections go on.
func TestMalformed(t *testing.T) {
	h := newHarness(t, Options{})
	good := h.dial(requestLine(uuid1), true)
	a := h.asker.next(t)
	for _, c := range []struct {
		name, line, want, id string
	}{
		{"not JSON", "hello\n", "request is not JSON", ""},
		{"missing field", `{"request_id":"` + uuid1 + `","tool_input":{},"cwd":"/","session_id":"s"}` + "\n", "missing tool_name", uuid1},
		{"not a UUID", `{"request_id":"nope","tool_name":"B","tool_input":{},"cwd":"/","session_id":"s"}` + "\n", `request_id "nope" is not a UUID`, ""},
		{"tool_input", `{"request_id":"` + strings.ReplaceAll(uuid1, "-", "") + `","tool_name":"B","tool_input":"x","cwd":"/","session_id":"s"}` + "\n",
			"tool_input is a string, want an object", uuid1},
		{"too long", strings.Repeat("x", wire.MaxReachoutLine+1) + "\n", "reachout request line longer than 1048576 bytes", ""},
		{"no newline, too long, never closed", strings.Repeat("x", wire.MaxReachoutLine+8192), "reachout request line longer than 1048576 bytes", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := h.dial(c.line, !strings.Contains(c.name, "never closed"))
			if got := readAll(t, conn); got != "" {
				t.Fatalf("answered %q", got)
			}
			ev := h.rec.wait(t, "request_refused: "+c.want, func(e eventlog.Event) bool {
				r, ok := e.(RequestRefused)
				return ok && strings.Contains(r.Error, c.want)
			}).(RequestRefused)
			if ev.RequestID != c.id {
				t.Fatalf("refused %+v, want request_id %q", ev, c.id)
			}
		})
	}
	if cs := a.cancelled(); len(cs) != 0 {
		t.Fatalf("the good hook was cancelled: %v", cs)
	}
	a.resolve(api.ApprovalAllowed, api.Resolution{Decision: api.DecisionAllow})
	if got := readAll(t, good); !strings.Contains(got, `"decision":"Allow"`) {
		t.Fatalf("good hook got %q", got)
	}
}

// A connection that sends no line in time is refused.
func TestLineTimeout(t *testing.T) {
	h := newHarness(t, Options{LineTimeout: 100 * time.Millisecond})
	c := h.dial(`{"request_id":`, false)
	if got := readAll(t, c); got != "" {
		t.Fatalf("answered %q", got)
	}
	h.rec.wait(t, "refused for time", func(e eventlog.Event) bool {
		r, ok := e.(RequestRefused)
		return ok && r.Error == "no request line within 100ms"
	})
}

// An Ask that fails (a request_id already pending) closes the connection.
func TestAskFails(t *testing.T) {
	h := newHarness(t, Options{})
	h.asker.err = api.Errorf(api.CodeInvalidState, "approval for request %s is already pending", uuid1)
	c := h.dial(requestLine(uuid1), true)
	if got := readAll(t, c); got != "" {
		t.Fatalf("answered %q", got)
	}
	h.rec.wait(t, "refused", func(e eventlog.Event) bool {
		r, ok := e.(RequestRefused)
		return ok && r.RequestID == uuid1 && strings.Contains(r.Error, "asking: approval for request")
	})
}

// A live socket is left alone: reachout.unavailable; a stale one is
// replaced.
func TestSocketInUse(t *testing.T) {
	h := newHarness(t, Options{})
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	rec := newRecorder()
	bus.Subscribe([]string{"reachout.*"}, rec)
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	_, err = Start(Options{Path: h.path, Asker: newFakeAsker(), Bus: bus, Logger: zerolog.Nop(), System: sys})
	if err == nil || !strings.Contains(err.Error(), "making vibe-reachout's hook socket") {
		t.Fatalf("second server: %v", err)
	}
	ev := rec.wait(t, "unavailable", func(e eventlog.Event) bool { _, ok := e.(Unavailable); return ok }).(Unavailable)
	if ev.Socket != h.path || !strings.Contains(ev.Error, "already listening") {
		t.Fatalf("unavailable %+v", ev)
	}
	// The first still serves.
	c := h.dial(requestLine(uuid1), true)
	h.asker.next(t).resolve(api.ApprovalAllowed, api.Resolution{Decision: api.DecisionAllow})
	if got := readAll(t, c); !strings.Contains(got, "Allow") {
		t.Fatalf("answer %q", got)
	}

	// A stale socket file (its server died) is replaced.
	stale := filepath.Join(t.TempDir(), "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	h2 := newHarness(t, Options{Path: stale})
	c2 := h2.dial(requestLine(uuid1), true)
	h2.asker.next(t).resolve(api.ApprovalAllowed, api.Resolution{Decision: api.DecisionAllow})
	if got := readAll(t, c2); !strings.Contains(got, "Allow") {
		t.Fatalf("answer %q", got)
	}
}

// Close cancels what still waits (daemon_stopping: the hook hears
// Timeout), closes connections still sending, waits for everything and
// removes the socket.
func TestClose(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async cancel %v", async), func(t *testing.T) { testClose(t, async) })
	}
}

func testClose(t *testing.T, async bool) {
	h := newHarness(t, Options{})
	h.asker.async = async
	waiting := h.dial(requestLine(uuid1), true)
	a := h.asker.next(t)
	sending := h.dial(`{"request_id"`, false)
	if err := h.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if cs := a.cancelled(); len(cs) != 1 || cs[0] != api.CancelDaemonStopped {
		t.Fatalf("cancels %v", cs)
	}
	if got := readAll(t, waiting); got != `{"request_id":"`+uuid1+`","decision":"Timeout"}`+"\n" {
		t.Fatalf("waiting hook got %q", got)
	}
	if got := readAll(t, sending); got != "" {
		t.Fatalf("sending hook got %q", got)
	}
	if _, err := os.Stat(h.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left: %v", err)
	}
}

// Whatever takes the socket's path (another process's socket bound there
// after ours was removed, a link, nothing at all), the server takes it
// back within a check, says so, and answers the hook again; a directory
// there is said once and left.
func TestSocketReplaced(t *testing.T) {
	h := newHarness(t, Options{CheckEvery: 20 * time.Millisecond})
	next := 0
	replaced := func(found string) SocketReplaced {
		t.Helper()
		ev, n := h.rec.waitFrom(t, next, "socket_replaced "+found, func(e eventlog.Event) bool {
			r, ok := e.(SocketReplaced)
			return ok && r.Found == found
		})
		next = n
		return ev.(SocketReplaced)
	}
	asks := func() {
		t.Helper()
		c := h.dial(requestLine(uuid1), true)
		h.asker.next(t).resolve(api.ApprovalAllowed, api.Resolution{Decision: api.DecisionAllow})
		if got := readAll(t, c); !strings.Contains(got, "Allow") {
			t.Fatalf("answer %q", got)
		}
	}
	// An impostor binds the path after removing ours.
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	imp, err := net.ListenUnix("unix", &net.UnixAddr{Name: h.path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	imp.SetUnlinkOnClose(false)
	defer imp.Close()
	if ev := replaced("socket"); !ev.TookBack || ev.Socket != h.path || ev.Error != "" {
		t.Fatalf("socket_replaced %+v", ev)
	}
	asks()
	// A link to somewhere else.
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(t.TempDir(), "elsewhere.sock"), h.path); err != nil {
		t.Fatal(err)
	}
	if ev := replaced("symlink"); !ev.TookBack {
		t.Fatalf("socket_replaced %+v", ev)
	}
	asks()
	// Nothing.
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	if ev := replaced("nothing"); !ev.TookBack {
		t.Fatalf("socket_replaced %+v", ev)
	}
	asks()
	// A directory: said, not removed; then taken back once it is gone.
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(h.path, 0o700); err != nil {
		t.Fatal(err)
	}
	if ev := replaced("directory"); ev.TookBack || !strings.Contains(ev.Error, "directory") {
		t.Fatalf("socket_replaced %+v", ev)
	}
	if fi, err := os.Lstat(h.path); err != nil || !fi.IsDir() {
		t.Fatalf("the directory was touched: %v %v", fi, err)
	}
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	if ev := replaced("nothing"); !ev.TookBack {
		t.Fatalf("socket_replaced %+v", ev)
	}
	asks()
	n := 0
	for _, e := range h.rec.all() {
		if r, ok := e.(SocketReplaced); ok && r.Found == "directory" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the directory was said %d times, want once", n)
	}
}
