package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/wire"
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

	// Throughput: run into /dev/null, /execute/stream in the binary
	// framing and logs -f, each against the same bytes through as many
	// process hops over plain pipes and sockets (job → runner → daemon →
	// client: head | cat over a pipe, two unix sockets between three
	// cats), and head alone. Trials alternate ABBA (the relay first, then
	// the three; then the three, then the relay); a ratio is the median of
	// the paired ratios. The daemon's CPU is charged per MiB moved.
	n := pick(b, int64(512<<20), int64(16<<20))
	trials := pick(b, 3, 1)
	type way struct {
		name   string
		metric string
		once   func() (time.Duration, time.Duration, error) // wall, client CPU (0: not measured)
		// toReader: its client writes a pipe orchbench reads, not
		// /dev/null; its baseline's last cat does too (a hop more).
		toReader bool
		// tcp: its last hop is TCP on loopback; also compared with the
		// relay whose last hop is too (tcpPairs).
		tcp      bool
		tcpPairs []float64
		rates    []float64
		pairs    []float64
		cpus     []float64
		runner   []float64
		client   []float64
	}
	ways := []*way{
		{name: "run", metric: fmt.Sprintf("`run -- head -c %s /dev/zero > /dev/null`", fmtBytes(float64(n))),
			once: func() (time.Duration, time.Duration, error) {
				return timedCPU(b.bin, "run", "--home", d.run.Home, "--lane", "bench", "--no-stdin", "--", "head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
			}},
		{name: "http", metric: fmt.Sprintf("POST /execute/stream of `head -c %s /dev/zero`, binary frames (Accept: %s), read by a Go client", fmtBytes(float64(n)), wire.ExecStreamType),
			once: func() (time.Duration, time.Duration, error) {
				t, err := execStreamFrames(addr, key, n)
				return t, 0, err
			}, tcp: true},
		{name: "logs", metric: fmt.Sprintf("`logs -f` of a job writing `head -c %s /dev/zero`, into a pipe read at full speed", fmtBytes(float64(n))),
			once: func() (time.Duration, time.Duration, error) { return logsFollowed(b, d, n) }, toReader: true},
	}
	var relays, readRelays, tcpRelays, heads []float64
	relayOnce := func() error {
		t, err := relayed(n, false, false)
		if err != nil {
			return fmt.Errorf("relay baseline: %w", err)
		}
		relays = append(relays, float64(n)/t.Seconds())
		if t, err = relayed(n, true, false); err != nil {
			return fmt.Errorf("relay baseline into a pipe: %w", err)
		}
		readRelays = append(readRelays, float64(n)/t.Seconds())
		// Not a target's baseline: how much of /execute/stream's ratio is
		// its last hop being TCP on loopback, not a unix socket.
		if t, err = relayed(n, false, true); err != nil {
			return fmt.Errorf("relay baseline over TCP: %w", err)
		}
		tcpRelays = append(tcpRelays, float64(n)/t.Seconds())
		return nil
	}
	wayOnce := func(w *way) error {
		c0, _ := procCPU(d.pid())
		r0 := runnersCPU(d.pid())
		t, cc, err := w.once()
		if err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		c1, _ := procCPU(d.pid())
		r1 := runnersCPU(d.pid())
		w.rates = append(w.rates, float64(n)/t.Seconds())
		w.cpus = append(w.cpus, float64(c1-c0)/float64(n>>20))
		w.runner = append(w.runner, float64(r1-r0)/float64(n>>20))
		if cc > 0 {
			w.client = append(w.client, float64(cc)/float64(n>>20))
		}
		return nil
	}
	for i := range trials {
		if i%2 == 0 {
			if err := relayOnce(); err != nil {
				return err
			}
		}
		for _, w := range ways {
			if err := wayOnce(w); err != nil {
				return err
			}
		}
		if i%2 == 1 {
			if err := relayOnce(); err != nil {
				return err
			}
		}
		for _, w := range ways {
			base := relays
			if w.toReader {
				base = readRelays
			}
			w.pairs = append(w.pairs, w.rates[len(w.rates)-1]/base[len(base)-1])
			if w.tcp {
				w.tcpPairs = append(w.tcpPairs, w.rates[len(w.rates)-1]/tcpRelays[len(tcpRelays)-1])
			}
		}
		t, err := timed("head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
		if err != nil {
			return err
		}
		heads = append(heads, float64(n)/t.Seconds())
	}
	rl, rlr, h := median(sorted(relays)), median(sorted(readRelays)), median(sorted(heads))
	const target = 0.40
	for i, w := range ways {
		r, pr, cpu := median(sorted(w.rates)), median(sorted(w.pairs)), median(sorted(w.cpus))
		base, baseText := rl, "%.0f MB/s (head | cat, cat, cat over a pipe and two unix sockets)"
		if w.toReader {
			base, baseText = rlr, "%.0f MB/s (head | cat, cat, cat over a pipe and two unix sockets, into a pipe read at full speed)"
		}
		b.add(Row{Metric: fmt.Sprintf("%s (median of %d; ratio: median of paired trials)", w.metric, trials), N: trials,
			Orchestrd: fmt.Sprintf("%.0f MB/s", r/1e6), Value: r, Unit: "B/s",
			Baseline: fmt.Sprintf(baseText, base/1e6), BaselineValue: &base,
			Ratio: fmt.Sprintf("%.0f%% (paired: %s)", 100*pr, pctList(w.pairs)), RatioValue: floatp(pr),
			Target: "≥ 1 GB/s or ≥ 40% of baseline", Met: boolp(r >= 1e9 || pr >= target)})
		if i == 0 {
			ratio, rv := fmtRatio(r, h)
			b.add(Row{Metric: "… against head alone", N: trials,
				Orchestrd: fmt.Sprintf("%.0f MB/s", r/1e6), Value: r, Unit: "B/s",
				Baseline: fmt.Sprintf("%.0f MB/s (head alone)", h/1e6), BaselineValue: &h, Ratio: ratio, RatioValue: rv})
		}
		if w.tcp {
			tb := median(sorted(tcpRelays))
			b.add(Row{Metric: "… against the relay whose last hop is TCP on 127.0.0.1 (not a target: what the unix sockets' baseline asks of TCP)", N: trials,
				Orchestrd: fmt.Sprintf("%.0f MB/s", r/1e6), Value: r, Unit: "B/s",
				Baseline: fmt.Sprintf("%.0f MB/s (head | cat, cat, cat over a pipe, a unix socket and a TCP connection)", tb/1e6), BaselineValue: &tb,
				Ratio: fmt.Sprintf("%.0f%% (paired: %s)", 100*median(sorted(w.tcpPairs)), pctList(w.tcpPairs)), RatioValue: floatp(median(sorted(w.tcpPairs)))})
		}
		b.add(Row{Metric: "… daemon CPU per MiB moved", N: trials,
			Orchestrd: fmt.Sprintf("%.0f µs", cpu/1e3), Value: cpu / 1e9, Unit: "s"})
		rcpu := median(sorted(w.runner))
		b.add(Row{Metric: "… runner CPU per MiB moved (the lane's runner, not its job)", N: trials,
			Orchestrd: fmt.Sprintf("%.0f µs", rcpu/1e3), Value: rcpu / 1e9, Unit: "s"})
		if len(w.client) > 0 {
			ccpu := median(sorted(w.client))
			b.add(Row{Metric: fmt.Sprintf("… client (`orchestrd %s`) CPU per MiB moved", w.name), N: trials,
				Orchestrd: fmt.Sprintf("%.0f µs", ccpu/1e3), Value: ccpu / 1e9, Unit: "s"})
		}
	}
	return nil
}

// pctList is ratios as percentages, in trial order.
func pctList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f%%", 100*x)
	}
	return strings.Join(parts, ", ")
}

