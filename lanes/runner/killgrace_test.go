package runner

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/wire"
)

func graceMs(v uint64) *uint64 { return &v }

// stopJob starts job (its script says "ready" once its traps are set),
// stops it with the given frames once it is ready, and returns its Result.
func (d *fakeDaemon) stopJob(j wire.Job, stop ...wire.Cancel) wire.Result {
	d.tb.Helper()
	d.send(wire.TypeJob, j)
	d.waitStdout(j.JobID, 1)
	for _, c := range stop {
		d.send(wire.TypeCancel, c)
	}
	return d.collect(j.JobID).res
}

func wantStopped(t *testing.T, r wire.Result, status wire.ExitStatus, by string) {
	t.Helper()
	if r.Status != status || r.StoppedBy != by {
		t.Fatalf("result %+v, want %s stopped by %s", r, status, by)
	}
}

// A cancel gives SIGTERM: a job that cleans up and exits is not killed.
//
// The jobs that trap TERM wait for their sleep with `wait`: dash runs a
// trap only once its foreground child has ended, and a child that gets
// the signal between dash's fork and its exec loses it (it still has
// dash's handler), so a foreground sleep could outlive the SIGTERM.
func TestCancelSendsSIGTERM(t *testing.T) {
	d := startRunner(t, okAck(1))
	r := d.stopJob(wire.Job{JobID: "t1", Command: `trap 'echo got TERM; exit 3' TERM; sleep 300 & echo ready; wait`},
		wire.Cancel{JobID: "t1"})
	wantStopped(t, r, wire.StatusCancelled, wire.StoppedBySIGTERM)
	if !r.WasCancelled || r.ExitCode == nil || *r.ExitCode != 3 || !strings.Contains(r.Output, "got TERM\n") {
		t.Fatalf("result %+v", r)
	}
}

// A job that ignores SIGTERM gets SIGKILL once its grace is over; with a
// grace of 0 it gets SIGKILL at once, and never SIGTERM.
func TestCancelSIGKILLsAfterTheGrace(t *testing.T) {
	d := startRunner(t, okAck(2))
	r := d.stopJob(wire.Job{JobID: "k1", KillGraceMs: graceMs(100), Command: `trap '' TERM; echo ready; sleep 300`},
		wire.Cancel{JobID: "k1"})
	wantStopped(t, r, wire.StatusCancelled, wire.StoppedBySIGKILL)
	r = d.stopJob(wire.Job{JobID: "k0", KillGraceMs: graceMs(0), Command: `trap 'echo got TERM; exit 3' TERM; echo ready; sleep 300`},
		wire.Cancel{JobID: "k0"})
	wantStopped(t, r, wire.StatusCancelled, wire.StoppedBySIGKILL)
	if strings.Contains(r.Output, "got TERM") || r.ExitCode != nil || r.Signal != "SIGKILL" {
		t.Fatalf("grace 0: result %+v", r)
	}
}

// A second cancel, or a forced one, kills at once: the hour's grace is not
// waited for.
func TestSecondOrForcedCancelKillsAtOnce(t *testing.T) {
	d := startRunner(t, okAck(2))
	hour := graceMs(3_600_000)
	r := d.stopJob(wire.Job{JobID: "s2", KillGraceMs: hour, Command: `trap '' TERM; echo ready; sleep 300`},
		wire.Cancel{JobID: "s2"}, wire.Cancel{JobID: "s2"})
	wantStopped(t, r, wire.StatusCancelled, wire.StoppedBySIGKILL)
	r = d.stopJob(wire.Job{JobID: "f1", KillGraceMs: hour, Command: `trap 'echo got TERM' TERM; echo ready; sleep 300`},
		wire.Cancel{JobID: "f1", Force: true})
	wantStopped(t, r, wire.StatusCancelled, wire.StoppedBySIGKILL)
	if strings.Contains(r.Output, "got TERM") {
		t.Fatalf("forced: result %+v", r)
	}
}

