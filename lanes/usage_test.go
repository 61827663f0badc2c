package lanes

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes/runner"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/wire"
)

// startChild starts `sh -c script` as a child of this test process (the
// "runner" of the tracker) with a job id in its environment, or none.
func startChild(t *testing.T, jobID, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = os.Environ()
	if jobID != "" {
		cmd.Env = append(cmd.Env, runner.EnvJobID+"="+jobID)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd
}

// rootOf is the JobStarted a runner would send for cmd.
func rootOf(t *testing.T, id string, cmd *exec.Cmd) wire.JobStarted {
	t.Helper()
	st, ok := proc.ReadStat(cmd.Process.Pid)
	if !ok {
		t.Fatalf("reading the stat of %d", cmd.Process.Pid)
	}
	return wire.JobStarted{JobID: id, Pid: cmd.Process.Pid, StartTicks: st.StartTime}
}

// A job's tree is its root's descendants: a child of the runner whose
// environment names the job is never counted; a process of the tree stays
// the job's once its parent exits and it is re-parented to the runner (the
// subreaper); one that exits keeps the figures of its last sample; a root
// named with another start time is not found.
func TestUsageTrackerRootAndPinned(t *testing.T) {
	var was uintptr
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&was)), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, was, 0, 0, 0) })

	// Another job's leftover naming this job: 20 MB held, then it sleeps.
	stranger := startChild(t, "job-usage-1", `x=$(head -c 20000000 /dev/zero | tr '\0' a); exec sleep 60`)
	// The root: a child that burns CPU, and the root waits for a line on
	// its stdin to exit (leaving the child to the runner).
	cmd := exec.Command("sh", "-c", `(while :; do :; done) & read line`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	root := rootOf(t, "job-usage-1", cmd)

	wrong := root
	wrong.StartTicks++
	if _, ok := findRoot(os.Getpid(), wrong); ok {
		t.Fatal("a root named with another start time was found")
	}
	tr := newUsageTracker(os.Getpid(), root)
	strangerKey := func() bool {
		for _, k := range tr.m.Pinned() {
			if int(k.Pid) == stranger.Process.Pid {
				return true
			}
		}
		return false
	}
	var u api.Usage
	var now treeNow
	for deadline := time.Now().Add(30 * time.Second); len(tr.m.Pinned()) < 2 || u.UserSeconds+u.SystemSeconds == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the root and its burning child not sampled within 30s: %+v, pinned %v", u, tr.m.Pinned())
		}
		u, now = tr.sample()
	}
	if strangerKey() || now.RSS >= 20_000_000 || u.Source != api.UsageSourceProcfs {
		t.Fatalf("the stranger naming the job is counted: %+v now %+v pinned %v", u, now, tr.m.Pinned())
	}

	// The root exits; its child, re-parented to us, is still the job's.
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	before := u.UserSeconds + u.SystemSeconds
	for deadline := time.Now().Add(30 * time.Second); ; {
		u, now = tr.sample()
		if len(tr.m.Pinned()) == 1 && u.UserSeconds+u.SystemSeconds > before && now.RSS > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the orphaned child is not counted after its parent exited: %+v now %+v pinned %v", u, now, tr.m.Pinned())
		}
	}
	if strangerKey() {
		t.Fatal("the stranger is counted")
	}
	// It exits too (we reap it, as a runner's reaper does): the figures
	// stay, and nothing is pinned.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	for _, k := range tr.m.Pinned() {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(int(k.Pid), &ws, 0, nil)
	}
	cpu := u.UserSeconds + u.SystemSeconds
	for deadline := time.Now().Add(30 * time.Second); ; {
		u, now = tr.sample()
		if len(tr.m.Pinned()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed child still pinned: %v", tr.m.Pinned())
		}
	}
	if u.UserSeconds+u.SystemSeconds < cpu || now.RSS != 0 {
		t.Fatalf("after the job's processes exited: %+v now %+v", u, now)
	}
}
