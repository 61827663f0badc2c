package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/platform/proc"

	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/wire"
)

func netDial(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 2*time.Second) }

const fastConfig = `
[daemon]
shutdown_timeout = "2s"
[lanes.net]
runners = 2
slots = 4
network = "host"
heartbeat_timeout = "1s"
[lanes.net.restart]
stable = "200ms"
[lanes.no-net]
runners = 1
slots = 2
network = "none"
`

func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	dir := shortTemp(t)

	t.Run("succeeds with output", func(t *testing.T) {
		d := d.in(t)
		rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"echo", "hello"}}))
		if rec.State != api.StateSucceeded || rec.ExitCode == nil || *rec.ExitCode != 0 || rec.Output != "hello\n" {
			t.Fatalf("record = %+v", rec)
		}
		if rec.RunnerID == "" || rec.RunnerPid == 0 || rec.FinishedAt == nil {
			t.Fatalf("record lacks runner or times: %+v", rec)
		}
	})
	t.Run("non-zero exit fails", func(t *testing.T) {
		d := d.in(t)
		rec := d.wait(d.submit(api.JobSpec{Lane: "net", Command: "echo oops >&2; exit 7"}))
		if rec.State != api.StateFailed || rec.ExitCode == nil || *rec.ExitCode != 7 || !strings.Contains(rec.Output, "oops") {
			t.Fatalf("record = %+v", rec)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		d := d.in(t)
		rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "30"}, TimeoutMs: 100}))
		if rec.State != api.StateTimeout || !rec.WasTimeout {
			t.Fatalf("record = %+v", rec)
		}
	})
	t.Run("cancel running", func(t *testing.T) {
		d := d.in(t)
		marker := filepath.Join(dir, "started")
		id := d.submit(api.JobSpec{Lane: "net", Command: "echo $$ > " + marker + "; exec sleep 30"})
		readPid(t, marker)
		var r struct {
			WasRunning bool `json:"was_running"`
		}
		d.mustCall("job.cancel", map[string]string{"id": id}, &r)
		if !r.WasRunning {
			t.Fatal("was_running = false for a running job")
		}
		rec := d.wait(id)
		if rec.State != api.StateCancelled || !rec.WasCancelled {
			t.Fatalf("record = %+v", rec)
		}
		err := d.call("job.cancel", map[string]string{"id": id}, nil)
		if remoteCode(err) != wire.CodeInvalidState {
			t.Fatalf("second cancel: %v, want code 1002", err)
		}
	})
	t.Run("path escape is an error and does not run", func(t *testing.T) {
		d := d.in(t)
		wt := filepath.Join(dir, "wt")
		os.MkdirAll(wt, 0o755)
		marker := filepath.Join(dir, "escaped")
		rec := d.wait(d.submit(api.JobSpec{Lane: "net", Command: "touch " + marker, WorktreeDir: wt, Cwd: "/tmp"}))
		if rec.State != api.StateError {
			t.Fatalf("record = %+v", rec)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("job ran although its cwd escaped the worktree")
		}
		rec = d.wait(d.submit(api.JobSpec{Lane: "net", Command: "true", WorktreeDir: wt, Cwd: wt,
			FilePaths: []string{"../../etc/passwd"}}))
		if rec.State != api.StateError {
			t.Fatalf("file_paths escape: record = %+v", rec)
		}
	})
	t.Run("errors", func(t *testing.T) {
		d := d.in(t)
		if err := d.call("job.submit", map[string]any{"lane": "nope", "argv": []string{"true"}}, nil); remoteCode(err) != wire.CodeNotFound {
			t.Fatalf("unknown lane: %v", err)
		}
		if err := d.call("job.submit", map[string]any{"lane": "net"}, nil); remoteCode(err) != wire.CodeInvalidParams {
			t.Fatalf("no command: %v", err)
		}
		if err := d.call("job.get", map[string]any{"id": "nope"}, nil); remoteCode(err) != wire.CodeNotFound {
			t.Fatalf("unknown job: %v", err)
		}
		if err := d.call("no.such", nil, nil); remoteCode(err) != wire.CodeMethodNotFound {
			t.Fatalf("unknown method: %v", err)
		}
	})
	t.Run("list and metrics", func(t *testing.T) {
		d := d.in(t)
		var r struct{ Jobs []api.JobRecord }
		d.mustCall("job.list", map[string]string{"state": "succeeded"}, &r)
		if len(r.Jobs) == 0 {
			t.Fatal("no succeeded jobs listed")
		}
		var m api.Metrics
		d.mustCall("metrics.get", nil, &m)
		if m.JobsByState[api.StateSucceeded] == 0 || m.JobsSubmitted < 5 {
			t.Fatalf("metrics = %+v", m)
		}
	})
}

