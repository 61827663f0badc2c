package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// HidePaths makes this process's mount namespace private (nothing mounted
// here reaches the namespace it was copied from) and hides each path: a
// directory under an empty, read-only, mode-000 tmpfs, a file under
// /dev/null, so that nothing started from here can see or reach what it
// held. A path inside another one hidden is covered already. The process
// must be in a mount namespace of its own (CLONE_NEWNS) with CAP_SYS_ADMIN
// in it. A path that does not exist has nothing to hide and is skipped.
func HidePaths(paths ...string) error { return HideExpose(paths, nil) }

// HideExpose is HidePaths, then puts each directory of expose that a
// hidden path covers back where it was, alone: the tmpfs over the hidden
// directory gets the path down to it (directories that can be traversed
// but not listed, mode 0111) and the directory itself bind-mounted there,
// then is made read-only. So an executor sees its own socket directory
// inside the daemon's home and nothing else of the home, and cannot make
// anything beside it. Exposed paths must be directories, given by their
// real paths.
func HideExpose(paths, expose []string) error {
	if err := ownMountNamespace(); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mount namespace private: %w", err)
	}
	// The exposed directories, held before they are covered.
	held := make([]int, len(expose))
	for i, e := range expose {
		fd, err := unix.Open(filepath.Clean(e), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, h := range held[:i] {
				unix.Close(h)
			}
			return fmt.Errorf("opening %s to expose it: %w", e, err)
		}
		held[i] = fd
	}
	defer func() {
		for _, h := range held {
			unix.Close(h)
		}
	}()
	sorted := append([]string(nil), paths...)
	sort.Strings(sorted)
	var done []string
next:
	for _, p := range sorted {
		p = filepath.Clean(p)
		for _, d := range done {
			if p == d || strings.HasPrefix(p, d+"/") || d == "/" {
				continue next
			}
		}
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			// Nothing to hide (vibe-reachout's socket in the instant
			// someone removed it and the daemon has not made it again).
			continue
		}
		if err != nil {
			return fmt.Errorf("hiding %s: %w", p, err)
		}
		var inside []int // the exposed directories below p
		for i, e := range expose {
			if strings.HasPrefix(filepath.Clean(e), p+"/") {
				inside = append(inside, i)
			}
		}
		switch {
		case !fi.IsDir():
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		case len(inside) == 0:
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY,
				"size=4k,nr_inodes=1,mode=000")
		default:
			err = exposeUnder(p, expose, held, inside)
		}
		if err != nil {
			return fmt.Errorf("hiding %s: %w", p, err)
		}
		done = append(done, p)
	}
	return nil
}

// ownMountNamespace fails when this process is in its parent's mount
// namespace: what HideExpose mounts would then cover the paths for the
// parent and everyone beside it (orchestrd sandbox-exec, or a runner given
// --hide, started by hand as root, would hide directories of the whole
// system). The daemon starts them in a namespace of their own. A parent
// whose namespace cannot be read (not ours to inspect, or gone) is not
// taken for ours: without privilege over it, mounts cannot reach it.
func ownMountNamespace() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("reading this process's mount namespace: %w", err)
	}
	// The parent as /proc knows it: still the starting namespace's /proc
	// when this runs, where a sandboxed process is not pid 1.
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return fmt.Errorf("reading this process's parent: %w", err)
	}
	var fields []string
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		fields = strings.Fields(string(stat[i+1:]))
	}
	if len(fields) < 2 {
		return errors.New("reading this process's parent: /proc/self/stat has no parent pid")
	}
	parent, err := os.Readlink("/proc/" + fields[1] + "/ns/mnt")
	switch {
	case err == nil && parent == self:
		return fmt.Errorf("refusing to hide paths: this process shares its mount namespace with its parent (pid %s), "+
			"where the masks would hide them from everyone; it must be started in a mount namespace of its own "+
			"(the daemon starts it so)", fields[1])
	case err == nil, errors.Is(err, os.ErrPermission), errors.Is(err, os.ErrNotExist):
		return nil
	}
	return fmt.Errorf("reading the mount namespace of this process's parent: %w", err)
}

