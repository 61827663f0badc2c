package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// graceConfig: lane net with the default kill_grace, now with none (SIGKILL
// at once), slow with 5 minutes (a job that outlives a cancel by less than
// that was killed by something else than the grace ending).
const graceConfig = `
[daemon]
shutdown_timeout = "2s"
[lanes.net]
runners = 1
slots = 6
spares = 0
network = "host"
[lanes.now]
runners = 1
slots = 2
spares = 0
network = "host"
kill_grace = "0s"
[lanes.slow]
runners = 1
slots = 2
spares = 0
network = "host"
kill_grace = "5m"
`

// ended is a finished job's record and how it was stopped, as the record
// and the log's job.finished say it.
type ended struct {
	api.JobRecord
	stoppedBy      string // the record's stopped_by
	eventStoppedBy any    // job.finished's stopped_by in the event log
}

// submitReady submits a job whose script writes its pid to marker once its
// traps are set, and waits for it: the job is ready to be stopped.
func (d *testDaemon) submitReady(params map[string]any, marker string) string {
	d.t.Helper()
	var r struct {
		JobID string `json:"job_id"`
	}
	d.mustCall("job.submit", params, &r)
	readPid(d.t, marker) // its pid in its runner's namespace: only a sign of life
	return r.JobID
}

// waitEnded waits for the job's end and reads how it was stopped.
func (d *testDaemon) waitEnded(id string) ended {
	d.t.Helper()
	var raw struct{ Job json.RawMessage }
	d.check(d.callWithin(testWaitTimeout+testCallTimeout, "job.wait",
		map[string]any{"id": id, "timeout_ms": testWaitTimeout.Milliseconds()}, &raw))
	var e ended
	if err := json.Unmarshal(raw.Job, &e.JobRecord); err != nil {
		d.t.Fatal(err)
	}
	var extra struct {
		StoppedBy string `json:"stopped_by"`
	}
	if err := json.Unmarshal(raw.Job, &extra); err != nil {
		d.t.Fatal(err)
	}
	e.stoppedBy = extra.StoppedBy
	ev := d.waitEvent("job.finished", func(e map[string]any) bool { return e["job_id"] == id })
	e.eventStoppedBy = ev["stopped_by"]
	return e
}

// stoppedBy fails the test unless the job ended in state, stopped by how
// (sigterm, sigkill) in its record and its job.finished.
func (e ended) stopped(t *testing.T, state api.State, how string) {
	t.Helper()
	if e.State != state || e.stoppedBy != how || e.eventStoppedBy != how {
		t.Fatalf("job %s ended %s, stopped_by %q (job.finished: %v); want %s by %s\noutput %q",
			e.ID, e.State, e.stoppedBy, e.eventStoppedBy, state, how, e.Output)
	}
}

