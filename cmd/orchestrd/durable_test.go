package main

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"

	_ "modernc.org/sqlite"

	"github.com/orchestrd/orchestrd/api"
)

// kill9 SIGKILLs the daemon and waits until it is gone.
func (d *testDaemon) kill9() {
	d.t.Helper()
	if err := syscall.Kill(d.proc.Pid(), syscall.SIGKILL); err != nil {
		d.t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		d.t.Fatal("daemon still alive 20s after SIGKILL")
	}
	// Its runners (and so their jobs) die with it; wait for them, so the
	// next daemon does not find their cgroups busy.
	d.waitRunnersGone()
}

// markJob is a shell command that appends a line to dir/<its job id>: a
// job that ran twice leaves two lines.
func markJob(dir, then string) string {
	cmd := `echo ran >> ` + dir + `/"$ORCHESTRD_JOB_ID"`
	if then != "" {
		cmd += "; " + then
	}
	return cmd
}

func lineCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// started finds the daemon.started event of the daemon with pid.
func (d *testDaemon) started(pid int) map[string]any {
	d.t.Helper()
	return d.waitEvent("daemon.started", func(e map[string]any) bool { return e["pid"] == float64(pid) })
}

const holdLanes = `
[lanes.hold]
runners = 0
[lanes.work]
runners = 1
slots = 1
spares = 0
network = "host"
`

// kill -9 of the daemon with a job only queued and one running: the next
// daemon on the home queues the first again under its id and it runs; the
// second ends failed daemon_lost and never runs again.
func TestKill9RecoversQueuedAndFailsRunning(t *testing.T) {
	t.Parallel()
	home, marks := shortTemp(t), shortTemp(t)
	d := startDaemonAt(t, home, holdLanes)
	queued := d.submit(api.JobSpec{Lane: "hold", Command: markJob(marks, "")})
	running := d.submit(api.JobSpec{Lane: "work", Command: markJob(marks, "exec sleep 60")})
	eventually(t, 20*time.Second, "the running job ran", func() bool { return lineCount(t, filepath.Join(marks, running)) == 1 })
	d.kill9()

	// The hold lane gets a runner of its own now.
	d2 := startDaemonAt(t, home, strings.Replace(holdLanes, "runners = 0", "runners = 1\nspares = 0", 1))
	rq := d2.wait(queued)
	if rq.State != api.StateSucceeded || rq.ID != queued || rq.Lane != "hold" {
		t.Fatalf("the queued job ended %+v, want succeeded under its id", rq)
	}
	rr := d2.wait(running)
	if rr.State != api.StateFailed || rr.Error != api.ErrDaemonLost {
		t.Fatalf("the running job ended %s (%s), want failed %s", rr.State, rr.Error, api.ErrDaemonLost)
	}
	if got := d2.job(running); got.State != api.StateFailed || got.Error != api.ErrDaemonLost {
		t.Fatalf("job.get of the running job: %+v", got)
	}
	d2.waitEvent("job.recovered", func(e map[string]any) bool {
		return e["job_id"] == queued && e["action"] == "requeued" && e["lane"] == "hold"
	})
	d2.waitEvent("job.recovered", func(e map[string]any) bool {
		return e["job_id"] == running && e["action"] == "failed" && e["error"] == api.ErrDaemonLost &&
			(e["was"] == "running" || e["was"] == "dispatched")
	})
	st := d2.started(d2.proc.Pid())
	if st["recovered"] != true || st["requeued"] != float64(1) || st["failed"] != float64(1) {
		t.Fatalf("daemon.started = %v, want recovered, requeued 1, failed 1", st)
	}
	if n := lineCount(t, filepath.Join(marks, running)); n != 1 {
		t.Fatalf("the running job ran %d times", n)
	}
	// Nobody saw how long the lost job ran: jobs says so, not 0s.
	out, _, code := runCLI(t, "--home", home, "jobs", "--state", "failed")
	var lost string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, running+" ") {
			lost = l
		}
	}
	if code != 0 || lost == "" || strings.Contains(lost, " 0s ") || !strings.Contains(lost, " - ") {
		t.Fatalf("orchestrd jobs shows the lost job as %q (exit %d):\n%s", lost, code, out)
	}
	if n := lineCount(t, filepath.Join(marks, queued)); n != 1 {
		t.Fatalf("the queued job ran %d times", n)
	}
	// The first daemon's start recovered nothing.
	first := d.started(d.proc.Pid())
	if first["recovered"] != false || first["requeued"] != float64(0) || first["failed"] != float64(0) {
		t.Fatalf("first daemon.started = %v", first)
	}
}

