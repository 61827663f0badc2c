package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/wire"
)

func TestHandshakeFields(t *testing.T) {
	d := startRunner(t, okAck(1))
	if d.hs.Lane != "no-net" || d.hs.Version != "test-1" || d.hs.Pid != uint32(os.Getpid()) {
		t.Fatalf("handshake = %+v", d.hs)
	}
	for _, c := range []string{"argv", "command", "cancel", "output_chunk", "timeout", "max_output_bytes", "file_paths", "heartbeat"} {
		if !slices.Contains(d.hs.Capabilities, c) {
			t.Errorf("capabilities %v lack %q", d.hs.Capabilities, c)
		}
	}
	d.send(wire.TypeShutdown, wire.Shutdown{})
	if err := d.waitRun(); err != nil {
		t.Fatalf("Run after Shutdown = %v, want nil", err)
	}
}

func TestHandshakeRejected(t *testing.T) {
	d := startRunner(t, &wire.HandshakeAck{Accepted: false, Config: wire.RunnerConfig{Reason: "lane no-net already has a runner"}})
	err := d.waitRun()
	if err == nil || !strings.Contains(err.Error(), "lane no-net already has a runner") {
		t.Fatalf("Run = %v, want the refusal reason", err)
	}
}

func TestArgvJob(t *testing.T) {
	d := startRunner(t, okAck(2))
	o := d.run(wire.Job{JobID: "j1", Argv: []string{"echo", "hello", "world"}})
	if !o.ack.Accepted || o.ack.Error != nil {
		t.Fatalf("ack = %+v", o.ack)
	}
	if o.stdout != "hello world\n" || o.stderr != "" {
		t.Fatalf("stdout %q stderr %q", o.stdout, o.stderr)
	}
	r := o.res
	if r.Status != wire.StatusSuccess || r.ExitCode == nil || *r.ExitCode != 0 || r.Output != "hello world\n" || r.WasTimeout || r.WasCancelled {
		t.Fatalf("result = %+v", r)
	}

	// argv wins over command; no shell is involved.
	o = d.run(wire.Job{JobID: "j2", Argv: []string{"sh", "-c", "echo out; echo err >&2", "ignored"}, Command: "echo command"})
	if o.stdout != "out\n" || o.stderr != "err\n" {
		t.Fatalf("stdout %q stderr %q", o.stdout, o.stderr)
	}
	if o.res.Status != wire.StatusSuccess || !strings.Contains(o.res.Output, "out\n") || !strings.Contains(o.res.Output, "err\n") {
		t.Fatalf("result = %+v", o.res)
	}
	for _, c := range o.chunks {
		if c.JobID != "j2" || (c.Stream != wire.Stdout && c.Stream != wire.Stderr) {
			t.Fatalf("chunk %+v", c)
		}
	}
	o = d.run(wire.Job{JobID: "j3", Argv: []string{"echo", "$HOME", "a b"}})
	if o.stdout != "$HOME a b\n" {
		t.Fatalf("argv was shell-expanded: %q", o.stdout)
	}
}

func TestCommandJob(t *testing.T) {
	d := startRunner(t, okAck(1))
	o := d.run(wire.Job{JobID: "c1", Command: "echo to-out; echo to-err 1>&2; printf 'no newline'"})
	if o.stdout != "to-out\nno newline" || o.stderr != "to-err\n" {
		t.Fatalf("stdout %q stderr %q", o.stdout, o.stderr)
	}
	if o.res.Status != wire.StatusSuccess || o.res.ExitCode == nil || *o.res.ExitCode != 0 {
		t.Fatalf("result = %+v", o.res)
	}
	if len(o.res.Output) != len("to-out\nno newline")+len("to-err\n") {
		t.Fatalf("output %q", o.res.Output)
	}
}