// Cancel and timeout give the job SIGTERM first, the whole process group
// and whatever else it started, and SIGKILL only once its kill_grace has
// passed; job.finished says which it took.
func TestCancelAndTimeoutTermThenKill(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, graceConfig)
	dir := shortTemp(t)
	n := 0
	marker := func() string { n++; return filepath.Join(dir, "m"+string(rune('a'+n))) }
	cancel := func(d *testDaemon, id string, force bool) {
		d.t.Helper()
		p := map[string]any{"id": id}
		if force {
			p["force"] = true
		}
		var r struct {
			WasRunning bool `json:"was_running"`
		}
		d.mustCall("job.cancel", p, &r)
		if !r.WasRunning {
			d.t.Fatalf("cancel of running job %s: was_running false", id)
		}
	}

	// Jobs that trap TERM wait for their sleep with `wait`: dash runs a
	// trap only once its foreground child has ended, and a child that gets
	// the signal between dash's fork and its exec loses it, so a
	// foreground sleep could outlive a SIGTERM sent just as it starts.
	t.Run("cancel: SIGTERM suffices", func(t *testing.T) {
		d := d.in(t)
		m := marker()
		id := d.submitReady(map[string]any{"lane": "net",
			"command": `trap 'echo got TERM; sleep 1; echo cleaned; exit 3' TERM; sleep 300 & echo $$ > ` + m + `; wait`}, m)
		cancel(d, id, false)
		e := d.waitEnded(id)
		e.stopped(t, api.StateCancelled, "sigterm")
		if !strings.Contains(e.Output, "got TERM\n") || !strings.Contains(e.Output, "cleaned\n") || !e.WasCancelled {
			t.Fatalf("output %q, record %+v; want the job's cleanup", e.Output, e.JobRecord)
		}
	})
	t.Run("cancel: SIGTERM ignored, SIGKILL after the grace", func(t *testing.T) {
		d := d.in(t)
		m := marker()
		id := d.submitReady(map[string]any{"lane": "net", "kill_grace_ms": 200,
			"command": `trap '' TERM; echo $$ > ` + m + `; sleep 300`}, m)
		cancel(d, id, false)
		d.waitEnded(id).stopped(t, api.StateCancelled, "sigkill")
	})
	// The timeout must come after the trap is set: 3 s is plenty for sh
	// to start, and the job ends long before its sleep would.
	t.Run("timeout: SIGTERM suffices", func(t *testing.T) {
		d := d.in(t)
		id := d.submit(api.JobSpec{Lane: "net", TimeoutMs: 3000,
			Command: `trap 'echo got TERM; exit 3' TERM; sleep 300 & wait`})
		e := d.waitEnded(id)
		e.stopped(t, api.StateTimeout, "sigterm")
		if !strings.Contains(e.Output, "got TERM\n") || !e.WasTimeout {
			t.Fatalf("output %q, record %+v", e.Output, e.JobRecord)
		}
	})
	t.Run("timeout: SIGTERM ignored, SIGKILL after the grace", func(t *testing.T) {
		d := d.in(t)
		var r struct {
			JobID string `json:"job_id"`
		}
		d.mustCall("job.submit", map[string]any{"lane": "net", "timeout_ms": 3000, "kill_grace_ms": 200,
			"command": `trap '' TERM; sleep 300`}, &r)
		e := d.waitEnded(r.JobID)
		e.stopped(t, api.StateTimeout, "sigkill")
		if !e.WasTimeout {
			t.Fatalf("record %+v", e.JobRecord)
		}
	})
	// A child in the job's group and one that left it (setsid) each trap
	// TERM and leave a file; the job's own trap waits for both files.
	t.Run("the whole group and what left it get SIGTERM", func(t *testing.T) {
		d := d.in(t)
		m, g, s := marker(), marker(), marker()
		script := `trap 'while [ ! -e ` + g + ` ] || [ ! -e ` + s + ` ]; do sleep 0.05; done; echo both; exit 0' TERM
sh -c 'trap "echo > ` + g + `; exit 0" TERM; echo > ` + g + `.ready; while :; do sleep 1; done' &
setsid sh -c 'trap "echo > ` + s + `; exit 0" TERM; echo > ` + s + `.ready; while :; do sleep 1; done' &
while [ ! -e ` + g + `.ready ] || [ ! -e ` + s + `.ready ]; do sleep 0.05; done
echo $$ > ` + m + `
wait`
		id := d.submitReady(map[string]any{"lane": "net", "command": script}, m)
		cancel(d, id, false)
		e := d.waitEnded(id)
		for _, f := range []string{g, s} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("%s: %v: the child did not get SIGTERM", filepath.Base(f), err)
			}
		}
		e.stopped(t, api.StateCancelled, "sigterm")
		if !strings.Contains(e.Output, "both\n") {
			t.Fatalf("output %q", e.Output)
		}
	})
	t.Run("kill_grace 0 kills at once", func(t *testing.T) {
		d := d.in(t)
		for _, p := range []map[string]any{{"lane": "now"}, {"lane": "net", "kill_grace_ms": 0}} {
			m := marker()
			p["command"] = `trap 'echo got TERM; exit 3' TERM; echo $$ > ` + m + `; sleep 300`
			id := d.submitReady(p, m)
			cancel(d, id, false)
			e := d.waitEnded(id)
			e.stopped(t, api.StateCancelled, "sigkill")
			if strings.Contains(e.Output, "got TERM") {
				t.Fatalf("%v: output %q: the job got SIGTERM", p, e.Output)
			}
		}
	})
	// In lane slow the grace is 5 minutes: a job that ends within the
	// wait's deadline was killed by the second cancel (or force: here
	// `orchestrd cancel ID --force`, its flags after the ID).
	t.Run("a second cancel or force kills at once", func(t *testing.T) {
		d := d.in(t)
		for _, force := range []bool{false, true} {
			m := marker()
			id := d.submitReady(map[string]any{"lane": "slow",
				"command": `trap '' TERM; echo $$ > ` + m + `; sleep 300`}, m)
			if force {
				if out, errOut, code := runCLI(t, "cancel", id, "--force", "--home", d.home); code != 0 || out != "cancelled "+id+" (was running)\n" {
					t.Fatalf("cancel --force: exit %d, %q %q", code, out, errOut)
				}
			} else {
				cancel(d, id, false)
				cancel(d, id, false)
			}
			d.waitEnded(id).stopped(t, api.StateCancelled, "sigkill")
		}
	})
}

// runInterrupted starts `orchestrd run` with args and returns it with its
// stdout and stderr as lines.
func runInterrupted(t *testing.T, args ...string) (cmd *exec.Cmd, stdout, stderr <-chan string) {
	t.Helper()
	cmd = exec.Command(binary, args...)
	o, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	e, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, lineChan(o), lineChan(e)
}

// lineChan sends r's lines, read in a goroutine of its own, on the
// channel it returns, closed at r's end.
func lineChan(r io.Reader) <-chan string {
	ch := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}()
	return ch
}

// waitLine reads ch until a line containing want, failing after 30 s or
// when ch ends; it returns the lines read.
func waitLine(t *testing.T, ch <-chan string, want string) []string {
	t.Helper()
	var all []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("no line with %q; got %q", want, all)
			}
			all = append(all, l)
			if strings.Contains(l, want) {
				return all
			}
		case <-deadline:
			t.Fatalf("no line with %q within 30s; got %q", want, all)
		}
	}
}

