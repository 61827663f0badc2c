package testio

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Hammer calls f from its goroutines until stopped, and none calls it
// once stop has returned; a goroutine whose f says false ends there.
func TestHammer(t *testing.T) {
	defer goleak.VerifyNone(t) // stop returned: every goroutine has ended
	var n atomic.Int64
	stop := Hammer(3, func() bool { n.Add(1); return true })
	Eventually(t, 10*time.Second, "100 calls", func() bool { return n.Load() >= 100 })
	stop()
	after := n.Load()
	time.Sleep(10 * time.Millisecond) // a goroutine still calling f would show here
	if n.Load() != after {
		t.Fatalf("f called after stop returned: %d, then %d", after, n.Load())
	}
	stop() // a second stop is harmless

	var once atomic.Int64
	stop = Hammer(2, func() bool { once.Add(1); return false })
	Eventually(t, 10*time.Second, "each goroutine's one call", func() bool { return once.Load() == 2 })
	stop()
	if once.Load() != 2 {
		t.Fatalf("%d calls of an f that says false, want one a goroutine", once.Load())
	}
}

// Eventually returns once cond holds, and fails t when it does not in time.
func TestEventually(t *testing.T) {
	var n atomic.Int64
	Eventually(t, 10*time.Second, "the third call", func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Fatalf("cond called %d times, want 3", n.Load())
	}
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine it runs on, as in a test
		defer close(done)
		Eventually(ft, time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if ft.msg != "timed out waiting until never" {
		t.Fatalf("failed with %q", ft.msg)
	}
}

// fatalT records the message of a Fatalf instead of failing the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// StartPiped's process writes into the pipe it returns, and is killed at
// the end of the test that started it.
func TestStartPiped(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo hi; exec sleep 30")
	t.Run("started", func(t *testing.T) {
		out := StartPiped(t, cmd)
		if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "hi\n" {
			t.Fatalf("read %q, %v", l, err)
		}
	})
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Fatalf("the process after its test's end: %v, want it killed and waited for", cmd.ProcessState)
	}
}

// Start's process is killed at the end of the test that started it and
// waited for; one that ended by itself says how, through Done and Err.
func TestStart(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	t.Run("started", func(t *testing.T) {
		p := Start(t, cmd)
		select {
		case <-p.Done():
			t.Fatalf("the process ended at once: %v", p.Err())
		default:
		}
	})
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Fatalf("the process after its test's end: %v, want it killed and waited for", cmd.ProcessState)
	}
	p := Start(t, exec.Command("sh", "-c", "exit 3"))
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("sh -c 'exit 3' did not end")
	}
	var ee *exec.ExitError
	if err := p.Err(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Err() = %v, want exit status 3", err)
	}
}

// GitRepo makes a repository on main whose one commit holds the README;
// Git answers what git printed, and fails t when git fails.
func TestGitRepo(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := filepath.Join(t.TempDir(), "a", "repo")
	GitRepo(t, repo, "hello\n")
	if got := Git(t, repo, "log", "--format=%s %an", "main"); got != "first t" {
		t.Fatalf("git log: %q, want the one commit, first, by t", got)
	}
	if got := Git(t, repo, "show", "main:README"); got != "hello" {
		t.Fatalf("main's README: %q", got)
	}
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Git(ft, repo, "show", "main:nothing-here")
	}()
	<-done
	if !strings.HasPrefix(ft.msg, "git [show main:nothing-here]: exit status") {
		t.Fatalf("a failing git failed t with %q", ft.msg)
	}
}

// ShortTemp is a new directory directly in the system's temporary
// directory, named from its prefix, gone once the test that asked ends.
func TestShortTemp(t *testing.T) {
	var dir string
	t.Run("user", func(t *testing.T) {
		dir = ShortTemp(t, "tioshort")
		if filepath.Dir(dir) != filepath.Clean(os.TempDir()) || !strings.HasPrefix(filepath.Base(dir), "tioshort") {
			t.Fatalf("ShortTemp = %q, want tioshort* in %s", dir, os.TempDir())
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Fatalf("stat %s: %v", dir, err)
		}
	})
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s after the test ended: %v, want it gone", dir, err)
	}
}
