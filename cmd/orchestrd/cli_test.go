package main

import (
	"bytes"
	binenc "encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/wire"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLIWith(t, "", nil, args...)
}

// mustCLI runs the binary with args; t fails unless it exits 0. It returns
// what it printed on stdout.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("orchestrd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func TestCLIAgainstRealDaemon(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	out, errOut, code := runCLI(t, "run", "--home", d.home, "--lane", "net", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if code != 3 || out != "out\n" || !strings.Contains(errOut, "err\n") {
		t.Fatalf("run: code %d stdout %q stderr %q", code, out, errOut)
	}
	_, errOut, code = runCLI(t, "run", "--home", d.home, "--lane", "net", "--timeout", "100ms", "--", "sleep", "10")
	if code != 124 || !strings.Contains(errOut, "timed out") {
		t.Fatalf("run timeout: code %d stderr %q", code, errOut)
	}
	out, _, code = runCLI(t, "jobs", "--home", d.home)
	if code != 0 || !strings.Contains(out, "succeeded") && !strings.Contains(out, "failed") {
		t.Fatalf("jobs: code %d\n%s", code, out)
	}
	out, _, code = runCLI(t, "status", "--home", d.home)
	if code != 0 || !strings.Contains(out, "net-0") || !strings.Contains(out, "lane/net") ||
		!strings.Contains(out, "spare") || !strings.Contains(out, "serving") {
		t.Fatalf("status: code %d\n%s", code, out)
	}
	out, _, code = runCLI(t, "events", "--home", d.home, "--kind", "runner.ready", "--lane", "net")
	if code != 0 || !strings.Contains(out, "runner.ready") || strings.Contains(out, "no-net-0") {
		t.Fatalf("events: code %d\n%s", code, out)
	}
	out, _, code = runCLI(t, "events", "--home", d.home, "--json", "--kind", "job.finished")
	if code != 0 || !strings.HasPrefix(out, `{"ts":`) {
		t.Fatalf("events --json: code %d\n%s", code, out)
	}
}

func TestCLIWithoutDaemon(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	for _, args := range [][]string{{"jobs"}, {"status"}, {"cancel", "x"}, {"run", "--", "true"}} {
		full := append([]string{args[0], "--home", home}, args[1:]...)
		_, errOut, code := runCLI(t, full...)
		if code != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "no daemon") {
			t.Errorf("%v: code %d stderr %q; want exit 1 and one line", args, code, errOut)
		}
	}
	if _, _, code := runCLI(t, "bogus"); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
}

func TestRunnerOverMemoryIsReplaced(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, `
[lanes.net]
runners = 1
slots = 1
network = "host"
max_runner_memory_bytes = 1048576
heartbeat_timeout = "600ms"
[lanes.net.restart]
max_delay = "100ms"
max_r = 1000
`)
	id := d.submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "300"}})
	rec := d.wait(id)
	if rec.State != api.StateFailed || rec.Error != api.ErrRunnerMemory {
		t.Fatalf("record = %+v", rec)
	}
	e := d.waitEvent("runner.killed", func(e map[string]any) bool { return e["reason"] == "memory_limit" })
	if !strings.Contains(e["detail"].(string), "max_runner_memory_bytes") {
		t.Fatalf("runner.killed detail = %v", e["detail"])
	}
	d.lanes() // record the replacement's pid for the leak check at stop
}