func TestNoNetLaneHasNoNetwork(t *testing.T) {
	t.Parallel()
	ln := loopbackListener(t)
	d := startDaemon(t, fastConfig)
	self, _ := os.Executable()
	spec := func(lane string) api.JobSpec {
		return api.JobSpec{Lane: lane, Argv: []string{self, ln.Addr().String()},
			Env: map[string]string{"ORCHESTRD_TEST_HELPER": "dial"}}
	}
	if rec := d.wait(d.submit(spec("net"))); rec.State != api.StateSucceeded {
		t.Fatalf("net lane could not reach 127.0.0.1: %+v", rec)
	}
	rec := d.wait(d.submit(spec("no-net")))
	if rec.State != api.StateFailed || rec.ExitCode == nil || *rec.ExitCode != 3 {
		t.Fatalf("no-net lane reached the host's loopback: %+v", rec)
	}
}

func TestRunnerKilledMidJob(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	c := d.client()
	if err := c.Call(context.Background(), "events.subscribe", map[string]any{"kinds": []string{"job.finished"}}, nil); err != nil {
		t.Fatal(err)
	}
	// Jobs live in their runner's pid namespace: find the grandchild by its
	// command line, by its host pid.
	tag := newTag()
	id := d.submit(api.JobSpec{Lane: "net", Command: "sleep " + tag + " & wait"})
	grandchild := waitTagged(t, tag, 1)[0]
	rec := d.job(id)
	runnerPid := rec.RunnerPid
	if runnerPid == 0 {
		t.Fatalf("job has no runner pid: %+v", rec)
	}
	if err := syscall.Kill(runnerPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-c.Events():
			if ev.Event != "job.finished" || !strings.Contains(string(ev.Data), id) {
				continue
			}
			var data struct{ Job api.JobRecord }
			if err := jsonUnmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
			if data.Job.State != api.StateFailed || data.Job.Error != api.ErrRunnerLost {
				t.Fatalf("orphaned job = %+v", data.Job)
			}
			goto finished
		case <-deadline:
			t.Fatal("no job.finished for the orphaned job")
		}
	}
finished:
	waitGone(t, grandchild)
	eventually(t, 20*time.Second, "lane back at full strength", func() bool {
		return fullStrength(d.lanes(), map[string]int{"net": 2})
	})
	d.waitEvent("runner.exited", func(e map[string]any) bool { return e["pid"] == float64(runnerPid) && e["signal"] == "killed" })
	d.waitEvent("job.orphaned", func(e map[string]any) bool { return e["job_id"] == id && e["reason"] == "runner_lost" })
	d.waitEvent("runner.restart_scheduled", nil)
	// Not retried: the job stays failed and no second dispatch happened.
	n := countEvents(d.events(), "job.dispatched", func(e map[string]any) bool { return e["job_id"] == id })
	if n != 1 {
		t.Fatalf("job dispatched %d times, want 1", n)
	}
}

func TestUnresponsiveRunnerIsReplaced(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	id := d.submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "300"}})
	pid := d.waitRunning(id).RunnerPid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rec := d.wait(id)
	if rec.State != api.StateFailed || rec.Error != api.ErrRunnerUnresponsive {
		t.Fatalf("record = %+v", rec)
	}
	d.waitEvent("runner.killed", func(e map[string]any) bool {
		return e["pid"] == float64(pid) && e["reason"] == "runner_unresponsive"
	})
	waitGone(t, pid)
	eventually(t, 20*time.Second, "replacement runner", func() bool {
		return fullStrength(d.lanes(), map[string]int{"net": 2})
	})
}

