package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup is an open cgroup v2 directory. Its operations go through a
// directory file descriptor, so they keep working after the path is hidden
// or made read-only in this process's mount namespace (a runner does that
// so its jobs cannot move themselves out of their cgroup).
type Cgroup struct {
	Path   string // where it was found, for messages
	fd     int    // O_PATH|O_DIRECTORY
	parent int    // fd of the parent directory, -1 if opened by path
	name   string // name in the parent
}

// OwnCgroupDir returns the cgroup v2 directory this process is in, as a
// path under the cgroup2 mount, or an error saying why there is none.
func OwnCgroupDir() (string, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			if !strings.HasPrefix(rest, "/") {
				return "", fmt.Errorf("unexpected cgroup v2 path %q in /proc/self/cgroup", rest)
			}
			return strings.TrimSuffix(mnt+rest, "/"), nil
		}
	}
	return "", errors.New("this process is in no cgroup v2 hierarchy")
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("reading mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) >= 5 {
			return unescapeMount(fields[4]), nil
		}
	}
	return "", errors.New("no cgroup2 filesystem is mounted")
}

// Cgroup2MountPoint is the cgroup2 mount point, for a runner that makes it
// read-only for its jobs.
func Cgroup2MountPoint() (string, error) { return cgroup2Mount() }

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// OpenCgroup opens an existing cgroup v2 directory.
func OpenCgroup(path string) (*Cgroup, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s: %w", path, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		unix.Close(fd)
		return nil, fmt.Errorf("opening cgroup %s: not a cgroup v2 directory", path)
	}
	return &Cgroup{Path: path, fd: fd, parent: -1}, nil
}

// Mkdir creates (or opens, if it exists) the child cgroup name.
func (c *Cgroup) Mkdir(name string) (*Cgroup, error) {
	name = SafeName(name)
	if err := unix.Mkdirat(c.fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("creating cgroup %s/%s: %w", c.Path, name, err)
	}
	ch, err := c.open(name)
	if err != nil {
		_ = unix.Unlinkat(c.fd, name, unix.AT_REMOVEDIR)
		return nil, fmt.Errorf("opening cgroup %s/%s: %w", c.Path, name, err)
	}
	return ch, nil
}

// FD is the directory's descriptor, for SysProcAttr.CgroupFD (clone3 puts
// the child in the cgroup before it runs a single instruction).
func (c *Cgroup) FD() int { return c.fd }

// Close releases the descriptors; the cgroup stays.
func (c *Cgroup) Close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	if c.parent >= 0 {
		unix.Close(c.parent)
		c.parent = -1
	}
}

// read reads a cgroup file (they are small) with plain system calls: it is
// on every job's path.
func (c *Cgroup) read(file string) ([]byte, error) {
	fd, err := unix.Openat(c.fd, file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func (c *Cgroup) write(file, value string) error {
	fd, err := unix.Openat(c.fd, file, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(value))
	return err
}

// Procs lists the processes in the cgroup (not its children).
func (c *Cgroup) Procs() ([]int, error) {
	b, err := c.read("cgroup.procs")
	if err != nil {
		return nil, fmt.Errorf("reading %s/cgroup.procs: %w", c.Path, err)
	}
	var out []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// CPUStat is the CPU time the cgroup's processes used, in microseconds,
// user and system (cpu.stat's user_usec and system_usec: every process
// that was in it, exited or not, its children included). cgroup v2 keeps
// them without the cpu controller. ok is false if they cannot be read.
func (c *Cgroup) CPUStat() (user, system uint64, ok bool) {
	b, err := c.read("cpu.stat")
	if err != nil {
		return 0, 0, false
	}
	return cpuStat(b)
}

// cpuStat parses cpu.stat's user_usec and system_usec.
func cpuStat(b []byte) (user, system uint64, ok bool) {
	var haveU, haveS bool
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "user_usec":
			user, haveU = n, true
		case "system_usec":
			system, haveS = n, true
		}
	}
	return user, system, haveU && haveS
}

// Populated reports whether any process is in the cgroup or below it.
func (c *Cgroup) Populated() bool { return c.eventIs("populated", "1") }

func (c *Cgroup) eventIs(key, want string) bool {
	b, err := c.read("cgroup.events")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return v == want
		}
	}
	return false
}

// Freeze stops every process in the cgroup (so none can fork while it is
// listed) and waits, up to timeout, until the kernel says it is frozen.
func (c *Cgroup) Freeze(timeout time.Duration) error {
	if err := c.write("cgroup.freeze", "1"); err != nil {
		return fmt.Errorf("freezing %s: %w", c.Path, err)
	}
	if !c.waitEvent("frozen", "1", timeout) {
		return fmt.Errorf("freezing %s: not frozen after %s", c.Path, timeout)
	}
	return nil
}

