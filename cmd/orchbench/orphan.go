package main

import (
	"fmt"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// runOrphan: SIGKILL a runner while a job runs on it; time until a client
// subscribed on the control socket receives job.finished with runner_lost.
func runOrphan(b *bench) error {
	n := pick(b, 30, 5)
	// restart.stable 100ms: a replacement up 100ms counts as stable, so the
	// trials need not wait a second each for the lane to restart at once.
	d, err := b.startDaemon("orphan", laneConfig{runners: 1, slots: 1, stable: "100ms"}.toml())
	if err != nil {
		return err
	}
	defer d.stop()
	sub, err := d.subscribe("job.finished", "runner.ready")
	if err != nil {
		return err
	}
	defer sub.close()
	c, err := d.dial()
	if err != nil {
		return err
	}
	defer c.Close()

	var ds []time.Duration
	for i := 0; i < n; i++ {
		var sub1 struct {
			JobID string `json:"job_id"`
		}
		if err := call(c, "job.submit", map[string]any{"lane": "bench", "argv": []string{"sleep", "60"}}, &sub1); err != nil {
			return fmt.Errorf("job.submit: %w", err)
		}
		// Setup, not measured: poll until the runner has acknowledged the
		// job (state running), so the job's process is started.
		pid, err := waitRunning(c, sub1.JobID, 10*time.Second)
		if err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
		sub.drain()
		t0 := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill runner %d: %w", pid, err)
		}
		e, err := sub.wait(10*time.Second, "job.finished", func(e event) bool {
			return e.kind == "job.finished" && e.data.Job != nil && e.data.Job.ID == sub1.JobID
		})
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		if e.data.Job.Error != "runner_lost" {
			return fmt.Errorf("trial %d: job ended %s with error %q, want runner_lost", i+1, e.data.Job.State, e.data.Job.Error)
		}
		ds = append(ds, e.at.Sub(t0))
		b.debugf("orphan trial %d: %s", i+1, e.at.Sub(t0))
		// The replacement, before the next trial.
		if _, err := sub.wait(time.Minute, "the replacement runner", func(e event) bool {
			return e.kind == "runner.ready" && e.data.Lane == "bench" && e.data.Pid != pid
		}); err != nil {
			return err
		}
		time.Sleep(150 * time.Millisecond) // past restart.stable
	}
	st := b.sample("orphan.notice_ms", durationsMs(ds), "ms")
	b.add(Row{Metric: "p50 kill → job.finished (runner_lost) pushed", N: st.N, Orchestrd: fmtMs(st.P50), Value: st.P50, Unit: "ms"})
	b.add(Row{Metric: "p99 kill → job.finished (runner_lost) pushed", N: st.N, Orchestrd: fmtMs(st.P99), Value: st.P99, Unit: "ms",
		Target: "≤ 5 ms", Met: boolp(st.P99 <= 5)})
	return d.stop()
}

// waitRunning polls job.get until the job runs and returns its runner's pid.
func waitRunning(c *client.Client, id string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		var res struct {
			Job struct {
				State     string `json:"state"`
				RunnerPid int    `json:"runner_pid"`
			} `json:"job"`
		}
		if err := call(c, "job.get", map[string]any{"id": id}, &res); err != nil {
			return 0, fmt.Errorf("job.get: %w", err)
		}
		switch res.Job.State {
		case "running":
			return res.Job.RunnerPid, nil
		case "queued", "dispatched":
		default:
			return 0, fmt.Errorf("job %s is %s, want running", id, res.Job.State)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("job %s not running after %s", id, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
