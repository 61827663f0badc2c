package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	loopsy "github.com/orchestrd/orchestrd/daemon/httpapi/client"
)

// runHTTP: Loopsy's HTTP API. POST /execute of `true` through lane bench
// at 1 and 16 clients against the control socket's own job.submit +
// job.wait on the same daemon (paired trials; the target is >= 70 %);
// context PUT and GET per second; the time from sending POST
// /execute/stream to its first output event.
func runHTTP(b *bench) error {
	trials := pick(b, 6, 1)
	dur := b.load(time.Second)
	cfg := laneConfig{runners: 2, slots: 16, finishedJobs: 1000}.toml() +
		"\n[http]\nlisten = \"127.0.0.1:0\"\nexec_lane = \"bench\"\nmax_concurrent = 64\n[http.rate_limits]\nexec = 0\ncontext = 0\n"
	d, addr, key, err := b.startHTTP("http", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	api := loopsy.New("http://"+addr+"/api/v1", key, false)

	execute := func() (func() error, func(), error) {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := api.Execute(ctx, loopsy.Exec{Command: "true"})
			if err == nil && (r.ExitCode == nil || *r.ExitCode != 0) {
				err = fmt.Errorf("job %s: exit %v, killed %v", r.JobID, r.ExitCode, r.Killed)
			}
			return err
		}, func() {}, nil
	}
	for _, w := range []func() (func() error, func(), error){execute, orchJobWorker(d)} {
		if _, err := closedLoop(4, b.load(200*time.Millisecond), w); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	pids := func() []int { return append([]int{d.pid()}, children(d.pid())...) }
	for _, c := range []int{1, 16} {
		o, e, err := paired(trials,
			func() (measured, error) { return trial(pids, c, dur, execute) },
			func() (measured, error) { return trial(pids, c, dur, orchJobWorker(d)) })
		if err != nil {
			return fmt.Errorf("execute, %d clients: %w", c, err)
		}
		st := b.pairSamples(fmt.Sprintf("http.c%d.", c), "jobs/s", o, e, "execute_per_s", "job_submit_wait_per_s", "execute_rtt_ms", "job_rtt_ms")
		b.add(rateRow(fmt.Sprintf("%d client(s): POST /execute of `true` (lane bench), jobs/s", c), "jobs/s", "job", st.rate, st.baseRate, st.ratio, " (control socket job.submit + job.wait)"))
		b.last().Target, b.last().Met = "≥ 70% of baseline", boolp(st.ratio.P50 >= 0.70)
		b.add(rttRow(fmt.Sprintf("%d client(s): POST /execute round trip p50 / p99", c), st.rtt, st.baseRtt))
	}

	// Context: each client PUTs (and GETs) its own keys; the baseline is a
	// bare net/http server answering the same requests with a fixed body.
	floor, floorAddr, err := b.startHTTPEcho()
	if err != nil {
		return err
	}
	defer floor.stop()
	floorAPI := loopsy.New("http://"+floorAddr+"/api/v1", "k", false)
	var wid atomic.Int64
	ctxOp := func(api *loopsy.Client, put bool) func() (func() error, func(), error) {
		return func() (func() error, func(), error) {
			w := wid.Add(1)%16 + 1 // at most 16 x 50 keys
			k := 0
			return func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				k++
				key := fmt.Sprintf("/context/bench-%d-%d", w, k%50)
				if put {
					return api.Do(ctx, http.MethodPut, key, map[string]any{"value": "v", "ttl": 3600}, nil)
				}
				return api.Do(ctx, http.MethodGet, fmt.Sprintf("/context/bench-%d-1", w), nil, nil)
			}, func() {}, nil
		}
	}
	for _, c := range []int{1, 16} {
		for _, put := range []bool{true, false} {
			wid.Store(0)
			if !put { // every GET finds its key
				if _, err := closedLoop(16, 100*time.Millisecond, ctxOp(api, true)); err != nil {
					return err
				}
			}
			wid.Store(0)
			ms, fs, err := paired(trials,
				func() (measured, error) { return trial(pids, c, dur, ctxOp(api, put)) },
				func() (measured, error) {
					return trial(func() []int { return []int{floor.pid()} }, c, dur, ctxOp(floorAPI, put))
				})
			if err != nil {
				return fmt.Errorf("context, %d clients: %w", c, err)
			}
			op := "GET"
			note := "answered from memory"
			if put {
				op, note = "PUT", "each committed to the state store before its answer"
			}
			lo := strings.ToLower(op)
			or := b.sample(fmt.Sprintf("http.c%d.context_%s_per_s", c, lo), rates(ms), "requests/s")
			ol := b.sample(fmt.Sprintf("http.c%d.context_%s_rtt_ms", c, lo), durationsMs(latencies(ms)), "ms")
			fr := b.sample(fmt.Sprintf("http.c%d.floor_%s_per_s", c, lo), rates(fs), "requests/s")
			rt := b.sample(fmt.Sprintf("http.c%d.context_%s_ratio", c, lo), pairRatios(ms, fs), "ratio")
			// The server's CPU per request (the daemon's, the baseline's),
			// in the JSON report: where a ratio comes from.
			b.sample(fmt.Sprintf("http.c%d.context_%s_server_cpu_us", c, lo), []float64{cpuPerOp(ms)}, "µs")
			b.sample(fmt.Sprintf("http.c%d.floor_%s_server_cpu_us", c, lo), []float64{cpuPerOp(fs)}, "µs")
			b.add(Row{Metric: fmt.Sprintf("%d client(s): context %s requests/s (%s), p50 / p99; upstream Loopsy: ~2,700 PUT / ~4,700 GET per s", c, op, note),
				N: or.N, Orchestrd: fmtRate(or.P50, "req") + ", " + fmtMs(ol.P50) + " / " + fmtMs(ol.P99), Value: or.P50, Unit: "requests/s",
				Baseline: fmtRate(fr.P50, "req") + " (bare Go net/http, fixed answer)", BaselineValue: floatp(fr.P50), BaselineN: fr.N,
				Ratio: fmt.Sprintf("%.0f%%", 100*rt.P50), RatioValue: floatp(rt.P50)})
		}
	}

	// Time to the first SSE event: request sent -> first stdout chunk.
	n := pick(b, 300, 40)
	var firsts []float64
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t0 := time.Now()
		var first time.Duration
		exit, err := api.Stream(ctx, loopsy.Exec{Command: "echo", Args: []string{"x"}}, nil, func(ev loopsy.Event) {
			if first == 0 && ev.Type == "stdout" {
				first = time.Since(t0)
			}
		})
		cancel()
		if err != nil {
			return fmt.Errorf("stream: %w", err)
		}
		if first == 0 || exit.Data != "0" {
			return fmt.Errorf("stream of echo: no stdout before exit %+v", exit)
		}
		firsts = append(firsts, ms(first))
	}
	fs := b.sample("http.stream_first_event_ms", firsts, "ms")
	b.add(Row{Metric: "POST /execute/stream of `echo x`: request sent to its first output event, p50 / p99", N: fs.N,
		Orchestrd: fmtMs(fs.P50) + " / " + fmtMs(fs.P99), Value: fs.P50, Unit: "ms"})
	return nil
}

// startHTTPEcho starts the bare net/http baseline (echo --http).
func (b *bench) startHTTPEcho() (*echoServer, string, error) {
	cmd := exec.Command(b.echo, "--http")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("the net/http baseline did not start: %q %v", line, err)
	}
	return &echoServer{cmd: cmd}, addr, nil
}
