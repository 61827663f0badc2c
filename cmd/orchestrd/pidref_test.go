package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pidRef is a process a test found by its pid (a runner in lane.list, a
// job's grandchild by its tag), held by a pidfd opened while the process
// was known to be the one meant. A pid is given to a new process once its
// own is reaped, and here that comes round fast (pid_max 32768, the suite
// starting thousands of processes a minute): a signal sent by pid late,
// a cleanup's SIGKILL to every pid a test watched, killed whatever now
// had it, another test's runner or job (runner_lost, a job killed), and a
// liveness check by pid waited on a stranger. Through the pidfd a signal
// reaches that process or nothing, and its end is seen as it happens.
type pidRef struct {
	pid int
	fd  int // -1: the process was gone before it could be held
}

// holdPid opens a pidfd on pid and keeps it if is, asked once the pidfd
// is open (so about the process it holds), says the process is the one
// meant; otherwise that process is gone and the ref says so. release
// closes the pidfd.
func holdPid(pid int, is func(pid int) bool) pidRef {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return pidRef{pid: pid, fd: -1}
	}
	if is != nil && !is(pid) {
		unix.Close(fd)
		return pidRef{pid: pid, fd: -1}
	}
	return pidRef{pid: pid, fd: fd}
}

// release closes the pidfd; the ref is not used after.
func (r pidRef) release() {
	if r.fd >= 0 {
		unix.Close(r.fd)
	}
}

// holdTagged holds the pids tagged found running "sleep TAG", released
// when the test ends.
func holdTagged(t *testing.T, tag string, pids []int) []pidRef {
	var out []pidRef
	for _, p := range pids {
		r := holdPid(p, func(p int) bool {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
			return err == nil && string(b) == "sleep\x00"+tag+"\x00"
		})
		t.Cleanup(r.release)
		out = append(out, r)
	}
	return out
}

// childOf says whether pid's parent is parent (a runner's is its daemon).
func childOf(parent int) func(pid int) bool {
	return func(pid int) bool {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		return len(f) > 1 && f[1] == strconv.Itoa(parent)
	}
}

// killChild sends SIGKILL to pid if it is parent's child (a daemon's
// runner or executor, found by its pid a moment ago): through a pidfd, so
// that if it died meanwhile no process that took its pid is killed. It
// reports whether the child was there to be killed.
func killChild(parent, pid int) bool {
	r := holdPid(pid, childOf(parent))
	defer r.release()
	if r.fd < 0 {
		return false
	}
	r.signal(syscall.SIGKILL)
	return true
}

// kill kills pid, the daemon's what (a "runner", an "executor"), with
// killChild; t fails if it was gone before.
func (d *testDaemon) kill(what string, pid int) {
	d.t.Helper()
	if !killChild(d.proc.Pid(), pid) {
		d.t.Fatalf("%s %d gone before it was killed", what, pid)
	}
}

// exited reports whether the process has ended (a zombie has).
func (r pidRef) exited() bool {
	if r.fd < 0 {
		return true
	}
	fds := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n > 0
	}
}

// signal sends sig to the process held, never to another with its pid.
func (r pidRef) signal(sig syscall.Signal) {
	if r.fd >= 0 {
		_ = unix.PidfdSendSignal(r.fd, sig, nil, 0)
	}
}

// waitExited fails the test if the process has not ended after a deadline.
func waitExited(t *testing.T, r pidRef) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !r.exited() {
		if time.Now().After(deadline) {
			t.Errorf("process %d is still alive", r.pid)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pidRef sees its process run, signals it, and sees its end; once the
// process is reaped, a new ref on its pid holds nothing.
func TestPidRef(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := holdPid(cmd.Process.Pid, childOf(os.Getpid()))
	defer r.release()
	if r.fd < 0 || r.exited() {
		t.Fatalf("a running child held as %+v, exited %v", r, r.exited())
	}
	if holdPid(cmd.Process.Pid, childOf(1)).fd >= 0 {
		t.Fatal("held a process that is not what was asked")
	}
	r.signal(syscall.SIGKILL)
	cmd.Wait()
	if !r.exited() {
		t.Fatal("the killed child is not seen exited")
	}
	if again := holdPid(cmd.Process.Pid, childOf(os.Getpid())); !again.exited() {
		again.release()
		t.Fatal("a reaped child's pid held again")
	}
}
