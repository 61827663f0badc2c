// Package daemontest runs the daemon in the test's own process: daemon.Run
// on a temporary home with a config, until the test ends. A domain's
// behaviour through the whole daemon (its methods on the control socket,
// its events, its metrics, its pages) is tested so in the domain's own
// package; cmd/orchestrd keeps what needs the real binary as a process
// (the CLI, signals, the sandbox, crashes), run by internal/daemonrun.
//
// The daemon still starts real processes: its runners and executors are
// the orchestrd binary, built once per test binary (Binary) and given to
// daemon.Run as its Exe. When the test ends Stop cancels Run, waits for it
// to return and fails the test when a goroutine the daemon started, or a
// process, is left.
//
// One daemon at a time per process: a daemon makes its process the child
// subreaper and kills the children it did not start (platform/proc's
// Reaper), and the goroutine and process checks count what appeared
// meanwhile. StartAt waits for the daemon before it to stop; a test
// using it must not call t.Parallel. A test's own processes are safe from
// the reaper: this package's init keeps the main thread to the main
// goroutine (whose children the reaper sweeps), so nothing else forks
// from it.
//
// A package using it is an external test package (its tests import the
// daemon, which imports the package) whose TestMain returns Main(m).
// It is test support: only tests import it.
package daemontest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon"
	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/wire"
)

// The reaper a daemon starts sweeps the children of the process's main
// thread and kills those it did not start itself. Locked here, in an init,
// the main thread runs the main goroutine only (TestMain, waiting for the
// tests), which starts no process while a daemon runs: a test's own
// processes (a promtool, a Prometheus) are forked from other threads and
// left alone.
func init() { runtime.LockOSThread() }

// Version is the version the daemons of this package report.
const Version = "daemontest"

// ReadyTimeout bounds a daemon's start until its lanes are ready.
const ReadyTimeout = 60 * time.Second

// CallTimeout bounds one call of the helpers on the client side; WaitTimeout
// is the server-side timeout of Wait's job.wait (the client waits that long
// and CallTimeout more).
const (
	CallTimeout = 30 * time.Second
	WaitTimeout = 60 * time.Second
)

// stopTimeout bounds Stop's wait for Run to return.
const stopTimeout = 60 * time.Second

var (
	dir       string // Main's temporary directory: the binary, XDG dirs
	buildOnce sync.Once
	binary    string
	buildErr  error

	// slot is held by the one daemon running; holder is its test's name.
	slot     = make(chan struct{}, 1)
	holderMu sync.Mutex
	holder   string
)

// leakIgnored are goroutines that outlive a daemon by design: protoactor's
// dead-letter throttle, one per actor system, ends on its own a second
// later.
var leakIgnored = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4"),
}