func TestCrashLoopDegradesLane(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, `
[lanes.net]
runners = 1
slots = 1
spares = 0
network = "host"
[lanes.net.restart]
stable = "10s"
base_delay = "1ms"
max_delay = "20ms"
max_r = 3
max_t = "60s"
`)
	for i := 0; i < 4; i++ {
		var pid int
		eventually(t, 20*time.Second, "runner ready", func() bool {
			l := d.lane("net")
			if len(l.Runners) == 1 && l.Runners[0].State == "ready" && l.Runners[0].Pid != pid {
				pid = l.Runners[0].Pid
				return true
			}
			return false
		})
		killChild(d.proc.Pid(), pid)
		d.waitEvent("runner.exited", func(e map[string]any) bool { return e["pid"] == float64(pid) })
	}
	e := d.waitEvent("lane.degraded", nil)
	if e["lane"] != "net" || e["max_r"] != float64(3) {
		t.Fatalf("lane.degraded = %v", e)
	}
	eventually(t, 10*time.Second, "degraded flag in lane.list", func() bool { return d.lane("net").Degraded })
	var delays []float64
	for _, e := range d.events() {
		if e["kind"] == "runner.restart_scheduled" {
			delays = append(delays, e["delay_ms"].(float64))
			if e["policy"] == "stable_exit" {
				t.Fatalf("a runner killed right after start was restarted as stable: %v", e)
			}
		}
	}
	if len(delays) < 4 {
		t.Fatalf("restart_scheduled events = %v", delays)
	}
}

func TestBringYourOwnRunner(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, `
[lanes.byo]
runners = 0
slots = 2
network = "host"
`)
	sock := filepath.Join(d.home, "runner-byo.sock")
	byo := exec.Command(binary, "runner", "--lane", "byo", "--socket", sock, "--token-file", lanes.JoinTokenPath(d.home, "byo"))
	byo.Stderr = os.Stderr
	p := testio.Start(t, byo)
	d.waitByoReady("byo")
	if rec := d.wait(d.submit(api.JobSpec{Lane: "byo", Argv: []string{"echo", "byo"}})); rec.State != api.StateSucceeded || rec.Output != "byo\n" {
		t.Fatalf("record = %+v", rec)
	}
	id := d.submit(api.JobSpec{Lane: "byo", Argv: []string{"sleep", "300"}})
	d.waitRunning(id)
	byo.Process.Kill()
	<-p.Done()
	if rec := d.wait(id); rec.State != api.StateFailed || rec.Error != api.ErrRunnerLost {
		t.Fatalf("record = %+v", rec)
	}
	eventually(t, 10*time.Second, "byo runner removed, not restarted", func() bool { return len(d.lane("byo").Runners) == 0 })
}

// A sandboxed bring-your-own runner (pid 1 of its namespace, under the
// wrapper `orchestrd runner --socket` started) tells its wrapper's clean
// stop from its death on its stop descriptor: a byte, then the end, stops
// it cleanly (its job cancelled); the end alone, with no byte, is the
// wrapper's death and the runner dies at once (its job runner_lost). The
// kernel closes a dying wrapper's descriptors before it sends the runner
// its parent-death signal: a runner that took that end for a clean stop
// reported its job cancelled when its wrapper was killed
// (TestBringYourOwnRunner under load). Here the runner is started as the
// wrapper starts it, by the test and without the parent-death signal, so
// only the descriptor speaks.
func TestBringYourOwnRunnerStopDescriptor(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[lanes.byo]\nrunners = 0\nslots = 1\nnetwork = \"host\"\n")
	token, err := os.ReadFile(lanes.JoinTokenPath(d.home, "byo"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stop  []byte // written before the end
		state api.State
		err   string
	}{
		{"clean stop", []byte{'s'}, api.StateCancelled, api.ErrCancelled},
		{"wrapper died", nil, api.StateFailed, api.ErrRunnerLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := d.in(t)
			c, err := net.Dial("unix", filepath.Join(d.home, "runner-byo.sock"))
			if err != nil {
				t.Fatal(err)
			}
			cf, err := c.(*net.UnixConn).File()
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			stopR, stopW, err := os.Pipe()
			if err != nil {
				cf.Close()
				t.Fatal(err)
			}
			var stderr testio.SyncBuffer
			r := exec.Command(binary, "runner", "--lane", "byo", "--fd", "3", "--stop-fd", "4", "--hide", d.home)
			r.ExtraFiles = []*os.File{cf, stopR}
			r.Env = append(os.Environ(), "ORCHESTRD_JOIN_TOKEN="+strings.TrimSpace(string(token)))
			r.Stderr = &stderr
			r.SysProcAttr = proc.SandboxAttr(proc.Isolation{Sandbox: true})
			r.SysProcAttr.Pdeathsig = 0
			err = r.Start()
			cf.Close()
			stopR.Close()
			if err != nil {
				stopW.Close()
				t.Skip("cannot start a sandboxed runner here:", err)
			}
			rDone := make(chan struct{})
			go func() { r.Wait(); close(rDone) }()
			defer func() { stopW.Close(); r.Process.Kill(); <-rDone }()
			d.waitByoReady("byo")
			tag := newTag()
			id := d.submit(api.JobSpec{Lane: "byo", Command: "exec sleep " + tag})
			job := waitTagged(t, tag, 1)[0]
			if len(tc.stop) > 0 {
				if _, err := stopW.Write(tc.stop); err != nil {
					t.Fatal(err)
				}
			}
			stopW.Close()
			if rec := d.wait(id); rec.State != tc.state || rec.Error != tc.err {
				t.Fatalf("record = %+v; want %s %q\nrunner's stderr:\n%s", rec, tc.state, tc.err, stderr.String())
			}
			select {
			case <-rDone:
			case <-time.After(30 * time.Second):
				t.Fatalf("the runner did not exit\n%s", stderr.String())
			}
			waitGone(t, job)
			eventually(t, 10*time.Second, "the runner left the lane", func() bool { return len(d.lane("byo").Runners) == 0 })
		})
	}
}

