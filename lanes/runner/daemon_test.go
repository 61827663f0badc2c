package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor is how long any single expected event may take.
const waitFor = 10 * time.Second

type rawFrame struct {
	t wire.MsgType
	p []byte
}

// fakeDaemon is the daemon end of one runner connection: it listens on a
// real unix socket, reads the Handshake, answers it, then records every
// frame the runner sends.
type fakeDaemon struct {
	tb      testing.TB
	dir     string
	sock    string
	ln      *net.UnixListener
	conn    *net.UnixConn
	hs      wire.Handshake
	frames  chan rawFrame // closed when the runner's stream ends
	backlog []rawFrame
	cancel  context.CancelFunc
	runErr  chan error
	ran     bool
	runRes  error
	// gate: holding it for writing stops the daemon reading the runner's
	// frames after the one it is at, so the socket fills.
	gate sync.RWMutex
}

type launcher func(ctx context.Context, o Options) error

// startRunner starts Run against a fresh fake daemon and completes the
// handshake with ack (no ack is sent if ack is nil).
func startRunner(tb testing.TB, ack *wire.HandshakeAck, mutate ...func(*Options)) *fakeDaemon {
	tb.Helper()
	return startWith(tb, ack, Run, mutate...)
}

func startWith(tb testing.TB, ack *wire.HandshakeAck, run launcher, mutate ...func(*Options)) *fakeDaemon {
	tb.Helper()
	// t.TempDir paths can exceed the 108-byte sun_path limit.
	dir := testio.ShortTemp(tb, "rnr")
	d := &fakeDaemon{tb: tb, dir: dir, sock: dir + "/lane.sock", frames: make(chan rawFrame, 4096), runErr: make(chan error, 1)}
	var err error
	d.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: d.sock, Net: "unix"})
	if err != nil {
		tb.Fatal(err)
	}
	o := Options{Lane: "no-net", Socket: d.sock, ID: "r-1", Version: "test-1", Logger: testLogger(tb)}
	for _, m := range mutate {
		m(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.runErr <- run(ctx, o) }()
	tb.Cleanup(d.stop)

	_ = d.ln.SetDeadline(time.Now().Add(waitFor))
	d.conn, err = d.ln.AcceptUnix()
	if err != nil {
		tb.Fatalf("runner did not connect: %v", err)
	}
	fr := wire.NewFrameReader(d.conn, 0)
	_ = d.conn.SetReadDeadline(time.Now().Add(waitFor))
	f, err := fr.Next()
	if err != nil {
		tb.Fatalf("reading Handshake: %v", err)
	}
	if f.Type != wire.TypeHandshake {
		tb.Fatalf("first frame is %s, want Handshake", f.Type)
	}
	if err := wire.Unmarshal(f, &d.hs); err != nil {
		tb.Fatal(err)
	}
	_ = d.conn.SetReadDeadline(time.Time{})
	if ack != nil {
		d.send(wire.TypeHandshakeAck, *ack)
	}
	go func() {
		defer close(d.frames)
		for {
			f, err := fr.Next()
			if err != nil {
				return
			}
			d.gate.RLock()
			d.gate.RUnlock() //nolint:staticcheck // a gate, not a critical section
			d.frames <- rawFrame{f.Type, bytes.Clone(f.Payload)}
		}
	}()
	return d
}

func okAck(slots int) *wire.HandshakeAck {
	return &wire.HandshakeAck{Accepted: true, Slots: slots, Config: wire.RunnerConfig{Lane: "no-net"}}
}

func testLogger(tb testing.TB) zerolog.Logger {
	if _, ok := tb.(*testing.B); ok {
		return zerolog.Nop()
	}
	return zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.DebugLevel)
}

// stop cancels Run, waits for it and releases everything.
func (d *fakeDaemon) stop() {
	d.cancel()
	if err := d.waitRun(); err != nil && d.tb != nil {
		d.tb.Logf("Run returned %v", err)
	}
	if d.conn != nil {
		d.conn.Close()
	}
	for range d.frames {
	}
	d.ln.Close()
}

// waitRun waits for Run to return and returns its error.
func (d *fakeDaemon) waitRun() error {
	if d.ran {
		return d.runRes
	}
	select {
	case err := <-d.runErr:
		d.ran, d.runRes = true, err
		return err
	case <-time.After(waitFor):
		d.tb.Fatalf("Run did not return within %v", waitFor)
		return nil
	}
}

func (d *fakeDaemon) send(t wire.MsgType, v any) {
	d.tb.Helper()
	if err := wire.WriteFrame(d.conn, t, v); err != nil {
		d.tb.Fatalf("sending %s: %v", t, err)
	}
}

