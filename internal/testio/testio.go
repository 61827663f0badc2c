// Package testio holds small I/O helpers for tests and benchmarks.
package testio

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer that a process's writer (a logger, a child's
// stderr) and the test reading it can share.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Hammer runs f over and over in n goroutines, until f returns false (in
// that goroutine) or stop is called; stop returns once every one has.
func Hammer(n int, f func() bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if !f() {
					return
				}
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// Eventually polls cond until it holds; t fails saying what it waited for
// if it does not hold within.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Proc is a process a test started with Start.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd; t fails if it cannot. If the process still runs at
// the test's end it is killed there, and the test waits for its end.
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

// Done is closed once the process has ended and been waited for.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is how the process ended (Wait's error); call it once Done is
// closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// StartPiped starts cmd, its stdout a pipe for the test to read; if it is
// still running at the test's end it is killed there, and waited for.
func StartPiped(t testing.TB, cmd *exec.Cmd) io.ReadCloser {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return out
}

// ReadFile is the content of the file at path; t fails if it cannot be
// read.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ShortTemp is a new directory directly in the system's temporary
// directory, named from prefix, removed when the test ends: a unix
// socket's path is limited to 108 bytes, and t.TempDir() with a socket's
// name can be longer.
func ShortTemp(t testing.TB, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// UpLinkTree makes, in dir (its symlinks resolved), the directories
// wt/sub, x/y and x/outside and the symlink wt/sub/up to x/y: the cwd
// "wt/sub/up/../outside" is x/outside as the kernel walks it, and
// wt/outside (no such directory) by its text. It returns the resolved dir;
// t fails if it cannot make them.
func UpLinkTree(t testing.TB, dir string) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{base + "/wt/sub", base + "/x/y", base + "/x/outside"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(base+"/x/y", base+"/wt/sub/up"); err != nil {
		t.Fatal(err)
	}
	return base
}

// Git runs git in dir with a fixed identity and no system or user config
// (HOME is dir); t fails if git does. It returns git's output, trimmed.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// GitRepo makes a repository in dir (made if missing) on main with one
// commit, "first", of a README holding readme; t fails if it cannot.
func GitRepo(t testing.TB, dir, readme string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Git(t, dir, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte(readme), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, dir, "add", "README")
	Git(t, dir, "commit", "-q", "-m", "first")
}

// UnixLine is the "unixline" helper a test binary runs as (a job, a pod of
// another user): args are SOCK LINE; it sends LINE and a newline on the
// unix socket SOCK and prints what is answered until the connection ends
// (10 s at most). It returns the exit code: 3 when it cannot connect, 2
// on bad args.
func UnixLine(args []string) int {
	if len(args) < 2 {
		fmt.Println("usage: unixline SOCK LINE")
		return 2
	}
	c, err := net.Dial("unix", args[0])
	if err != nil {
		fmt.Println("dial failed:", err)
		return 3
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte(args[1] + "\n"))
	b, _ := io.ReadAll(c)
	fmt.Print(string(b))
	return 0
}

// Parallel lets n parallel tests run at once where -parallel is not given
// (its default is GOMAXPROCS). For a TestMain whose tests mostly wait, on
// processes they started or on timers of a server they run, so that two
// at a time on two cores leave most of the machine idle. It parses the
// flags: call it first in TestMain.
func Parallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(fmt.Sprintf("setting -test.parallel: %v", err))
		}
	}
}

// MemTotal is /proc/meminfo's MemTotal in bytes: what a node's figures
// must say of this machine.
func MemTotal(t testing.TB) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}
