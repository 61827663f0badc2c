package proctree

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startTree starts `sh -c script` in its own process group and waits until
// sh has n children; the group is killed and reaped when the test ends.
func startTree(t *testing.T, script string, n int) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for len(bytes.Fields(Children(nil, pid))) < n {
		if time.Now().After(deadline) {
			t.Fatalf("children of %d: %q, want %d", pid, Children(nil, pid), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pid
}

func TestRSSCountsDescendants(t *testing.T) {
	pid := startTree(t, "sleep 300 & sleep 300 & wait", 2)
	// Freshly exec'd children are still faulting their pages in: wait
	// until two readings agree, so the comparisons below compare like with
	// like.
	all := RSS(pid)
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(10 * time.Millisecond)
		again := RSS(pid)
		if again == all || time.Now().After(deadline) {
			break
		}
		all = again
	}
	alone := rss(pid)
	if alone == 0 || all <= alone {
		t.Fatalf("sh alone %d bytes, with its children %d", alone, all)
	}
	// RSS moves a little between two readings (the children are freshly
	// exec'd); counted twice it would be about double.
	if got := RSS(pid, pid); got > all+all/2 {
		t.Fatalf("a root given twice counted twice: %d, once %d", got, all)
	}
	if got := RSS(1 << 30); got != 0 {
		t.Fatalf("RSS of a missing pid: %d", got)
	}
}

// A child forked by a thread other than the main one is listed in that
// thread's children file only; this test process is a Go program whose
// exec happens on whatever thread runs the goroutine.
func TestChildrenOfEveryThread(t *testing.T) {
	done := make(chan struct{})
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	// Start children from goroutines locked to fresh threads.
	for i := 0; i < 4; i++ {
		ch := make(chan *exec.Cmd)
		go func() {
			runtime.LockOSThread() // the thread exits with the goroutine, taking nothing with it
			c := exec.Command("sleep", "300")
			if err := c.Start(); err != nil {
				ch <- nil
				return
			}
			ch <- c
			<-done
		}()
		if c := <-ch; c != nil {
			cmds = append(cmds, c)
		}
	}
	if len(cmds) == 0 {
		t.Fatal("could not start any child")
	}
	kids := map[string]bool{}
	for _, f := range bytes.Fields(Children(nil, os.Getpid())) {
		kids[string(f)] = true
	}
	close(done)
	for _, c := range cmds {
		if !kids[strconv.Itoa(c.Process.Pid)] {
			t.Errorf("child %d started from another thread is not listed (got %v)", c.Process.Pid, kids)
		}
	}
}

// The cost of one measurement of a small tree: the daemon pays it once a
// heartbeat per runner of a lane with max_runner_memory_bytes.
func BenchmarkRSS(b *testing.B) {
	var cmds []*exec.Cmd
	for i := 0; i < 4; i++ {
		c := exec.Command("sleep", "300")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	self := os.Getpid()
	b.ReportAllocs()
	for b.Loop() {
		if RSS(self) == 0 {
			b.Fatal("no RSS")
		}
	}
}

// statmRSS reads the second field, in pages; anything else is 0.
func TestStatmRSS(t *testing.T) {
	ps := pageSize
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{"1234 56 7 8 0 9 0\n", 56 * ps},
		{"1234 0 7 8 0 9 0", 0},
		{"1234", 0},
		{"", 0},
		{"1234 -5 7", 0},
		{"1234 x 7", 0},
		{"1 99999999999999999999 0", 0},
		{"1 18446744073709551615 0", 0}, // pages * page size overflows
	} {
		if got := statmRSS([]byte(c.in)); got != c.want {
			t.Errorf("statmRSS(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	if rss(os.Getpid()) == 0 {
		t.Error("rss of this process is 0")
	}
	if rss(0) != 0 || rss(-1) != 0 {
		t.Error("rss of no process is not 0")
	}
}

func FuzzStatmRSS(f *testing.F) {
	f.Add([]byte("1234 56 7 8 0 9 0\n"))
	f.Add([]byte("1 18446744073709551615"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got := statmRSS(b); got%pageSize != 0 {
			t.Fatalf("statmRSS(%q) = %d, not a whole number of pages", b, got)
		}
	})
}