// Every job.submit answered with a job_id is in the store after kill -9,
// however many were in flight.
func TestAcknowledgedSubmissionsSurviveKill9(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	cfg := "[lanes.hold]\nrunners = 0\n"
	d := startDaemonAt(t, home, cfg)
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for range 6 {
		c, err := client.Dial(d.sock())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var r struct {
					JobID string `json:"job_id"`
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := c.Call(ctx, "job.submit", api.JobSpec{Lane: "hold", Argv: []string{"true"}}, &r)
				cancel()
				if err != nil {
					return
				}
				mu.Lock()
				acked = append(acked, r.JobID)
				mu.Unlock()
			}
		}()
	}
	eventually(t, 30*time.Second, "300 acknowledged submissions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 300
	})
	d.kill9()
	wg.Wait()

	d2 := startDaemonAt(t, home, cfg)
	for _, id := range acked {
		var got struct{ Job api.JobRecord }
		if err := d2.call("job.get", map[string]any{"id": id}, &got); err != nil {
			t.Fatalf("acknowledged job %s lost after kill -9: %v", id, err)
		}
		if got.Job.State != api.StateQueued {
			t.Fatalf("job %s is %s, want queued", id, got.Job.State)
		}
	}
	st := d2.started(d2.proc.Pid())
	if n, _ := st["requeued"].(float64); int(n) < len(acked) {
		t.Fatalf("daemon.started requeued %v, want at least the %d acknowledged", st["requeued"], len(acked))
	}
}

// A finished job (its record, its output) is found by job.get, job.wait
// and job.list after a clean restart and after kill -9.
func TestFinishedJobQueryableAfterRestart(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	cfg := holdLanes
	d := startDaemonAt(t, home, cfg)
	id := d.submit(api.JobSpec{Lane: "work", Argv: []string{"sh", "-c", "printf 'hi\\n'; exit 3"}})
	want := d.wait(id)
	if want.State != api.StateFailed || want.Output != "hi\n" {
		t.Fatalf("job ended %+v", want)
	}
	check := func(d *testDaemon, how string) {
		t.Helper()
		got := d.job(id)
		if got.State != api.StateFailed || got.Output != "hi\n" || got.ExitCode == nil || *got.ExitCode != 3 ||
			got.OutputBytes != 3 || got.FinishedAt == nil {
			t.Fatalf("after %s: job.get = %+v", how, got)
		}
		if w := d.wait(id); w.State != api.StateFailed || w.Output != "hi\n" {
			t.Fatalf("after %s: job.wait = %+v", how, w)
		}
		var l struct{ Jobs []api.JobRecord }
		d.mustCall("job.list", map[string]any{"state": "failed"}, &l)
		if len(l.Jobs) != 1 || l.Jobs[0].ID != id {
			t.Fatalf("after %s: job.list = %+v", how, l.Jobs)
		}
	}
	d.stop()
	d2 := startDaemonAt(t, home, cfg)
	check(d2, "a clean restart")
	d2.kill9()
	d3 := startDaemonAt(t, home, cfg)
	check(d3, "kill -9")
}

