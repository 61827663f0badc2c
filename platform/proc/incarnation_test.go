package proc

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// spawned is what an incarnation's callbacks reported, as a caller's
// messages would be.
type spawned struct {
	in      *Incarnation
	started chan startReport
	exited  chan Exit
	warned  chan error
}

type startReport struct {
	pid int
	err error
}

// spawnRecorded spawns spec with callbacks that record what they hear; it
// fails the test if OnStart and OnExit come out of order or twice.
func spawnRecorded(t *testing.T, spec Spec) *spawned {
	t.Helper()
	s := &spawned{started: make(chan startReport, 1), exited: make(chan Exit, 1), warned: make(chan error, 4)}
	var mu sync.Mutex
	var starts, exits int
	spec.OnStart = func(pid int, err error) {
		mu.Lock()
		starts++
		if starts != 1 || exits != 0 {
			t.Errorf("OnStart call %d after %d OnExit", starts, exits)
		}
		mu.Unlock()
		s.started <- startReport{pid, err}
	}
	spec.OnExit = func(e Exit) {
		mu.Lock()
		exits++
		if starts != 1 || exits != 1 {
			t.Errorf("OnExit call %d after %d OnStart", exits, starts)
		}
		mu.Unlock()
		s.exited <- e
	}
	spec.Warn = func(err error) { s.warned <- err }
	s.in = Spawn(spec)
	return s
}

func (s *spawned) waitStart(t *testing.T) int {
	t.Helper()
	select {
	case r := <-s.started:
		if r.err != nil {
			t.Fatalf("start failed: %v", r.err)
		}
		if r.pid <= 0 || r.pid != s.in.Pid() {
			t.Fatalf("started with pid %d, Pid() %d", r.pid, s.in.Pid())
		}
		return r.pid
	case <-time.After(10 * time.Second):
		t.Fatal("no OnStart within 10s")
	}
	return 0
}

func (s *spawned) waitExit(t *testing.T) Exit {
	t.Helper()
	select {
	case e := <-s.exited:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no OnExit within 10s")
	}
	return Exit{}
}

// shSpec runs script in sh, its descriptor 3 the write end of a pipe whose
// read end is returned.
func shSpec(t *testing.T, script string) (Spec, *bufio.Reader) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, ExtraFiles: []*os.File{w}}, bufio.NewReader(r)
}

// readPid reads one pid a child wrote on its descriptor 3.
func readPid(t *testing.T, br *bufio.Reader) int {
	t.Helper()
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a pid from the child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the child wrote %q", line)
	}
	return pid
}

// waitGone waits until the process pid (started at start, so that a
// reused pid does not count) is dead: gone, or a zombie nobody reaped.
func waitGone(t *testing.T, pid int, start uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, ok := ReadStat(pid)
		if !ok || st.State == 'Z' || st.StartTime != start {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d (%s) still alive", pid, st.Comm)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startTime(t *testing.T, pid int) uint64 {
	t.Helper()
	st, ok := ReadStat(pid)
	if !ok {
		t.Fatalf("no process %d", pid)
	}
	return st.StartTime
}

// An incarnation reports its start and then its exit code, its pid and how
// long it ran; the child got descriptor 3 and this process kept no copy.
func TestIncarnationReportsStartAndExitCode(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	spec, br := shSpec(t, "echo $$ >&3; exit 7")
	w := spec.ExtraFiles[0]
	s := spawnRecorded(t, spec)
	pid := s.waitStart(t)
	if got := readPid(t, br); got != pid {
		t.Fatalf("the child says its pid is %d, OnStart said %d", got, pid)
	}
	e := s.waitExit(t)
	if e.Pid != pid || e.Code != 7 || e.Signal != 0 || e.Uptime <= 0 {
		t.Fatalf("exit %+v, want pid %d code 7, no signal, an uptime", e, pid)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the parent's copy of the child's fd 3 is still open: %v", err)
	}
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("the pipe did not reach EOF: someone still holds its write end")
	}
}

// A process killed by a signal is reported with the signal and code -1.
func TestIncarnationReportsSignal(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := spawnRecorded(t, Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "kill -SEGV $$"}})
	pid := s.waitStart(t)
	e := s.waitExit(t)
	if e.Pid != pid || e.Signal != syscall.SIGSEGV || e.Code != -1 {
		t.Fatalf("exit %+v, want SIGSEGV and code -1", e)
	}
}

// Kill takes the process and what it forked in its group; a second Kill,
// after the exit, does nothing.
func TestIncarnationKillTakesItsGroup(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	spec, br := shSpec(t, "sleep 300 & echo $! >&3; wait")
	s := spawnRecorded(t, spec)
	pid := s.waitStart(t)
	child := readPid(t, br)
	st, ok := ReadStat(child)
	if !ok || st.Pgid != pid {
		t.Fatalf("the forked child %d is in group %d, want %d", child, st.Pgid, pid)
	}
	s.in.Kill()
	e := s.waitExit(t)
	if e.Signal != syscall.SIGKILL || e.Code != -1 {
		t.Fatalf("exit %+v, want SIGKILL", e)
	}
	waitGone(t, child, st.StartTime)
	s.in.Kill()
}

// When the leader exits by itself, what it left in its group dies with it.
func TestIncarnationGroupDiesWithItsLeader(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	spec, br := shSpec(t, "sleep 300 & echo $! >&3; exit 0")
	s := spawnRecorded(t, spec)
	s.waitStart(t)
	child := readPid(t, br)
	start := startTime(t, child)
	if e := s.waitExit(t); e.Code != 0 || e.Signal != 0 {
		t.Fatalf("exit %+v, want 0", e)
	}
	waitGone(t, child, start)
}

