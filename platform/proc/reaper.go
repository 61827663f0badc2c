package proc

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Orphan is a live child of the reaper's process that was not started
// through Start: a process whose own parent died and that the kernel
// re-parented to us, the child subreaper.
type Orphan struct {
	Pid  int
	Pgid int
	Sid  int // its session
}

// Reaper makes this process the child subreaper of everything it starts.
// A process that loses its parent anywhere below us is re-parented to us;
// on SIGCHLD (or Kick) the reaper lists our children, reaps the dead ones
// that were not started through Start, and hands each live one to the
// OnOrphan callback once (until it is reaped).
//
// Processes started through Start are registered under the same lock a
// sweep takes, so one that has just been forked is never mistaken for an
// orphan, and they are reaped only by their starter's own wait; the reaper
// waits for specific pids, never for -1.
type Reaper struct {
	onOrphan func(Orphan)
	self     int
	mu       sync.RWMutex // R: starting; W: sweeping
	mapMu    sync.Mutex   // guards started and handed
	started  map[int]struct{}
	handed   map[int]struct{} // orphans given to onOrphan, not yet reaped
	kickCh   chan struct{}
	sigCh    chan os.Signal
	done     chan struct{}
	wg       sync.WaitGroup
}

// NewReaper becomes the child subreaper and starts the sweep loop. onOrphan
// (may be nil: orphans are then left alone and reaped when they die) runs
// on the reaper's goroutine.
func NewReaper(onOrphan func(Orphan)) (*Reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("becoming child subreaper: %w", err)
	}
	r := &Reaper{onOrphan: onOrphan, self: os.Getpid(), started: map[int]struct{}{}, handed: map[int]struct{}{},
		kickCh: make(chan struct{}, 1), sigCh: make(chan os.Signal, 16), done: make(chan struct{})}
	signal.Notify(r.sigCh, syscall.SIGCHLD)
	r.wg.Add(1)
	go r.loop()
	return r, nil
}

func (r *Reaper) loop() {
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

// Start runs start, which forks a process and returns its pid, and
// registers that pid, atomically with respect to sweeps.
func (r *Reaper) Start(start func() (int, error)) (int, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	pid, err := start()
	if err != nil {
		return 0, err
	}
	r.mapMu.Lock()
	r.started[pid] = struct{}{}
	r.mapMu.Unlock()
	return pid, nil
}

// Unregister forgets a started pid once its starter has reaped it.
func (r *Reaper) Unregister(pid int) {
	r.mapMu.Lock()
	delete(r.started, pid)
	r.mapMu.Unlock()
}

// Started reports whether pid was started through Start and not yet
// unregistered.
func (r *Reaper) Started(pid int) bool {
	r.mapMu.Lock()
	defer r.mapMu.Unlock()
	_, ok := r.started[pid]
	return ok
}

// Kick asks for a sweep soon.
func (r *Reaper) Kick() {
	select {
	case r.kickCh <- struct{}{}:
	default:
	}
}

// Orphans lists our live children that were not started through Start.
func (r *Reaper) Orphans() []Orphan {
	var out []Orphan
	for _, pid := range adopted(r.self) {
		if r.Started(pid) {
			continue
		}
		if st, ok := ReadStat(pid); ok && st.PPid == r.self && st.State != 'Z' {
			out = append(out, Orphan{Pid: pid, Pgid: st.Pgid, Sid: st.Sid})
		}
	}
	return out
}

// sweep reaps dead orphans and hands live ones to onOrphan. The children
// are listed without the lock (reading /proc is the slow part, and a start
// must not wait for it); each one is checked again under the lock.
func (r *Reaper) sweep() {
	cands := adopted(r.self)
	if len(cands) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pid := range cands {
		if r.Started(pid) {
			continue
		}
		st, ok := ReadStat(pid)
		if !ok || st.PPid != r.self {
			continue
		}
		if st.State == 'Z' {
			var ws unix.WaitStatus
			if n, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil); n == pid {
				r.mapMu.Lock()
				delete(r.handed, pid)
				r.mapMu.Unlock()
			}
			continue
		}
		if r.onOrphan == nil {
			continue
		}
		r.mapMu.Lock()
		_, dup := r.handed[pid]
		r.handed[pid] = struct{}{}
		r.mapMu.Unlock()
		if !dup {
			r.onOrphan(Orphan{Pid: pid, Pgid: st.Pgid})
		}
	}
}

// Stop ends the loop after one last sweep.
func (r *Reaper) Stop() {
	signal.Stop(r.sigCh)
	close(r.done)
	r.wg.Wait()
	r.sweep()
}

// adopted lists the children of pid's main thread. That is where the
// kernel re-parents an orphan (to the first live thread of its subreaper
// or pid-namespace init, and the main thread of a Go process lives as long
// as the process), so one file has every orphan: what a process forked
// itself (Start's children) may be on any thread, but needs no sweep.
// Without CONFIG_PROC_CHILDREN it is Children.
func adopted(pid int) []int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		return Children(pid)
	}
	var out []int
	for _, f := range bytes.Fields(b) {
		if c, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// Children lists pid's children from /proc/PID/task/*/children (a process
// forks from any of its threads, and an orphan is re-parented to any live
// thread of its subreaper), else, without CONFIG_PROC_CHILDREN, by reading
// every /proc/PID/stat.
func Children(pid int) []int {
	var out []int
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	if tasks, err := os.ReadDir(dir); err == nil {
		ok := true
		for _, t := range tasks {
			b, err := os.ReadFile(dir + t.Name() + "/children")
			if err != nil {
				if os.IsNotExist(err) && t.Name() == strconv.Itoa(pid) {
					ok = false // no children files at all
					break
				}
				continue // the thread exited
			}
			for _, f := range bytes.Fields(b) {
				if c, err := strconv.Atoi(string(f)); err == nil {
					out = append(out, c)
				}
			}
		}
		if ok {
			return out
		}
		out = out[:0]
	}
	for _, p := range AllPids() {
		if st, ok := ReadStat(p); ok && st.PPid == pid && p != pid {
			out = append(out, p)
		}
	}
	return out
}

// AllPids lists every process in /proc.
func AllPids() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	out := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Stat is what ReadStat reads from /proc/PID/stat.
type Stat struct {
	Comm      string
	State     byte
	PPid      int
	Pgid      int
	Sid       int
	StartTime uint64 // clock ticks after boot: with the pid, names one process
}

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	open := bytes.IndexByte(b, '(')
	i := bytes.LastIndexByte(b, ')')
	if open < 0 || i < open || i+2 >= len(b) {
		return Stat{}, false
	}
	f := bytes.Fields(b[i+2:])
	// state(0) ppid(1) pgrp(2) session tty tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime priority nice threads itrealvalue
	// starttime(19)
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgid, err2 := strconv.Atoi(string(f[2]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	sid, err4 := strconv.Atoi(string(f[3]))
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return Stat{}, false
	}
	return Stat{Comm: string(b[open+1 : i]), State: f[0][0], PPid: ppid, Pgid: pgid, Sid: sid, StartTime: start}, true
}
