package main

import (
	"context"
	"fmt"
	"time"
)

// runSampling: 32 long-running jobs (`sleep`) on 2 runners of 16 slots,
// their trees sampled every 100 ms (usage_sample_interval), against the
// same jobs with sampling off ("0s"), in the same run: the daemon's CPU
// over a window, and what one sample costs (the difference over the
// samples the records counted). What the default 5 s interval costs
// follows from it.
func runSampling(b *bench) error {
	window := pick(b, 10*time.Second, 2*time.Second)
	const jobs = 32
	const every = 100 * time.Millisecond
	measure := func(name, interval string) (cpu time.Duration, wall time.Duration, samples int, err error) {
		cfg := laneConfig{runners: 2, slots: 16, finishedJobs: 1000}.toml()
		cfg = "[daemon]\nusage_sample_interval = \"" + interval + "\"\n" + cfg[len("[daemon]\n"):]
		d, err := b.startDaemon(name, cfg)
		if err != nil {
			return 0, 0, 0, err
		}
		defer d.stop()
		c, err := d.dial()
		if err != nil {
			return 0, 0, 0, err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ids := make([]string, 0, jobs)
		for range jobs {
			var sub struct {
				JobID string `json:"job_id"`
			}
			if err := c.Call(ctx, "job.submit", map[string]any{"lane": "bench", "argv": []string{"sleep", "600"}}, &sub); err != nil {
				return 0, 0, 0, fmt.Errorf("job.submit: %w", err)
			}
			ids = append(ids, sub.JobID)
		}
		count := func() (int, error) {
			n := 0
			for _, id := range ids {
				var r struct {
					Job struct {
						State string `json:"state"`
						Usage *struct {
							Samples int `json:"samples"`
						} `json:"usage"`
					} `json:"job"`
				}
				if err := c.Call(ctx, "job.get", map[string]any{"id": id}, &r); err != nil {
					return 0, err
				}
				if r.Job.State != "running" {
					return 0, fmt.Errorf("job %s is %s", id, r.Job.State)
				}
				if r.Job.Usage != nil {
					n += r.Job.Usage.Samples
				}
			}
			return n, nil
		}
		time.Sleep(pick(b, 2*time.Second, 500*time.Millisecond)) // every job started and sampled once
		cpu, wall, samples, err = sampledWindow(d.pid(), window, count)
		if err != nil {
			return 0, 0, 0, err
		}
		for _, id := range ids {
			_ = c.Call(ctx, "job.cancel", map[string]any{"id": id, "force": true}, nil)
		}
		return cpu, wall, samples, d.stop()
	}
	onCPU, onWall, samples, err := measure("sampling-on", every.String())
	if err != nil {
		return err
	}
	offCPU, offWall, _, err := measure("sampling-off", "0s")
	if err != nil {
		return err
	}
	pct := func(c, w time.Duration) float64 { return 100 * c.Seconds() / w.Seconds() }
	on, off := pct(onCPU, onWall), pct(offCPU, offWall)
	b.add(Row{Metric: fmt.Sprintf("%d running jobs sampled every %s: daemon CPU", jobs, every), Orchestrd: fmt.Sprintf("%.2f%% of one core", on),
		Value: on, Unit: "% of one core", Baseline: fmt.Sprintf("%.2f%% (sampling off)", off), BaselineValue: floatp(off)})
	if samples > 0 {
		per := (onCPU.Seconds() - offCPU.Seconds()*onWall.Seconds()/offWall.Seconds()) / float64(samples) * 1e6
		at5s := per * jobs / 5 / 1e4 // µs per sample x samples a second at 5 s, in % of a core
		b.add(Row{Metric: "CPU per sample of a job's tree (daemon)", N: samples, Orchestrd: fmt.Sprintf("%.0f µs", per), Value: per, Unit: "µs"})
		b.add(Row{Metric: fmt.Sprintf("%d running jobs at the default 5 s interval (derived)", jobs), Orchestrd: fmt.Sprintf("%.3f%% of one core", at5s),
			Value: at5s, Unit: "% of one core"})
	}
	b.note("Sampling: 32 `sleep 600` jobs on 2 runners x 16 slots; daemon CPU from schedstat over the window, with usage_sample_interval 100ms against 0s (off) in the same run; samples counted from the records' usage.samples.")
	return runTaskSampling(b, window)
}

// runTaskSampling: 8 long agent tasks (orchestrd executor running an
// agent that waits), their executors' trees sampled at the default 5 s
// interval, against the same tasks with sampling off, in the same run:
// the daemon's CPU over the window.
func runTaskSampling(b *bench, window time.Duration) error {
	const tasks = 8
	measure := func(name, interval string) (cpu, wall time.Duration, samples int, err error) {
		cfg := laneConfig{runners: 1, slots: 1, finishedJobs: 1000}.toml()
		cfg = "[daemon]\nusage_sample_interval = \"" + interval + "\"\n" + cfg[len("[daemon]\n"):] +
			fmt.Sprintf("\n[executors.agents]\ncommand = [%q, \"executor\", \"--\", \"sh\", \"-c\", \"read p; exec sleep 600\"]\n"+
				"instances = %d\nmax_instances = %d\n", b.bin, tasks, tasks)
		d, c, err := b.startDialed(name, cfg)
		if err != nil {
			return 0, 0, 0, err
		}
		defer d.stop()
		defer c.Close()
		ids := make([]string, 0, tasks)
		for range tasks {
			var res struct {
				TaskID string `json:"task_id"`
			}
			if err := call(c, "task.execute", map[string]any{"executor": "agents", "prompt": "wait", "cwd": b.tmp}, &res); err != nil {
				return 0, 0, 0, fmt.Errorf("task.execute: %w", err)
			}
			ids = append(ids, res.TaskID)
		}
		count := func() (int, error) {
			n := 0
			for _, id := range ids {
				var r struct {
					Task struct {
						State string `json:"state"`
						Usage *struct {
							Samples int `json:"samples"`
						} `json:"usage"`
					} `json:"task"`
				}
				if err := call(c, "task.get", map[string]any{"id": id}, &r); err != nil {
					return 0, err
				}
				if r.Task.State != "running" {
					return 0, fmt.Errorf("task %s is %s", id, r.Task.State)
				}
				if r.Task.Usage != nil {
					n += r.Task.Usage.Samples
				}
			}
			return n, nil
		}
		time.Sleep(pick(b, 2*time.Second, 500*time.Millisecond)) // every task started and sampled once
		cpu, wall, samples, err = sampledWindow(d.pid(), window, count)
		if err != nil {
			return 0, 0, 0, err
		}
		for _, id := range ids {
			_ = call(c, "task.stop", map[string]any{"id": id, "force": true}, nil)
		}
		return cpu, wall, samples, d.stop()
	}
	onCPU, onWall, samples, err := measure("task-sampling-on", "5s")
	if err != nil {
		return err
	}
	offCPU, offWall, _, err := measure("task-sampling-off", "0s")
	if err != nil {
		return err
	}
	pct := func(c, w time.Duration) float64 { return 100 * c.Seconds() / w.Seconds() }
	on, off := pct(onCPU, onWall), pct(offCPU, offWall)
	b.add(Row{Metric: fmt.Sprintf("%d running agent tasks sampled every 5 s (default): daemon CPU", tasks), N: samples,
		Orchestrd: fmt.Sprintf("%.2f%% of one core", on), Value: on, Unit: "% of one core",
		Baseline: fmt.Sprintf("%.2f%% (sampling off)", off), BaselineValue: floatp(off)})
	b.note("Task sampling: 8 agent tasks (orchestrd executor, an agent that sleeps) at usage_sample_interval 5s against 0s (off) in the same run; N is the samples taken in the window.")
	return nil
}

// sampledWindow is the daemon's CPU over window, the wall time it took and
// how many samples count says were taken in it.
func sampledWindow(pid int, window time.Duration, count func() (int, error)) (cpu, wall time.Duration, samples int, err error) {
	s0, err := count()
	if err != nil {
		return 0, 0, 0, err
	}
	c0, err := procCPUPrecise(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	time.Sleep(window)
	c1, err := procCPUPrecise(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	wall = time.Since(t0)
	s1, err := count()
	if err != nil {
		return 0, 0, 0, err
	}
	return c1 - c0, wall, s1 - s0, nil
}
