package proc

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"
	"golang.org/x/sys/unix"
)

// The helper modes re-run this test binary as a small tool.
func TestMain(m *testing.M) {
	switch os.Getenv("PROC_TEST_HELPER") {
	case "hide":
		// hide DIR: in our own mount namespace, DIR/secret must vanish.
		dir := os.Args[1]
		if err := HidePaths(dir); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		if _, err := os.ReadFile(filepath.Join(dir, "secret")); err == nil {
			os.Stderr.WriteString("secret still readable")
			os.Exit(4)
		}
		os.Exit(0)
	case "in-own-ns":
		// in-own-ns DIR: (started in a mount namespace of its own) start
		// hide-shared in this same namespace.
		relayHelper("hide-shared", nil)
	case "hide-shared":
		// hide-shared DIR: in the mount namespace of our parent, HidePaths
		// refuses, and DIR/secret stays readable.
		dir := os.Args[1]
		err := HidePaths(dir)
		if err == nil || !strings.Contains(err.Error(), "shares its mount namespace with its parent") {
			fmt.Fprintf(os.Stderr, "HidePaths in the parent's mount namespace: %v", err)
			os.Exit(4)
		}
		if _, err := os.ReadFile(filepath.Join(dir, "secret")); err != nil {
			fmt.Fprintf(os.Stderr, "the secret was hidden all the same: %v", err)
			os.Exit(4)
		}
		os.Exit(0)
	case "expose-spawn":
		// expose-spawn HOME EXPOSED: start expose in a sandbox as this
		// process's user would (SandboxAttr: a user namespace without root).
		relayHelper("expose", SandboxAttr(Isolation{Sandbox: true}))
	case "expose":
		// expose HOME EXPOSED: HOME hidden but EXPOSED, which stays
		// reachable; nothing can be made beside it.
		home, exposed := os.Args[1], os.Args[2]
		if err := HideExpose([]string{home}, []string{exposed}); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		if _, err := os.ReadFile(filepath.Join(home, "secret")); err == nil {
			os.Stderr.WriteString("the home's secret is still readable")
			os.Exit(4)
		}
		if b, err := os.ReadFile(filepath.Join(exposed, "mine")); err != nil || string(b) != "ok" {
			fmt.Fprintf(os.Stderr, "the exposed directory is not reachable: %v", err)
			os.Exit(4)
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(exposed), "beside"), nil, 0o600); err == nil {
			os.Stderr.WriteString("a file could be made beside the exposed directory")
			os.Exit(4)
		}
		if err := os.Chmod(filepath.Dir(exposed), 0o700); err == nil {
			os.Stderr.WriteString("the cover could be opened up")
			os.Exit(4)
		}
		os.Exit(0)
	case "dial":
		// dial ADDR: connect, say so, hold the connection until stdin
		// ends, then close it.
		c, err := net.Dial("tcp", os.Args[1])
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		os.Stdout.WriteString("dialled\n")
		io.Copy(io.Discard, os.Stdin)
		c.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func statusField(t *testing.T, status, key string) string {
	t.Helper()
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in %q", key, status)
	return ""
}

// A process forked from the spawner's thread holds no capability and can
// gain none; the rest of this process keeps what it had.
func TestSpawnerDropsPrivileges(t *testing.T) {
	before, _ := os.ReadFile("/proc/self/status")
	sp, err := NewSpawner(2)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	var out []byte
	var runErr error
	sp.Do(func() { out, runErr = exec.Command("cat", "/proc/self/status").Output() })
	if runErr != nil {
		t.Fatal(runErr)
	}
	st := string(out)
	for key, want := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"CapInh": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1"} {
		if got := statusField(t, st, key); got != want {
			t.Errorf("child %s = %s, want %s", key, got, want)
		}
	}
	if os.Geteuid() == 0 {
		if got := statusField(t, st, "CapBnd"); got != "0000000000000000" {
			t.Errorf("a root child keeps bounding set %s: exec would give it capabilities back", got)
		}
	}
	after, _ := os.ReadFile("/proc/self/status")
	if a, b := statusField(t, string(after), "CapEff"), statusField(t, string(before), "CapEff"); a != b {
		t.Errorf("the main thread's capabilities changed from %s to %s", b, a)
	}
}

// Work handed to the spawner in a burst runs at once on threads of its
// own, up to its size, however long the first takes: a job that blocks
// (its output not read) never holds back the runner's other slots. (Work
// was counted as taken only when a thread took it, so a burst queued
// behind one thread.)
func TestSpawnerRunsABurstAtOnce(t *testing.T) {
	sp, err := NewSpawner(4)
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	started := make(chan struct{}, 4)
	for range 4 {
		sp.Go(func() { started <- struct{}{}; <-block })
	}
	for i := range 4 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 4 started while the others block", i)
		}
	}
	// A fifth waits for a thread, then runs on it.
	done := make(chan struct{})
	sp.Go(func() { close(done) })
	close(block)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fifth never ran")
	}
	sp.Close()
}