// exposeUnder covers the directory p with a tmpfs that holds only the
// exposed directories inside (expose[i] for i in inside, held[i] their
// descriptors), bind-mounted at their paths, then makes it read-only.
func exposeUnder(p string, expose []string, held []int, inside []int) error {
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	// Made writable by its owner while the way down is built: without
	// root, in a user namespace of its own, the sandbox holds no
	// CAP_DAC_OVERRIDE to write a 0111 directory. Each directory is made
	// 0111 once what is below it is in place.
	if err := unix.Mount("tmpfs", p, "tmpfs", flags, "size=16k,nr_inodes=64,mode=0700"); err != nil {
		return err
	}
	var made []string // directories on the way down, to close to 0111
	for _, i := range inside {
		rel := strings.TrimPrefix(filepath.Clean(expose[i]), p+"/")
		at := p
		for _, c := range strings.Split(rel, "/") {
			at = filepath.Join(at, c)
			if err := unix.Mkdir(at, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("making %s to expose it: %w", at, err)
			} else if err == nil && at != filepath.Clean(expose[i]) {
				made = append(made, at)
			}
		}
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(held[i]), at, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("exposing %s: %w", expose[i], err)
		}
	}
	// Deepest first, the cover's root last; never an exposed directory
	// (its mount is on top: a chmod there would change the real one).
	sort.Sort(sort.Reverse(sort.StringSlice(made)))
	for _, d := range append(made, p) {
		if slices.ContainsFunc(expose, func(e string) bool { return filepath.Clean(e) == d }) {
			continue
		}
		if err := unix.Chmod(d, 0o111); err != nil {
			return fmt.Errorf("closing %s: %w", d, err)
		}
	}
	if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("making the cover of %s read-only: %w", p, err)
	}
	return nil
}

// CgroupRoot is where cgroup hierarchies are mounted. Every sandbox (a
// runner's around its jobs, sandbox-exec's around an executor) hides all
// of it: as uid 0, or as the owner of a delegated cgroup, what runs there
// could otherwise write a cgroup.procs or clone into a cgroup to leave its
// own, or freeze (cgroup.freeze) or kill a runner's cgroup and so every
// lane's jobs. The daemon and runners write cgroups through descriptors
// opened before.
const CgroupRoot = "/sys/fs/cgroup"

// WithCgroupRoot is paths and CgroupRoot, when it is a directory here:
// what a sandbox hides.
func WithCgroupRoot(paths []string) []string {
	out := append([]string(nil), paths...)
	if fi, err := os.Stat(CgroupRoot); err == nil && fi.IsDir() {
		out = append(out, CgroupRoot)
	}
	return out
}

// MountProc mounts a /proc of this process's pid namespace over /proc, so
// that what is started from here sees (and can address) only that
// namespace's processes. The process must be in a mount namespace of its
// own with CAP_SYS_ADMIN over its pid namespace.
func MountProc() error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc of the runner's pid namespace: %w", err)
	}
	return nil
}

// Spawner runs functions on OS threads that hold no capabilities (none
// effective, permitted, inheritable or ambient, and an empty bounding set
// where the process may empty it) and have no_new_privs set. A process
// forked from such a thread inherits all of it: even as root, and through
// any setuid or file-capability binary, it cannot gain a privilege, so it
// cannot undo a mount namespace's masks or enter another namespace.
// Credentials are per thread on Linux, which is why these are locked
// threads and not the whole process: the rest of the process keeps what it
// needs. There are several threads because starting a process waits for
// its exec: one thread would start one job at a time.
type Spawner struct {
	req chan func()
	wg  sync.WaitGroup

	mu    sync.Mutex
	max   int // threads at most
	total int // threads started
	// idle is threads waiting for work less work queued for none (it may
	// go below 0): counted when work is queued, not when a thread takes
	// it, so a burst of Go calls grows the spawner instead of queueing
	// behind one thread that is busy with a long job.
	idle int
}

