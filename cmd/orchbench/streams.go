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

	// Throughput: run into /dev/null, against the same bytes through as
	// many process hops over plain pipes and sockets (job → runner → daemon
	// → client: head | cat over a pipe, two unix sockets between three
	// cats), and head alone. Trials alternate ABBA; the ratio is the median
	// of the paired ratios. The daemon's CPU is charged per MiB moved.
	n := pick(b, int64(512<<20), int64(16<<20))
	trials := pick(b, 3, 1)
	var runs, relays, heads, pairs, cpus, clientCPUs []float64
	runOnce := func() error {
		c0, _ := procCPU(d.pid())
		t, cc, err := timedCPU(b.bin, "run", "--home", d.run.Home, "--lane", "bench", "--no-stdin", "--", "head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
		if err != nil {
			return fmt.Errorf("run into /dev/null: %w", err)
		}
		c1, _ := procCPU(d.pid())
		runs = append(runs, float64(n)/t.Seconds())
		cpus = append(cpus, float64(c1-c0)/float64(n>>20))
		clientCPUs = append(clientCPUs, float64(cc)/float64(n>>20))
		return nil
	}
	relayOnce := func() error {
		t, err := relayed(n)
		if err != nil {
			return fmt.Errorf("relay baseline: %w", err)
		}
		relays = append(relays, float64(n)/t.Seconds())
		return nil
	}
	for i := range trials {
		first, second := runOnce, relayOnce
		if i%2 == 1 {
			first, second = relayOnce, runOnce
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
		pairs = append(pairs, runs[len(runs)-1]/relays[len(relays)-1])
		t, err := timed("head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
		if err != nil {
			return err
		}
		heads = append(heads, float64(n)/t.Seconds())
	}
	r, rl, h, pr, cpu := median(sorted(runs)), median(sorted(relays)), median(sorted(heads)), median(sorted(pairs)), median(sorted(cpus))
	const target = 0.40
	b.add(Row{Metric: fmt.Sprintf("`run -- head -c %s /dev/zero > /dev/null` (median of %d; ratio: median of paired trials)", fmtBytes(float64(n)), trials), N: trials,
		Orchestrd: fmt.Sprintf("%.0f MB/s", r/1e6), Value: r, Unit: "B/s",
		Baseline: fmt.Sprintf("%.0f MB/s (head | cat, cat, cat over a pipe and two unix sockets)", rl/1e6), BaselineValue: &rl,
		Ratio: fmt.Sprintf("%.0f%%", 100*pr), RatioValue: floatp(pr),
		Target: "≥ 1 GB/s or ≥ 40% of baseline", Met: boolp(r >= 1e9 || pr >= target)})
	ratio, rv := fmtRatio(r, h)
	b.add(Row{Metric: "… against head alone", N: trials,
		Orchestrd: fmt.Sprintf("%.0f MB/s", r/1e6), Value: r, Unit: "B/s",
		Baseline: fmt.Sprintf("%.0f MB/s (head alone)", h/1e6), BaselineValue: &h, Ratio: ratio, RatioValue: rv})
	b.add(Row{Metric: "… daemon CPU per MiB moved", N: trials,
		Orchestrd: fmt.Sprintf("%.0f µs", cpu/1e3), Value: cpu / 1e9, Unit: "s"})
	ccpu := median(sorted(clientCPUs))
	b.add(Row{Metric: "… client (`orchestrd run`) CPU per MiB moved", N: trials,
		Orchestrd: fmt.Sprintf("%.0f µs", ccpu/1e3), Value: ccpu / 1e9, Unit: "s"})
	return nil
}

func sorted(xs []float64) []float64 { sort.Float64s(xs); return xs }

// relayed moves n bytes from head through three cat relays: head writes a
// pipe (the job's stdout) to the first (the runner), which writes a unix
// socket to the second (the daemon), which writes a unix socket to the
// third (the client), which writes /dev/null. It returns the wall time from
// the first start to the last exit.
func relayed(n int64) (time.Duration, error) {
	a, err := socketPair()
	if err != nil {
		return 0, err
	}
	bb, err := socketPair()
	if err != nil {
		a[0].Close()
		a[1].Close()
		return 0, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	head := exec.Command("head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
	head.Stdout = pw
	c1 := exec.Command("cat")
	c1.Stdin, c1.Stdout = pr, a[0]
	c2 := exec.Command("cat")
	c2.Stdin, c2.Stdout = a[1], bb[0]
	c3 := exec.Command("cat")
	c3.Stdin, c3.Stdout = bb[1], null
	cmds := []*exec.Cmd{c3, c2, c1, head}
	t0 := time.Now()
	var started []*exec.Cmd
	for _, c := range cmds {
		if err = c.Start(); err != nil {
			break
		}
		started = append(started, c)
	}
	// Only the children hold the ends now: each sees EOF when its writer exits.
	for _, f := range []*os.File{pr, pw, a[0], a[1], bb[0], bb[1]} {
		f.Close()
	}
	var werr error
	for _, c := range started {
		if e := c.Wait(); e != nil && werr == nil {
			werr = e
		}
	}
	if err != nil {
		return 0, err
	}
	return time.Since(t0), werr
}

// socketPair is a connected pair of unix stream sockets.
func socketPair() ([2]*os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return [2]*os.File{}, err
	}
	return [2]*os.File{os.NewFile(uintptr(fds[0]), "relay0"), os.NewFile(uintptr(fds[1]), "relay1")}, nil
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

// timedCPU is timed that also returns the command's CPU time (user and
// system, its own and its waited-for children's).
func timedCPU(name string, args ...string) (time.Duration, time.Duration, error) {
	cmd := exec.Command(name, args...)
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, 0, err
	}
	defer null.Close()
	cmd.Stdout = null
	var errOut strings.Builder
	cmd.Stderr = &errOut
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("%s: %w: %s", name, err, errOut.String())
	}
	if errOut.Len() > 0 {
		return 0, 0, errors.New(errOut.String())
	}
	return time.Since(t0), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
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
