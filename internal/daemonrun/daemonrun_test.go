package daemonrun

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary a stand-in daemon (see helperMain).
const helperEnv = "DAEMONRUN_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helperMain(h))
	}
	code := m.Run()
	if bin != "" {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// helperMain is a process that is no daemon, for the paths a real daemon
// does not take: it says "ready" on stdout once its signal dispositions
// are set, then waits.
func helperMain(what string) int {
	switch what {
	case "exit3":
		return 3
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	case "ignore-term-quit":
		signal.Ignore(syscall.SIGTERM, syscall.SIGQUIT)
	case "wait":
	case "starter": // start the helper "wait" through Start, say its pid, wait
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"=wait")
		d, err := Start(cmd, "")
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println(d.Pid())
	default:
		return 2
	}
	fmt.Println("ready")
	for {
		time.Sleep(time.Hour)
	}
}

// startHelper starts the helper what as a daemon on a home of its own and
// waits until it has said it is ready.
func startHelper(t *testing.T, what string, stderr *bytes.Buffer) *Daemon {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+what)
	cmd.Stdout, cmd.Stderr = w, stderr
	d, err := Start(cmd, t.TempDir())
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Cmd.Process.Kill()
		<-d.Done()
	})
	if line, err := bufio.NewReader(r).ReadString('\n'); line != "ready\n" {
		t.Fatalf("helper %s said %q (%v), not ready", what, line, err)
	}
	return d
}

// A daemon that ignores SIGTERM is sent SIGQUIT after the deadline: it
// exits writing every goroutine's stack to its stderr, and Stop says it
// did not exit in time.
func TestStopDumpsTheGoroutinesOfAHungDaemon(t *testing.T) {
	defer goleak.VerifyNone(t)
	var stderr bytes.Buffer
	d := startHelper(t, "ignore-term", &stderr)
	err := d.Stop(100 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not exit within 100ms of SIGTERM") {
		t.Fatalf("Stop = %v, want it to say the daemon did not exit within 100ms of SIGTERM", err)
	}
	select {
	case <-d.Done():
	default:
		t.Fatal("Stop returned with the daemon running")
	}
	if !strings.Contains(stderr.String(), "SIGQUIT") || !strings.Contains(stderr.String(), "\ngoroutine 1 ") {
		t.Fatalf("no goroutine dump on the daemon's stderr:\n%s", stderr.String())
	}
	if d.Err() == nil {
		t.Fatal("Err() = nil for a daemon that died of SIGQUIT")
	}
}

// A daemon that ignores SIGQUIT too is killed: Stop never waits forever.
func TestStopKillsADaemonThatIgnoresQuit(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := startHelper(t, "ignore-term-quit", &bytes.Buffer{})
	if err := d.Stop(100 * time.Millisecond); err == nil {
		t.Fatal("Stop = nil for a daemon that ignored SIGTERM")
	}
	var ee *exec.ExitError
	if !errors.As(d.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("Err() = %v, want killed by SIGKILL", d.Err())
	}
}

// Stop on a daemon that exits on SIGTERM returns nil, and again on one
// that has exited.
func TestStopTwice(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := startHelper(t, "wait", &bytes.Buffer{})
	for i := range 2 {
		if err := d.Stop(30 * time.Second); err != nil {
			t.Fatalf("Stop %d: %v", i+1, err)
		}
	}
	if d.Err() == nil {
		t.Fatal("Err() = nil for a process killed by SIGTERM")
	}
}

