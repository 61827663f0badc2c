package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// A finished job's output lives in the state store, not in the daemon's
// memory (issue 25): the daemon's RSS after 200 finished jobs of 1 MiB of
// output each (20 in a quick run) against its RSS before them, and job.get of such a job, from
// the store (the oldest) and from the small cache of recent ones (the
// newest), against job.get of a finished job without output.
const (
	finishedJobs    = 200
	finishedOutput  = 1 << 20
	finishedGrowth  = 16 << 20 // the target, bytes
	finishedGetMsOK = 2.0
)

func measureFinishedOutput(b *bench) error {
	d, c, err := b.startDialed("store-finished", laneConfig{runners: 1, slots: 4}.toml())
	if err != nil {
		return err
	}
	defer d.stop()
	defer c.Close()
	big := fmt.Sprintf("yes 'orchbench output line of text' | head -c %d", finishedOutput)
	run := func(command string) (string, error) {
		var sub struct {
			JobID string `json:"job_id"`
		}
		if err := call(c, "job.submit", map[string]any{"lane": "bench", "command": command}, &sub); err != nil {
			return "", fmt.Errorf("job.submit: %w", err)
		}
		var w struct {
			Job struct {
				State       string `json:"state"`
				OutputBytes int64  `json:"output_bytes"`
			} `json:"job"`
		}
		if err := call(c, "job.wait", map[string]any{"id": sub.JobID}, &w); err != nil {
			return "", fmt.Errorf("job.wait %s: %w", sub.JobID, err)
		}
		if w.Job.State != "succeeded" {
			return "", fmt.Errorf("job %s (%s) ended %s", sub.JobID, command, w.Job.State)
		}
		return sub.JobID, nil
	}
	// Warm: a job's first costs, the heap a 1 MiB job's work grows to, the
	// cache of finished jobs full.
	for range 8 {
		if _, err := run(big); err != nil {
			return err
		}
	}
	empty, err := run("true")
	if err != nil {
		return err
	}
	settle := pick(b, 10*time.Second, time.Second)
	before, err := quietRSS(d.pid(), settle)
	if err != nil {
		return err
	}
	var ids []string
	jobs := pick(b, finishedJobs, 20)
	for range jobs {
		id, err := run(big)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	after, err := quietRSS(d.pid(), settle)
	if err != nil {
		return err
	}
	growth := after - before
	b.add(Row{Metric: fmt.Sprintf("daemon RSS growth after %d finished jobs of 1 MiB output each", jobs), N: jobs,
		Orchestrd: fmtBytes(float64(growth)), Value: float64(growth) / (1 << 20), Unit: "MiB",
		Baseline: fmtBytes(float64(before)) + " (its RSS before them)", BaselineValue: floatp(float64(before) / (1 << 20)),
		Target: "≤ 16 MiB", Met: boolp(growth <= finishedGrowth),
		Note: fmt.Sprintf("RSS read once it stopped falling for %s (at most %s)", settle/4, settle)})

	n := pick(b, 200, 10)
	base, err := timeGets(d.sock, empty, n, 0)
	if err != nil {
		return err
	}
	bs := b.sample("store.job_get_empty_ms", base, "ms")
	for _, g := range []struct{ name, id, from string }{
		{"store.job_get_1mib_store_ms", ids[0], "the state store (the oldest)"},
		{"store.job_get_1mib_cache_ms", ids[len(ids)-1], "the cache of finished jobs (the newest)"},
	} {
		xs, err := timeGets(d.sock, g.id, n, finishedOutput)
		if err != nil {
			return err
		}
		s := b.sample(g.name, xs, "ms")
		for _, p := range []struct {
			name  string
			v, bv float64
		}{{"p50", s.P50, bs.P50}, {"p99", s.P99, bs.P99}} {
			ratio, rv := fmtRatio(p.v, p.bv)
			b.add(Row{Metric: fmt.Sprintf("job.get of a finished job with 1 MiB of output, from %s, %s", g.from, p.name), N: s.N,
				Orchestrd: fmtMs(p.v), Value: p.v, Unit: "ms", Baseline: fmtMs(p.bv) + " (job.get of one without output)",
				BaselineValue: floatp(p.bv), BaselineN: bs.N, Ratio: ratio, RatioValue: rv,
				Target: "< 2 ms", Met: boolp(p.v < finishedGetMsOK), Note: "through the control socket: request written to the answer's last byte read, not decoded"})
		}
	}
	return nil
}

// timeGets times n job.get calls of job id, whose output must be want
// bytes, in milliseconds: from the request's write to the answer's last
// byte, on a raw connection that does not decode it (the daemon's cost
// and the socket's, not a client's JSON decoder's).
func timeGets(sock, id string, n, want int) ([]float64, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rc := &rawConn{c: c, br: bufio.NewReaderSize(c, 4<<20)}
	params, _ := json.Marshal(map[string]string{"id": id})
	xs := make([]float64, 0, n)
	for range n {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		start := time.Now()
		line, err := rc.call("job.get", string(params))
		took := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("job.get %s: %w", id, err)
		}
		if len(line) < want || bytes.Contains(line[:min(len(line), 100)], []byte(`"error"`)) {
			return nil, fmt.Errorf("job.get %s: %d bytes, without its %d bytes of output", id, len(line), want)
		}
		xs = append(xs, float64(took.Microseconds())/1000)
	}
	return xs, nil
}

// quietRSS reads a process's RSS once it has stopped falling (the garbage
// collector and the scavenger giving memory back) for a quarter of settle,
// or after settle.
func quietRSS(pid int, settle time.Duration) (int64, error) {
	low, err := procRSS(pid)
	if err != nil {
		return 0, err
	}
	quiet := time.Now()
	for deadline := time.Now().Add(settle); time.Now().Before(deadline) && time.Since(quiet) < settle/4; {
		time.Sleep(100 * time.Millisecond)
		v, err := procRSS(pid)
		if err != nil {
			return 0, err
		}
		if v < low {
			low, quiet = v, time.Now()
		}
	}
	return low, nil
}