// relayHelper runs this test binary again as helper mode, with this
// process's arguments and attr, and exits: 0 if it succeeded, else 5,
// after writing what it wrote.
func relayHelper(mode string, attr *syscall.SysProcAttr) {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), "PROC_TEST_HELPER="+mode)
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	os.Stderr.Write(out)
	if err != nil {
		os.Exit(5)
	}
	os.Exit(0)
}

// HidePaths in a mount namespace of its own hides a directory there and
// nowhere else (hide). It refuses in its parent's mount namespace
// (in-own-ns starts hide-shared in its own: orchestrd sandbox-exec or a
// runner with --hide started by hand, as root, would otherwise hide the
// paths from the whole system), where a mask would go to the helper's
// namespace, not this one, if the refusal failed.
func TestHidePaths(t *testing.T) {
	for _, mode := range []string{"hide", "in-own-ns"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := inOwnMountNamespace(mode, dir).CombinedOutput(); err != nil {
			t.Fatalf("%s helper: %v: %s", mode, err, out)
		}
		if _, err := os.ReadFile(filepath.Join(dir, "secret")); err != nil {
			t.Fatalf("%s: the mask leaked out of the helper's namespace: %v", mode, err)
		}
	}
}

// inOwnMountNamespace is this test binary as the helper mode, in a mount
// namespace of its own (in a user namespace, holding CAP_SYS_ADMIN there,
// without root).
func inOwnMountNamespace(mode string, args ...string) *exec.Cmd {
	exe, _ := os.Executable()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "PROC_TEST_HELPER="+mode)
	a := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if os.Geteuid() != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		a.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	cmd.SysProcAttr = a
	return cmd
}

// testCgroup is a cgroup below this process's own, or a skip where cgroup
// v2 cannot be written.
func testCgroup(t *testing.T) *Cgroup {
	dir, err := OwnCgroupDir()
	if err != nil {
		t.Skip(err)
	}
	own, err := OpenCgroup(dir)
	if err != nil {
		t.Skip(err)
	}
	defer own.Close()
	cg, err := own.Mkdir("proc-test-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() {
		_ = cg.Kill()
		cg.WaitEmpty(5 * time.Second)
		if err := cg.Remove(); err != nil {
			t.Error(err)
		}
		cg.Close()
	})
	return cg
}

