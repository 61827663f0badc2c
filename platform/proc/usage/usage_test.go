package usage

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// measure of a pid that names no process, or one that exited, says so.
func TestMeasureGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, _, ok := measure(t.Context(), cmd.Process.Pid); ok {
		t.Fatal("measure of a reaped process returned figures")
	}
	if _, _, _, _, _, ok := measure(t.Context(), 1<<22+1); ok {
		t.Fatal("measure of a pid above pid_max returned figures")
	}
}

// A tree's CPU is summed over its processes, a descendant's included,
// and a process that exits keeps what it used at its last sample.
func TestTrackerTree(t *testing.T) {
	// The root waits on a child that burns CPU until killed.
	cmd := exec.Command("sh", "-c", `sh -c 'while :; do :; done' & wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }
	t.Cleanup(kill)
	tr := NewTracker()
	var u api.Usage
	for deadline := time.Now().Add(30 * time.Second); u.UserSeconds+u.SystemSeconds == 0 || u.PeakThreads < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("no CPU counted for a burning grandchild within 30s: %+v", u)
		}
		u = sampled(tr, []int{cmd.Process.Pid})
	}
	if u.Source != api.UsageSourceProcfs || u.PeakRSSBytes == 0 {
		t.Fatalf("a sampled tree: %+v", u)
	}
	kill()
	after := sampled(tr, []int{cmd.Process.Pid})
	if after.UserSeconds+after.SystemSeconds < u.UserSeconds+u.SystemSeconds || after.Samples != u.Samples+1 {
		t.Fatalf("after the root exited: %+v, before %+v", after, u)
	}
}

// A tracker since now counts what a process older than it had used as its
// baseline, and a process started since whole.
func TestTrackerSince(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "go")
	// The root burns CPU until the mark (alone: test is a builtin), then
	// starts a child that burns until killed.
	cmd := exec.Command("sh", "-c", `while [ ! -e "$1" ]; do :; done; sh -c 'while :; do :; done' & wait`, "sh", mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	root := []int{cmd.Process.Pid}
	whole := NewTracker()
	cpu := func(u api.Usage) float64 { return u.UserSeconds + u.SystemSeconds }
	for deadline := time.Now().Add(30 * time.Second); cpu(sampled(whole, root)) < 0.05; {
		if time.Now().After(deadline) {
			t.Fatalf("the root used under 50ms of CPU within 30s: %+v", sampled(whole, root))
		}
	}
	since := NewTrackerSince()
	if u := sampled(since, root); cpu(u) != 0 || u.PeakRSSBytes == 0 || u.Samples != 1 {
		t.Fatalf("the first sample since: %+v (the root's figures are its baseline)", u)
	}
	if err := os.WriteFile(mark, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var u api.Usage
	for deadline := time.Now().Add(30 * time.Second); u.PeakThreads < 2 || cpu(u) < 0.05; {
		if time.Now().After(deadline) {
			t.Fatalf("the child started since not counted within 30s: %+v", u)
		}
		u = sampled(since, root)
	}
	// Whole counts the root's 50ms before the tracker started; since does not.
	if w := sampled(whole, root); cpu(w)-cpu(u) < 0.05-1e-9 {
		t.Fatalf("since %+v, whole %+v: the root's CPU before is counted", u, w)
	}
	if len(since.base) != 1 {
		t.Fatalf("baselines %v, want the root's alone (its children started since count whole)", since.base)
	}
	for k := range since.base {
		if int(k.Pid) != cmd.Process.Pid {
			t.Fatalf("baseline of %d, want the root %d", k.Pid, cmd.Process.Pid)
		}
	}
}

func TestStatStart(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"42 (sh) S 1 42 42 0 -1 4194304 10 0 0 0 7 3 20 5 20 0 1 0 12345 100 5", 12345, true},
		{"42 (a) b) (c) S 1 42 42 0 -1 4194304 10 0 0 0 7 3 20 5 20 0 1 0 99 100", 99, true},
		{"42 (sh) S 1 42 42 0 -1 4194304 10 0 0 0 7 3 20 5 20 0 1 0", 0, false},
		{"42 (sh) S 1 42 42 0 -1 4194304 10 0 0 0 7 3 20 5 20 0 1 0 -5 1", 0, false},
		{"no parenthesis", 0, false},
	} {
		if got, ok := statStart([]byte(c.in)); got != c.want || ok != c.ok {
			t.Errorf("statStart(%q) = %d, %v, want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	// This process started before now, on the same clock.
	if st, ok := startTicks(os.Getpid()); !ok || st == 0 || st > bootTicks() {
		t.Fatalf("this process's start %d (%v), boot clock now %d", st, ok, bootTicks())
	}
}

func FuzzStatStart(f *testing.F) {
	f.Add([]byte("42 (sh) S 1 42 42 0 -1 4194304 10 0 0 0 7 3 20 5 20 0 1 0 12345 100 5"))
	f.Add([]byte("1 ()) R"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, ok := statStart(b)
		if !ok && v != 0 {
			t.Fatalf("statStart(%q) = %d and not ok", b, v)
		}
	})
}

// One sample of a tree of two processes (an executor and its agent).
// sampled is tr.Sample's sum so far.
func sampled(tr *Tracker, roots []int) api.Usage {
	u, _ := tr.Sample(roots)
	return u
}

func BenchmarkSample(b *testing.B) {
	cmd := exec.Command("sh", "-c", `sleep 60 & wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	tr := NewTrackerSince()
	for sampled(tr, []int{cmd.Process.Pid}).PeakThreads < 2 {
		time.Sleep(10 * time.Millisecond) // until the child is there
	}
	b.ResetTimer()
	for b.Loop() {
		sampled(tr, []int{cmd.Process.Pid})
	}
}

// burner burns CPU until it has used 0.3 s of it.
const burner = `perl -e '1 while do { my @t = times; $t[0]+$t[1] < 0.3 }'`

// A child that lives and dies between two samples, reaped by a process
// the tracker saw, counts (its parent's reaped children's CPU); one a
// sample saw before its parent reaped it counts once, not twice.
func TestTrackerReapedChildren(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl to burn CPU with")
	}
	dir := t.TempDir()
	step := func(name string) string { return filepath.Join(dir, name) }
	// unseen: burns, ends and is reaped before any sample sees it; seen:
	// burns, then waits to be sampled before it ends.
	script := `while [ ! -e ` + step("a") + ` ]; do sleep 0.01; done; ` + burner + `; : > ` + step("b") + `; ` +
		`while [ ! -e ` + step("c") + ` ]; do sleep 0.01; done; ` +
		`perl -e '1 while do { my @t = times; $t[0]+$t[1] < 0.3 }; open(F, ">", $ARGV[0]); close F; ` +
		`sleep 0.01 until -e $ARGV[1]' ` + step("d") + ` ` + step("e") + `; : > ` + step("f") + `; sleep 100`
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	waitFile := func(name string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(step(name)); err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the tree did not reach step %s within 60s", name)
			}
		}
	}
	mark := func(name string) {
		t.Helper()
		if err := os.WriteFile(step(name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cpu := func(u api.Usage) float64 { return u.UserSeconds + u.SystemSeconds }
	tr := NewTracker()
	sampled(tr, []int{cmd.Process.Pid})
	mark("a")
	waitFile("b")
	if u := sampled(tr, []int{cmd.Process.Pid}); cpu(u) < 0.28 {
		t.Fatalf("a child reaped between two samples after 0.3 s of CPU: the tree's CPU %.3f s", cpu(u))
	}
	mark("c")
	waitFile("d")
	seen := sampled(tr, []int{cmd.Process.Pid}) // the second burner, done, alive
	mark("e")
	waitFile("f")
	u := sampled(tr, []int{cmd.Process.Pid})
	if cpu(u) < cpu(seen)-0.005 || cpu(u) < 0.58 || cpu(u) > 0.85 {
		t.Fatalf("two children of 0.3 s of CPU each, one seen before it was reaped: %.3f s (%.3f s before)", cpu(u), cpu(seen))
	}
}