func TestExitCodes(t *testing.T) {
	d := startRunner(t, okAck(1))
	code := func(c int32) *int32 { return &c }
	for i, tc := range []struct {
		job    wire.Job
		status wire.ExitStatus
		code   *int32
	}{
		{wire.Job{Command: "exit 0"}, wire.StatusSuccess, code(0)},
		{wire.Job{Command: "exit 3"}, wire.StatusFailed, code(3)},
		{wire.Job{Argv: []string{"false"}}, wire.StatusFailed, code(1)},
		{wire.Job{Command: "kill -9 $$"}, wire.StatusFailed, nil},
		{wire.Job{Command: "kill -TERM $$"}, wire.StatusFailed, nil},
	} {
		tc.job.JobID = fmt.Sprintf("e%d", i)
		r := d.run(tc.job).res
		if r.Status != tc.status || (r.ExitCode == nil) != (tc.code == nil) || (r.ExitCode != nil && *r.ExitCode != *tc.code) {
			t.Errorf("%+v: result %+v, want %s %v", tc.job, r, tc.status, tc.code)
		}
	}
}

// Jobs refused before they start (commands that cannot be run are
// accepted: TestCommandThatCannotRun).
func TestJobErrors(t *testing.T) {
	d := startRunner(t, okAck(1))
	for _, tc := range []struct {
		job      wire.Job
		accepted bool
		want     string
	}{
		{wire.Job{JobID: "none"}, false, "neither argv nor command"},
		{wire.Job{JobID: "badenv", Command: "true", Env: map[string]string{"A=B": "c"}}, false, "invalid environment"},
		{wire.Job{JobID: "nocwd", Command: "true", Cwd: "/nonexistent/dir"}, false, `working directory "/nonexistent/dir" does not exist`},
	} {
		o := d.run(tc.job)
		if o.ack.Accepted != tc.accepted {
			t.Errorf("%s: ack %+v", tc.job.JobID, o.ack)
		}
		if !tc.accepted && (o.ack.Error == nil || !strings.Contains(*o.ack.Error, tc.want)) {
			t.Errorf("%s: ack error %v, want %q", tc.job.JobID, o.ack.Error, tc.want)
		}
		r := o.res
		if r.Status != wire.StatusError || r.ExitCode != nil || !strings.Contains(r.Output, tc.want) {
			t.Errorf("%s: result %+v, want Error with %q", tc.job.JobID, r, tc.want)
		}
	}
}

func TestTimeout(t *testing.T) {
	d := startRunner(t, okAck(1))
	start := time.Now()
	o := d.run(wire.Job{JobID: "t1", Command: "echo begun; exec sleep 300", TimeoutMs: 150})
	r := o.res
	if r.Status != wire.StatusTimeout || !r.WasTimeout || r.WasCancelled || r.ExitCode != nil {
		t.Fatalf("result %+v", r)
	}
	if r.DurationMs < 150 || time.Since(start) > 5*time.Second {
		t.Fatalf("duration %dms (wall %v)", r.DurationMs, time.Since(start))
	}
	if r.Output != "begun\n" {
		t.Fatalf("output %q", r.Output)
	}
}