// A state.db that cannot be opened stops `serve` with exit 2 and one line
// naming the file and the problem.
func TestUnopenableStateExits2(t *testing.T) {
	t.Parallel()
	corrupt := shortTemp(t)
	if err := os.WriteFile(filepath.Join(corrupt, "state.db"), []byte(strings.Repeat("not a database\n", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := shortTemp(t)
	db, err := sql.Open("sqlite", filepath.Join(newer, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, tc := range []struct{ home, want string }{
		{corrupt, "not a database"},
		{newer, "schema version 999"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, binary, "serve", "--home", tc.home).CombinedOutput()
		cancel()
		line := strings.TrimSpace(string(out))
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Contains(line, "\n") ||
			!strings.Contains(line, filepath.Join(tc.home, "state.db")) || !strings.Contains(line, tc.want) {
			t.Errorf("serve on %s: exit %v, output %q; want exit 2 and one line naming the file and %q", tc.home, err, out, tc.want)
		}
		if _, err := os.Stat(filepath.Join(tc.home, "daemon.sock")); err == nil {
			t.Errorf("serve on %s made its socket", tc.home)
		}
	}
}

// A state store that cannot write at run time (its file system is full)
// refuses submissions with store_unavailable and a state.write_failed
// event, acknowledging nothing it did not record; once there is room
// again it takes them again.
func TestFullStoreRefusesSubmissions(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as a full file system")
	}
	home, fsDir := shortTemp(t), shortTemp(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", fsDir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", fsDir).Run() }) // after the daemon's stop
	// state.db lives on the small file system; SQLite keeps its WAL
	// beside the file the link names.
	if err := os.Symlink(filepath.Join(fsDir, "state.db"), filepath.Join(home, "state.db")); err != nil {
		t.Fatal(err)
	}
	cfg := "[lanes.hold]\nrunners = 0\n"
	d := startDaemonAt(t, home, cfg)
	if _, err := os.Stat(filepath.Join(fsDir, "state.db-wal")); err != nil {
		t.Fatalf("the WAL is not on the small file system: %v", err)
	}
	filler := filepath.Join(fsDir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	var acked []string
	var refused error
	for range 2000 {
		var r struct {
			JobID string `json:"job_id"`
		}
		// Enough to grow the WAL past what it had room for.
		err := d.call("job.submit", api.JobSpec{Lane: "hold", Argv: []string{"echo", strings.Repeat("x", 2000)}}, &r)
		if err != nil {
			refused = err
			break
		}
		acked = append(acked, r.JobID)
	}
	if refused == nil {
		t.Fatalf("2000 submissions acknowledged on a full file system")
	}
	if remoteCode(refused) != api.CodeStoreUnavailable || !strings.Contains(refused.Error(), "state store") ||
		!strings.Contains(refused.Error(), "not accepted") {
		t.Fatalf("refusal %v, want code %d saying the state store could not record it", refused, api.CodeStoreUnavailable)
	}
	ev := d.waitEvent("state.write_failed", func(e map[string]any) bool {
		w, _ := e["what"].(string)
		return strings.HasSuffix(w, " submitted") && e["error"] != ""
	})
	t.Logf("refused after %d: %v; event %v", len(acked), refused, ev)
	// What was acknowledged is recorded; what was refused is not queued.
	var l struct{ Jobs []api.JobRecord }
	d.mustCall("job.list", map[string]any{"lane": "hold"}, &l)
	if len(l.Jobs) != len(acked) {
		t.Fatalf("job.list has %d jobs, %d were acknowledged", len(l.Jobs), len(acked))
	}
	if q := d.lane("hold").Queued; q != len(acked) {
		t.Fatalf("lane hold has %d queued, %d were acknowledged", q, len(acked))
	}

	// Room again: submissions are taken again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a submission taken once there is room", func() bool {
		var r struct {
			JobID string `json:"job_id"`
		}
		return d.call("job.submit", api.JobSpec{Lane: "hold", Argv: []string{"true"}}, &r) == nil
	})
}