// A hostile runner that sends an oversized frame is cut off with an event;
// the lane's other runner and its jobs are not disturbed.
func TestOversizedRunnerFrameIsRefused(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, strings.Replace(fastConfig, "[lanes.net.restart]", "external_runners = true\n[lanes.net.restart]", 1))
	base := len(d.lane("net").Runners)
	conn := d.joinByo("net", "evil")
	ack, err := wire.NewFrameReader(conn, 0).Next()
	if err != nil || ack.Type != wire.TypeHandshakeAck {
		t.Fatalf("ack: %v %v", ack.Type, err)
	}
	eventually(t, 10*time.Second, "byo runner joined", func() bool { return len(d.lane("net").Runners) == base+1 })
	// A malformed payload is ignored, not fatal.
	conn.Write(wire.AppendFrame(nil, wire.TypeHeartbeat, []byte("{not json")))
	d.waitEvent("conn.protocol_error", func(e map[string]any) bool { return e["fatal"] == false })
	var hdr [5]byte
	binenc.BigEndian.PutUint32(hdr[:4], 1<<30)
	hdr[4] = byte(wire.TypeOutputChunk)
	conn.Write(hdr[:])
	e := d.waitEvent("conn.protocol_error", func(e map[string]any) bool { return e["fatal"] == true })
	if !strings.Contains(e["error"].(string), "exceeds the maximum") {
		t.Fatalf("event = %v", e)
	}
	eventually(t, 10*time.Second, "hostile runner removed", func() bool { return len(d.lane("net").Runners) == base })
	if rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"echo", "fine"}})); rec.State != api.StateSucceeded {
		t.Fatalf("lane disturbed: %+v", rec)
	}
	// The daemon closed the connection.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	for {
		if _, err := conn.Read(buf); err != nil {
			break
		}
	}
}

// A socket path the kernel cannot take fails start-up with one clear error
// instead of leaving a lane that never runs jobs.
func TestUnusableSocketPathFailsStartup(t *testing.T) {
	t.Parallel()
	home := filepath.Join(shortTemp(t), strings.Repeat("h", 100))
	_, errOut, code := runCLI(t, "serve", "--home", home, "--log-format", "json")
	if code != 1 || !strings.Contains(errOut, "listening on") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the socket", code, errOut)
	}
}

func TestQueueLimitAndQueuedCancel(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, `
[lanes.idle]
runners = 0
slots = 1
queue_limit = 2
network = "host"
`)
	a := d.submit(api.JobSpec{Lane: "idle", Argv: []string{"true"}})
	d.submit(api.JobSpec{Lane: "idle", Argv: []string{"true"}})
	err := d.call("job.submit", api.JobSpec{Lane: "idle", Argv: []string{"true"}}, nil)
	if remoteCode(err) != wire.CodeQueueFull || !strings.Contains(err.Error(), "queue_limit 2") {
		t.Fatalf("third submit: %v, want code 1004 naming the limit", err)
	}
	if l := d.lane("idle"); l.Queued != 2 {
		t.Fatalf("queued = %d, want 2", l.Queued)
	}
	var r struct {
		WasRunning bool `json:"was_running"`
	}
	d.mustCall("job.cancel", map[string]string{"id": a}, &r)
	if r.WasRunning {
		t.Fatal("a queued job was reported running")
	}
	if rec := d.wait(a); rec.State != api.StateCancelled || rec.DispatchedAt != nil {
		t.Fatalf("cancelled queued job = %+v", rec)
	}
	// The freed place takes a new job.
	d.submit(api.JobSpec{Lane: "idle", Argv: []string{"true"}})
	d.waitEvent("job.rejected", func(e map[string]any) bool { return e["reason"] == "queue_full" })
}

// The Python runner in examples/ is a second, independent implementation of
// the runner protocol (chunks as serde-style byte arrays): it must join a
// lane and run jobs unchanged.
func TestPythonBringYourOwnRunner(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	d := startDaemon(t, "[lanes.py]\nrunners = 0\nnetwork = \"host\"\n")
	cmd := exec.Command(py, "../../examples/byo-runner/runner.py", "py", filepath.Join(d.home, "runner-py.sock"))
	cmd.Env = append(os.Environ(), "ORCHESTRD_JOIN_TOKEN="+d.joinToken("py"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	d.waitByoReady("py")
	rec := d.wait(d.submit(api.JobSpec{Lane: "py", Command: "echo from python; exit 4"}))
	if rec.State != api.StateFailed || rec.ExitCode == nil || *rec.ExitCode != 4 || rec.Output != "from python\n" {
		t.Fatalf("record = %+v\nrunner stderr: %s", rec, stderr.String())
	}
	d.stop() // Shutdown frame: the runner exits on its own
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("python runner: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("python runner did not exit on Shutdown")
	}
}