// rest reads ch to its end.
func rest(ch <-chan string) []string {
	var all []string
	for l := range ch {
		all = append(all, l)
	}
	return all
}

// waitExit waits up to 60 s for cmd and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	return exitCode(t, waitCmd(t, cmd))
}

// Ctrl-C of run cancels its job with the grace (the job gets SIGTERM and
// its cleanup's output still streams), and run waits for its end; a second
// Ctrl-C kills it at once. Either way run exits 130.
func TestRunCtrlCTermsThenKills(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, graceConfig)

	t.Run("first Ctrl-C: SIGTERM", func(t *testing.T) {
		cmd, out, errs := runInterrupted(t, "run", "--home", d.home, "--lane", "net", "--no-stdin", "--",
			"sh", "-c", `trap 'echo got TERM; sleep 1; echo cleaned; exit 3' TERM; sleep 300 & echo ready; wait`)
		waitLine(t, out, "ready")
		cmd.Process.Signal(syscall.SIGINT)
		got := rest(out)
		errLines := rest(errs)
		code := waitExit(t, cmd)
		if strings.Join(got, "\n") != "got TERM\ncleaned" || code != exitCancelled {
			t.Fatalf("exit %d, stdout after Ctrl-C %q, stderr %q; want the job's cleanup and 130", code, got, errLines)
		}
		if last := errLines[len(errLines)-1]; !strings.Contains(last, "was cancelled (interrupted)") {
			t.Fatalf("stderr %q", errLines)
		}
	})
	t.Run("second Ctrl-C: SIGKILL", func(t *testing.T) {
		cmd, out, errs := runInterrupted(t, "run", "--home", d.home, "--lane", "slow", "--no-stdin", "--",
			"sh", "-c", `trap '' TERM; echo ready; sleep 300`)
		waitLine(t, out, "ready")
		cmd.Process.Signal(syscall.SIGINT)
		said := waitLine(t, errs, "Ctrl-C again")
		id := ""
		for _, f := range strings.Fields(said[len(said)-1]) {
			if strings.HasPrefix(f, "j-") {
				id = strings.Trim(f, ":,()")
			}
		}
		// It ignores SIGTERM and its grace is 5 minutes: still running.
		if st := d.in(t).job(id).State; st != api.StateRunning {
			t.Fatalf("job %s is %s after the first Ctrl-C; stderr %q", id, st, said)
		}
		cmd.Process.Signal(syscall.SIGINT)
		errLines := append(said, rest(errs)...)
		if code := waitExit(t, cmd); code != exitCancelled {
			t.Fatalf("exit %d, stderr %q; want 130", code, errLines)
		}
		d.in(t).waitEnded(id).stopped(t, api.StateCancelled, "sigkill")
	})
}

// A command that cannot be run makes run say why in one line and exit as
// a shell does: 127 when it is not there, 126 when it cannot be executed.
// job.get and jobs show the reason; Loopsy's /execute answers it as
// upstream does (400, code 3004).
func TestRunCommandThatCannotRun(t *testing.T) {
	t.Parallel()
	d, base, key := httpDaemonAt(t, shortTemp(t), graceConfig, "")
	for _, c := range []struct {
		argv []string
		code int
		says string
	}{
		{[]string{"/nonexistent"}, 127, "/nonexistent: no such file or directory"},
		{[]string{"orchestrd-no-such-command", "x"}, 127, "orchestrd-no-such-command: command not found"},
		{[]string{"/etc/passwd"}, 126, "/etc/passwd: permission denied"},
		{[]string{"/tmp"}, 126, "/tmp: is a directory"},
	} {
		out, errOut, code := runCLI(t, append([]string{"run", "--home", d.home, "--lane", "net", "--"}, c.argv...)...)
		if code != c.code || out != "" || errOut != "orchestrd: "+c.says+"\n" {
			t.Errorf("run %v: exit %d, stdout %q, stderr %q; want %d and one line saying %q", c.argv, code, out, errOut, c.code, c.says)
		}
	}
	var r struct{ Jobs []api.JobRecord }
	d.mustCall("job.list", map[string]any{"state": "error"}, &r)
	if len(r.Jobs) != 4 {
		t.Fatalf("jobs in error: %+v", r.Jobs)
	}
	for _, j := range r.Jobs {
		g := d.job(j.ID)
		if g.ExitCode == nil || (*g.ExitCode != 126 && *g.ExitCode != 127) || !strings.Contains(g.Error, ": ") || g.OutputBytes != 0 {
			t.Errorf("job.get %s: %+v", j.ID, g)
		}
	}
	out, _, _ := runCLI(t, "jobs", "--home", d.home, "--state", "error")
	if !strings.Contains(out, "/tmp: is a directory") || !strings.Contains(out, "127") {
		t.Errorf("jobs:\n%s", out)
	}
	wantHTTPError(t, httpDo(t, "POST", base+"/execute", key, `{"command":"/nonexistent"}`), 400, 3004)
}