func TestShutdownCancelsJobsAndLeavesNothing(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	tag := newTag()
	id := d.submit(api.JobSpec{Lane: "net", Command: "exec sleep " + tag})
	jobPid := waitTagged(t, tag, 1)[0]
	c := d.client()
	if err := c.Call(context.Background(), "events.subscribe", map[string]any{"kinds": []string{"job.finished"}}, nil); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.After(20 * time.Second)
	for got := false; !got; {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatal("connection closed before the job's end was heard")
			}
			if ev.Event == "job.finished" && strings.Contains(string(ev.Data), id) {
				var data struct{ Job api.JobRecord }
				jsonUnmarshal(ev.Data, &data)
				if data.Job.State != api.StateCancelled || data.Job.Error != api.ErrDaemonShutdown {
					t.Fatalf("job at shutdown = %+v", data.Job)
				}
				got = true
			}
		case <-deadline:
			t.Fatal("no job.finished at shutdown")
		}
	}
	d.waitCleanExit("the daemon did not exit after SIGTERM")
	waitGone(t, jobPid)
	kinds := map[string]bool{}
	stopping := false
	for _, e := range d.events() {
		k := e["kind"].(string)
		kinds[k] = true
		switch k {
		case "daemon.stopping":
			stopping = true
		case "runner.promoted", "runner.spawned", "runner.restart_scheduled":
			// Every runner is on its way out: none is replaced.
			if stopping {
				t.Errorf("%s after daemon.stopping: %v", k, e)
			}
		}
	}
	for _, k := range []string{"daemon.started", "daemon.stopping", "daemon.stopped", "runner.exited"} {
		if !kinds[k] {
			t.Errorf("event log has no %s", k)
		}
	}
}

