package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"

	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/api"

	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/wire"
)

// binary is the orchestrd binary built once for all integration tests;
// raceBinary is the same built with the race detector, for the daemons of
// the tests that call underRace (and for every daemon with
// ORCHESTRD_TEST_RACE_DAEMONS=1). A race-built daemon and its runners cost
// twice the CPU of the whole package (557 s against 275 s): the domains'
// own tests run under -race in process, and the tests here that drive the
// most concurrency at once (chaos, many streams, every method, loops)
// drive a race-built daemon.
var binary, raceBinary string

// raceTests are the top-level tests whose daemons are race-built.
var raceTests sync.Map

// underRace makes t's daemons race-built (call it before starting them).
func underRace(t *testing.T) {
	raceTests.Store(strings.SplitN(t.Name(), "/", 2)[0], true)
}

// binaryFor is the binary of t's daemons.
func binaryFor(t *testing.T) string {
	if _, ok := raceTests.Load(strings.SplitN(t.Name(), "/", 2)[0]); ok {
		return raceBinary
	}
	return binary
}

func TestMain(m *testing.M) {
	if h := os.Getenv("ORCHESTRD_TEST_HELPER"); h != "" {
		os.Exit(helperMain(h))
	}
	dir, err := os.MkdirTemp("", "orchbin")
	if err != nil {
		panic(err)
	}
	binary, raceBinary = filepath.Join(dir, "orchestrd"), filepath.Join(dir, "orchestrd-race")
	if tools.Dir, err = os.MkdirTemp("", "orchtools"); err != nil {
		panic(err)
	}
	if err := os.Chmod(tools.Dir, 0o755); err != nil { // some tests run a tool as another user
		panic(err)
	}
	// No daemon of these tests may take the user's vibe-reachout socket.
	if err := daemonrun.PrivateXDG(dir); err != nil {
		panic(err)
	}
	if err := noRaceExitSleep(); err != nil {
		panic(err)
	}
	// Up to twice GOMAXPROCS tests at once: each mostly waits on the
	// processes it started (daemons, runners, jobs, the CLI).
	testio.Parallel(2 * runtime.GOMAXPROCS(0))
	// Both at once: the race build reuses what go test compiled.
	errs := make(chan error, 2)
	go func() { errs <- daemonrun.Build("", ".", raceBinary, "-race") }()
	go func() {
		if os.Getenv("ORCHESTRD_TEST_RACE_DAEMONS") == "1" {
			errs <- nil
			return
		}
		errs <- daemonrun.Build("", ".", binary)
	}()
	for range 2 {
		if err := <-errs; err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if os.Getenv("ORCHESTRD_TEST_RACE_DAEMONS") == "1" {
		binary = raceBinary
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.RemoveAll(tools.Dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// tools are the programs tests run beside the daemon (the test executor,
// vibe-reachout's hook), each built once, into a directory anyone may
// read, when first asked for.
var tools daemonrun.Builds

// builtTool is the program of package pkg (an import path in this module),
// built.
func builtTool(t *testing.T, pkg string) string {
	t.Helper()
	p, err := tools.Build(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// noRaceExitSleep sets GORACE's atexit_sleep_ms to 0 for every process the
// tests start that is race-built (raceBinary): by default a race-built
// program sleeps a second after main returns, in case a goroutine still
// running races then. Every orchestrd command a test runs paid it, and
// every daemon stop twice (its runners, then itself): two thirds of a
// CLI test's time, a second or two of each test's. Races are still
// reported as they happen and still make the process exit 66. A GORACE
// that says atexit_sleep_ms itself is left as it is.
func noRaceExitSleep() error {
	v := os.Getenv("GORACE")
	if strings.Contains(v, "atexit_sleep_ms") {
		return nil
	}
	if err := os.Setenv("GORACE", strings.TrimSpace(v+" atexit_sleep_ms=0")); err != nil {
		return fmt.Errorf("setting GORACE: %w", err)
	}
	return nil
}

// helperMain lets a job run this test binary as a small tool.
func helperMain(what string) int {
	switch what {
	case "dial": // dial ADDR: exit 0 if a TCP connect succeeds, 3 if not
		c, err := netDial(os.Args[1])
		if err != nil {
			fmt.Println("dial failed:", err)
			return 3
		}
		c.Close()
		fmt.Println("dial ok")
		return 0
	case "unixline": // unixline SOCK LINE: send LINE on a unix socket, print the answer line
		return testio.UnixLine(os.Args[1:])
	case "attacksock": // attacksock "CAPTURE PATTERN...": see attackSockets
		return attackSockets(strings.Fields(os.Args[1]))
	}
	return 2
}

// attackSockets is what a hostile job or agent does to a unix socket it
// wants to answer in its owner's place. args are a capture file ("-": do
// not serve, exit), then paths, whose directory may be a glob pattern
// (the socket need not exist yet). For each path it connects, removes the
// file and binds its own socket there, printing one line for each attempt
// ("PATH: connect ok", "PATH: remove failed: ..."); then "attacks done".
// What it bound it serves until killed, appending every byte a
// connection sends to the capture file.
func attackSockets(args []string) int {
	if len(args) < 2 {
		return 2
	}
	capture := args[0]
	var paths []string
	for _, p := range args[1:] {
		dirs, _ := filepath.Glob(filepath.Dir(p))
		if len(dirs) == 0 {
			paths = append(paths, p)
		}
		for _, d := range dirs {
			paths = append(paths, filepath.Join(d, filepath.Base(p)))
		}
	}
	var lns []net.Listener
	for _, p := range paths {
		if c, err := net.DialTimeout("unix", p, 2*time.Second); err == nil {
			c.Close()
			fmt.Printf("%s: connect ok\n", p)
		} else {
			fmt.Printf("%s: connect failed: %v\n", p, err)
		}
		if err := os.Remove(p); err == nil {
			fmt.Printf("%s: remove ok\n", p)
		} else {
			fmt.Printf("%s: remove failed: %v\n", p, err)
		}
		ln, err := net.Listen("unix", p)
		if err != nil {
			fmt.Printf("%s: bind failed: %v\n", p, err)
			continue
		}
		fmt.Printf("%s: bind ok\n", p)
		lns = append(lns, ln)
	}
	fmt.Println("attacks done")
	if len(lns) == 0 || capture == "-" {
		return 0
	}
	var mu sync.Mutex
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					b, _ := io.ReadAll(c)
					mu.Lock()
					defer mu.Unlock()
					f, err := os.OpenFile(capture, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
					if err == nil {
						fmt.Fprintf(f, "connection: %q\n", b)
						f.Close()
					}
				}()
			}
		}()
	}
	select {}
}

// testDaemon is a running daemon as seen from one test: helpers fail t.
type testDaemon struct {
	t *testing.T
	*daemonProc
}

// in is d as seen from t, a subtest: a helper failing there fails only it.
func (d *testDaemon) in(t *testing.T) *testDaemon { return &testDaemon{t: t, daemonProc: d.daemonProc} }

// daemonProc is the daemon process and what the tests learnt about it.
type daemonProc struct {
	home   string
	cmd    *exec.Cmd
	proc   *daemonrun.Daemon
	done   <-chan struct{} // closed once it has exited: proc.Done()
	stderr *testio.SyncBuffer
	seen   map[int]pidRef // every runner seen, held from when it was
	mu     sync.Mutex
}

// shortTemp returns a short directory: unix socket paths are limited to 108
// bytes and t.TempDir() can be long.
func shortTemp(t *testing.T) string {
	t.Helper()
	return testio.ShortTemp(t, "od")
}

// loopbackListener listens on the host's loopback and closes every
// connection it accepts: what a job or an executor reaches (or, sandboxed,
// does not) when it dials its address. It closes when the test ends, and
// its goroutine is gone then.
func loopbackListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln
}

// startDaemon starts the real binary with config (TOML, may be empty) and
// waits until every lane has all its runners ready.
func startDaemon(t *testing.T, config string) *testDaemon {
	t.Helper()
	return startDaemonAt(t, shortTemp(t), config)
}

// startDaemonAt is startDaemon on a home the test prepared.
func startDaemonAt(t *testing.T, home, config string) *testDaemon {
	t.Helper()
	if config != "" {
		config = daemonrun.OwnHTTPPort(config)
		p := filepath.Join(home, "config.toml")
		if err := os.WriteFile(p, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := newTestDaemon(t, home)
	cmd := daemonrun.Serve(binaryFor(t), home)
	cmd.Stderr = d.stderr
	cmd.Stdout = d.stderr
	d.launch(cmd)
	return d
}

// newTestDaemon is the daemon on home as its test will see it, before it
// is launched.
func newTestDaemon(t *testing.T, home string) *testDaemon {
	return &testDaemon{t: t, daemonProc: &daemonProc{home: home, stderr: &testio.SyncBuffer{}, seen: map[int]pidRef{}}}
}

// launch starts cmd, a daemon on d's home, stops it when the test ends
// and waits until its lanes are ready.
func (d *testDaemon) launch(cmd *exec.Cmd) {
	d.t.Helper()
	p, err := daemonrun.Start(cmd, d.home)
	if err != nil {
		d.t.Fatal(err)
	}
	d.cmd, d.proc, d.done = cmd, p, p.Done()
	d.t.Cleanup(d.stop)
	d.waitReady(readyTimeout)
}

// readyTimeout bounds a daemon's start until its lanes are ready: seconds
// when the machine is idle, far more with the tests running in parallel
// under -race on a loaded machine.
const readyTimeout = 60 * time.Second

// waitCleanExit waits up to 30 s for the daemon to exit (failing with
// what otherwise) and fails unless it exited with status 0.
func (d *testDaemon) waitCleanExit(what string) {
	d.t.Helper()
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.t.Fatal(what)
	}
	if err := d.proc.Err(); err != nil {
		d.t.Fatalf("daemon exit: %v\n%s", err, tail(d.stderr.String(), 3000))
	}
}

func (d *testDaemon) sock() string { return filepath.Join(d.home, "daemon.sock") }

func (d *testDaemon) client() *client.Client {
	d.t.Helper()
	c, err := client.Dial(d.sock())
	if err != nil {
		d.t.Fatalf("dial: %v\ndaemon log:\n%s", err, d.stderr.String())
	}
	d.t.Cleanup(func() { c.Close() })
	return c
}

// testCallTimeout bounds one call of the tests' helpers on the client side.
// A call that makes the daemon wait (job.wait's timeout_ms) gets that wait
// on top: the client must never give up before the daemon answers.
var testCallTimeout = 30 * time.Second

// testWaitTimeout is the server-side timeout of wait's job.wait.
const testWaitTimeout = 60 * time.Second

func (d *testDaemon) call(method string, params, result any) error {
	return d.callWithin(testCallTimeout, method, params, result)
}

// callWithin is call with a client deadline of within.
func (d *testDaemon) callWithin(within time.Duration, method string, params, result any) error {
	return daemontest.CallAt(d.sock(), within, method, params, result)
}

// mustCall fails the test when the call fails. Like every helper that
// fails t, it must only be called from the test's own goroutine (t.Fatal
// elsewhere does not stop the test): other goroutines use call, tryWait
// and tryLanes and report errors back.
func (d *testDaemon) mustCall(method string, params, result any) {
	d.t.Helper()
	d.check(d.call(method, params, result))
}

// check fails the test with the daemon's log tail when err is not nil.
func (d *testDaemon) check(err error) {
	d.t.Helper()
	if err != nil {
		d.t.Fatalf("%v\ndaemon log tail:\n%s", err, tail(d.stderr.String(), 3000))
	}
}

func tail(s string, n int) string { return daemontest.Tail(s, n) }

func (d *testDaemon) lanes() []api.LaneStatus {
	d.t.Helper()
	ls, err := d.tryLanes()
	d.check(err)
	return ls
}

// tryLanes is lanes for any goroutine: it returns the error instead of
// failing the test.
func (d *testDaemon) tryLanes() ([]api.LaneStatus, error) {
	var r struct{ Lanes []api.LaneStatus }
	if err := d.call("lane.list", nil, &r); err != nil {
		return nil, err
	}
	d.record(r.Lanes)
	return r.Lanes, nil
}

// record notes the pids of the runners the daemon spawned in ls: stop
// checks that none of them outlives it.
func (d *testDaemon) record(ls []api.LaneStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range ls {
		for _, rn := range l.Runners {
			if rn.Pid <= 0 || !rn.Spawned {
				continue
			}
			if r, ok := d.seen[rn.Pid]; ok {
				if !r.exited() {
					continue
				}
				r.release() // its pid is another runner's now
			}
			d.seen[rn.Pid] = holdPid(rn.Pid, childOf(d.proc.Pid()))
		}
	}
}

func (d *testDaemon) lane(name string) api.LaneStatus {
	for _, l := range d.lanes() {
		if l.Name == name {
			return l
		}
	}
	d.t.Fatalf("no lane %s", name)
	return api.LaneStatus{}
}

// frontEnd is the daemon's front-end named name, as frontend.list lists it
// now; t fails if it lists none of that name.
func (d *testDaemon) frontEnd(name string) api.FrontEnd {
	d.t.Helper()
	var fe api.FrontEndList
	d.mustCall("frontend.list", nil, &fe)
	for _, f := range fe.FrontEnds {
		if f.Name == name {
			return f
		}
	}
	d.t.Fatalf("no %s front-end in %+v", name, fe)
	return api.FrontEnd{}
}

// metricSeries reads the daemon's /metrics (its [metrics] listener): each
// series' value by its name and labels.
func (d *testDaemon) metricSeries() map[string]float64 {
	d.t.Helper()
	addr := d.frontEnd("metrics").Address
	client := &http.Client{Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return daemontest.MetricSeries(d.t, string(body))
}

// eventually polls cond until it holds or the deadline passes. It is for
// state reached through the control socket, where no push exists.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	eventuallyOr(t, within, what, cond, func() string { return "" })
}

// eventuallyOr is eventually with a diagnosis printed on timeout.
func eventuallyOr(t *testing.T, within time.Duration, what string, cond func() bool, diag func() string) {
	t.Helper()
	daemontest.Eventually(t, within, what, cond, diag)
}

// fullStrength reports whether each lane in want has that many serving
// runners ready plus its spares.
func fullStrength(ls []api.LaneStatus, want map[string]int) bool {
	for _, l := range ls {
		ready := 0
		for _, r := range l.Runners {
			if r.State == "ready" && r.Spawned {
				ready++
			}
		}
		if w, ok := want[l.Name]; ok && ready != w+l.Spares {
			return false
		}
	}
	return true
}

func (d *testDaemon) waitReady(within time.Duration) {
	d.t.Helper()
	ls, err := d.proc.WaitReady(within)
	switch {
	case errors.Is(err, daemonrun.ErrExited):
		d.t.Fatalf("daemon exited early: %v\n%s", d.proc.Err(), d.stderr.String())
	case err != nil:
		d.t.Fatalf("daemon not ready after %s\n%s", within, tail(d.stderr.String(), 4000))
	}
	d.record(ls)
}

// stop sends SIGTERM, waits for the daemon to exit, and checks that no
// runner it ever reported is still alive.
func (d *testDaemon) stop() {
	// On a hang the daemon's log ends with every goroutine's stack.
	if err := d.proc.Stop(30 * time.Second); err != nil {
		d.t.Errorf("daemon did not exit within 30s of SIGTERM\n%s", tail(d.stderr.String(), 60000))
	}
	d.waitRunnersGone()
}

// waitRunnersGone fails the test if a runner d saw is still alive after a
// deadline.
func (d *testDaemon) waitRunnersGone() {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for pid, r := range d.seen {
		waitExited(d.t, r)
		r.release()
		delete(d.seen, pid)
	}
}

// waitGone fails the test if pid is still alive (and not a zombie) after a
// deadline.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	daemontest.WaitGone(t, pid)
}

func alive(pid int) bool { return daemontest.Alive(pid) }

func (d *testDaemon) submit(spec api.JobSpec) string {
	d.t.Helper()
	return daemontest.SubmitTo(d.t, d, spec)
}

// job is the job's record, as job.get answers it.
func (d *testDaemon) job(id string) api.JobRecord {
	d.t.Helper()
	var r struct{ Job api.JobRecord }
	d.mustCall("job.get", map[string]any{"id": id}, &r)
	return r.Job
}

// waitRunning waits until the job runs and returns its record then.
func (d *testDaemon) waitRunning(id string) api.JobRecord {
	d.t.Helper()
	var rec api.JobRecord
	eventually(d.t, 30*time.Second, "job "+id+" running", func() bool {
		rec = d.job(id)
		return rec.State == api.StateRunning
	})
	return rec
}

func (d *testDaemon) wait(id string) api.JobRecord {
	d.t.Helper()
	rec, err := d.tryWait(id)
	d.check(err)
	return rec
}

// tryWait is wait for any goroutine: it returns the error instead of
// failing the test. The daemon waits up to testWaitTimeout for the job; the
// client waits that long plus testCallTimeout for the daemon's answer, so a
// slow machine gets the daemon's verdict (or the record), never a client
// deadline that fires first.
func (d *testDaemon) tryWait(id string) (api.JobRecord, error) {
	var r struct{ Job api.JobRecord }
	err := d.callWithin(testWaitTimeout+testCallTimeout, "job.wait",
		map[string]any{"id": id, "timeout_ms": testWaitTimeout.Milliseconds()}, &r)
	if err != nil {
		return api.JobRecord{}, fmt.Errorf("job %s: %w", id, err)
	}
	return r.Job, nil
}

// events reads the complete lines of the event log (the daemon may be in
// the middle of writing the last one).
func (d *testDaemon) events() []map[string]any {
	d.t.Helper()
	return daemontest.Events(d.t, d.home)
}

// countEvents is how many of events (lines of an event log) are of kind
// and match match (every one of kind if match is nil).
func countEvents(events []map[string]any, kind string, match func(map[string]any) bool) int {
	n := 0
	for _, e := range events {
		if e["kind"] == kind && (match == nil || match(e)) {
			n++
		}
	}
	return n
}

// waitEvent waits until the event log has a line of kind matching match.
func (d *testDaemon) waitEvent(kind string, match func(map[string]any) bool) map[string]any {
	d.t.Helper()
	return d.waitEventWithin(20*time.Second, kind, match)
}

// waitEventWithin is waitEvent with a deadline of its own, for events that
// take several process starts to come.
func (d *testDaemon) waitEventWithin(within time.Duration, kind string, match func(map[string]any) bool) map[string]any {
	d.t.Helper()
	return daemontest.WaitEventAt(d.t, d.home, within, kind, match, nil)
}

func remoteCode(err error) int { return daemontest.RemoteCode(err) }

// exitCode is a process's exit code after Wait's (or Run's) err; t fails
// if it did not run.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// runOut runs cmd with its stdout and stderr kept: what it printed and
// its exit code.
func runOut(t *testing.T, cmd *exec.Cmd) (stdout, stderr []byte, code int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	code = exitCode(t, cmd.Run())
	return o.Bytes(), e.Bytes(), code
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, 10*time.Second, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// byoLane is the config of lane with no runner of its own and one slot,
// for the runner a test joins by hand (joinByo); its heartbeat timeout
// outlasts the test.
func byoLane(lane string) string {
	return "[lanes." + lane + "]\nrunners = 0\nslots = 1\nnetwork = \"host\"\nheartbeat_timeout = \"60s\"\n"
}

// joinByo connects to lane's runner socket as a bring-your-own runner and
// sends its handshake with the lane's join token; version names the fake
// runner in the daemon's events. The caller reads the ack.
func (d *testDaemon) joinByo(lane, version string) net.Conn {
	d.t.Helper()
	c, err := net.Dial("unix", filepath.Join(d.home, "runner-"+lane+".sock"))
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { c.Close() })
	hs := wire.Handshake{Lane: lane, Pid: uint32(os.Getpid()), Version: version, Token: d.joinToken(lane)}
	if err := wire.WriteFrame(c, wire.TypeHandshake, hs); err != nil {
		d.t.Fatal(err)
	}
	return c
}

// waitByoReady waits until lane's one runner is the ready byo runner (one
// the daemon did not spawn).
func (d *testDaemon) waitByoReady(lane string) {
	d.t.Helper()
	eventually(d.t, 30*time.Second, "the bring-your-own runner joined", func() bool {
		l := d.lane(lane)
		return len(l.Runners) == 1 && l.Runners[0].State == "ready" && !l.Runners[0].Spawned
	})
}

// The tests that ask for race-built daemons get them, and the others
// plain ones (unless every daemon is race-built).
func TestRaceDaemonsAreRaceBuilt(t *testing.T) {
	t.Parallel()
	race := func(path string) bool {
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return true
			}
		}
		return false
	}
	plain := binaryFor(t)
	underRace(t)
	if !race(binaryFor(t)) {
		t.Fatalf("%s is not race-built", binaryFor(t))
	}
	if race(plain) != (os.Getenv("ORCHESTRD_TEST_RACE_DAEMONS") == "1") {
		t.Fatalf("%s: race-built %v with ORCHESTRD_TEST_RACE_DAEMONS=%q", plain, race(plain), os.Getenv("ORCHESTRD_TEST_RACE_DAEMONS"))
	}
}
