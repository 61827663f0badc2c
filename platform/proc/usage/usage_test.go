package usage

import (
	"os/exec"
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
	if _, _, _, _, ok := measure(t.Context(), cmd.Process.Pid); ok {
		t.Fatal("measure of a reaped process returned figures")
	}
	if _, _, _, _, ok := measure(t.Context(), 1<<22+1); ok {
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
		u = tr.Sample([]int{cmd.Process.Pid})
	}
	if u.Source != api.UsageSourceProcfs || u.PeakRSSBytes == 0 {
		t.Fatalf("a sampled tree: %+v", u)
	}
	kill()
	after := tr.Sample([]int{cmd.Process.Pid})
	if after.UserSeconds+after.SystemSeconds < u.UserSeconds+u.SystemSeconds || after.Samples != u.Samples+1 {
		t.Fatalf("after the root exited: %+v, before %+v", after, u)
	}
}
