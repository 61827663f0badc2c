package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/state"
)

// runStore measures the state store: what recording a job costs (in this
// process, through the state package as the daemon uses it), and how long
// a daemon takes to start on a home whose last daemon died with 10,000
// jobs unfinished, and what finished jobs with large output cost the
// daemon (finished.go).
func runStore(b *bench) error {
	for _, d := range []state.Durability{state.DurabilityProcess, state.DurabilityPower} {
		for _, c := range []int{1, 32} {
			if err := measureStoreWrites(b, d, c); err != nil {
				return err
			}
		}
	}
	if err := measureRecovery(b); err != nil {
		return err
	}
	return measureFinishedOutput(b)
}

// processCPU is the CPU this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// jobLife records one job as the job path does: submitted with its spec,
// dispatched, running, finished with 200 bytes of output; each write
// returns once committed.
func jobLife(ctx context.Context, jobs state.Jobs, id string, spec api.JobSpec, out string) error {
	now := time.Now()
	code := int32(0)
	for _, err := range []error{
		jobs.Submit(ctx, api.JobRecord{ID: id, Lane: "bench", State: api.StateQueued, CreatedAt: now}, spec),
		jobs.Dispatch(ctx, id, "bench-0", 1234, now),
		jobs.Run(ctx, id),
		jobs.Finish(ctx, api.JobRecord{ID: id, Lane: "bench", State: api.StateSucceeded, ExitCode: &code,
			RunnerID: "bench-0", RunnerPid: 1234, CreatedAt: now, DispatchedAt: &now, Output: out, OutputBytes: int64(len(out))}),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

func benchSpec() api.JobSpec {
	return api.JobSpec{Lane: "bench", Command: "sh", Argv: []string{"-c", "true"}, Cwd: "/tmp",
		Env: map[string]string{"HOME": "/home/me"}, TimeoutMs: 30000, MaxOutputBytes: 1 << 20}
}

// measureStoreWrites records whole jobs from conc goroutines for a while
// and reports CPU per job (callers and writer), wall time per job and
// commits per second.
func measureStoreWrites(b *bench, d state.Durability, conc int) error {
	dir, err := os.MkdirTemp(b.tmp, "store")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s, err := state.Open(filepath.Join(dir, "state.db"), state.Options{Durability: d})
	if err != nil {
		return err
	}
	defer s.Close()
	spec, out := benchSpec(), strings.Repeat("output line\n", 17)[:200]
	dur := b.load(3 * time.Second)
	ctx := context.Background()
	var n atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	before, cpu0, start := s.Stats(), processCPU(), time.Now()
	deadline := start.Add(dur)
	for g := range conc {
		wg.Go(func() {
			jobs := s.Jobs()
			for i := 0; time.Now().Before(deadline); i++ {
				if err := jobLife(ctx, jobs, fmt.Sprintf("j-%d-%d", g, i), spec, out); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed, cpu, after := time.Since(start), processCPU()-cpu0, s.Stats()
	if err, _ := failed.Load().(error); err != nil {
		return fmt.Errorf("recording jobs: %w", err)
	}
	jobs := float64(n.Load())
	if jobs == 0 {
		return fmt.Errorf("no job recorded in %s", dur)
	}
	commits := float64(after.Commits - before.Commits)
	label := fmt.Sprintf("durability %s, c=%d", d, conc)
	cpuUs := float64(cpu.Microseconds()) / jobs
	b.add(Row{Metric: label + ": CPU per recorded job (4 writes)", N: int(jobs), Orchestrd: fmt.Sprintf("%.0f µs", cpuUs),
		Value: cpuUs, Unit: "µs", Note: fmt.Sprintf("%.0f jobs/s, %.0f commits/s, %.1f writes/commit, wall %.0f µs/job per writer",
			jobs/elapsed.Seconds(), commits/elapsed.Seconds(), float64(after.Writes-before.Writes)/commits,
			float64(elapsed.Microseconds())*float64(conc)/jobs)})
	return nil
}

// recoveryConfig is a lane without runners: the requeued jobs stay queued
// and the measure is the recovery alone.
const recoveryConfig = `[daemon]
shutdown_timeout = "2s"
[lanes.bench]
runners = 0
slots = 1
network = "host"
queue_limit = 20000
`

// measureRecovery times a daemon's start, from exec to every socket
// answering, on a home left with 10,000 unfinished jobs (half only queued,
// to be queued again; half dispatched, to be failed daemon_lost), against
// the same start on an empty home.
func measureRecovery(b *bench) error {
	const unfinished = 10000
	seed := filepath.Join(b.tmp, "recovery-seed.db")
	if err := seedUnfinished(seed, unfinished); err != nil {
		return err
	}
	trials := pick(b, 5, 1)
	var rec, empty []float64
	for i := range trials * 2 {
		withJobs := i%2 == 0
		ms, err := timeStart(b, fmt.Sprintf("recovery-%d", i), map[bool]string{true: seed}[withJobs], unfinished)
		if err != nil {
			return err
		}
		if withJobs {
			rec = append(rec, ms)
		} else {
			empty = append(empty, ms)
		}
	}
	r, e := b.sample("store.recover_10k_ms", rec, "ms"), b.sample("store.start_empty_ms", empty, "ms")
	ratio, rv := fmtRatio(r.P50, e.P50)
	b.add(Row{Metric: "start with 10,000 unfinished jobs (5,000 requeued, 5,000 failed daemon_lost), exec to ready", N: r.N,
		Orchestrd: fmtMs(r.P50), Value: r.P50, Unit: "ms", Baseline: fmtMs(e.P50) + " (start on an empty home)",
		BaselineValue: floatp(e.P50), BaselineN: e.N, Ratio: ratio, RatioValue: rv})
	return nil
}

// seedUnfinished writes a state.db as a daemon killed with n jobs
// unfinished leaves it.
func seedUnfinished(path string, n int) error {
	s, err := state.Open(path, state.Options{})
	if err != nil {
		return err
	}
	spec := benchSpec()
	now := time.Now()
	var ws []state.Write
	for i := range n {
		id := fmt.Sprintf("j-seed-%d", i)
		ws = append(ws, state.JobSubmitted(api.JobRecord{ID: id, Lane: "bench", State: api.StateQueued, CreatedAt: now}, spec))
		if i%2 == 1 {
			ws = append(ws, state.JobDispatched(id, "bench-0", 1234, now))
		}
	}
	if err := s.Do(context.Background(), ws...); err != nil {
		s.Close()
		return fmt.Errorf("seeding %d unfinished jobs: %w", n, err)
	}
	return s.Close()
}

// timeStart starts a daemon on a new home (with a copy of seed as its
// state.db, if seed is not "") and returns the milliseconds from exec to
// ready. With a seed it checks that the daemon recovered every job.
func timeStart(b *bench, name, seed string, unfinished int) (float64, error) {
	home := filepath.Join(b.tmp, name)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return 0, err
	}
	if seed != "" {
		if err := daemonrun.CopyFile(seed, filepath.Join(home, "state.db"), 0o600); err != nil {
			return 0, err
		}
	}
	cfg := filepath.Join(home, "orchbench.toml")
	if err := os.WriteFile(cfg, []byte(recoveryConfig), 0o600); err != nil {
		return 0, err
	}
	logf, err := os.Create(filepath.Join(b.tmp, name+".log"))
	if err != nil {
		return 0, err
	}
	cmd := daemonrun.Serve(b.bin, home, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	p, err := daemonrun.Start(cmd, home)
	if err != nil {
		logf.Close()
		return 0, err
	}
	d := &daemon{run: p, b: b, name: name, sock: p.Socket(), logf: logf}
	defer d.stop()
	if _, err := p.WaitReady(60 * time.Second); err != nil {
		return 0, fmt.Errorf("daemon %s: %w\n%s", name, err, d.logTail())
	}
	took := time.Since(start)
	if seed != "" {
		evs, err := daemonrun.ReadEvents(p.EventLog())
		if err != nil {
			return 0, err
		}
		var started map[string]any
		for _, e := range evs {
			if e["kind"] == "daemon.started" {
				started = e
			}
		}
		if started == nil || started["requeued"] != float64(unfinished/2) || started["failed"] != float64(unfinished/2) {
			return 0, fmt.Errorf("daemon %s did not recover the %d unfinished jobs: daemon.started = %v", name, unfinished, started)
		}
	}
	return float64(took.Microseconds()) / 1000, d.stop()
}
