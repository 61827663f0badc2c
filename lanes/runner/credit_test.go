package runner

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/wire"
)

func creditAck(slots int, window uint64) *wire.HandshakeAck {
	a := okAck(slots)
	a.Config.OutputWindow = window
	return a
}

// procLine reads "name: value" of /proc/PID/file.
func procLine(pid int, file, name string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// With an output window, a job whose output is not acknowledged blocks on
// its pipe once the window is sent; acknowledgements let it go on to its
// end, every byte sent once.
func TestOutputCreditBlocksTheJob(t *testing.T) {
	const window, total = 64 << 10, 1 << 20
	d := startRunner(t, creditAck(1, window))
	if !strings.Contains(strings.Join(d.hs.Capabilities, " "), wire.CapOutputCredit) ||
		!strings.Contains(strings.Join(d.hs.Capabilities, " "), wire.CapStdinStream) {
		t.Fatalf("capabilities %v", d.hs.Capabilities)
	}
	d.send(wire.TypeJob, wire.Job{JobID: "c1", Command: fmt.Sprintf("echo $$ >&2; exec head -c %d /dev/zero", total)})
	if !d.jobAck("c1").Accepted {
		t.Fatal("not accepted")
	}
	var got, stdout int
	pid := 0
	take := func() {
		f := d.expect("output of c1", func(f rawFrame) bool { return f.t == wire.TypeOutputChunk && jobIDOf(f) == "c1" })
		c := decode[wire.OutputChunk](t, f)
		got += len(c.Chunk)
		if c.Stream == wire.Stderr {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(c.Chunk)))
		} else {
			stdout += len(c.Chunk)
		}
	}
	// Its pid comes on stderr; stdout and stderr share the window, so
	// stdout may fill it first: acknowledged until the pid came.
	acked := 0
	for pid == 0 || stdout == 0 {
		take()
		if pid == 0 {
			acked = got
			d.send(wire.TypeOutputAck, wire.OutputAck{JobID: "c1", Acked: uint64(acked)})
		}
	}
	// Blocked: head sleeps in a pipe write, the same bytes written twice in
	// a row, with only about a window sent.
	last := ""
	deadline := time.Now().Add(waitFor)
	for {
		w := procLine(pid, "io", "wchar")
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		if strings.Contains(string(wchan), "pipe_write") && w == last {
			break
		}
		last = w
		if time.Now().After(deadline) {
			t.Fatalf("job not blocked: wchan %q, wchar %s", wchan, w)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		select {
		case f := <-d.frames:
			d.backlog = append(d.backlog, f)
			continue
		default:
		}
		break
	}
	for len(d.backlog) > 0 {
		take()
	}
	if got-acked > window+2*d.chunkSize() {
		t.Fatalf("%d bytes sent unacknowledged, window %d", got-acked, window)
	}
	// Acknowledge as it comes: the rest flows, then the Result.
	for stdout < total {
		d.send(wire.TypeOutputAck, wire.OutputAck{JobID: "c1", Acked: uint64(got)})
		take()
	}
	res := decode[wire.Result](t, d.expectType(wire.TypeResult, "c1"))
	if res.Status != wire.StatusSuccess || stdout != total {
		t.Fatalf("result %+v after %d bytes", res, stdout)
	}
}

func (d *fakeDaemon) chunkSize() int { return chunkMax }

// A job that exits does not wait for credit: what is left in its pipes
// goes at once and its Result follows.
func TestOutputCreditDoesNotHoldTheResult(t *testing.T) {
	d := startRunner(t, creditAck(1, 1024))
	o := d.run(wire.Job{JobID: "c2", Command: "head -c 20000 /dev/zero"})
	if o.res.Status != wire.StatusSuccess || len(o.stdout) != 20000 {
		t.Fatalf("result %+v, %d bytes", o.res, len(o.stdout))
	}
	// A daemon that gave a window takes the output from the chunks: the
	// Result does not carry it again (a Loopr daemon's does: TestArgvJob).
	if o.res.Output != "" {
		t.Fatalf("Result.output has %d bytes, want none", len(o.res.Output))
	}
}

