package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// runClanker: clanker's pod IPC through one repo socket, request round
// trips and requests/s at 1 and 16 clients, each client a connection that
// sends one request line and waits for its answer, against the Go NDJSON
// echo server (the same client code drives both); the same for a request
// that changes state (task_status: committed to the store, the task file
// and events.log written); and the spool's drain rate.
func runClanker(b *bench) error {
	trials := pick(b, 6, 1)
	dur := b.load(time.Second)
	repo := filepath.Join(b.tmp, "clanker-repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		return err
	}
	cfg := fmt.Sprintf("[[clanker.repos]]\npath = %q\nbase_prompt = \"bench\"\n", repo)
	d, err := b.startDaemon("clanker", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	sock := filepath.Join(repo, ".clanker", "ipc.sock")
	echo, err := b.startEcho("clanker-echo")
	if err != nil {
		return err
	}
	defer echo.stop()

	hello := func(path string) func() (func() error, func(), error) {
		return func() (func() error, func(), error) {
			c, err := dialPod(path)
			if err != nil {
				return nil, nil, err
			}
			return func() error { return c.roundTrip("hello", `{"podId":"bench","role":"slave"}`) }, c.close, nil
		}
	}
	for _, s := range []string{sock, echo.sock} {
		if _, err := closedLoop(4, b.load(200*time.Millisecond), hello(s)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	for _, c := range []int{1, 16} {
		o, e, err := paired(trials,
			func() (measured, error) { return trial(func() []int { return []int{d.pid()} }, c, dur, hello(sock)) },
			func() (measured, error) {
				return trial(func() []int { return []int{echo.pid()} }, c, dur, hello(echo.sock))
			})
		if err != nil {
			return fmt.Errorf("hello, %d clients: %w", c, err)
		}
		st := b.pairSamples(fmt.Sprintf("clanker.c%d.", c), "requests/s", o, e, "hello_per_s", "echo_per_s", "hello_rtt_ms", "echo_rtt_ms")
		b.add(rateRow(fmt.Sprintf("%d pod(s): hello requests/s through the repo socket (ratio: median of paired trials)", c), "requests/s", "req", st.rate, st.baseRate, st.ratio, " (Go NDJSON echo)"))
		b.add(rttRow(fmt.Sprintf("%d pod(s): hello round trip p50 / p99", c), st.rtt, st.baseRtt))
	}

	// A request that changes state: each pod moves its own task between
	// running and needs_judge.
	const writers = 16
	for i := range writers {
		c, err := dialPod(sock)
		if err != nil {
			return err
		}
		err = c.roundTrip("task_create", fmt.Sprintf(`{"task":{"id":"bench-%d","prompt":"p","status":"running"}}`, i))
		c.close()
		if err != nil {
			return err
		}
	}
	var wid atomic.Int64
	status := func() (func() error, func(), error) {
		c, err := dialPod(sock)
		if err != nil {
			return nil, nil, err
		}
		w := int(wid.Add(1)-1) % writers
		k := 0
		return func() error {
			k++
			st := "running"
			if k%2 == 1 {
				st = "needs_judge"
			}
			return c.roundTrip("task_status", fmt.Sprintf(`{"taskId":"bench-%d","status":%q}`, w, st))
		}, c.close, nil
	}
	for _, c := range []int{1, 16} {
		wid.Store(0)
		var ms []measured
		for range trials {
			m, err := trial(func() []int { return []int{d.pid()} }, c, dur, status)
			if err != nil {
				return fmt.Errorf("task_status, %d clients: %w", c, err)
			}
			ms = append(ms, m)
		}
		or := b.sample(fmt.Sprintf("clanker.c%d.task_status_per_s", c), rates(ms), "requests/s")
		ol := b.sample(fmt.Sprintf("clanker.c%d.task_status_rtt_ms", c), durationsMs(latencies(ms)), "ms")
		b.add(Row{Metric: fmt.Sprintf("%d pod(s): task_status requests/s (committed to the store, task file and events.log written), p50 / p99", c),
			N: or.N, Orchestrd: fmtRate(or.P50, "req") + ", " + fmtMs(ol.P50) + " / " + fmtMs(ol.P99), Value: or.P50, Unit: "requests/s"})
	}

	// The spool: n task_create lines left while the socket was down,
	// drained by a repo whose tick is 10 ms (the default tick, 1 s with
	// 200 lines a tick as clanker's batch, caps the rate at 200 lines/s).
	n := pick(b, 4000, 600)
	repo2 := filepath.Join(b.tmp, "clanker-spool")
	if err := os.MkdirAll(filepath.Join(repo2, ".clanker"), 0o755); err != nil {
		return err
	}
	var spool bytes.Buffer
	for i := range n {
		fmt.Fprintf(&spool, `{"ts":"2026-01-26T10:00:00.000Z","type":"task_create","payload":{"task":{"id":"s-%d","prompt":"p"}}}`+"\n", i)
	}
	if err := os.WriteFile(filepath.Join(repo2, ".clanker", "ipc-spool.ndjson"), spool.Bytes(), 0o644); err != nil {
		return err
	}
	sub, err := d.subscribe("clanker.spool_drained", "clanker.repo_started")
	if err != nil {
		return err
	}
	defer sub.close()
	c, err := d.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	t0 := time.Now()
	if err := call(c, "clanker.repo_add", map[string]any{"path": repo2, "tick": "10ms"}, nil); err != nil {
		return fmt.Errorf("clanker.repo_add: %w", err)
	}
	applied := 0
	for applied < n {
		e, err := sub.wait(time.Minute, fmt.Sprintf("spool line %d of %d applied", applied+1, n), func(e event) bool {
			return e.kind == "clanker.spool_drained"
		})
		if err != nil {
			return err
		}
		var dr struct {
			Repo    string `json:"repo"`
			Applied int    `json:"applied"`
			Dead    int    `json:"dead"`
		}
		if json.Unmarshal(e.raw, &dr) == nil && dr.Repo == repo2 {
			if dr.Dead > 0 {
				return fmt.Errorf("%d spool lines dead-lettered", dr.Dead)
			}
			applied += dr.Applied
		}
	}
	rate := float64(n) / time.Since(t0).Seconds()
	b.add(Row{Metric: fmt.Sprintf("spool drain: task_create lines applied per second (%d lines, tick 10 ms, 200 a tick; each line committed to the store, its task file written)", n),
		N: n, Orchestrd: fmt.Sprintf("%.0f lines/s", rate), Value: rate, Unit: "lines/s"})
	return d.stop()
}

// podConn is a pod's connection: requests as clanker's client writes
// them, answers checked for the request's id. The echo server sends the
// line back, which carries the same id.
type podConn struct {
	c   net.Conn
	br  *bufio.Reader
	buf []byte
	id  uint64
}

func dialPod(path string) (*podConn, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	return &podConn{c: c, br: bufio.NewReaderSize(c, 16<<10)}, nil
}

func (p *podConn) roundTrip(typ, payload string) error {
	p.id++
	b := append(p.buf[:0], `{"v":1,"id":"`...)
	b = strconv.AppendUint(b, p.id, 10)
	b = append(b, `","type":"`...)
	b = append(b, typ...)
	b = append(b, `","payload":`...)
	b = append(b, payload...)
	b = append(b, "}\n"...)
	p.buf = b
	if _, err := p.c.Write(b); err != nil {
		return err
	}
	line, err := p.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.Contains(line, []byte(`"id":"`+strconv.FormatUint(p.id, 10)+`"`)) {
		return fmt.Errorf("unexpected answer %q", line)
	}
	if bytes.Contains(line, []byte(`"ok":false`)) {
		return fmt.Errorf("refused: %s", strings.TrimSpace(string(line)))
	}
	return nil
}

func (p *podConn) close() { p.c.Close() }