// NewSpawner prepares up to n threads (at least one), started as they are
// needed: an idle runner keeps one. It starts the first at once and fails
// if its privileges cannot be dropped, so that no job ever runs with them.
func NewSpawner(n int) (*Spawner, error) {
	s := &Spawner{req: make(chan func(), 2*max(n, 1)), max: max(n, 1), total: 1, idle: 1}
	if err := s.grow(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// grow starts one more thread, already counted in total and idle, and
// waits until it is ready.
func (s *Spawner) grow() error {
	ready := make(chan error, 1)
	s.wg.Add(1)
	go s.serve(ready)
	return <-ready
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
	defer s.wg.Done()
	if err := dropPrivileges(); err != nil {
		s.mu.Lock()
		s.total--
		s.idle--
		s.mu.Unlock()
		ready <- err
		return
	}
	ready <- nil
	for fn := range s.req {
		fn()
		s.mu.Lock()
		s.idle++
		s.mu.Unlock()
	}
}

// Go runs fn on one of the spawner's threads, as soon as one is free,
// starting another (up to the spawner's size) when none is. Everything fn
// does (a process it starts, waiting for it) happens there.
func (s *Spawner) Go(fn func()) {
	s.mu.Lock()
	more := s.idle <= 0 && s.total < s.max
	if more {
		s.total++
		s.idle++
	}
	s.idle-- // fn takes a thread, now or once one is free
	s.mu.Unlock()
	if more {
		// A thread that could not drop its privileges runs nothing; the
		// ones already there take the work.
		_ = s.grow()
	}
	s.req <- fn
}

// Do runs fn on one of the spawner's threads and returns when it has.
func (s *Spawner) Do(fn func()) {
	done := make(chan struct{})
	s.Go(func() { fn(); close(done) })
	<-done
}

// Close ends the threads. Processes they forked with a parent-death signal
// get it then.
func (s *Spawner) Close() {
	close(s.req)
	s.wg.Wait()
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

// Isolation is what SandboxAttr puts a new process in.
type Isolation struct {
	// Sandbox: a mount namespace and a pid namespace of its own (the
	// process is their init; the kernel kills everything in the pid
	// namespace when it dies). Its parent-death signal is then SIGKILL.
	Sandbox bool
	// NoNetwork: a network namespace of its own, with only a loopback that
	// is down.
	NoNetwork bool
	// Cgroup, if not nil, is where the process starts (clone3).
	Cgroup *Cgroup
	// DeathSignal is the parent-death signal without Sandbox (0: none).
	DeathSignal syscall.Signal
}

// SandboxAttr starts a process as the leader of its own session (no
// controlling terminal for what it starts to type into) in the namespaces
// iso asks for. Without root they are made inside a new user namespace
// that maps only this process's uid and gid, where the new process keeps
// CAP_SYS_ADMIN (ambient) to mount what it hides and its /proc; the uid it
// runs as is unchanged.
func SandboxAttr(iso Isolation) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setsid: true, Pdeathsig: iso.DeathSignal}
	if iso.Sandbox {
		a.Cloneflags |= syscall.CLONE_NEWNS | syscall.CLONE_NEWPID
		a.Pdeathsig = syscall.SIGKILL
	}
	if iso.NoNetwork {
		a.Cloneflags |= syscall.CLONE_NEWNET
	}
	if iso.Cgroup != nil {
		a.UseCgroupFD, a.CgroupFD = true, iso.Cgroup.FD()
	}
	if os.Geteuid() == 0 || a.Cloneflags == 0 {
		return a
	}
	a.Cloneflags |= syscall.CLONE_NEWUSER
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
	a.GidMappingsEnableSetgroups = false
	if iso.Sandbox {
		a.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	return a
}

// ExplainSpawnError adds to err, when it is the kernel refusing a
// namespace, what the user can do about it.
func ExplainSpawnError(err error) error {
	if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	return fmt.Errorf("%w (making the runner's namespaces was refused: run as root, or where unprivileged "+
		"user namespaces are allowed (try: unshare -Urmp --fork true), or turn the sandbox off, which lets jobs reach the daemon's sockets)", err)
}

// Hidden is what ExecHidden does before it execs.
type Hidden struct {
	Hide   []string // paths hidden (with the cgroup tree): HideExpose
	Expose []string // directories inside a hidden one put back: HideExpose
	// ReadOnly and Writable: Confine, after the paths are hidden.
	ReadOnly, Writable []string
}

// ExecHidden replaces this process with argv (env as its environment)
// after hiding h.Hide and the cgroup tree but what h.Expose names
// (HideExpose, WithCgroupRoot), making h.ReadOnly read-only but
// h.Writable (Confine), mounting the /proc of its pid namespace and
// dropping every privilege on the thread that execs, so that the program
// cannot undo the masks. Its working directory is entered again by path,
// through the new mounts. The process must have been started with
// SandboxAttr(Isolation{Sandbox: true}). It returns only on failure.
func ExecHidden(h Hidden, argv, env []string) error {
	if len(argv) == 0 {
		return errors.New("nothing to run")
	}
	runtime.LockOSThread() // the credentials dropped are this thread's, and exec runs on it
	if err := HideExpose(WithCgroupRoot(h.Hide), h.Expose); err != nil {
		return err
	}
	if len(h.ReadOnly) > 0 || len(h.Writable) > 0 {
		if err := Confine(h.ReadOnly, h.Writable); err != nil {
			return err
		}
	}
	if err := MountProc(); err != nil {
		return err
	}
	if wd, err := os.Getwd(); err == nil {
		if err := os.Chdir(wd); err != nil {
			return fmt.Errorf("entering %s again through the sandbox's mounts: %w", wd, err)
		}
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		lp, err := lookPath(path, env)
		if err != nil {
			return err
		}
		path = lp
	}
	if err := dropPrivileges(); err != nil {
		return err
	}
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("executing %s: %w", path, err)
	}
	return nil
}

// lookPath finds a program in env's PATH.
func lookPath(name string, env []string) (string, error) {
	pathVar := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH %s", name, pathVar)
}
