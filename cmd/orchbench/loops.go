package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// runLoops is scenario 14: many code loops at once, each iterating with an
// instant agent (the test executor answers a prompt that is not a script
// at once) and a validation that fails, so every iteration is followed by
// another. The figure is the gap between an iteration's agent task ending
// (task.finished) and the next iteration's task starting on an executor
// (task.started, when execute_prompt goes out), as one subscriber stamps
// them: the loop's own work between the two is a validation job, the
// feedback and the iteration's records in the store. The baseline is a
// client per loop doing the same steps itself in the same run (task.execute,
// task.wait, job.submit of the same validation, job.wait, then the next
// task.execute), measured the same way. Then the daemon's RSS per waiting
// loop: loops queued behind max_running, each an actor and a record.
func runLoops(b *bench) error {
	loops := pick(b, 100, 4)
	iters := pick(b, 4, 2)
	repo := filepath.Join(b.tmp, "loops-repo")
	if err := gitInit(repo); err != nil {
		return err
	}
	cfg := laneConfig{runners: 1, slots: loops, queueLimit: 100000}.toml() +
		fmt.Sprintf("\n[executors.bench]\ncommand = [%q]\ninstances = %d\nmax_instances = %d\nqueue_limit = 100000\n", b.testexec, loops, loops) +
		fmt.Sprintf("\n[loops]\nexecutor = \"bench\"\nvalidation_lane = \"bench\"\nmax_running = %d\n\n[loops.code]\nvalidation_command = \"exit 1\"\nmax_iterations = %d\n", loops, iters)
	cfg = strings.Replace(cfg, "[daemon]\n", "[daemon]\nsubscriber_queue = 65536\n", 1)
	d, c, err := b.startDialed("loops", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	defer c.Close()
	if err := waitExecutors(c, "bench", loops, time.Minute); err != nil {
		return err
	}

	// Orchestrd's loops.
	sub, err := d.subscribe("task.started", "task.finished")
	if err != nil {
		return err
	}
	ids := make([]string, loops)
	for i := range ids {
		var r api.LoopCreatePlanResult
		if err := call(c, "loop.create", map[string]any{"loop_type": "code", "description": "bench", "repo": repo}, &r); err != nil {
			sub.close()
			return fmt.Errorf("loop.create: %w", err)
		}
		ids[i] = r.ID
	}
	want := loops * iters // tasks, each started and finished
	stamps, err := taskStamps(sub, want, 5*time.Minute)
	sub.close()
	if err != nil {
		return fmt.Errorf("loops: %w", err)
	}
	var sequences [][]string
	for _, id := range ids {
		g, err := waitLoopEnd(c, id, time.Minute)
		if err != nil {
			return err
		}
		if g.Loop.Status != api.LoopFailed || int(g.Loop.Iteration) != iters || g.Loop.Error != api.LoopErrMaxIterations {
			return fmt.Errorf("loop %s ended %s (%s) at iteration %d, want failed (max_iterations) at %d", id, g.Loop.Status, g.Loop.Error, g.Loop.Iteration, iters)
		}
		var seq []string
		for _, it := range g.Iterations {
			seq = append(seq, it.TaskID)
		}
		sequences = append(sequences, seq)
	}
	loopGaps, err := gaps(stamps, sequences)
	if err != nil {
		return fmt.Errorf("loops: %w", err)
	}

	// The baseline: a client per loop, the same steps.
	sub, err = d.subscribe("task.started", "task.finished")
	if err != nil {
		return err
	}
	wt := filepath.Join(b.tmp, "loops-baseline")
	if err := os.MkdirAll(wt, 0o700); err != nil {
		sub.close()
		return err
	}
	seqs := make([][]string, loops)
	errs := make(chan error, loops)
	var wg sync.WaitGroup
	for i := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, err := d.dial()
			if err != nil {
				errs <- err
				return
			}
			defer cc.Close()
			seq, err := clientLoop(cc, wt, iters)
			seqs[i] = seq
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		sub.close()
		return fmt.Errorf("baseline: %w", err)
	}
	stamps, err = taskStamps(sub, want, 5*time.Minute)
	sub.close()
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	baseGaps, err := gaps(stamps, seqs)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	o, bs := summarize(durationsMs(loopGaps), "ms"), summarize(durationsMs(baseGaps), "ms")
	for _, p := range []struct {
		name   string
		ov, bv float64
		target bool
	}{{"p50", o.P50, bs.P50, true}, {"p99", o.P99, bs.P99, true}} {
		ratio, rv := fmtRatio(p.ov, p.bv)
		row := Row{Metric: fmt.Sprintf("%d code loops at once, %d iterations each: agent task end → next iteration's task start, %s", loops, iters, p.name),
			N: o.N, Orchestrd: fmtMs(p.ov), Value: p.ov, Unit: "ms",
			Baseline: fmtMs(p.bv) + " (a client doing the same steps)", BaselineValue: floatp(p.bv), BaselineN: bs.N, Ratio: ratio, RatioValue: rv}
		if p.target {
			row.Target, row.Met = "≤ 1.2x baseline", boolp(p.ov <= 1.2*p.bv)
		}
		b.add(row)
	}
	return loopsRSS(b)
}