func TestCancel(t *testing.T) {
	d := startRunner(t, okAck(1))
	d.send(wire.TypeJob, wire.Job{JobID: "k1", Command: "echo $$; exec sleep 300"})
	if a := d.jobAck("k1"); !a.Accepted {
		t.Fatalf("ack %+v", a)
	}
	pid := atoiLine(t, d.waitStdout("k1", 1))
	d.send(wire.TypeCancel, wire.Cancel{JobID: "k1"})
	var sawAck bool
	for {
		f := d.expect("CancelAck or Result", func(f rawFrame) bool {
			return (f.t == wire.TypeCancelAck || f.t == wire.TypeResult) && jobIDOf(f) == "k1"
		})
		if f.t == wire.TypeCancelAck {
			if ca := decode[wire.CancelAck](t, f); !ca.WasRunning {
				t.Fatalf("cancel ack %+v", ca)
			}
			sawAck = true
			continue
		}
		if !sawAck {
			t.Fatal("Result arrived before CancelAck")
		}
		r := decode[wire.Result](t, f)
		if r.Status != wire.StatusCancelled || !r.WasCancelled || r.WasTimeout || r.ExitCode != nil || r.StoppedBy != wire.StoppedBySIGTERM {
			t.Fatalf("result %+v", r)
		}
		break
	}
	waitGone(t, pid)

	d.send(wire.TypeCancel, wire.Cancel{JobID: "nope"})
	if ca := decode[wire.CancelAck](t, d.expectType(wire.TypeCancelAck, "nope")); ca.WasRunning {
		t.Fatalf("cancel of unknown job: %+v", ca)
	}
	// The finished job is unknown too.
	d.send(wire.TypeCancel, wire.Cancel{JobID: "k1"})
	if ca := decode[wire.CancelAck](t, d.expectType(wire.TypeCancelAck, "k1")); ca.WasRunning {
		t.Fatalf("cancel of finished job: %+v", ca)
	}
}