// execStreamFrames runs head -c n /dev/zero through POST /execute/stream
// in the binary framing and reads it to its exit frame: the wall time from
// the request to the last frame, an error unless n bytes came and the
// command exited 0.
func execStreamFrames(addr, key string, n int64) (time.Duration, error) {
	body := fmt.Sprintf(`{"command":"head","args":["-c","%d","/dev/zero"],"timeout":600000}`, n)
	req, err := http.NewRequest("POST", "http://"+addr+"/api/v1/execute/stream", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", wire.ExecStreamType)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != wire.ExecStreamType {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("/execute/stream: %s %q", resp.Status, b)
	}
	fr := wire.NewExecFrameReader(resp.Body, 16<<20)
	var got int64
	for {
		kind, p, err := fr.Next()
		if err != nil {
			return 0, fmt.Errorf("/execute/stream after %d bytes: %w", got, err)
		}
		switch kind {
		case wire.ExecStdout:
			got += int64(len(p))
		case wire.ExecExit:
			if got != n || !strings.Contains(string(p), `"data":"0"`) {
				return 0, fmt.Errorf("/execute/stream: %d of %d bytes, exit %s", got, n, p)
			}
			return time.Since(t0), nil
		default:
			return 0, fmt.Errorf("/execute/stream: frame %q %q", kind, p)
		}
	}
}

