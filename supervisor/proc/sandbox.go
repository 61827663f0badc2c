package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// HidePaths makes this process's mount namespace private (nothing mounted
// here reaches the namespace it was copied from) and mounts an empty,
// read-only, mode-000 tmpfs over each path, so that nothing started from
// here can see or reach what is below it. The process must be in a mount
// namespace of its own (CLONE_NEWNS) with CAP_SYS_ADMIN in it.
func HidePaths(paths ...string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mount namespace private: %w", err)
	}
	for _, p := range paths {
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY,
			"size=4k,nr_inodes=1,mode=000"); err != nil {
			return fmt.Errorf("hiding %s: %w", p, err)
		}
	}
	return nil
}

// ReadOnly bind-mounts path over itself read-only. Descriptors opened
// below path before the call keep writing through the original mount.
func ReadOnly(path string) error {
	if err := unix.Mount(path, path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %w", path, err)
	}
	if err := unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", path, err)
	}
	return nil
}

// Spawner runs functions on one OS thread that holds no capabilities (none
// effective, permitted, inheritable or ambient, and an empty bounding set
// where the process may empty it) and has no_new_privs set. A process
// forked from that thread inherits all of it: even as root, and through
// any setuid or file-capability binary, it cannot gain a privilege, so it
// cannot undo a mount namespace's masks or enter another namespace.
// Credentials are per thread on Linux, which is why this is one locked
// thread and not the whole process: the rest of the process keeps what it
// needs.
type Spawner struct {
	req  chan func()
	done chan struct{}
}

// NewSpawner starts the thread. It fails if the privileges cannot be
// dropped, so that no job ever runs with them.
func NewSpawner() (*Spawner, error) {
	s := &Spawner{req: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go s.serve(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

// serve locks a thread other than the main one (whose credentials are what
// /proc/PID/status shows and what the process is judged by), drops its
// privileges and runs requests on it.
func (s *Spawner) serve(ready chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread: hold it, so the next try cannot land on it too,
		// until that try has its own thread; then give it back untouched.
		next := make(chan error, 1)
		go s.serve(next)
		err := <-next
		runtime.UnlockOSThread()
		ready <- err
		return
	}
	// Never unlocked: when this goroutine returns, the thread ends with it
	// rather than going back to the scheduler without privileges.
	defer close(s.done)
	if err := dropPrivileges(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for fn := range s.req {
		fn()
	}
}

// Do runs fn on the spawner's thread and returns when it has.
func (s *Spawner) Do(fn func()) {
	done := make(chan struct{})
	s.req <- func() { fn(); close(done) }
	<-done
}

// Close ends the thread. Processes it forked with a parent-death signal
// get it then.
func (s *Spawner) Close() {
	close(s.req)
	<-s.done
}

func dropPrivileges() error {
	last := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(string(bytes.TrimSpace(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		// EPERM without CAP_SETPCAP: checked below where it matters.
		_ = unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("dropping capabilities: %w", err)
	}
	// uid 0 gets the bounding set back as permitted capabilities at every
	// exec: it must be empty.
	if unix.Geteuid() == 0 {
		for c := 0; c <= last; c++ {
			if r, _ := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); r == 1 {
				return fmt.Errorf("dropping capability %d from the bounding set: not permitted", c)
			}
		}
	}
	return nil
}

// SetNotDumpable makes this process undumpable: processes of the same uid
// (its jobs) can then neither ptrace it nor read its memory, environment
// or file descriptors through /proc.
func SetNotDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("making the process undumpable: %w", err)
	}
	return nil
}
