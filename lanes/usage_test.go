package lanes

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes/runner"
)

// startChild starts `sh -c script` as a child of this test process (the
// "runner" of the tracker) with the job's id in its environment, or none.
func startChild(t *testing.T, jobID, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = os.Environ()
	if jobID != "" {
		cmd.Env = append(cmd.Env, runner.EnvJobID+"="+jobID)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// A process of the job that exits (and is reaped: its pid may name another
// process from then on) keeps the figures of its last sample; a child of
// the runner that is not the job's is never counted, even in the pid of
// one that was.
func TestUsageTrackerExitedAndReused(t *testing.T) {
	tr := newUsageTracker(os.Getpid(), "job-usage-1")
	if u := tr.sample(); u.Samples != 1 || u.PeakRSSBytes != 0 || u.Source != api.UsageSourceProcfs {
		t.Fatalf("a sample with no process of the job: %+v", u)
	}
	// Burns CPU until killed.
	ours := startChild(t, "job-usage-1", `while :; do :; done`)
	other := startChild(t, "job-usage-2", `exec sleep 60`)
	none := startChild(t, "", `exec sleep 60`)
	var u api.Usage
	for deadline := time.Now().Add(30 * time.Second); u.UserSeconds+u.SystemSeconds == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no CPU counted for a burning child within 30s: %+v", u)
		}
		u = tr.sample() // the child burns CPU: the loop ends once a tick is counted
	}
	if u.PeakRSSBytes == 0 || u.PeakThreads != 1 {
		t.Fatalf("one process of the job sampled: %+v", u)
	}
	cpu := u.UserSeconds + u.SystemSeconds

	// It exits; the next sample keeps what it used.
	_ = ours.Process.Kill()
	_ = ours.Wait()
	after := tr.sample()
	if after.UserSeconds+after.SystemSeconds < cpu || after.PeakRSSBytes != u.PeakRSSBytes {
		t.Fatalf("after the job's process exited: %+v, before %+v", after, u)
	}
	if len(tr.ours) != 2 { // the other job's and the one of no job, still alive
		t.Fatalf("the tracker still knows %d children, want 2 (the exited one forgotten)", len(tr.ours))
	}
	for k, isOurs := range tr.ours {
		if isOurs {
			t.Fatalf("child %d is taken for the job's", k.pid)
		}
	}
	_, _ = other, none
}