// logsFollowed submits a job that says it is ready, waits for a file, then
// writes n bytes, and follows it with logs -f into a pipe: once logs -f
// has printed the first line (it is attached) the file is made; the wall
// time from then to logs -f's exit, its CPU, an error unless every byte
// came and it exited 0.
func logsFollowed(b *bench, d *daemon, n int64) (time.Duration, time.Duration, error) {
	gate := filepath.Join(b.tmp, "logs-gate") // not in the home: jobs do not see it
	_ = os.Remove(gate)
	c, err := d.dial()
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	var sub struct {
		JobID string `json:"job_id"`
	}
	spec := map[string]any{"lane": "bench", "argv": []string{"sh", "-c",
		`echo ready; while [ ! -e "$1" ]; do sleep 0.005; done; exec head -c "$2" /dev/zero`, "sh", gate, strconv.FormatInt(n, 10)}}
	if err := c.Call(context.Background(), "job.submit", spec, &sub); err != nil {
		return 0, 0, fmt.Errorf("job.submit: %w", err)
	}
	cmd := exec.Command(b.bin, "logs", "--home", d.run.Home, "-f", sub.JobID)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	first := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(out, first); err != nil || string(first) != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, 0, fmt.Errorf("logs -f began %q: %v (%s)", first, err, errOut.String())
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	got, _ := io.CopyBuffer(io.Discard, out, make([]byte, 256<<10))
	if err := cmd.Wait(); err != nil || got != n {
		return 0, 0, fmt.Errorf("logs -f: %d of %d bytes: %v (%s)", got, n, err, errOut.String())
	}
	return time.Since(t0), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

func sorted(xs []float64) []float64 { sort.Float64s(xs); return xs }

// relayed moves n bytes from head through three cat relays: head writes a
// pipe (the job's stdout) to the first (the runner), which writes a unix
// socket to the second (the daemon), which writes a unix socket to the
// third (the client), which writes /dev/null, or with toReader a pipe this
// process reads at full speed (as logs -f's row reads its client). It
// returns the wall time from the first start to the last exit (and the
// last byte read).
func relayed(n int64, toReader, tcpLast bool) (time.Duration, error) {
	a, err := socketPair()
	if err != nil {
		return 0, err
	}
	pair := socketPair
	if tcpLast {
		pair = tcpPair
	}
	bb, err := pair()
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
	read := make(chan int64, 1)
	var rr, rw *os.File
	if toReader {
		if rr, rw, err = os.Pipe(); err != nil {
			return 0, err
		}
		defer rr.Close()
		c3.Stdout = rw
	}
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
	if toReader {
		rw.Close()
		go func() {
			got, _ := io.CopyBuffer(io.Discard, rr, make([]byte, 256<<10))
			read <- got
		}()
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
	if toReader {
		if got := <-read; got != n && werr == nil {
			werr = fmt.Errorf("the relay's reader got %d of %d bytes", got, n)
		}
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

// tcpPair is a connected pair of TCP sockets on 127.0.0.1 (blocking, as
// a cat's stdin and stdout are).
func tcpPair() ([2]*os.File, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return [2]*os.File{}, err
	}
	defer ln.Close()
	c0, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		return [2]*os.File{}, err
	}
	defer c0.Close()
	c1, err := ln.AcceptTCP()
	if err != nil {
		return [2]*os.File{}, err
	}
	defer c1.Close()
	f0, err := c0.File()
	if err != nil {
		return [2]*os.File{}, err
	}
	f1, err := c1.File()
	if err != nil {
		f0.Close()
		return [2]*os.File{}, err
	}
	return [2]*os.File{f0, f1}, nil
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
	wall, _, err := timedCPU(name, args...)
	return wall, err
}

// timedCPU runs a command with its stdout to /dev/null and returns its
// wall time and its CPU time (user and system, its own and its waited-for
// children's).
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

// runnersCPU is the CPU time of the daemon's children (the bench lane's
// runner; its jobs are the runner's children, not counted).
func runnersCPU(daemon int) time.Duration {
	var total time.Duration
	for _, p := range children(daemon) {
		if c, err := procCPU(p); err == nil {
			total += c
		}
	}
	return total
}