// Kill SIGKILLs every process in the cgroup and below it, at once
// (cgroup.kill; on kernels before 5.14, one by one until none is left).
func (c *Cgroup) Kill() error {
	err := c.write("cgroup.kill", "1")
	if err == nil || !errors.Is(err, unix.ENOENT) {
		if err != nil {
			return fmt.Errorf("killing %s: %w", c.Path, err)
		}
		return nil
	}
	for i := 0; i < 100; i++ {
		pids, err := c.Procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
	}
	return fmt.Errorf("killing %s: processes keep appearing", c.Path)
}

// WaitEmpty waits up to timeout until no process is left in the cgroup or
// below it.
func (c *Cgroup) WaitEmpty(timeout time.Duration) bool {
	return c.waitEvent("populated", "0", timeout)
}

// waitEvent waits until cgroup.events says key = want, woken by inotify
// (the kernel signals a modification of cgroup.events on every change).
func (c *Cgroup) waitEvent(key, want string, timeout time.Duration) bool {
	if c.eventIs(key, want) {
		return true
	}
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return false
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, "/proc/self/fd/"+strconv.Itoa(c.fd)+"/cgroup.events", unix.IN_MODIFY); err != nil {
		return false
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 4096)
	for {
		if c.eventIs(key, want) {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(max(left.Milliseconds(), 1))); err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
		_, _ = unix.Read(in, buf)
	}
}

// Retire removes a cgroup whose process has ended and closes it: what is
// left in it gets grace to end by itself, then is killed (and gets grace
// again to die); the error says why it could not be removed.
func (c *Cgroup) Retire(grace time.Duration) error {
	defer c.Close()
	if !c.WaitEmpty(grace) {
		_ = c.Kill()
		c.WaitEmpty(grace)
	}
	return c.Remove()
}

// Remove removes the cgroup's children (depth first) and then the cgroup;
// a cgroup that still holds processes is left, with an error.
func (c *Cgroup) Remove() error {
	if c.parent < 0 {
		return fmt.Errorf("removing %s: opened by path; remove it through its parent", c.Path)
	}
	if err := c.removeChildren(); err != nil {
		return err
	}
	if err := unix.Unlinkat(c.parent, c.name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing cgroup %s: %w", c.Path, err)
	}
	return nil
}

// RemoveChild removes the child cgroup name and everything below it.
func (c *Cgroup) RemoveChild(name string) error {
	ch, err := c.open(SafeName(name))
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("opening cgroup %s/%s: %w", c.Path, name, err)
	}
	defer ch.Close()
	return ch.Remove()
}

// Child opens the existing child cgroup name.
func (c *Cgroup) Child(name string) (*Cgroup, error) {
	ch, err := c.open(SafeName(name))
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s/%s: %w", c.Path, name, err)
	}
	return ch, nil
}

// open opens the child name. The child holds its own descriptor of c, so
// either may be closed first.
func (c *Cgroup) open(name string) (*Cgroup, error) {
	fd, err := unix.Openat(c.fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	parent, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Cgroup{Path: c.Path + "/" + name, fd: fd, parent: parent, name: name}, nil
}

// Children lists the names of the child cgroups.
func (c *Cgroup) Children() []string {
	fd, err := unix.Openat(c.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), c.Path)
	defer f.Close()
	ents, _ := f.ReadDir(-1)
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

func (c *Cgroup) removeChildren() error {
	for _, n := range c.Children() {
		ch, err := c.open(n)
		if err != nil {
			continue
		}
		err = ch.Remove()
		ch.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// SafeName makes s usable as one cgroup directory name: letters, digits,
// '-', '_' and '.' are kept, anything else becomes '_'; never "", "." or "..".
func SafeName(s string) string {
	b := []byte(s)
	for i, ch := range b {
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.'
		if !ok {
			b[i] = '_'
		}
	}
	s = string(b)
	if s == "" || s == "." || s == ".." {
		s = "_" + s
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// CgroupOf returns the cgroup v2 path of pid as /proc/PID/cgroup gives it
// (relative to the cgroup2 mount), or "".
func CgroupOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	return ""
}

// EnvValue reads one variable from a process's environment as it was when
// the process started (or last exec'd), or "".
func EnvValue(pid int, key string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	k := []byte(key + "=")
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, k); ok {
			return string(v)
		}
	}
	return ""
}