func TestPathEscape(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wt := filepath.Join(base, "wt")
	outside := filepath.Join(base, "outside")
	for _, dir := range []string{wt + "/sub", outside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		wt + "/link":   outside,      // absolute target outside
		wt + "/a":      "b",          // chain: a -> b -> ../outside
		wt + "/b":      "../outside", //
		wt + "/inner":  "sub",        // stays inside
		base + "/wtln": "wt",         // a symlink to the worktree itself
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}

	d := startRunner(t, okAck(1))
	for i, tc := range []struct {
		name      string
		cwd       string
		files     []string
		offending string
	}{
		{"cwd absolute outside", outside, nil, outside},
		{"cwd relative escape", "../outside", nil, "../outside"},
		{"cwd via symlink", "link", nil, "link"},
		{"file absolute outside", "", []string{"sub/ok", "/etc/passwd"}, "/etc/passwd"},
		{"file relative escape", "", []string{"../outside/x"}, "../outside/x"},
		{"file via symlink", "", []string{"link/secret"}, "link/secret"},
		{"file via symlink chain", "", []string{"a/f"}, "a/f"},
		{"file dotdot after symlink", "", []string{"link/../x"}, "link/../x"},
		{"file relative to cwd escapes", "sub", []string{"../../outside/y"}, "../../outside/y"},
		{"file missing tail escapes", "", []string{"nope/../../outside"}, "nope/../../outside"},
	} {
		marker := filepath.Join(base, fmt.Sprintf("marker-%d", i))
		o := d.run(wire.Job{JobID: fmt.Sprintf("p%d", i), Command: "touch " + marker, WorktreeDir: wt, Cwd: tc.cwd, FilePaths: tc.files})
		if o.ack.Accepted || o.ack.Error == nil || !strings.Contains(*o.ack.Error, fmt.Sprintf("%q", tc.offending)) {
			t.Errorf("%s: ack %+v (error %v), want a rejection naming %q", tc.name, o.ack, deref(o.ack.Error), tc.offending)
			continue
		}
		r := o.res
		if r.Status != wire.StatusError || r.ExitCode != nil || r.Output != *o.ack.Error {
			t.Errorf("%s: result %+v", tc.name, r)
		}
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the command ran (marker: %v)", tc.name, err)
		}
	}

	// Allowed: paths that stay inside, including through an inner symlink
	// and through a symlinked worktree_dir.
	for i, tc := range []struct {
		wt, cwd, pwd string
		files        []string
	}{
		{wt, "", wt, []string{"new/file.txt", "../wt/sub/x", wt + "/sub", "inner/z", "."}},
		{wt, "sub", wt + "/sub", []string{"f", "../link-free"}},
		{wt, "inner", wt + "/sub", nil},
		{base + "/wtln", "", wt, []string{"sub/q"}},
	} {
		marker := filepath.Join(base, fmt.Sprintf("ok-%d", i))
		o := d.run(wire.Job{JobID: fmt.Sprintf("ok%d", i), Command: "touch " + marker + " && pwd -P", WorktreeDir: tc.wt, Cwd: tc.cwd, FilePaths: tc.files})
		if !o.ack.Accepted || o.res.Status != wire.StatusSuccess {
			t.Errorf("allowed case %d: ack %+v (%v) result %+v", i, o.ack, deref(o.ack.Error), o.res)
			continue
		}
		if got := strings.TrimSpace(o.stdout); got != tc.pwd {
			t.Errorf("allowed case %d: ran in %q, want %q", i, got, tc.pwd)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("allowed case %d: command did not run: %v", i, err)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func TestOutputTruncation(t *testing.T) {
	d := startRunner(t, okAck(1))
	o := d.run(wire.Job{JobID: "big", Command: "head -c 100000 /dev/zero | tr '\\0' a", MaxOutputBytes: 1000})
	want := strings.Repeat("a", 1000) + "\n[orchestrd: output truncated at 1000 bytes]"
	if o.res.Output != want {
		t.Fatalf("output (%d bytes) ends %q", len(o.res.Output), o.res.Output[max(0, len(o.res.Output)-60):])
	}
	// The cap is on what is kept, not on what is streamed.
	if o.stdout != strings.Repeat("a", 100000) {
		t.Fatalf("streamed %d bytes, want all 100000", len(o.stdout))
	}
	// The pipe kept being drained, so the writer did not die of SIGPIPE.
	if o.res.Status != wire.StatusSuccess {
		t.Fatalf("result %+v", o.res.Status)
	}

	// The default cap is 1 MiB; chunks are at most 32 KiB.
	o = d.run(wire.Job{JobID: "default", Command: "head -c 1100000 /dev/zero | tr '\\0' b; echo tail"})
	wantLen := 1<<20 + len("\n[orchestrd: output truncated at 1048576 bytes]")
	if len(o.res.Output) != wantLen || !strings.HasSuffix(o.res.Output, "b\n[orchestrd: output truncated at 1048576 bytes]") {
		t.Fatalf("output %d bytes, want %d", len(o.res.Output), wantLen)
	}
	for _, c := range o.chunks {
		if len(c.Chunk) > 32<<10 || len(c.Chunk) == 0 {
			t.Fatalf("chunk of %d bytes", len(c.Chunk))
		}
	}
	if len(o.stdout) != 1100000+len("tail\n") {
		t.Fatalf("streamed %d bytes, want all %d", len(o.stdout), 1100000+len("tail\n"))
	}

	// Exactly at the cap is not truncated.
	o = d.run(wire.Job{JobID: "exact", Command: "printf 12345", MaxOutputBytes: 5})
	if o.res.Output != "12345" {
		t.Fatalf("output %q", o.res.Output)
	}
}

func TestResultFitsFrameLimit(t *testing.T) {
	ack := okAck(1)
	ack.Config.MaxFrameBytes = 64 << 10
	d := startRunner(t, ack)
	o := d.run(wire.Job{JobID: "fit", Command: "head -c 200000 /dev/zero | tr '\\0' c", MaxOutputBytes: 150000})
	if !strings.Contains(o.res.Output, "to fit the frame limit]") || len(o.res.Output) > 64<<10 {
		t.Fatalf("output of %d bytes", len(o.res.Output))
	}
	for _, c := range o.chunks {
		if n := len(c.Chunk)*4 + 100; n > 64<<10 {
			t.Fatalf("chunk of %d bytes may exceed the frame limit", len(c.Chunk))
		}
	}
}

func TestEnvOverride(t *testing.T) {
	t.Setenv("ORCHESTRD_RT_INHERITED", "inherited")
	t.Setenv("ORCHESTRD_RT_OVERRIDE", "old")
	bin := t.TempDir()
	if err := os.WriteFile(bin+"/orchestrd-rt-tool", []byte("#!/bin/sh\necho tool:$ORCHESTRD_RT_OVERRIDE\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ORCHESTRD_RT_SECRET", "sk-not-for-jobs")
	ack := okAck(1)
	// The lane's inherit_env and env, as the daemon's HandshakeAck carries them.
	ack.Config.InheritEnv = []string{"ORCHESTRD_RT_INHERITED", "ORCHESTRD_RT_OVER*"}
	ack.Config.Env = map[string]string{"ORCHESTRD_RT_LANE": "lane", "ORCHESTRD_RT_NEW": "from-lane"}
	d := startRunner(t, ack)
	o := d.run(wire.Job{JobID: "env", Command: `echo "$ORCHESTRD_RT_INHERITED|$ORCHESTRD_RT_OVERRIDE|$ORCHESTRD_RT_NEW|$ORCHESTRD_RT_LANE|$ORCHESTRD_RT_SECRET"`,
		Env: map[string]string{"ORCHESTRD_RT_OVERRIDE": "new", "ORCHESTRD_RT_NEW": "fresh"}})
	if o.stdout != "inherited|new|fresh|lane|\n" {
		t.Fatalf("stdout %q", o.stdout)
	}
	// argv[0] is looked up in the job's PATH.
	o = d.run(wire.Job{JobID: "path", Argv: []string{"orchestrd-rt-tool"},
		Env: map[string]string{"PATH": bin + ":" + os.Getenv("PATH"), "ORCHESTRD_RT_OVERRIDE": "x"}})
	if o.res.Status != wire.StatusSuccess || o.stdout != "tool:x\n" {
		t.Fatalf("result %+v", o.res)
	}
}

func TestSlotsFull(t *testing.T) {
	d := startRunner(t, okAck(1))
	d.send(wire.TypeJob, wire.Job{JobID: "s1", Argv: []string{"sleep", "300"}})
	if a := d.jobAck("s1"); !a.Accepted {
		t.Fatalf("ack %+v", a)
	}
	o := d.run(wire.Job{JobID: "s2", Command: "touch " + d.dir + "/s2"})
	if o.ack.Accepted || deref(o.ack.Error) != "no free slot" {
		t.Fatalf("ack %+v", o.ack)
	}
	if o.res.Status != wire.StatusError || o.res.ExitCode != nil {
		t.Fatalf("result %+v", o.res)
	}
	if _, err := os.Stat(d.dir + "/s2"); err == nil {
		t.Fatal("rejected job ran")
	}
	d.send(wire.TypeCancel, wire.Cancel{JobID: "s1"})
	if r := d.collect("s1").res; r.Status != wire.StatusCancelled {
		t.Fatalf("s1 result %+v", r)
	}
	// The slot is free again once the Result is sent.
	if r := d.run(wire.Job{JobID: "s3", Argv: []string{"true"}}).res; r.Status != wire.StatusSuccess {
		t.Fatalf("s3 result %+v", r)
	}
}

func TestConcurrentJobs(t *testing.T) {
	const n = 4
	d := startRunner(t, okAck(n))
	for i := range n {
		d.send(wire.TypeJob, wire.Job{JobID: fmt.Sprintf("c%d", i), Command: "echo $N; echo e$N >&2", Env: map[string]string{"N": fmt.Sprint(i)}})
	}
	for i := range n {
		o := d.collect(fmt.Sprintf("c%d", i))
		if o.res.Status != wire.StatusSuccess || o.stdout != fmt.Sprintf("%d\n", i) || o.stderr != fmt.Sprintf("e%d\n", i) {
			t.Fatalf("job %d: %+v stdout %q stderr %q", i, o.res, o.stdout, o.stderr)
		}
	}
}

func TestShutdownCancelsRunning(t *testing.T) {
	d := startRunner(t, okAck(2))
	d.send(wire.TypeJob, wire.Job{JobID: "sd", Command: "echo $$; exec sleep 300"})
	pid := atoiLine(t, d.waitStdout("sd", 1))
	d.send(wire.TypeShutdown, wire.Shutdown{})
	r := decode[wire.Result](t, d.expectType(wire.TypeResult, "sd"))
	if r.Status != wire.StatusCancelled || !r.WasCancelled || r.ExitCode != nil {
		t.Fatalf("result %+v", r)
	}
	if err := d.waitRun(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	waitGone(t, pid)
	d.waitEOF()
}

func TestContextCancelShutsDown(t *testing.T) {
	d := startRunner(t, okAck(1))
	d.send(wire.TypeJob, wire.Job{JobID: "cc", Command: "echo $$; exec sleep 300"})
	pid := atoiLine(t, d.waitStdout("cc", 1))
	d.cancel()
	r := decode[wire.Result](t, d.expectType(wire.TypeResult, "cc"))
	if r.Status != wire.StatusCancelled || !r.WasCancelled {
		t.Fatalf("result %+v", r)
	}
	if err := d.waitRun(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	waitGone(t, pid)
}

func TestSocketClosedKillsJobs(t *testing.T) {
	d := startRunner(t, okAck(1))
	pidfile := d.dir + "/pidfile"
	d.send(wire.TypeJob, wire.Job{JobID: "bg", Command: "echo $$; sleep 300 & echo $! > " + pidfile + "; echo $!; wait"})
	lines := strings.Fields(d.waitStdout("bg", 2))
	shPid, grandPid := atoiLine(t, lines[0]), atoiLine(t, lines[1])
	b, err := os.ReadFile(pidfile)
	if err != nil || atoiLine(t, string(b)) != grandPid {
		t.Fatalf("pidfile %q (%v), want %d", b, err, grandPid)
	}
	if !alive(grandPid) {
		t.Fatalf("grandchild %d is not running before the close", grandPid)
	}
	d.conn.Close()
	err = d.waitRun()
	if err == nil {
		t.Fatal("Run returned nil after the daemon closed the socket")
	}
	t.Logf("Run: %v", err)
	waitGone(t, shPid)
	waitGone(t, grandPid)
}

func TestBackgroundChildDiesWithJob(t *testing.T) {
	d := startRunner(t, okAck(1))
	start := time.Now()
	o := d.run(wire.Job{JobID: "bgc", Command: "sleep 300 & echo $!"})
	if o.res.Status != wire.StatusSuccess {
		t.Fatalf("result %+v", o.res)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("result took %v", time.Since(start))
	}
	waitGone(t, atoiLine(t, o.stdout))
}

func TestEscapedChildDoesNotHoldResult(t *testing.T) {
	// To a Loopr daemon (its output read), and to orchestrd's (spliced).
	for _, a := range []*wire.HandshakeAck{okAck(1), rawAck(1 << 20)} {
		escapedChildDoesNotHoldResult(t, a)
	}
}

func escapedChildDoesNotHoldResult(t *testing.T, a *wire.HandshakeAck) {
	d := startRunner(t, a)
	start := time.Now()
	// The escaped process writes its pid only after setsid, and the job
	// exits only once it sees the pid, so the pipes are held for sure.
	f := d.dir + "/escaped"
	o := d.run(wire.Job{JobID: "esc", Command: "setsid sh -c 'echo $$ > " + f + "; exec sleep 30' & while [ ! -s " + f + " ]; do sleep 0.01; done; cat " + f})
	took := time.Since(start)
	pid := atoiLine(t, o.stdout)
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
	if !alive(pid) {
		t.Fatalf("escaped process %d is not running", pid)
	}
	if o.res.Status != wire.StatusSuccess || took > 5*time.Second {
		t.Fatalf("result %+v after %v", o.res, took)
	}
	// What it might still write is not read, and the Result says so.
	if !o.res.OutputCut {
		t.Fatalf("result %+v: output_cut not set", o.res)
	}
	t.Logf("result after %v with an escaped process holding the pipes", took)
}

func TestHeartbeat(t *testing.T) {
	ack := okAck(1)
	ack.Config.HeartbeatIntervalMs = 20
	d := startRunner(t, ack, func(o *Options) { o.HeartbeatInterval = time.Hour })
	d.send(wire.TypeJob, wire.Job{JobID: "hb", Argv: []string{"sleep", "300"}})
	d.jobAck("hb")
	var hb wire.Heartbeat
	d.expect("Heartbeat with one active job", func(f rawFrame) bool {
		if f.t != wire.TypeHeartbeat {
			return false
		}
		hb = decode[wire.Heartbeat](t, f)
		return hb.ActiveJobs == 1
	})
	if hb.MemoryBytes < 1<<20 || hb.MemoryBytes > 1<<40 || hb.UptimeSecs > 60 {
		t.Fatalf("heartbeat %+v", hb)
	}
	d.send(wire.TypeHeartbeatAck, wire.HeartbeatAck{Timestamp: uint64(time.Now().UnixMilli())})
	d.send(wire.TypeCancel, wire.Cancel{JobID: "hb"})
	d.collect("hb")
	d.expect("Heartbeat with no active job", func(f rawFrame) bool {
		return f.t == wire.TypeHeartbeat && decode[wire.Heartbeat](t, f).ActiveJobs == 0
	})
}

func TestHeartbeatIntervalOption(t *testing.T) {
	d := startRunner(t, okAck(1), func(o *Options) { o.HeartbeatInterval = 10 * time.Millisecond })
	d.expect("Heartbeat", func(f rawFrame) bool { return f.t == wire.TypeHeartbeat })
	d.expect("second Heartbeat", func(f rawFrame) bool { return f.t == wire.TypeHeartbeat })
}

func TestBadFramesIgnored(t *testing.T) {
	d := startRunner(t, okAck(1))
	raw := func(typ byte, payload string) {
		if _, err := d.conn.Write(wire.AppendFrame(nil, wire.MsgType(typ), []byte(payload))); err != nil {
			t.Fatal(err)
		}
	}
	raw(0x99, `{"what":"ever"}`)
	raw(byte(wire.TypeJob), `{not json`)
	raw(byte(wire.TypeCancel), `[1,2]`)
	raw(byte(wire.TypeHandshake), `{}`)
	raw(byte(wire.TypeHeartbeatAck), `{"timestamp":1}`)
	// Undecodable, but the job id is readable: rejected rather than lost.
	raw(byte(wire.TypeJob), `{"job_id":"typo","argv":"not-a-list"}`)
	o := d.collect("typo")
	if o.ack.Accepted || o.res.Status != wire.StatusError {
		t.Fatalf("outcome %+v", o)
	}
	if r := d.run(wire.Job{JobID: "after", Argv: []string{"true"}}).res; r.Status != wire.StatusSuccess {
		t.Fatalf("result %+v", r)
	}
}

func TestFrameTooLargeEndsRun(t *testing.T) {
	ack := okAck(1)
	ack.Config.MaxFrameBytes = 1024
	d := startRunner(t, ack)
	if _, err := d.conn.Write(wire.AppendFrame(nil, wire.TypeJob, make([]byte, 2048))); err != nil {
		t.Fatal(err)
	}
	if err := d.waitRun(); !errors.Is(err, wire.ErrFrameTooLarge) {
		t.Fatalf("Run = %v, want ErrFrameTooLarge", err)
	}
}

func TestDialFailure(t *testing.T) {
	err := Run(context.Background(), Options{Lane: "x", Socket: t.TempDir() + "/none.sock", Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "none.sock") {
		t.Fatalf("Run = %v", err)
	}
}