// Main runs the tests of m: every daemon resolves vibe-reachout's paths
// under a temporary directory (never the user's), the binary is built
// there when a test first needs it and removed at the end, and goleak
// checks the package's goroutines once the tests have passed. A TestMain
// calls os.Exit(daemontest.Main(m)).
func Main(m *testing.M, leak ...goleak.Option) int {
	var err error
	if dir, err = os.MkdirTemp("", "odtest"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	tools.Dir = dir
	if err := daemonrun.PrivateXDG(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(append(slices.Clone(leakIgnored), leak...)...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// Binary is the orchestrd binary (cmd/orchestrd), built once per test
// binary, the first time a test asks: what the daemon runs as its runners
// and executors' sandbox, and what a test may run as the CLI.
func Binary(t testing.TB) string {
	t.Helper()
	if dir == "" {
		t.Fatal("daemontest: the package's TestMain must return daemontest.Main(m)")
	}
	buildOnce.Do(func() {
		binary = filepath.Join(dir, "orchestrd")
		buildErr = daemonrun.Build("", "github.com/orchestrd/orchestrd/cmd/orchestrd", binary)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Tool is the program of package pkg (an import path of this module), built
// once per test binary next to the orchestrd binary.
func Tool(t testing.TB, pkg string) string {
	t.Helper()
	Binary(t) // and so Main's directory, where tools go
	p, err := tools.Build(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var tools daemonrun.Builds

// ShortTemp is a new directory for a home (a unix socket's path is limited
// to 108 bytes; t.TempDir() can be longer), removed when the test ends.
func ShortTemp(t testing.TB) string {
	t.Helper()
	return testio.ShortTemp(t, "odt")
}

// Daemon is daemon.Run running in this process on Home.
type Daemon struct {
	t    *testing.T
	Home string
	// Log is the daemon's log (JSON lines, as `serve --log-format json`
	// writes) and its runners' stderr.
	Log *testio.SyncBuffer

	cancel   context.CancelFunc
	done     chan struct{}
	err      error // Run's; set before done closes
	stopOnce sync.Once
	before   goleak.Option // the goroutines there were before it
	children map[int]bool  // this process's children before it
}

// Start runs a daemon on a new home with config (TOML, may be empty: the
// defaults) until t ends, and waits until its lanes are ready.
func Start(t *testing.T, config string) *Daemon {
	t.Helper()
	return StartAt(t, ShortTemp(t), config)
}

// StartAt is Start on a home the test prepared. config, when not empty, is
// written to HOME/config.toml; the daemon reads HOME/config.toml as serve
// does (the defaults without one). It waits for another test's daemon to
// stop first.
func StartAt(t *testing.T, home, config string) *Daemon {
	t.Helper()
	exe := Binary(t)
	path := filepath.Join(home, "config.toml")
	if config != "" {
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := daemon.DefaultConfig()
	if _, err := os.Stat(path); err == nil {
		if cfg, err = daemon.LoadConfig(path); err != nil {
			t.Fatalf("the daemon's config: %v", err)
		}
	}
	take(t)
	d := &Daemon{t: t, Home: home, Log: &testio.SyncBuffer{}, done: make(chan struct{}),
		before: goleak.IgnoreCurrent(), children: map[int]bool{}}
	for _, pid := range proc.Children(os.Getpid()) {
		d.children[pid] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	logger := zerolog.New(d.Log).With().Timestamp().Logger().Level(zerolog.InfoLevel)
	go func() {
		d.err = daemon.Run(ctx, daemon.Options{Home: home, Config: cfg, Logger: logger, Version: Version,
			Exe: exe, RunnerStderr: d.Log})
		close(d.done)
	}()
	t.Cleanup(d.Stop)
	if _, err := daemonrun.WaitLanesReady(home, d.done, func() error { return d.err }, ReadyTimeout); err != nil {
		t.Fatalf("daemon not ready: %v\n%s", err, Tail(d.Log.String(), 4000))
	}
	return d
}

// take waits for the daemon slot; a test that holds it already (a second
// daemon while its first runs) fails: it would wait for itself.
func take(t *testing.T) {
	t.Helper()
	holderMu.Lock()
	if holder == t.Name() {
		holderMu.Unlock()
		t.Fatalf("daemontest: %s runs a second daemon while its first runs: one at a time per process (Stop the first)", t.Name())
	}
	holderMu.Unlock()
	slot <- struct{}{}
	holderMu.Lock()
	holder = t.Name()
	holderMu.Unlock()
}

func release() {
	holderMu.Lock()
	holder = ""
	holderMu.Unlock()
	<-slot
}

// Done is closed once Run has returned.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err waits for Run to return (Stop ends it) and returns its error (nil: a
// clean stop).
func (d *Daemon) Err() error {
	<-d.done
	return d.err
}

// Stop cancels Run's context and waits for it to return; it fails the test
// when Run does not return within a minute (with every goroutine's stack),
// when a process the daemon started is still alive, or when a goroutine
// started while it ran is still running. Stop once more does nothing.
// The test's cleanup calls it.
func (d *Daemon) Stop() {
	d.stopOnce.Do(func() {
		defer release()
		d.cancel()
		select {
		case <-d.done:
		case <-time.After(stopTimeout):
			buf := make([]byte, 1<<22)
			buf = buf[:runtime.Stack(buf, true)]
			d.t.Errorf("daemon.Run did not return within %s of its context's end\n%s\nlog tail:\n%s",
				stopTimeout, buf, Tail(d.Log.String(), 4000))
			return
		}
		d.checkChildren()
		if err := goleak.Find(append(slices.Clone(leakIgnored), d.before)...); err != nil {
			d.t.Errorf("goroutines left once daemon.Run returned: %v", err)
		}
	})
}

// checkChildren fails the test when a child of this process that was not
// there before the daemon is still alive 10 s after Run returned; it kills
// those.
func (d *Daemon) checkChildren() {
	deadline := time.Now().Add(10 * time.Second)
	var poll daemonrun.Poller
	for {
		var left []int
		for _, pid := range proc.Children(os.Getpid()) {
			if st, ok := proc.ReadStat(pid); ok && st.State != 'Z' && !d.children[pid] {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				st, _ := proc.ReadStat(pid)
				d.t.Errorf("process %d (%s) is still alive after daemon.Run returned", pid, st.Comm)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return
		}
		poll.Pause()
	}
}

// Socket is the path of the daemon's control socket.
func (d *Daemon) Socket() string { return filepath.Join(d.Home, "daemon.sock") }

// Client is a new connection to the control socket, closed when the test
// ends.
func (d *Daemon) Client() *client.Client {
	d.t.Helper()
	c, err := client.Dial(d.Socket())
	if err != nil {
		d.t.Fatalf("dial: %v\ndaemon log:\n%s", err, Tail(d.Log.String(), 4000))
	}
	d.t.Cleanup(func() { c.Close() })
	return c
}

// Call calls method on a connection of its own, within CallTimeout; any
// goroutine may call it.
func (d *Daemon) Call(method string, params, result any) error {
	return d.CallWithin(CallTimeout, method, params, result)
}

// CallWithin is Call with a client deadline of within.
func (d *Daemon) CallWithin(within time.Duration, method string, params, result any) error {
	return CallAt(d.Socket(), within, method, params, result)
}

// CallAt calls method on the control socket at socket, on a connection of
// its own, with a client deadline of within; any goroutine may call it.
func CallAt(socket string, within time.Duration, method string, params, result any) error {
	c, err := client.Dial(socket)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := c.Call(ctx, method, params, result); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// MustCall is Call failing the test (from the test's goroutine only).
func (d *Daemon) MustCall(method string, params, result any) {
	d.t.Helper()
	d.Check(d.Call(method, params, result))
}

// Check fails the test with the daemon's log tail when err is not nil.
func (d *Daemon) Check(err error) {
	d.t.Helper()
	if err != nil {
		d.t.Fatalf("%v\ndaemon log tail:\n%s", err, Tail(d.Log.String(), 3000))
	}
}

// Submit submits spec and returns the job's id.
func (d *Daemon) Submit(spec api.JobSpec) string {
	d.t.Helper()
	return SubmitTo(d.t, d, spec)
}

// SubmitTo submits spec to c and returns the job's id.
func SubmitTo(t testing.TB, c Conn, spec api.JobSpec) string {
	t.Helper()
	var r struct {
		JobID string `json:"job_id"`
	}
	mustCall(t, c, "job.submit", spec, &r)
	return r.JobID
}

// Wait waits for job id's end (up to WaitTimeout) and returns its record.
func (d *Daemon) Wait(id string) api.JobRecord {
	d.t.Helper()
	var r struct{ Job api.JobRecord }
	d.Check(d.CallWithin(WaitTimeout+CallTimeout, "job.wait",
		map[string]any{"id": id, "timeout_ms": WaitTimeout.Milliseconds()}, &r))
	return r.Job
}

// Events reads the complete lines of the event log (the daemon may be in
// the middle of writing the last one).
func (d *Daemon) Events() []map[string]any {
	d.t.Helper()
	return Events(d.t, d.Home)
}

// Events reads the complete lines of the event log of the daemon on home.
func Events(t testing.TB, home string) []map[string]any {
	t.Helper()
	out, err := daemonrun.ReadEvents(daemonrun.EventLog(home))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WaitEvent waits up to 20 s until the event log has a line of kind that
// match (nil: any) accepts, and returns it.
func (d *Daemon) WaitEvent(kind string, match func(map[string]any) bool) map[string]any {
	d.t.Helper()
	return d.WaitEventWithin(20*time.Second, kind, match)
}

// WaitEventWithin is WaitEvent with a deadline of its own.
func (d *Daemon) WaitEventWithin(within time.Duration, kind string, match func(map[string]any) bool) map[string]any {
	d.t.Helper()
	return WaitEventAt(d.t, d.Home, within, kind, match, d.LogTail)
}

// WaitEventAt waits up to within until the event log of the daemon on home
// has a line of kind that match (nil: any) accepts, and returns it; diag
// (may be nil) says more on a timeout.
func WaitEventAt(t testing.TB, home string, within time.Duration, kind string, match func(map[string]any) bool, diag func() string) map[string]any {
	t.Helper()
	var found map[string]any
	Eventually(t, within, "event "+kind, func() bool {
		evs, err := daemonrun.ReadEventsOfKind(daemonrun.EventLog(home), kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if match == nil || match(e) {
				found = e
				return true
			}
		}
		return false
	}, diag)
	return found
}

// Eventually polls cond until it holds, failing t after within with what
// and diag's diagnosis (diag may be nil). It is for state reached through
// a socket or a file, where no push exists.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool, diag func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	var poll daemonrun.Poller
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			if diag != nil {
				msg = diag()
			}
			t.Fatalf("timed out after %s waiting for %s\n%s", within, what, msg)
		}
		poll.Pause()
	}
}

// RemoteCode is the daemon's error code in err, 0 when err is none.
func RemoteCode(err error) int {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// WaitGone fails t if process pid is still alive (and not a zombie) 10 s
// from now.
func WaitGone(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var poll daemonrun.Poller
	for Alive(pid) {
		if time.Now().After(deadline) {
			t.Errorf("process %d is still alive", pid)
			return
		}
		poll.Pause()
	}
}

// Alive reports whether pid is a live process, not a zombie.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	st, ok := proc.ReadStat(pid)
	return ok && st.State != 'Z'
}