// expect returns the first frame (oldest first, backlog included) for which
// match is true; other frames are kept for later calls.
func (d *fakeDaemon) expect(what string, match func(rawFrame) bool) rawFrame {
	d.tb.Helper()
	for i, f := range d.backlog {
		if match(f) {
			d.backlog = append(d.backlog[:i], d.backlog[i+1:]...)
			return f
		}
	}
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		select {
		case f, ok := <-d.frames:
			if !ok {
				d.tb.Fatalf("connection ended while waiting for %s", what)
			}
			if match(f) {
				return f
			}
			d.backlog = append(d.backlog, f)
		case <-deadline.C:
			d.tb.Fatalf("no %s within %v", what, waitFor)
		}
	}
}

func jobIDOf(f rawFrame) string {
	if f.t == wire.TypeOutputRaw {
		c, _ := wire.DecodeOutputRaw(f.p)
		return c.JobID
	}
	var v struct {
		JobID string `json:"job_id"`
	}
	_ = json.Unmarshal(f.p, &v)
	return v.JobID
}

func decode[T any](tb testing.TB, f rawFrame) T {
	tb.Helper()
	var v T
	if err := json.Unmarshal(f.p, &v); err != nil {
		tb.Fatalf("decoding %s %s: %v", f.t, f.p, err)
	}
	return v
}

func (d *fakeDaemon) expectType(t wire.MsgType, id string) rawFrame {
	d.tb.Helper()
	return d.expect(fmt.Sprintf("%s for %q", t, id), func(f rawFrame) bool {
		return f.t == t && jobIDOf(f) == id
	})
}

func (d *fakeDaemon) jobAck(id string) wire.JobAck {
	d.tb.Helper()
	return decode[wire.JobAck](d.tb, d.expectType(wire.TypeJobAck, id))
}

// outcome is everything the runner sent about one job.
type outcome struct {
	ack            wire.JobAck
	chunks         []wire.OutputChunk
	stdout, stderr string
	res            wire.Result
	order          []wire.MsgType
}

// collect gathers JobAck, OutputChunks and the Result of job id.
func (d *fakeDaemon) collect(id string) outcome {
	d.tb.Helper()
	var o outcome
	for {
		f := d.expect("frames of job "+id, func(f rawFrame) bool {
			switch f.t {
			case wire.TypeJobAck, wire.TypeOutputChunk, wire.TypeOutputRaw, wire.TypeResult:
				return jobIDOf(f) == id
			}
			return false
		})
		o.order = append(o.order, f.t)
		switch f.t {
		case wire.TypeJobAck:
			o.ack = decode[wire.JobAck](d.tb, f)
		case wire.TypeOutputChunk, wire.TypeOutputRaw:
			var c wire.OutputChunk
			if f.t == wire.TypeOutputRaw {
				var err error
				if c, err = wire.DecodeOutputRaw(f.p); err != nil {
					d.tb.Fatalf("decoding %s: %v", f.t, err)
				}
			} else {
				c = decode[wire.OutputChunk](d.tb, f)
			}
			o.chunks = append(o.chunks, c)
			if c.Stream == wire.Stdout {
				o.stdout += string(c.Chunk)
			} else {
				o.stderr += string(c.Chunk)
			}
		case wire.TypeResult:
			o.res = decode[wire.Result](d.tb, f)
			// The JobAck may have been consumed already; if not, it came first.
			if i := slices.Index(o.order, wire.TypeJobAck); i > 0 {
				d.tb.Fatalf("job %s: frames %v, want JobAck first", id, o.order)
			}
			return o
		}
	}
}

// run sends a job and collects its outcome.
func (d *fakeDaemon) run(j wire.Job) outcome {
	d.tb.Helper()
	d.send(wire.TypeJob, j)
	return d.collect(j.JobID)
}

// waitStdout waits until the job's stdout holds at least lines newlines and
// returns it.
func (d *fakeDaemon) waitStdout(id string, lines int) string {
	d.tb.Helper()
	var out string
	for strings.Count(out, "\n") < lines {
		f := d.expect("stdout of "+id, func(f rawFrame) bool {
			return f.t == wire.TypeOutputChunk && jobIDOf(f) == id
		})
		if c := decode[wire.OutputChunk](d.tb, f); c.Stream == wire.Stdout {
			out += string(c.Chunk)
		}
	}
	return out
}

// waitEOF waits for the runner to end the stream.
func (d *fakeDaemon) waitEOF() {
	d.tb.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		select {
		case f, ok := <-d.frames:
			if !ok {
				return
			}
			d.backlog = append(d.backlog, f)
		case <-deadline.C:
			d.tb.Fatalf("the runner did not close the connection within %v", waitFor)
		}
	}
}

// waitGone waits until pid no longer runs (gone, or a zombie nobody reaps).
func waitGone(tb testing.TB, pid int) {
	tb.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) || isZombie(pid) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("process %d still alive after %v", pid, waitFor)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func alive(pid int) bool {
	return unix.Kill(pid, 0) == nil && !isZombie(pid)
}

func atoiLine(tb testing.TB, s string) int {
	tb.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(strings.TrimSpace(s), "\n", 2)[0]))
	if err != nil {
		tb.Fatalf("parsing pid from %q: %v", s, err)
	}
	return n
}