// A streamed stdin: chunks reach the job's pipe in order, each
// acknowledged once written, EOF closes it; a job that stops reading gets
// the rest acknowledged unwritten.
func TestStdinStream(t *testing.T) {
	d := startRunner(t, creditAck(2, 1<<20))
	data := make([]byte, 1<<20)
	rand.Read(data)
	sum := sha256.Sum256(data)
	d.send(wire.TypeJob, wire.Job{JobID: "s1", Argv: []string{"sha256sum"}, StdinStream: true})
	sendStdin := func(id string, data []byte) {
		const piece, window = 64 << 10, 256 << 10
		var sent, acked uint64
		for len(data) > 0 || acked < sent {
			if len(data) > 0 && sent-acked < window {
				n := min(piece, len(data))
				d.send(wire.TypeStdinChunk, wire.StdinChunk{JobID: id, Data: data[:n]})
				data, sent = data[n:], sent+uint64(n)
				continue
			}
			a := decode[wire.StdinAck](t, d.expectType(wire.TypeStdinAck, id))
			if a.Bytes < acked || a.Bytes > sent {
				t.Fatalf("ack %d after %d, %d sent", a.Bytes, acked, sent)
			}
			acked = a.Bytes
		}
		d.send(wire.TypeStdinChunk, wire.StdinChunk{JobID: id, EOF: true})
	}
	sendStdin("s1", data)
	o := d.collect("s1")
	if o.res.Status != wire.StatusSuccess || !strings.HasPrefix(o.stdout, hex.EncodeToString(sum[:])+" ") {
		t.Fatalf("result %+v stdout %q, want %x", o.res, o.stdout, sum)
	}
	// It stops reading after 3 bytes; the rest is acknowledged all the same.
	gate := d.dir + "/gate"
	d.send(wire.TypeJob, wire.Job{JobID: "s2", StdinStream: true,
		Command: "head -c 3; echo; exec 0<&-; while [ ! -e " + gate + " ]; do sleep 0.01; done"})
	sendStdin("s2", bytes.Repeat([]byte("y\n"), 400<<10))
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if o := d.collect("s2"); o.res.Status != wire.StatusSuccess || o.stdout != "y\ny\n" {
		t.Fatalf("result %+v stdout %q", o.res, o.stdout)
	}
	// Output from a job whose stdin is still open: it runs at once.
	d.send(wire.TypeJob, wire.Job{JobID: "s3", Command: "echo started; cat", StdinStream: true})
	if out := d.waitStdout("s3", 1); out != "started\n" {
		t.Fatalf("stdout %q", out)
	}
	d.send(wire.TypeStdinChunk, wire.StdinChunk{JobID: "s3", Data: []byte("more\n"), EOF: true})
	if o := d.collect("s3"); o.res.Status != wire.StatusSuccess || o.stdout != "more\n" {
		t.Fatalf("result %+v stdout %q", o.res, o.stdout)
	}
}