// WaitReady gives up at once when the daemon exits, saying so.
func TestWaitReadyDaemonExits(t *testing.T) {
	defer goleak.VerifyNone(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=exit3")
	d, err := Start(cmd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.WaitReady(time.Minute)
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("WaitReady = %v, want it to say the daemon exited with status 3", err)
	}
}

// WaitReady on a daemon whose control socket never comes up fails after
// its deadline, naming the socket it could not reach.
func TestWaitReadyNoSocket(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := startHelper(t, "wait", &bytes.Buffer{})
	_, err := d.WaitReady(100 * time.Millisecond)
	if err == nil || errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "control socket not up after 100ms") ||
		!strings.Contains(err.Error(), d.Socket()) {
		t.Fatalf("WaitReady = %v, want the control socket %s not up", err, d.Socket())
	}
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

var (
	buildOnce sync.Once
	bin       string // the orchestrd binary, once built
	buildErr  error
)

// orchestrd builds the real binary once for the tests that need it.
func orchestrd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "daemonrun")
		if err != nil {
			buildErr = err
			return
		}
		bin = filepath.Join(dir, "orchestrd")
		buildErr = Build("", "github.com/orchestrd/orchestrd/cmd/orchestrd", bin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

const twoLanes = `
[daemon]
shutdown_timeout = "2s"
[lanes.net]
runners = 2
spares = 1
network = "host"
[lanes.byo]
runners = 0
network = "host"
`

// The real daemon: WaitReady returns once every lane has its configured
// runners and spares ready (as its lane.started events say), Stop ends it
// cleanly and its runners with it, and its event log reads back.
func TestRealDaemon(t *testing.T) {
	defer goleak.VerifyNone(t)
	orch := orchestrd(t)
	home, err := ShortTempDir("drun")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(twoLanes), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := Serve(orch, home)
	cmd.Stdout, cmd.Stderr = &log, &log
	d, err := Start(cmd, home)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop(30 * time.Second)
	ls, err := d.WaitReady(20 * time.Second)
	if err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	want := map[string]int{"net": 2 + 1, "byo": 0}
	var runners []int
	for _, l := range ls {
		ready := 0
		for _, r := range l.Runners {
			if r.State == "ready" && r.Spawned {
				ready++
				runners = append(runners, r.Pid)
			}
		}
		if w, ok := want[l.Name]; !ok || ready != w {
			t.Errorf("lane %s: %d runners ready, want %d", l.Name, ready, w)
		}
		delete(want, l.Name)
	}
	if len(want) != 0 {
		t.Errorf("lanes missing from lane.list: %v", want)
	}
	if got := ConfiguredRunners(home); got["net"] != 2 || got["byo"] != 0 || len(got) != 2 {
		t.Errorf("ConfiguredRunners = %v, want net 2 and byo 0", got)
	}
	evs, err := ReadEvents(d.EventLog())
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[any]int{}
	for _, e := range evs {
		kinds[e["kind"]]++
	}
	if kinds["lane.started"] != 2 || kinds["runner.ready"] < 3 {
		t.Errorf("event log has %v, want 2 lane.started and 3 runner.ready", kinds)
	}

	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatalf("Stop: %v\n%s", err, log.String())
	}
	if err := d.Err(); err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, log.String())
	}
	for _, pid := range runners {
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(pid, 0) == nil && !zombie(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("runner %d outlived the daemon", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// ReadEvents reads complete lines only; a line that is not JSON is named,
// with the events before it.
func TestReadEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.ndjson")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"kind":"lane.started","lane":"a","runners":3}` + "\n" + `{"kind":"runner.ready"}` + "\n" + `{"kind":"lane.sta`)
	evs, err := ReadEvents(path)
	if err != nil || len(evs) != 2 || evs[1]["kind"] != "runner.ready" {
		t.Fatalf("ReadEvents = %v, %v; want the two complete lines", evs, err)
	}
	if got := ConfiguredRunners(filepath.Dir(path)); len(got) != 1 || got["a"] != 3 {
		t.Fatalf("ConfiguredRunners = %v", got)
	}
	write(`{"kind":"a"}` + "\n" + "not json\n" + `{"kind":"b"}` + "\n")
	evs, err = ReadEvents(path)
	if err == nil || !strings.Contains(err.Error(), `bad event line "not json"`) || len(evs) != 1 {
		t.Fatalf("ReadEvents = %v, %v; want the first event and an error naming the bad line", evs, err)
	}
	write(`{"kind":"a"}`)
	if evs, err := ReadEvents(path); err != nil || len(evs) != 0 {
		t.Fatalf("ReadEvents of one unfinished line = %v, %v", evs, err)
	}
	if _, err := ReadEvents(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadEvents of no file: %v", err)
	}
}

// ReadEventsOfKind returns the events of one kind, not another whose
// fields mention it; a line that is not JSON still ends the reading.
func TestReadEventsOfKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.ndjson")
	log := `{"kind":"job.finished","id":"j1"}` + "\n" + `{"kind":"note","text":"job.finished"}` + "\n" +
		`{"kind":"job.finished","id":"j2"}` + "\n" + `{"kind":"job.fin`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadEventsOfKind(path, "job.finished")
	if err != nil || len(evs) != 2 || evs[0]["id"] != "j1" || evs[1]["id"] != "j2" {
		t.Fatalf("ReadEventsOfKind = %v, %v; want j1 and j2", evs, err)
	}
	if err := os.WriteFile(path, []byte(`{"kind":"a"}`+"\nnot json\n"+`{"kind":"b"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if evs, err := ReadEventsOfKind(path, "b"); err == nil || !strings.Contains(err.Error(), `bad event line "not json"`) || len(evs) != 0 {
		t.Fatalf("ReadEventsOfKind = %v, %v; want an error naming the bad line", evs, err)
	}
}

// CopyFile copies the bytes (truncating what dst held) with the mode given.
func TestCopyFile(t *testing.T) {
	dir := t.TempDir()
	src, dst, fresh := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte("something longer, to be truncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{dst, fresh} {
		if err := CopyFile(src, to, 0o700); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(to)
		if err != nil || string(b) != "#!/bin/sh\n" {
			t.Fatalf("%s holds %q, %v", to, b, err)
		}
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the new file: %v, %v; want mode 0700", st.Mode(), err)
	}
	if err := CopyFile(filepath.Join(dir, "none"), dst, 0o700); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("copying a missing file: %v", err)
	}
}

// A program CopyFile wrote runs at once, while other goroutines fork and
// exec as fast as they can (golang/go#22315: a child forked while the
// copy was open for writing held it until its own exec, and running the
// copy failed with "text file busy").
func TestCopyFileThenExecWhileForking(t *testing.T) {
	defer goleak.VerifyNone(t)
	src, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	dir := t.TempDir()
	defer testio.Hammer(4, func() bool { exec.Command(src).Run(); return true })()
	for i := range 100 {
		dst := filepath.Join(dir, "p"+strconv.Itoa(i))
		if err := CopyFile(src, dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := exec.Command(dst).Run(); err != nil {
			t.Fatalf("running the copy %d: %v", i, err)
		}
	}
}

// A daemon dies with the process that started it (a test binary killed by
// go test's -timeout): Start's Pdeathsig.
func TestDaemonDiesWithItsStarter(t *testing.T) {
	defer goleak.VerifyNone(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	starter := exec.Command(os.Args[0])
	starter.Env = append(os.Environ(), helperEnv+"=starter")
	starter.Stdout = w
	err = starter.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer starter.Wait()
	defer starter.Process.Kill()
	line, err := bufio.NewReader(r).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("the starter said %q (%v)", line, err)
	}
	// Its pidfd, taken while the starter, its parent, lives: it cannot
	// have been reaped yet.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if err := starter.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int((30 * time.Second).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("the daemon (pid %d) outlived its starter by 30 s", pid)
		}
		return
	}
}

// The daemon's Pdeathsig is not sent when the thread that called Start
// ends (the kernel sends it when the thread that forked ends): a
// goroutine locked to its thread starts the daemon and returns, ending
// that thread; the daemon then dies of the SIGTERM sent after, not of a
// SIGKILL sent when the thread ended.
func TestDaemonOutlivesTheThreadThatStartedIt(t *testing.T) {
	defer goleak.VerifyNone(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type started struct {
		d   *Daemon
		tid int
		err error
	}
	ch := make(chan started, 1)
	var s started
	// The main thread never ends (the runtime wedges it when its locked
	// goroutine exits), so the goroutine starts the daemon only on
	// another thread.
	for tries := 0; ; tries++ {
		if tries == 1000 {
			t.Fatal("no goroutine ran on a thread other than the main thread in 1000 tries")
		}
		dir := t.TempDir()
		go func() {
			runtime.LockOSThread() // never unlocked but on the main thread: the thread ends with the goroutine
			if unix.Gettid() == unix.Getpid() {
				runtime.UnlockOSThread()
				ch <- started{tid: -1}
				return
			}
			cmd := exec.Command(self)
			cmd.Env = append(os.Environ(), helperEnv+"=wait")
			d, err := Start(cmd, dir)
			ch <- started{d, unix.Gettid(), err}
		}()
		if s = <-ch; s.tid != -1 {
			break
		}
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	defer func() { s.d.Cmd.Process.Kill(); <-s.d.Done() }()
	// The thread is gone from /proc once it has exited, Pdeathsig sent.
	task := fmt.Sprintf("/proc/self/task/%d", s.tid)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still there after 30 s", s.tid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = s.d.Cmd.Process.Signal(syscall.SIGTERM) // fails if SIGKILL came first
	<-s.d.Done()
	var ee *exec.ExitError
	if !errors.As(s.d.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("the daemon exited %v, want killed by SIGTERM (SIGKILL: by the thread's end)", s.d.Err())
	}
}

// ReadEvents passes over a line a crash cut short and stops at any other
// line that is not JSON.
func TestReadEventsTornLine(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		log   string
		kinds []string
		bad   bool
	}{
		{"{\"kind\":\"a\"}\n{\"ts\":\"2026-11-30T06:20:44.65Z\"\n{\"kind\":\"b\"}\n{\"kind\":\"c\"", []string{"a", "b"}, false},
		{"{\"kind\":\"a\"}\n{\"kind\":\"a\",\"x\":[1,\n{\"kind\":\"b\"}\n", []string{"a", "b"}, false},
		{"{\"kind\":\"a\"}\n{\"kind\":\"a\"}}\n{\"kind\":\"b\"}\n", []string{"a"}, true},
		{"{\"kind\":\"a\"}\nnot json\n{\"kind\":\"b\"}\n", []string{"a"}, true},
		{"{\"kind\":\"a\"}\n\"cut\n", []string{"a"}, true},
	} {
		p := filepath.Join(dir, "events.ndjson")
		if err := os.WriteFile(p, []byte(c.log), 0o600); err != nil {
			t.Fatal(err)
		}
		evs, err := ReadEvents(p)
		var kinds []string
		for _, e := range evs {
			kinds = append(kinds, e["kind"].(string))
		}
		if (err != nil) != c.bad || !slices.Equal(kinds, c.kinds) {
			t.Errorf("%q: %v (%v), want %v, an error %v", c.log, kinds, err, c.kinds, c.bad)
		}
	}
}