// A process started into a cgroup stays found there whatever it does
// (setsid -f), and Kill ends every one of them at once.
func TestCgroupHoldsAndKillsEverything(t *testing.T) {
	cg := testCgroup(t)
	job, err := cg.Mkdir("job-x/y") // SafeName: one level
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	if !strings.HasSuffix(job.Path, "/job-x_y") {
		t.Fatalf("path %s", job.Path)
	}
	cmd := exec.Command("sh", "-c", "setsid -f sleep 300; sleep 300 & echo started; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: job.FD(), Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, _ := out.Read(buf); !bytes.HasPrefix(buf[:n], []byte("started")) {
		t.Fatalf("read %q", buf[:n])
	}
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 3 && time.Now().Before(deadline) {
		pids, _ = job.Procs()
	}
	if len(pids) < 3 || !job.Populated() {
		t.Fatalf("procs %v", pids)
	}
	if err := job.Freeze(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := job.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if !job.WaitEmpty(10 * time.Second) {
		t.Fatal("cgroup not empty after Kill")
	}
	if left, _ := job.Procs(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
	if err := job.Remove(); err != nil {
		t.Fatal(err)
	}
	if got := cg.Children(); len(got) != 0 {
		t.Fatalf("children left: %v", got)
	}
}

// The reaper hands each orphan to its callback once, however many sweeps
// see it, and reaps it once it dies; what was started through it is left
// to its starter.
func TestReaperHandsEachOrphanOnce(t *testing.T) {
	var mu sync.Mutex
	handed := map[int]int{}
	r, err := NewReaper(func(o Orphan) {
		mu.Lock()
		handed[o.Pid]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		r.Stop()
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}()
	var started *exec.Cmd
	if _, err := r.Start(func() (int, error) {
		started = exec.Command("sh", "-c", "setsid -f sh -c 'echo $$; exec sleep 300'")
		out, err := started.StdoutPipe()
		if err != nil {
			return 0, err
		}
		if err := started.Start(); err != nil {
			return 0, err
		}
		b := make([]byte, 32)
		n, _ := out.Read(b)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
		mu.Lock()
		handed[-1] = pid
		mu.Unlock()
		return started.Process.Pid, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := started.Wait(); err != nil {
		t.Fatalf("the starter's own wait failed (was it reaped by the reaper?): %v", err)
	}
	r.Unregister(started.Process.Pid)
	var orphan int
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.Kick()
		mu.Lock()
		orphan = handed[-1]
		n := handed[orphan]
		mu.Unlock()
		if orphan > 0 && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan never handed: %v", handed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 20; i++ {
		r.sweep()
	}
	syscall.Kill(orphan, syscall.SIGKILL)
	for {
		r.sweep()
		if _, ok := ReadStat(orphan); !ok {
			break // reaped
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead orphan was not reaped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if handed[orphan] != 1 {
		t.Fatalf("orphan %d handed %d times", orphan, handed[orphan])
	}
}

func TestCleanEnv(t *testing.T) {
	env := []string{"PATH=/bin", "HOME=/h", "ANTHROPIC_API_KEY=sk", "LC_ALL=C", "LC_TIME=C", "LANGUAGE=fr",
		"MY_A=1", "MY=2", "TERM=xterm", "SSH_AUTH_SOCK=/s", "bad", "=x", "TZ=UTC", "SHELL=/bin/sh", "USER=u", "LOGNAME=u", "LANG=C"}
	got := strings.Join(CleanEnv(env, []string{"MY_*", "SSH_AUTH_SOCK"}), " ")
	want := "PATH=/bin HOME=/h LC_ALL=C LC_TIME=C MY_A=1 TERM=xterm SSH_AUTH_SOCK=/s TZ=UTC SHELL=/bin/sh USER=u LOGNAME=u LANG=C"
	if got != want {
		t.Fatalf("CleanEnv =\n%s\nwant\n%s", got, want)
	}
	if got := CleanEnv(env, nil); strings.Contains(strings.Join(got, " "), "sk") || strings.Contains(strings.Join(got, " "), "MY_A") {
		t.Fatalf("CleanEnv without inherit_env: %q", got)
	}
}

// A child (and its child) descends from this process; this process does
// not descend from its child, and a pid that is gone descends from none.
func TestDescends(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & echo $!; wait")
	out := testio.StartPiped(t, cmd)
	var grandchild int
	if _, err := fmt.Fscan(out, &grandchild); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(grandchild, syscall.SIGKILL)
	self := os.Getpid()
	for _, c := range []struct {
		pid, ancestor int
		want          bool
	}{
		{self, self, true},
		{cmd.Process.Pid, self, true},
		{grandchild, self, true},
		{grandchild, cmd.Process.Pid, true},
		{self, cmd.Process.Pid, false},
		{os.Getppid(), self, false},
		{1 << 30, self, false},
	} {
		if got := Descends(c.pid, c.ancestor); got != c.want {
			t.Errorf("Descends(%d, %d) = %v, want %v", c.pid, c.ancestor, got, c.want)
		}
	}
}

// HideExpose works for a daemon run as an ordinary user: its sandbox is a
// user namespace of its own, where it holds CAP_SYS_ADMIN but no
// CAP_DAC_OVERRIDE, so the cover's way down to the exposed directory
// must be built writable and closed after. As root the test runs as
// nobody, from a copy of this binary that user can run.
func TestHideExposeUnprivileged(t *testing.T) {
	top := testio.ShortTemp(t, "proc-expose-")
	exe, _ := os.Executable()
	var cred *syscall.Credential
	uid := os.Getuid()
	if os.Geteuid() == 0 {
		uid = 65534
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		exe = filepath.Join(top, "proc.test")
		if err := os.WriteFile(exe, b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(top, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(top, "home")
	exposed := filepath.Join(home, "executors", "x-1")
	if err := os.MkdirAll(exposed, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(home, "secret"), filepath.Join(exposed, "mine")} {
		if err := os.WriteFile(f, []byte("ok"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{home, filepath.Join(home, "executors"), exposed, filepath.Join(home, "secret"), filepath.Join(exposed, "mine")} {
		if err := os.Chown(d, uid, uid); err != nil && cred != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(exe, home, exposed)
	cmd.Env = append(os.Environ(), "PROC_TEST_HELPER=expose-spawn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("operation not permitted")) && !userNSAllowed() {
			t.Skipf("this kernel refuses unprivileged user namespaces: %s", out)
		}
		t.Fatalf("the sandbox as an ordinary user: %v: %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(home, "executors", "beside")); err == nil {
		t.Fatal("the helper made a file beside the exposed directory")
	}
}

// userNSAllowed: an ordinary user may make a user namespace here.
func userNSAllowed() bool {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd.Run() == nil
}