// Kill right after Spawn, before or while the process is forked, still
// kills it.
func TestIncarnationKillBeforeStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := spawnRecorded(t, Spec{Path: "/bin/sleep", Args: []string{"sleep", "300"}})
	s.in.Kill()
	s.waitStart(t)
	if e := s.waitExit(t); e.Signal != syscall.SIGKILL {
		t.Fatalf("exit %+v, want SIGKILL", e)
	}
}

// A process that cannot start is reported once to OnStart with the error,
// never to OnExit, and its extra files are closed.
func TestIncarnationStartFailure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	spec, _ := shSpec(t, "")
	spec.Path = "/nonexistent/orchestrd-test"
	w := spec.ExtraFiles[0]
	s := spawnRecorded(t, spec)
	waitStartFailed(t, s)
	if _, err := w.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the extra file is still open: %v", err)
	}
	s.in.Kill() // nothing to kill
	select {
	case e := <-s.exited:
		t.Fatalf("OnExit(%+v) for a process that never started", e)
	default:
	}
}

func waitStartFailed(t *testing.T, s *spawned) {
	t.Helper()
	select {
	case r := <-s.started:
		if !errors.Is(r.err, os.ErrNotExist) || r.pid != 0 || s.in.Pid() != 0 {
			t.Fatalf("OnStart(%d, %v), want ENOENT", r.pid, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no OnStart")
	}
}

// Nice is applied before the start is reported; a network namespace of its
// own is what Isolation.NoNetwork asks for.
func TestIncarnationNiceAndNetwork(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := spawnRecorded(t, Spec{Path: "/bin/sleep", Args: []string{"sleep", "300"}, Nice: 7,
		Isolation: Isolation{NoNetwork: true}})
	var pid int
	select {
	case r := <-s.started:
		if r.err != nil {
			t.Skipf("no network namespace here: %v", r.err)
		}
		pid = r.pid
	case <-time.After(10 * time.Second):
		t.Fatal("no OnStart")
	}
	defer func() { s.in.Kill(); s.waitExit(t) }()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if f[16] != "7" { // nice is the 19th field of stat, the 17th after comm
		t.Fatalf("nice %s, want 7", f[16])
	}
	ours, _ := os.Readlink("/proc/self/ns/net")
	theirs, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil || theirs == ours {
		t.Fatalf("child's network namespace %q (%v), ours %q", theirs, err, ours)
	}
	if st, _ := ReadStat(pid); st.Pgid != pid {
		t.Fatalf("the child leads group %d, not its own", st.Pgid)
	}
}

// Started through a Reaper, the process is never handed to it as an
// orphan, and it is the incarnation that reaps it: its exit code is right
// and the reaper forgets it afterwards.
func TestIncarnationRegistersWithTheReaper(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var mu sync.Mutex
	var orphans []int
	r, err := NewReaper(func(o Orphan) {
		mu.Lock()
		orphans = append(orphans, o.Pid)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		r.Stop()
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// It holds until its stdin closes.
	spec := Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "read x; exit 3"}, Stdin: pr, Reaper: r}
	s := spawnRecorded(t, spec)
	pid := s.waitStart(t)
	if !r.Started(pid) {
		t.Fatalf("pid %d is not registered with the reaper", pid)
	}
	for i := 0; i < 5; i++ {
		r.sweep()
	}
	pw.Close()
	e := s.waitExit(t)
	if e.Code != 3 {
		t.Fatalf("exit %+v, want code 3 (was it reaped by someone else?)", e)
	}
	if r.Started(pid) {
		t.Fatalf("pid %d still registered after its exit", pid)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, o := range orphans {
		if o == pid {
			t.Fatalf("the incarnation's process %d was handed to the reaper as an orphan", pid)
		}
	}
}

// The incarnation's cgroup outlives the process only as long as what the
// process left in it, given the grace: then that is killed and the cgroup
// removed.
func TestIncarnationRetiresItsCgroup(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	parent := testCgroup(t)
	cg, err := parent.Mkdir("incarnation")
	if err != nil {
		t.Fatal(err)
	}
	path := cg.Path
	// setsid -f: the leftover leaves the group (once it is out, the
	// process is killed), so only the cgroup holds it.
	spec, br := shSpec(t, "setsid -f sh -c 'echo $$ >&3; exec sleep 300'; exec sleep 300")
	spec.Isolation.Cgroup = cg
	spec.CgroupGrace = 200 * time.Millisecond
	s := spawnRecorded(t, spec)
	s.waitStart(t)
	left := readPid(t, br)
	start := startTime(t, left)
	s.in.Kill()
	if e := s.waitExit(t); e.Signal != syscall.SIGKILL {
		t.Fatalf("exit %+v", e)
	}
	waitGone(t, left, start)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroup %s not removed", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-s.warned:
		t.Fatalf("warned: %v", err)
	default:
	}

	// One that never starts leaves no cgroup either.
	cg, err = parent.Mkdir("never-started")
	if err != nil {
		t.Fatal(err)
	}
	path = cg.Path
	s = spawnRecorded(t, Spec{Path: "/nonexistent/orchestrd-test", Isolation: Isolation{Cgroup: cg}})
	waitStartFailed(t, s)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the cgroup of a process that never started is left: %v", err)
	}
}