// A timeout stops the job the same way. Its timeout comes long after sh
// has set its trap, and long before its sleep ends.
func TestTimeoutSendsSIGTERMThenSIGKILL(t *testing.T) {
	d := startRunner(t, okAck(2))
	r := d.run(wire.Job{JobID: "o1", TimeoutMs: 2000, Command: `trap 'echo got TERM; exit 3' TERM; sleep 300 & wait`}).res
	wantStopped(t, r, wire.StatusTimeout, wire.StoppedBySIGTERM)
	if !r.WasTimeout || !strings.Contains(r.Output, "got TERM\n") {
		t.Fatalf("result %+v", r)
	}
	r = d.run(wire.Job{JobID: "o2", TimeoutMs: 2000, KillGraceMs: graceMs(100), Command: `trap '' TERM; sleep 300`}).res
	wantStopped(t, r, wire.StatusTimeout, wire.StoppedBySIGKILL)
}

// SIGTERM reaches the job's whole process group and what left it (here a
// setsid child: with a cgroup, the rest of the cgroup; without, what is
// below the job's process). The job's own trap waits for both children's
// files.
func TestSIGTERMReachesWhatLeftTheGroup(t *testing.T) {
	t.Run("process group", func(t *testing.T) { sigtermReachesAll(t, startRunner(t, okAck(1))) })
	t.Run("cgroup", func(t *testing.T) {
		own, err := proc.OwnCgroupDir()
		if err != nil {
			t.Skipf("no cgroup v2: %v", err)
		}
		dir := filepath.Join(own, "runner-test-"+strconv.Itoa(os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Skipf("cannot make a cgroup: %v", err)
		}
		t.Cleanup(func() { os.Remove(dir) })
		d := startRunner(t, okAck(1), func(o *Options) { o.Sandbox.Cgroup = dir })
		sigtermReachesAll(t, d)
		d.stop() // before the cgroup's Cleanup: the runner removes its jobs' cgroups
	})
}

func sigtermReachesAll(t *testing.T, d *fakeDaemon) {
	g, s := filepath.Join(d.dir, "g"), filepath.Join(d.dir, "s")
	script := `trap 'while [ ! -e ` + g + ` ] || [ ! -e ` + s + ` ]; do sleep 0.05; done; exit 0' TERM
sh -c 'trap "echo > ` + g + `; exit 0" TERM; echo > ` + g + `.ready; while :; do sleep 1; done' &
setsid sh -c 'trap "echo > ` + s + `; exit 0" TERM; echo > ` + s + `.ready; while :; do sleep 1; done' &
while [ ! -e ` + g + `.ready ] || [ ! -e ` + s + `.ready ]; do sleep 0.05; done
echo ready
wait`
	r := d.stopJob(wire.Job{JobID: "g1", Command: script}, wire.Cancel{JobID: "g1"})
	for _, f := range []string{g, s} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
	}
	wantStopped(t, r, wire.StatusCancelled, wire.StoppedBySIGTERM)
}

// A command that cannot be run ends Error with a shell's exit code and
// words: 127 not there, 126 there but not executable.
func TestCommandThatCannotRun(t *testing.T) {
	d := startRunner(t, okAck(1))
	script := filepath.Join(d.dir, "script")
	if err := os.WriteFile(script, []byte("#!/nonexistent/interp\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		argv []string
		code int32
		why  string
	}{
		{[]string{"/nonexistent"}, 127, "/nonexistent: no such file or directory"},
		{[]string{"orchestrd-no-such-program"}, 127, "orchestrd-no-such-program: command not found"},
		{[]string{"/etc/passwd"}, 126, "/etc/passwd: permission denied"},
		{[]string{"/tmp"}, 126, "/tmp: is a directory"},
		{[]string{script}, 126, script + ": bad interpreter /nonexistent/interp: no such file or directory"},
	} {
		o := d.run(wire.Job{JobID: "x" + string(rune('a'+i)), Argv: c.argv})
		if !o.ack.Accepted || o.res.Status != wire.StatusError || o.res.ExitCode == nil || *o.res.ExitCode != c.code ||
			o.res.Output != c.why || len(o.chunks) != 0 {
			t.Errorf("%v: ack %+v result %+v; want Error, %d, %q", c.argv, o.ack, o.res, c.code, c.why)
		}
	}
}
