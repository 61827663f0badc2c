package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// runStreams is scenario 13: a job's output is flow-controlled to the
// readers that must not lose bytes. A 2 GB job for each of three
// /execute/stream clients that never read, and one `orchestrd run` of the
// same into a pipe read slowly: the daemon's RSS above idle stays flat and
// the slow reader gets every byte at its own pace. Then the throughput of
// `run` into /dev/null against `head` alone.
func runStreams(b *bench) error {
	size := pick(b, int64(2<<30), int64(256<<20))
	hold := pick(b, 20*time.Second, 2*time.Second)
	cfg := laneConfig{runners: 1, slots: 8, finishedJobs: 100}.toml() +
		"\n[http]\nlisten = \"127.0.0.1:0\"\nexec_lane = \"bench\"\n[http.rate_limits]\nexec = 0\n"
	d, addr, key, err := b.startHTTP("streams", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	fresh, err := procRSS(d.pid())
	if err != nil {
		return err
	}
	// Warm: a job's first costs, and the heap the garbage collector lets a
	// stream's work grow to, are not what stalled readers hold.
	if _, err := timed(b.bin, "run", "--home", d.run.Home, "--lane", "bench", "--no-stdin", "--", "head", "-c", "33554432", "/dev/zero"); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	idle, err := procRSS(d.pid())
	if err != nil {
		return err
	}

	// Three /execute/stream clients that read their headers, then nothing.
	for range 3 {
		c, err := stalledStream(addr, key, size)
		if err != nil {
			return err
		}
		defer c.Close()
	}
	// One run into a pipe read at about 8 MB/s.
	run := exec.Command(b.bin, "run", "--home", d.run.Home, "--lane", "bench", "--no-stdin", "--",
		"head", "-c", strconv.FormatInt(size, 10), "/dev/zero")
	out, err := run.StdoutPipe()
	if err != nil {
		return err
	}
	if err := run.Start(); err != nil {
		return err
	}
	var got atomic.Int64
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 64<<10)
		for {
			n, err := out.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
			time.Sleep(8 * time.Millisecond)
		}
	}()
	var peak int64
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) {
		if rss, err := procRSS(d.pid()); err == nil {
			peak = max(peak, rss)
		}
		time.Sleep(50 * time.Millisecond)
	}
	delivered := got.Load()
	hwm := procHWM(d.pid())
	_ = run.Process.Signal(syscall.SIGINT) // cancels its job
	_ = run.Wait()
	<-readDone

	growth := peak - idle
	const bound = 32 << 20
	b.add(Row{Metric: fmt.Sprintf("daemon RSS above idle: %s jobs, 3 stalled /execute/stream clients and a run read at ~8 MB/s, over %s",
		fmtBytes(float64(size)), hold),
		Orchestrd: fmtBytes(float64(growth)), Value: float64(growth), Unit: "bytes",
		Note: fmt.Sprintf("idle %s after one run of 32 MiB at full speed (%s before any), peak %s (VmHWM %s)",
			fmtBytes(float64(idle)), fmtBytes(float64(fresh)), fmtBytes(float64(peak)), fmtBytes(float64(hwm))),
		Target: "≤ 32 MiB", Met: boolp(growth <= bound)})
	b.add(Row{Metric: "… bytes the slow run reader got, all in order", Orchestrd: fmt.Sprintf("%s (%.1f MB/s)",
		fmtBytes(float64(delivered)), float64(delivered)/hold.Seconds()/1e6), Value: float64(delivered), Unit: "bytes"})

	// Throughput: run into /dev/null, against head alone.
	n := pick(b, int64(512<<20), int64(16<<20))
	trials := pick(b, 3, 1)
	var runs, heads []float64
	for range trials {
		t, err := timed(b.bin, "run", "--home", d.run.Home, "--lane", "bench", "--no-stdin", "--", "head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
		if err != nil {
			return fmt.Errorf("run into /dev/null: %w", err)
		}
		runs = append(runs, float64(n)/t.Seconds())
		t, err = timed("head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
		if err != nil {
			return err
		}
		heads = append(heads, float64(n)/t.Seconds())
	}
	sort.Float64s(runs)
	sort.Float64s(heads)
	r, h := median(runs), median(heads)
	ratio, rv := fmtRatio(r, h)
	b.add(Row{Metric: fmt.Sprintf("`run -- head -c %s /dev/zero > /dev/null` (median of %d)", fmtBytes(float64(n)), trials), N: trials,
		Orchestrd: fmt.Sprintf("%.0f MB/s", r/1e6), Value: r, Unit: "B/s",
		Baseline: fmt.Sprintf("%.0f MB/s (head alone)", h/1e6), BaselineValue: &h, Ratio: ratio, RatioValue: rv})
	return nil
}

// stalledStream starts an /execute/stream of head -c size /dev/zero and
// reads its response's headers, then nothing.
func stalledStream(addr, key string, size int64) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	body := fmt.Sprintf(`{"command":"head","args":["-c","%d","/dev/zero"],"timeout":600000}`, size)
	fmt.Fprintf(c, "POST /api/v1/execute/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		key, len(body), body)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReaderSize(c, 1)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		c.Close()
		return nil, fmt.Errorf("stream: %q %v", status, err)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, err
		}
		if l == "\r\n" {
			break
		}
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}

// timed runs a command with its stdout to /dev/null and times it.
func timed(name string, args ...string) (time.Duration, error) {
	cmd := exec.Command(name, args...)
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	cmd.Stdout = null
	var errOut strings.Builder
	cmd.Stderr = &errOut
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", name, err, errOut.String())
	}
	if errOut.Len() > 0 {
		return 0, errors.New(errOut.String())
	}
	return time.Since(t0), nil
}

// procHWM is a process's peak RSS (VmHWM), 0 if unknown.
func procHWM(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