func TestChaos(t *testing.T) {
	underRace(t)
	t.Parallel()
	if testing.Short() {
		t.Skip("chaos test in -short mode")
	}
	d := startDaemon(t, `
[daemon]
shutdown_timeout = "2s"
[lanes.net]
runners = 3
slots = 4
network = "host"
[lanes.net.restart]
stable = "50ms"
base_delay = "1ms"
max_delay = "50ms"
max_r = 1000
[lanes.heavy]
runners = 2
slots = 2
network = "host"
[lanes.heavy.restart]
stable = "50ms"
base_delay = "1ms"
max_delay = "50ms"
max_r = 1000
`)
	// The baseline is the daemon at rest: every runner up and two readings
	// in a row alike. On a loaded machine it may still be starting or
	// replacing a runner when startDaemon returns, with fewer goroutines
	// than it will have at rest.
	var base, prev api.Metrics
	eventuallyOr(t, 30*time.Second, "the daemon at rest before the chaos", func() bool {
		prev = base
		d.mustCall("metrics.get", nil, &base)
		return fullStrength(d.lanes(), map[string]int{"net": 3, "heavy": 2}) &&
			base.Goroutines == prev.Goroutines && base.OpenFDs == prev.OpenFDs
	}, func() string { return fmt.Sprintf("last readings %+v, %+v", prev, base) })
	const jobs = 400
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	stop := make(chan struct{})
	var killer sync.WaitGroup
	killer.Add(1)
	kills := 0
	krng := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	go func() {
		defer killer.Done()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-stop:
				return
			case <-timer.C:
			}
			// This goroutine must not fail t (t.Fatal only stops the
			// goroutine it runs on): it reports and gives up.
			ls, err := d.tryLanes()
			if err != nil {
				t.Errorf("chaos killer: %v", err)
				return
			}
			// One runner down at a time: kill only once the last one is
			// replaced. On an idle machine that takes milliseconds, less
			// than the pause between kills; on a loaded one a restart can
			// take a second or more, and killing at a fixed rate would
			// kill every runner as soon as it is back, starving the jobs
			// until their waits time out.
			if !fullStrength(ls, map[string]int{"net": 3, "heavy": 2}) {
				timer.Reset(10 * time.Millisecond)
				continue
			}
			var pids []int
			for _, l := range ls {
				for _, r := range l.Runners {
					if r.State == "ready" && r.Pid > 0 {
						pids = append(pids, r.Pid)
					}
				}
			}
			if len(pids) > 0 {
				killChild(d.proc.Pid(), pids[krng.IntN(len(pids))])
				kills++
			}
			timer.Reset(time.Duration(20+krng.IntN(60)) * time.Millisecond)
		}
	}()
	ids := make([]string, 0, jobs)
	for i := 0; i < jobs; i++ {
		lane := "net"
		if i%3 == 0 {
			lane = "heavy"
		}
		ids = append(ids, d.submit(api.JobSpec{Lane: lane, Command: fmt.Sprintf("sleep 0.0%d; echo %d", rng.IntN(10), i)}))
	}
	var wg sync.WaitGroup
	recs := make([]api.JobRecord, jobs)
	waitErrs := make([]error, jobs)
	for i, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); recs[i], waitErrs[i] = d.tryWait(id) }()
	}
	wg.Wait()
	close(stop)
	killer.Wait()
	var failedWaits []error
	for _, err := range waitErrs {
		if err != nil {
			failedWaits = append(failedWaits, err)
		}
	}
	if n := len(failedWaits); n > 0 {
		t.Fatalf("%d of %d job.wait calls failed, the first ones:\n%v\ndaemon log tail:\n%s", n, jobs,
			errors.Join(failedWaits[:min(n, 3)]...), tail(d.stderr.String(), 3000))
	}
	if t.Failed() {
		t.FailNow()
	}
	lost := 0
	for _, r := range recs {
		if !r.State.Terminal() {
			t.Fatalf("job not terminal: %+v", r)
		}
		switch r.State {
		case api.StateSucceeded:
		case api.StateFailed:
			if r.Error != api.ErrRunnerLost {
				t.Fatalf("failed job without runner_lost: %+v", r)
			}
			lost++
		default:
			t.Fatalf("unexpected state: %+v", r)
		}
	}
	t.Logf("%d jobs, %d runner kills, %d jobs lost with their runner", jobs, kills, lost)
	if kills == 0 {
		t.Fatal("the chaos killer killed nothing")
	}
	// Exactly one job.finished per job in the event log. The log is written
	// asynchronously, so wait for it to catch up before counting.
	var finished, dispatched, requeued map[string]int
	eventuallyOr(t, 20*time.Second, "every job.finished in the event log", func() bool {
		finished, dispatched, requeued = map[string]int{}, map[string]int{}, map[string]int{}
		for _, e := range d.events() {
			switch e["kind"] {
			case "job.finished":
				finished[e["job_id"].(string)]++
			case "job.dispatched":
				dispatched[e["job_id"].(string)]++
			case "job.requeued":
				requeued[e["job_id"].(string)]++
			}
		}
		for _, id := range ids {
			if finished[id] == 0 {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%d of %d jobs have job.finished", len(finished), len(ids)) })
	bounced := 0
	for _, id := range ids {
		if finished[id] != 1 {
			t.Fatalf("job %s has %d job.finished events", id, finished[id])
		}
		// Never retried: a second dispatch only after the job bounced off
		// a runner that was gone before it was written to it.
		if dispatched[id] != 1+requeued[id] {
			t.Fatalf("job %s dispatched %d times, requeued %d times", id, dispatched[id], requeued[id])
		}
		bounced += requeued[id]
	}
	t.Logf("%d dispatches bounced off a dead runner and were requeued", bounced)
	var last []api.LaneStatus
	eventuallyOr(t, 30*time.Second, "all lanes back at full strength", func() bool {
		last = d.lanes()
		return fullStrength(last, map[string]int{"net": 3, "heavy": 2})
	}, func() string { return fmt.Sprintf("lanes: %+v\nlog tail:\n%s", last, tail(d.stderr.String(), 3000)) })
	// Nothing leaked: the daemon settles back to its goroutine and fd
	// counts from before the chaos (same runners, no extra connections),
	// and its only children are its runners.
	var now api.Metrics
	eventuallyOr(t, 30*time.Second, "goroutines and fds back to baseline", func() bool {
		d.mustCall("metrics.get", nil, &now)
		return now.Goroutines <= base.Goroutines && now.OpenFDs <= base.OpenFDs
	}, func() string {
		return fmt.Sprintf("baseline %d goroutines %d fds, now %d and %d", base.Goroutines, base.OpenFDs, now.Goroutines, now.OpenFDs)
	})
	t.Logf("daemon: %d goroutines, %d fds before; %d and %d after", base.Goroutines, base.OpenFDs, now.Goroutines, now.OpenFDs)
	runners := map[int]bool{}
	for _, l := range d.lanes() {
		for _, r := range l.Runners {
			runners[r.Pid] = true
		}
	}
	eventually(t, 10*time.Second, "daemon's only children are its runners", func() bool {
		for _, pid := range childrenOf(d.cmd.Process.Pid) {
			if !runners[pid] {
				return false
			}
		}
		return true
	})
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+2:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && f[0] != "Z" {
			out = append(out, p)
		}
	}
	return out
}

func TestConfigErrorsExit2(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	for _, tc := range []struct{ cfg, want string }{
		{"[lanes.net]\nslotz = 3\n", "unknown key lanes.net.slotz"},
		{"[lanes.net]\nnetwork = \"wifi\"\n", "lanes.net.network must be"},
		{"[daemon]\nbogus = 1\n", "unknown key daemon.bogus"},
		{"[lanes.net.restart]\nmax_delay = \"1ms\"\nbase_delay = \"5ms\"\n", "max_delay"},
	} {
		p := filepath.Join(home, "bad.toml")
		os.WriteFile(p, []byte(tc.cfg), 0o600)
		out, err := exec.Command(binary, "serve", "--home", home, "--config", p).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("config %q: exit %v, output %q; want exit 2 naming %q", tc.cfg, err, out, tc.want)
		}
		if n := strings.Count(strings.TrimSpace(string(out)), "\n"); n > 0 {
			t.Errorf("config %q: want one line, got %q", tc.cfg, out)
		}
	}
}

// A second SIGTERM while the daemon stops hurries it: a runner that
// ignores Shutdown is killed at once instead of at shutdown_timeout (60 s
// here), and the daemon still exits cleanly with its event log complete.
func TestSecondSignalHurriesShutdown(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[daemon]\nshutdown_timeout = \"60s\"\n"+byoLane("byo"))
	// A bring-your-own runner that handshakes, then ignores everything,
	// Shutdown included.
	c := d.joinByo("byo", "stubborn")
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		fr := wire.NewFrameReader(c, 0)
		for {
			if _, err := fr.Next(); err != nil {
				return // the daemon closed the connection
			}
		}
	}()
	d.waitByoReady("byo")

	d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitEvent("daemon.stopping", nil)
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitCleanExit("the daemon did not exit after a second SIGTERM")
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("the stubborn runner's connection is still open")
	}
	var stopping, forced, stopped int
	for _, e := range d.events() {
		switch {
		case e["kind"] == "daemon.stopping":
			stopping++
		case e["kind"] == "runner.killed" && e["reason"] == "shutdown_forced":
			forced++
		case e["kind"] == "daemon.stopped":
			stopped++
		}
	}
	if stopping != 2 || forced != 1 || stopped != 1 {
		t.Fatalf("daemon.stopping %d, runner.killed{shutdown_forced} %d, daemon.stopped %d; want 2, 1, 1", stopping, forced, stopped)
	}
}
