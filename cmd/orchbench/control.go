package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// rawConn is a minimal NDJSON client: the same code drives orchestrd and the
// echo baseline, so the client's own cost is identical for both.
type rawConn struct {
	c   net.Conn
	br  *bufio.Reader
	buf []byte
	id  uint64
}

func dialRaw(path string) (*rawConn, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 16<<10), buf: make([]byte, 0, 128)}, nil
}

// roundTrip sends {"id":N,"method":method,"params":{}} and reads one line,
// which must carry the same id (a pong, or the echo of the request).
func (r *rawConn) roundTrip(method string) error {
	_, err := r.call(method, "{}")
	return err
}

// call sends {"id":N,"method":method,"params":params} and returns the line
// that answers it (valid until the next call; it must fit the reader's
// buffer), undecoded.
func (r *rawConn) call(method, params string) ([]byte, error) {
	r.id++
	b := append(r.buf[:0], `{"id":`...)
	b = strconv.AppendUint(b, r.id, 10)
	b = append(b, `,"method":"`...)
	b = append(b, method...)
	b = append(b, `","params":`...)
	b = append(b, params...)
	b = append(b, "}\n"...)
	r.buf = b
	if _, err := r.c.Write(b); err != nil {
		return nil, err
	}
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	want := b[:bytes.IndexByte(b, ',')+1] // {"id":N,
	if !bytes.HasPrefix(line, want) {
		return nil, fmt.Errorf("unexpected reply %q", line[:min(len(line), 200)])
	}
	return line, nil
}

func (r *rawConn) close() { r.c.Close() }

// echoServer is the baseline process.
type echoServer struct {
	cmd  *exec.Cmd
	sock string
}

func (b *bench) startEcho(name string) (*echoServer, error) {
	dir := filepath.Join(b.tmp, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "echo.sock")
	cmd := exec.Command(b.echo, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("echo server did not start: %q %v", line, err)
	}
	return &echoServer{cmd: cmd, sock: sock}, nil
}

func (e *echoServer) pid() int { return e.cmd.Process.Pid }

func (e *echoServer) stop() {
	_ = e.cmd.Process.Kill()
	_ = e.cmd.Wait()
}

func pingWorker(sock string) func() (func() error, func(), error) {
	return func() (func() error, func(), error) {
		rc, err := dialRaw(sock)
		if err != nil {
			return nil, nil, err
		}
		return func() error { return rc.roundTrip("ping") }, rc.close, nil
	}
}

func runControl(b *bench) error {
	trials := pick(b, 10, 1)
	dur := b.load(time.Second)

	levels := []int{1, 64}
	d, err := b.startDaemon("control", laneConfig{runners: 1, slots: 1}.toml())
	if err != nil {
		return err
	}
	defer d.stop()
	echo, err := b.startEcho("echo")
	if err != nil {
		return err
	}
	defer echo.stop()

	for _, sock := range []string{d.sock, echo.sock} {
		if _, err := closedLoop(8, b.load(200*time.Millisecond), pingWorker(sock)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	type series struct{ orch, base []measured }
	res := map[int]*series{}
	for _, c := range levels {
		o, e, err := paired(trials,
			func() (measured, error) {
				return trial(func() []int { return []int{d.pid()} }, c, dur, pingWorker(d.sock))
			},
			func() (measured, error) {
				return trial(func() []int { return []int{echo.pid()} }, c, dur, pingWorker(echo.sock))
			})
		if err != nil {
			return fmt.Errorf("%d clients: %w", c, err)
		}
		res[c] = &series{o, e}
		b.debugf("ping %d clients: orchestrd %v /s, echo %v /s", c, rates(o), rates(e))
	}
	for _, c := range levels {
		s := res[c]
		st := b.pairSamples(fmt.Sprintf("control.c%d.", c), "round trips/s", s.orch, s.base,
			"orchestrd_ping_per_s", "echo_per_s", "orchestrd_rtt_ms", "echo_rtt_ms")
		b.add(rateRow(fmt.Sprintf("%d client(s): round trips/s (median of trials; ratio: median of paired trials)", c), "round trips/s", "rt", st.rate, st.baseRate, st.ratio, " (Go NDJSON echo)"))
		b.last().Target, b.last().Met = "≥ 50% of baseline", boolp(st.ratio.P50 >= 0.5)
		b.add(rttRow(fmt.Sprintf("%d client(s): round trip p50 / p99", c), st.rtt, st.baseRtt))
		oc, bc := cpuPerOp(s.orch), cpuPerOp(s.base)
		ratio, rv := fmtRatio(oc, bc)
		b.add(Row{Metric: fmt.Sprintf("%d client(s): server CPU per round trip", c),
			Orchestrd: fmt.Sprintf("%.1f µs", oc), Value: oc, Unit: "µs",
			Baseline: fmt.Sprintf("%.1f µs", bc), BaselineValue: floatp(bc), Ratio: ratio, RatioValue: rv})
	}
	return d.stop()
}
