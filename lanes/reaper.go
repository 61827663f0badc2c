package lanes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// reaper makes the daemon the child subreaper of everything its runners
// start. When a runner dies, its job processes are re-parented to the
// daemon; on the SIGCHLD that the runner's death raises, the reaper finds
// every child that is not a runner, kills its process group and reaps it.
// So no job process outlives its runner, however the runner died.
//
// Runner pids are registered under the same lock a sweep takes, so a runner
// that has just been forked is never mistaken for an orphan. Runners
// themselves are reaped only by their own exec.Cmd.Wait; the reaper waits
// for specific non-runner pids, never for -1.
type reaper struct {
	bus     *eventlog.Bus
	self    int
	selfPg  int
	mu      sync.RWMutex // R: spawning; W: sweeping
	mapMu   sync.Mutex   // guards runners
	runners map[int]struct{}
	kickCh  chan struct{}
	sigCh   chan os.Signal
	done    chan struct{}
	wg      sync.WaitGroup
}

func newReaper(bus *eventlog.Bus) (*reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("becoming child subreaper: %w", err)
	}
	r := &reaper{bus: bus, self: os.Getpid(), selfPg: syscall.Getpgrp(), runners: map[int]struct{}{},
		kickCh: make(chan struct{}, 1), sigCh: make(chan os.Signal, 16), done: make(chan struct{})}
	signal.Notify(r.sigCh, syscall.SIGCHLD)
	r.wg.Add(1)
	go r.loop()
	return r, nil
}

func (r *reaper) loop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.sigCh:
		case <-r.kickCh:
		case <-r.done:
			return
		}
		r.sweep()
	}
}

// start starts cmd and registers its pid as a runner, atomically with
// respect to sweeps.
func (r *reaper) start(cmd *exec.Cmd) (int, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	r.mapMu.Lock()
	r.runners[pid] = struct{}{}
	r.mapMu.Unlock()
	return pid, nil
}

func (r *reaper) unregister(pid int) {
	r.mapMu.Lock()
	delete(r.runners, pid)
	r.mapMu.Unlock()
}

func (r *reaper) isRunner(pid int) bool {
	r.mapMu.Lock()
	defer r.mapMu.Unlock()
	_, ok := r.runners[pid]
	return ok
}

// kick asks for a sweep soon.
func (r *reaper) kick() {
	select {
	case r.kickCh <- struct{}{}:
	default:
	}
}

// sweep kills and reaps every child of the daemon that is not a runner.
// The children are listed without the lock (reading /proc is the slow part,
// and a spawn must not wait for it); each one is checked again under the
// lock, so a runner forked meanwhile, which registers under the read lock,
// is never mistaken for an orphan.
func (r *reaper) sweep() {
	cands := r.children()
	if len(cands) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pid := range cands {
		if r.isRunner(pid) {
			continue
		}
		state, ppid, pgid, ok := procStat(pid)
		if !ok || ppid != r.self {
			continue
		}
		if state == 'Z' {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			continue
		}
		if pgid > 1 && pgid != r.selfPg {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		r.bus.Emit(eventlog.OrphanKilled{Pid: pid, Pgid: pgid, Reason: "runner_gone"})
	}
}

// children lists the daemon's children that are not registered runners:
// from /proc/self/task/*/children when the kernel has them
// (CONFIG_PROC_CHILDREN), else by reading every /proc/PID/stat.
func (r *reaper) children() []int {
	var out []int
	if tasks, err := os.ReadDir("/proc/self/task"); err == nil {
		ok := true
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
			if err != nil {
				if os.IsNotExist(err) && t.Name() == strconv.Itoa(r.self) {
					ok = false // no children files at all
					break
				}
				continue // the thread exited
			}
			for _, f := range bytes.Fields(b) {
				if pid, err := strconv.Atoi(string(f)); err == nil && !r.isRunner(pid) {
					out = append(out, pid)
				}
			}
		}
		if ok {
			return out
		}
		out = out[:0]
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == r.self || r.isRunner(pid) {
			continue
		}
		if _, ppid, _, ok := procStat(pid); ok && ppid == r.self {
			out = append(out, pid)
		}
	}
	return out
}

// stop ends the loop after one last sweep.
func (r *reaper) stop() {
	signal.Stop(r.sigCh)
	close(r.done)
	r.wg.Wait()
	r.sweep()
}

// procStat reads state, ppid and pgid from /proc/PID/stat.
func procStat(pid int) (state byte, ppid, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, 0, false
	}
	f := bytes.Fields(b[i+2:])
	if len(f) < 3 {
		return 0, 0, 0, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgid, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil || len(f[0]) != 1 {
		return 0, 0, 0, false
	}
	return f[0][0], ppid, pgid, true
}