// A job that ends while its output is still on the way (the daemon reads
// slowly, the runner is starved) loses none of it, however long the way:
// its pipes are cut only when empty and idle. Job b ends with its output
// in its pipe while the runner is blocked sending job a's flood to a
// daemon that stopped reading; the daemon reads again only well after b
// is gone (drainGrace used to cut b's pipe there, telling no one).
func TestOutputOfAnEndedJobIsNotCutWhileOnItsWay(t *testing.T) {
	d := startRunner(t, okAck(2))
	dir := t.TempDir()
	const total = 40000
	d.send(wire.TypeJob, wire.Job{JobID: "b", Command: fmt.Sprintf(
		"echo $$ > %s/b.pid; while [ ! -e %s/go ]; do sleep 0.01; done; exec head -c %d /dev/zero", dir, dir, total)})
	if !d.jobAck("b").Accepted {
		t.Fatal("b not accepted")
	}
	d.send(wire.TypeJob, wire.Job{JobID: "a", Command: "echo $$ >&2; exec cat /dev/zero"})
	if !d.jobAck("a").Accepted {
		t.Fatal("a not accepted")
	}
	// a floods; once its pid came, stop reading and wait until a is
	// blocked on its pipe: the socket and the runner are full.
	aPid := 0
	for aPid == 0 {
		c := decode[wire.OutputChunk](t, d.expect("a's pid", func(f rawFrame) bool {
			return f.t == wire.TypeOutputChunk && jobIDOf(f) == "a"
		}))
		if c.Stream == wire.Stderr {
			aPid, _ = strconv.Atoi(strings.TrimSpace(string(c.Chunk)))
		}
	}
	d.gate.Lock()
	gated := true
	defer func() {
		if gated {
			d.gate.Unlock()
		}
	}()
	waitBlockedOnPipe(t, aPid)
	// b writes all of its output into its pipe and ends; its shell may not
	// have written its pid yet (a loaded machine).
	bPid := 0
	for deadline := time.Now().Add(waitFor); bPid == 0; {
		b, _ := os.ReadFile(dir + "/b.pid")
		bPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if bPid == 0 && time.Now().After(deadline) {
			t.Fatalf("b wrote no pid: %q", b)
		}
		if bPid == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := os.WriteFile(dir+"/go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for unix.Kill(bPid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("b (pid %d) did not end", bPid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Provocation, not correctness: the old bound fired 250 ms after the
	// end; give it well over that before the daemon reads again.
	time.Sleep(4 * drainGrace)
	d.gate.Unlock()
	gated = false
	d.send(wire.TypeCancel, wire.Cancel{JobID: "a", Force: true})
	o := d.collect("b")
	if o.res.Status != wire.StatusSuccess || len(o.stdout) != total || o.res.OutputCut {
		t.Fatalf("b: status %s, output_cut %v, %d of %d bytes", o.res.Status, o.res.OutputCut, len(o.stdout), total)
	}
	ra := decode[wire.Result](t, d.expectType(wire.TypeResult, "a"))
	if !ra.WasCancelled {
		t.Fatalf("a: result %+v", ra)
	}
}

func rawAck(window uint64) *wire.HandshakeAck {
	a := creditAck(1, window)
	a.Config.OutputRaw = true
	return a
}

// A daemon that sets OutputRaw gets a job's output as OutputRaw frames
// (no JSON, no base64), every byte once, in order, within the window.
func TestOutputRawFrames(t *testing.T) {
	d := startRunner(t, rawAck(256<<10))
	if !strings.Contains(strings.Join(d.hs.Capabilities, " "), wire.CapOutputRaw) {
		t.Fatalf("capabilities %v", d.hs.Capabilities)
	}
	d.rawJob("r1", 3<<20)
}

// A daemon that closes its socket while the runner is in the middle of
// writing a frame into it (the socket full, the job blocked on its pipe):
// Run ends with the error and the job is killed.
func TestOutputRawDaemonGoneMidFrame(t *testing.T) {
	d := startRunner(t, rawAck(1<<40))
	pid := d.rawFlood("g", "cat /dev/zero")
	d.gate.Lock()
	defer d.gate.Unlock()
	waitBlockedOnPipe(t, pid)
	d.conn.Close()
	if err := d.waitRun(); err == nil {
		t.Fatal("Run returned nil after the daemon closed the socket")
	} else {
		t.Logf("Run: %v", err)
	}
	waitGone(t, pid)
}

// rawFlood starts job id, which writes its pid on stderr and then execs
// flood (a command writing at full speed), and returns the pid, read from
// its OutputRaw frames.
func (d *fakeDaemon) rawFlood(id, flood string) int {
	t := d.tb
	t.Helper()
	d.send(wire.TypeJob, wire.Job{JobID: id, Command: "echo $$ >&2; exec " + flood})
	if !d.jobAck(id).Accepted {
		t.Fatal("not accepted")
	}
	for {
		f := d.expect(id+"'s pid", func(f rawFrame) bool { return f.t == wire.TypeOutputRaw })
		if c, err := wire.DecodeOutputRaw(f.p); err == nil && c.Stream == wire.Stderr {
			pid, err := strconv.Atoi(strings.TrimSpace(string(c.Chunk)))
			if err != nil {
				t.Fatalf("%s's pid %q: %v", id, c.Chunk, err)
			}
			return pid
		}
	}
}

// rawJob runs a job writing total random bytes to stdout and the same to
// stderr, acknowledging its output as it comes, and checks every byte came
// in OutputRaw frames, in order.
func (d *fakeDaemon) rawJob(id string, total int) {
	t := d.tb
	t.Helper()
	d.send(wire.TypeJob, wire.Job{JobID: id, Command: fmt.Sprintf("head -c %d /dev/urandom | tee /dev/stderr", total)})
	if !d.jobAck(id).Accepted {
		t.Fatal("not accepted")
	}
	var stdout []byte
	var stderr bytes.Buffer
	for {
		f := d.expect("output of "+id, func(f rawFrame) bool {
			return f.t == wire.TypeOutputRaw || f.t == wire.TypeOutputChunk || f.t == wire.TypeResult
		})
		if f.t == wire.TypeResult {
			if res := decode[wire.Result](t, f); res.Status != wire.StatusSuccess {
				t.Fatalf("result %+v", res)
			}
			break
		}
		if f.t != wire.TypeOutputRaw {
			t.Fatalf("a %s frame to a daemon that asked for OutputRaw", f.t)
		}
		c, err := wire.DecodeOutputRaw(f.p)
		if err != nil || c.JobID != id {
			t.Fatalf("OutputRaw %q: %v", c.JobID, err)
		}
		if len(c.Chunk) > rawChunkMax {
			t.Fatalf("chunk of %d bytes", len(c.Chunk))
		}
		if c.Stream == wire.Stderr {
			stderr.Write(c.Chunk)
		} else {
			stdout = append(stdout, c.Chunk...)
		}
		d.send(wire.TypeOutputAck, wire.OutputAck{JobID: id, Acked: uint64(len(stdout) + stderr.Len())})
	}
	if len(stdout) != total || !bytes.Equal(stderr.Bytes(), stdout) {
		t.Fatalf("stdout %d bytes, stderr %d bytes: not the same bytes, or not all", len(stdout), stderr.Len())
	}
}

// A runner sending OutputRaw frames asks for a send buffer that holds a
// whole chunk and more (sockSendBuffer): with the daemon not reading and a
// job writing at full speed, its socket holds well over the default 208
// KiB once the job is blocked on its pipe.
func TestOutputRawSocketBuffer(t *testing.T) {
	if b, _ := os.ReadFile("/proc/sys/net/core/wmem_max"); func() int { n, _ := strconv.Atoi(strings.TrimSpace(string(b))); return n }() < sockSendBuffer {
		t.Skipf("net.core.wmem_max is %s: a send buffer of %d bytes cannot be had", strings.TrimSpace(string(b)), sockSendBuffer)
	}
	d := startRunner(t, rawAck(8<<20))
	pid := d.rawFlood("f", "head -c 16777216 /dev/zero")
	d.gate.Lock()
	gated := true
	defer func() {
		if gated {
			d.gate.Unlock()
		}
	}()
	// Blocked on its pipe: the runner has filled the socket as far as its
	// buffer lets it.
	waitBlockedOnPipe(t, pid)
	rc, err := d.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	unread := 0
	_ = rc.Control(func(fd uintptr) { unread, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	if err != nil {
		t.Fatal(err)
	}
	if unread < 768<<10 {
		t.Fatalf("the socket holds %d bytes the daemon has not read: the runner's send buffer is the default's", unread)
	}
	d.gate.Unlock()
	gated = false
	d.send(wire.TypeCancel, wire.Cancel{JobID: "f", Force: true})
	d.expect("f's result", func(f rawFrame) bool { return f.t == wire.TypeResult })
}

// waitBlockedOnPipe waits until process pid is blocked writing a pipe, its
// writes counted no further between two looks.
func waitBlockedOnPipe(t *testing.T, pid int) {
	t.Helper()
	last := ""
	for deadline := time.Now().Add(waitFor); ; {
		w := procLine(pid, "io", "wchar")
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		if strings.Contains(string(wchan), "pipe_write") && w == last {
			return
		}
		last = w
		if time.Now().After(deadline) {
			t.Fatalf("process %d is not blocked on its pipe: wchan %q, wchar %s", pid, wchan, w)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
