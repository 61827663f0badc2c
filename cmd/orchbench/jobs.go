package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// loadResult is one timed run of a closed-loop load at some concurrency.
type loadResult struct {
	ops     int
	elapsed time.Duration
	lat     []time.Duration
}

func (r loadResult) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// closedLoop runs conc workers, each calling op in a loop, for dur; op's
// latency is recorded per call. newWorker prepares each worker's op (its
// connection, say) and returns a cleanup.
func closedLoop(conc int, dur time.Duration, newWorker func() (op func() error, done func(), err error)) (loadResult, error) {
	ops := make([]func() error, conc)
	var dones []func()
	defer func() {
		for _, d := range dones {
			d()
		}
	}()
	for i := range ops {
		op, done, err := newWorker()
		if err != nil {
			return loadResult{}, err
		}
		ops[i] = op
		dones = append(dones, done)
	}
	var (
		mu   sync.Mutex
		res  loadResult
		errs []error
		wg   sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(dur)
	var last time.Time
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			var end time.Time
			n := 0
			for {
				t := time.Now()
				if !t.Before(deadline) {
					break
				}
				if err := op(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				end = time.Now()
				lat = append(lat, end.Sub(t))
				n++
			}
			mu.Lock()
			res.ops += n
			res.lat = append(res.lat, lat...)
			if end.After(last) {
				last = end
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return res, errs[0]
	}
	res.elapsed = last.Sub(start)
	if res.ops == 0 || res.elapsed <= 0 {
		return res, errors.New("no operation completed")
	}
	return res, nil
}

// orchJobWorker submits `true` to lane bench and waits for it, on its own
// control connection.
func orchJobWorker(d *daemon) func() (func() error, func(), error) {
	return func() (func() error, func(), error) {
		c, err := d.dial()
		if err != nil {
			return nil, nil, err
		}
		op := func() error { return runTrueJob(c) }
		return op, func() { c.Close() }, nil
	}
}

func runTrueJob(c *client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := c.Call(ctx, "job.submit", map[string]any{"lane": "bench", "argv": []string{"true"}}, &sub); err != nil {
		return fmt.Errorf("job.submit: %w", err)
	}
	var res struct {
		Job struct {
			State string `json:"state"`
			Error string `json:"error"`
		} `json:"job"`
	}
	if err := c.Call(ctx, "job.wait", map[string]any{"id": sub.JobID, "timeout_ms": 20000}, &res); err != nil {
		return fmt.Errorf("job.wait: %w", err)
	}
	if res.Job.State != "succeeded" {
		return fmt.Errorf("job %s ended %s (%s)", sub.JobID, res.Job.State, res.Job.Error)
	}
	return nil
}

// execTrueWorker is the baseline: exec.Command("true").Run() in a loop.
func execTrueWorker() (func() error, func(), error) {
	path, err := exec.LookPath("true")
	if err != nil {
		return nil, nil, err
	}
	return func() error { return exec.Command(path).Run() }, func() {}, nil
}

func runJobs(b *bench) error {
	trials := pick(b, 8, 1)
	dur := b.load(1500 * time.Millisecond)

	levels := []int{1, 32}
	// 2 runners (one per core here) of 16 slots: 32 jobs can run at once.
	d, err := b.startDaemon("jobs", laneConfig{runners: 2, slots: 16, finishedJobs: 1000}.toml())
	if err != nil {
		return err
	}
	defer d.stop()

	// Warm both up.
	if _, err := closedLoop(4, b.load(500*time.Millisecond), orchJobWorker(d)); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := closedLoop(4, b.load(200*time.Millisecond), execTrueWorker); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	if err := measureJobs(b, d, "", levels, trials, dur); err != nil {
		return err
	}
	if err := d.stop(); err != nil {
		return err
	}

	// The same with durability = "power": an fsync per group commit.
	dp, err := b.startDaemon("jobs-power", laneConfig{runners: 2, slots: 16, finishedJobs: 1000, durability: "power"}.toml())
	if err != nil {
		return err
	}
	defer dp.stop()
	if _, err := closedLoop(4, b.load(500*time.Millisecond), orchJobWorker(dp)); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := measureJobs(b, dp, "durability power, ", levels, pick(b, 4, 1), dur); err != nil {
		return err
	}
	return dp.stop()
}

// measureJobs runs trivial jobs through d at each concurrency, paired with
// the exec loop, and adds the rows; label prefixes the metrics ("" for the
// default daemon, which carries the targets).
func measureJobs(b *bench, d *daemon, label string, levels []int, trials int, dur time.Duration) error {
	key := strings.NewReplacer(",", "", " ", "_", "=", "_").Replace(label)
	type series struct{ orch, base []measured }
	res := map[int]*series{}
	none := func() []int { return nil }
	// The CPU orchestrd spends on a job (the daemon and its runners, the
	// job's own process not included): what the exec loop does not pay.
	servers := func() []int {
		ps := []int{d.pid()}
		if c, err := d.dial(); err == nil {
			if ls, err := laneList(c); err == nil {
				for _, l := range ls {
					for _, r := range l.Runners {
						ps = append(ps, r.Pid)
					}
				}
			}
			c.Close()
		}
		return ps
	}
	for _, c := range levels {
		o, e, err := paired(trials,
			func() (measured, error) { return trial(servers, c, dur, orchJobWorker(d)) },
			func() (measured, error) { return trial(none, c, dur, execTrueWorker) })
		if err != nil {
			return fmt.Errorf("concurrency %d: %w", c, err)
		}
		res[c] = &series{o, e}
		b.debugf("jobs c=%d: orchestrd %v /s, exec loop %v /s", c, rates(o), rates(e))
	}
	for _, c := range levels {
		s := res[c]
		st := b.pairSamples(fmt.Sprintf("jobs."+key+"c%d.", c), "jobs/s", s.orch, s.base,
			"orchestrd_jobs_per_s", "exec_loop_jobs_per_s", "orchestrd_latency_ms", "exec_loop_latency_ms")
		row := rateRow(fmt.Sprintf(label+"c=%d: throughput (median of trials; ratio: median of paired trials)", c), "jobs/s", "jobs",
			st.rate, st.baseRate, st.ratio, " (exec loop)")
		if c == 32 && label == "" {
			row.Target, row.Met = "≥ 85% of baseline", boolp(st.ratio.P50 >= 0.85)
		}
		b.add(row)
		ol, bl := st.rtt, st.baseRtt
		ratio, rv := fmtRatio(ol.P50, bl.P50)
		row = Row{Metric: fmt.Sprintf(label+"c=%d: latency p50", c), N: ol.N, Orchestrd: fmtMs(ol.P50), Value: ol.P50, Unit: "ms",
			Baseline: fmtMs(bl.P50) + " (exec loop)", BaselineValue: floatp(bl.P50), BaselineN: bl.N, Ratio: ratio, RatioValue: rv}
		if c == 1 && label == "" {
			row.Target, row.Met = "≤ 1.5x baseline", boolp(ol.P50 <= 1.5*bl.P50)
		}
		b.add(row)
		ratio, rv = fmtRatio(ol.P99, bl.P99)
		b.add(Row{Metric: fmt.Sprintf(label+"c=%d: latency p99", c), N: ol.N, Orchestrd: fmtMs(ol.P99), Value: ol.P99, Unit: "ms",
			Baseline: fmtMs(bl.P99) + " (exec loop)", BaselineValue: floatp(bl.P99), BaselineN: bl.N, Ratio: ratio, RatioValue: rv})
		if cpu := cpuPerOp(s.orch); !math.IsNaN(cpu) {
			b.add(Row{Metric: fmt.Sprintf(label+"c=%d: CPU per job, daemon and runners (not the job's process)", c), N: len(s.orch),
				Orchestrd: fmt.Sprintf("%.0f µs", cpu), Value: cpu, Unit: "µs"})
		}
	}
	return nil
}

// measured is one trial of a closed loop plus the CPU its server used.
type measured struct {
	loadResult
	cpu time.Duration // of the server process(es) during the trial
}

// cpuOf returns the total CPU time of pids (0 for a process that is gone).
func cpuOf(pids []int) time.Duration {
	var t time.Duration
	for _, p := range pids {
		c, _ := procCPU(p)
		t += c
	}
	return t
}

// trial runs one closed loop and charges it the CPU used by pids.
func trial(pids func() []int, conc int, dur time.Duration, w func() (func() error, func(), error)) (measured, error) {
	ps := pids()
	c0 := cpuOf(ps)
	r, err := closedLoop(conc, dur, w)
	if err != nil {
		return measured{}, err
	}
	return measured{loadResult: r, cpu: cpuOf(ps) - c0}, nil
}

// paired runs a and b trials times each, alternating ABBA so that drift on
// a shared machine hits both alike, and returns the results in trial order.
func paired(trials int, a, b func() (measured, error)) (as, bs []measured, err error) {
	for t := 0; t < trials; t++ {
		first, second := a, b
		if t%2 == 1 {
			first, second = b, a
		}
		r1, err := first()
		if err != nil {
			return nil, nil, err
		}
		r2, err := second()
		if err != nil {
			return nil, nil, err
		}
		if t%2 == 1 {
			r1, r2 = r2, r1
		}
		as, bs = append(as, r1), append(bs, r2)
	}
	return as, bs, nil
}

// pairRatios returns a[i].rate()/b[i].rate() for each pair.
func pairRatios(a, b []measured) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i].rate() / b[i].rate()
	}
	return out
}

func rates(ms []measured) []float64 {
	out := make([]float64, len(ms))
	for i, m := range ms {
		out[i] = m.rate()
	}
	return out
}

func latencies(ms []measured) []time.Duration {
	var out []time.Duration
	for _, m := range ms {
		out = append(out, m.lat...)
	}
	return out
}

// cpuPerOp is the server CPU per operation over all trials, in µs.
func cpuPerOp(ms []measured) float64 {
	var cpu time.Duration
	ops := 0
	for _, m := range ms {
		cpu += m.cpu
		ops += m.ops
	}
	if ops == 0 {
		return math.NaN()
	}
	return float64(cpu) / float64(time.Microsecond) / float64(ops)
}