// loopsRSS measures what a waiting loop costs the daemon: n loops queued
// behind one running loop (max_running 1) whose validation sleeps.
func loopsRSS(b *bench) error {
	n := pick(b, 1000, 20)
	repo := filepath.Join(b.tmp, "loops-rss-repo")
	if err := gitInit(repo); err != nil {
		return err
	}
	cfg := laneConfig{runners: 1, slots: 2}.toml() +
		fmt.Sprintf("\n[executors.bench]\ncommand = [%q]\ninstances = 1\nmax_instances = 1\n", b.testexec) +
		"\n[loops]\nexecutor = \"bench\"\nvalidation_lane = \"bench\"\nmax_running = 1\n\n[loops.code]\nvalidation_command = \"sleep 600\"\n"
	d, c, err := b.startDialed("loops-rss", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	defer c.Close()
	create := func() error {
		var r api.LoopCreatePlanResult
		return call(c, "loop.create", map[string]any{"loop_type": "code", "description": "bench", "repo": repo}, &r)
	}
	if err := create(); err != nil { // the one that runs
		return fmt.Errorf("loop.create: %w", err)
	}
	time.Sleep(time.Second) // settle: its first iteration, the heap it grows to
	rss0, err := procRSS(d.pid())
	if err != nil {
		return err
	}
	for range n {
		if err := create(); err != nil {
			return fmt.Errorf("loop.create: %w", err)
		}
	}
	time.Sleep(time.Second)
	rss1, err := procRSS(d.pid())
	if err != nil {
		return err
	}
	var pending api.LoopListResult
	if err := call(c, "loop.list", map[string]any{"status": "pending", "limit": 10000}, &pending); err != nil {
		return err
	}
	if len(pending.Loops) != n {
		return fmt.Errorf("%d loops pending, want %d", len(pending.Loops), n)
	}
	per := float64(rss1-rss0) / float64(n)
	b.add(Row{Metric: fmt.Sprintf("daemon RSS per waiting loop (%d loops pending behind max_running)", n), N: n,
		Orchestrd: fmtBytes(per), Value: per, Unit: "bytes",
		Note: fmt.Sprintf("%s before, %s after", fmtBytes(float64(rss0)), fmtBytes(float64(rss1)))})
	return nil
}

// clientLoop does what a loop does, as a client: iters times a task on
// the bench pool, then the failing validation as a job in wt. It returns
// its tasks' ids in order.
func clientLoop(c *client.Client, wt string, iters int) ([]string, error) {
	var seq []string
	for range iters {
		var t struct {
			TaskID string `json:"task_id"`
		}
		if err := call(c, "task.execute", api.TaskSpec{Executor: "bench", Prompt: "bench", Cwd: wt, PermissionMode: api.ModeBypass}, &t); err != nil {
			return seq, fmt.Errorf("task.execute: %w", err)
		}
		seq = append(seq, t.TaskID)
		if err := callLong(c, "task.wait", map[string]any{"id": t.TaskID, "timeout_ms": 0}, nil); err != nil {
			return seq, fmt.Errorf("task.wait: %w", err)
		}
		var j struct {
			JobID string `json:"job_id"`
		}
		if err := call(c, "job.submit", api.JobSpec{Lane: "bench", Command: "exit 1", Cwd: wt, TimeoutMs: 300000}, &j); err != nil {
			return seq, fmt.Errorf("job.submit: %w", err)
		}
		if err := callLong(c, "job.wait", map[string]any{"id": j.JobID}, nil); err != nil {
			return seq, fmt.Errorf("job.wait: %w", err)
		}
	}
	return seq, nil
}

type taskStamp struct {
	started, finished time.Time
	counted           bool
}

// taskStamps reads task.started and task.finished until n tasks have both.
func taskStamps(sub *subscription, n int, timeout time.Duration) (map[string]*taskStamp, error) {
	stamps := map[string]*taskStamp{}
	done := 0
	deadline := time.Now().Add(timeout)
	for done < n {
		e, err := sub.wait(time.Until(deadline), fmt.Sprintf("task %d of %d", done+1, n), func(event) bool { return true })
		if err != nil {
			return nil, err
		}
		id := e.data.TaskID
		if id == "" {
			continue
		}
		s := stamps[id]
		if s == nil {
			s = &taskStamp{}
			stamps[id] = s
		}
		switch e.kind {
		case "task.started":
			s.started = e.at
		case "task.finished":
			s.finished = e.at
		}
		if !s.started.IsZero() && !s.finished.IsZero() && !s.counted {
			s.counted = true
			done++
		}
	}
	return stamps, nil
}

// gaps is, for each sequence of tasks, the time from each task's end to
// the next one's start.
func gaps(stamps map[string]*taskStamp, seqs [][]string) ([]time.Duration, error) {
	var out []time.Duration
	for _, seq := range seqs {
		for k := 1; k < len(seq); k++ {
			prev, next := stamps[seq[k-1]], stamps[seq[k]]
			if prev == nil || next == nil || prev.finished.IsZero() || next.started.IsZero() {
				return nil, fmt.Errorf("no task.finished of %s or task.started of %s", seq[k-1], seq[k])
			}
			out = append(out, next.started.Sub(prev.finished))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// waitLoopEnd polls loop.get until the loop has ended.
func waitLoopEnd(c *client.Client, id string, timeout time.Duration) (api.LoopGetResult, error) {
	deadline := time.Now().Add(timeout)
	for {
		var g api.LoopGetResult
		if err := call(c, "loop.get", map[string]any{"id": id}, &g); err != nil {
			return g, fmt.Errorf("loop.get %s: %w", id, err)
		}
		if g.Loop.Status.Terminal() {
			return g, nil
		}
		if time.Now().After(deadline) {
			return g, fmt.Errorf("loop %s still %s after %s", id, g.Loop.Status, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitExecutors waits until pool has n executors idle.
func waitExecutors(c *client.Client, pool string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var res struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		if err := call(c, "executor.list", nil, &res); err != nil {
			return fmt.Errorf("executor.list: %w", err)
		}
		for _, p := range res.Pools {
			idle := 0
			for _, e := range p.Executors {
				if e.State == "idle" {
					idle++
				}
			}
			if p.Name == pool && idle >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool %s has not %d executors idle after %s", pool, n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// callLong is a call that may take as long as the work it waits for.
func callLong(c *client.Client, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return c.Call(ctx, method, params, result)
}

// gitInit makes a git repository at dir with one commit on main.
func gitInit(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"-c", "user.name=bench", "-c", "user.email=bench@localhost",
		"commit", "-q", "--allow-empty", "-m", "start"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
