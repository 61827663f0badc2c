package proc

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultCgroupGrace is how long, by default, what an incarnation left in
// its cgroup gets to end by itself before it is killed.
const DefaultCgroupGrace = 5 * time.Second

// Spec is a process for Spawn to start.
type Spec struct {
	Path string   // the executable; a /proc/self/fd/N path works
	Args []string // its argv, Args[0] included (as exec.Cmd's)
	Env  []string // nil: this process's environment
	Dir  string   // "": this process's working directory
	// Stdin, Stdout and Stderr are as exec.Cmd's: nil is /dev/null, an
	// *os.File is passed as it is, anything else through a pipe.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// ExtraFiles are the child's descriptors 3, 4, ... Spawn closes them in
	// this process once the child has its copies (or failed to start), so
	// the child holds the only ones.
	ExtraFiles []*os.File
	// Isolation is what the process starts in (see SandboxAttr): it is
	// always the leader of a session, and so of a process group, of its
	// own. Isolation.Cgroup, if set, becomes the incarnation's: it is
	// removed and closed once the process has exited (see CgroupGrace),
	// or at once if it failed to start.
	Isolation Isolation
	// CgroupGrace is how long what the process left in its cgroup gets to
	// end by itself after it exited before it is killed (another part of
	// the caller, such as a Reaper's callback, may be ending it with a
	// word for each); 0 is DefaultCgroupGrace.
	CgroupGrace time.Duration
	// Nice, if not 0, is the process's scheduling priority, set once it
	// has started.
	Nice int
	// Reaper, if set, is where the process is registered as it is forked,
	// so that it is never mistaken for an orphan and only Spawn reaps it.
	Reaper *Reaper

	// OnStart is called once the process has started, with its pid, or
	// with the error that kept it from starting (then OnExit is not
	// called). OnExit is called once it has exited and been reaped.
	// Warn, if set, hears what went wrong cleaning up after the exit (a
	// cgroup that could not be removed). All three run on the
	// incarnation's own goroutine, in that order, and may block it (Warn
	// and the cgroup's removal wait for OnExit to return): a caller that
	// must not block turns them into messages.
	OnStart func(pid int, err error)
	OnExit  func(Exit)
	Warn    func(error)
}

// Exit is how an incarnation ended.
type Exit struct {
	Pid    int
	Code   int            // its exit status; -1 when a signal ended it
	Signal syscall.Signal // the signal that ended it; 0 when it exited
	// Uptime runs from Spawn until the exit was seen.
	Uptime time.Duration
}

// Incarnation is one run of a supervised process: started by Spawn on a
// goroutine of its own that reports its start and its exit, killed as a
// whole process group by Kill. Each incarnation is a new value, so the
// caller can tell a late report of an old one from the current one (by
// the value, or by a number of its own in the callbacks).
//
// When the process exits, whatever is left in its process group is
// killed too, before the process is reaped: until then its pid, which is
// also its group's id, cannot be given to another process, so neither
// that kill nor Kill can reach a process group that is not this
// incarnation's.
type Incarnation struct {
	start time.Time

	mu     sync.Mutex
	pid    int  // 0 until started
	killed bool // Kill was called
	exited bool // the process has exited: its group is killed and it is about to be reaped
}

// Spawn starts spec's process as a new incarnation and returns at once:
// the fork, the wait and the callbacks run on a goroutine, so a caller
// that must not block (an actor's Receive) does not.
func Spawn(spec Spec) *Incarnation {
	in := &Incarnation{start: time.Now()}
	cmd := &exec.Cmd{Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir,
		Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr, ExtraFiles: spec.ExtraFiles,
		SysProcAttr: SandboxAttr(spec.Isolation)}
	go in.run(spec, cmd)
	return in
}

func (in *Incarnation) run(spec Spec, cmd *exec.Cmd) {
	fork := func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	}
	var pid int
	var err error
	if spec.Reaper != nil {
		pid, err = spec.Reaper.Start(fork)
	} else {
		pid, err = fork()
	}
	for _, f := range spec.ExtraFiles {
		f.Close()
	}
	if err != nil {
		in.retireCgroup(spec)
		spec.OnStart(0, err)
		return
	}
	in.mu.Lock()
	in.pid = pid
	if in.killed {
		_ = unix.Kill(-pid, unix.SIGKILL)
	}
	in.mu.Unlock()
	if spec.Nice != 0 {
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, pid, spec.Nice)
	}
	spec.OnStart(pid, nil)

	// Wait for the exit without reaping, kill what is left of the group
	// while its id still cannot be reused, then reap.
	var info unix.Siginfo
	for {
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	in.mu.Lock()
	in.exited = true
	_ = unix.Kill(-pid, unix.SIGKILL)
	in.mu.Unlock()
	uptime := time.Since(in.start)
	_ = cmd.Wait()
	if spec.Reaper != nil {
		spec.Reaper.Unregister(pid)
	}
	ex := Exit{Pid: pid, Code: cmd.ProcessState.ExitCode(), Uptime: uptime}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Code, ex.Signal = -1, ws.Signal()
	}
	spec.OnExit(ex)
	in.retireCgroup(spec)
}

// retireCgroup removes the incarnation's cgroup: what is left in it gets
// the grace to end, then is killed.
func (in *Incarnation) retireCgroup(spec Spec) {
	cg := spec.Isolation.Cgroup
	if cg == nil {
		return
	}
	grace := spec.CgroupGrace
	if grace <= 0 {
		grace = DefaultCgroupGrace
	}
	if err := cg.Retire(grace); err != nil && spec.Warn != nil {
		spec.Warn(err)
	}
}

// Kill SIGKILLs the incarnation's process group: the process and
// everything it started that did not leave its group. Safe to call at any
// time and more than once: before the process has started it is killed
// as soon as it has; once it has exited (its group was killed then) Kill
// does nothing.
func (in *Incarnation) Kill() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.killed = true
	if in.pid > 0 && !in.exited {
		_ = unix.Kill(-in.pid, unix.SIGKILL)
	}
}

// Pid is the process's pid, 0 until it has started (and if it failed to).
func (in *Incarnation) Pid() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.pid
}
