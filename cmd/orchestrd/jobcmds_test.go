package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// `orchestrd job ID` shows a job's record: readable by default, the record
// as job.get gives it with --json; an unknown id says so.
func TestJobCommandShowsTheRecord(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	id := d.submit(api.JobSpec{Lane: "net", Command: "printf 'one\\ntwo\\n'; exit 3"})
	d.wait(id)

	out, errOut, code := runCLI(t, "job", "--home", d.home, id)
	if code != 0 {
		t.Fatalf("job: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"job         " + id, "state       failed, exit 3", "lane        net",
		"command     printf 'one\\ntwo\\n'; exit 3", "output      8 B", "\n  one\n  two\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("job %s does not show %q:\n%s", id, want, out)
		}
	}

	out, errOut, code = runCLI(t, "job", id, "--json", "--home", d.home)
	var rec map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil {
		t.Fatalf("job --json: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if rec["id"] != id || rec["output"] != "one\ntwo\n" || rec["exit_code"] != float64(3) || rec["output_bytes"] != float64(8) {
		t.Fatalf("job --json: %v", rec)
	}

	// A running job's record holds no output yet: no output member.
	running := d.submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "30"}})
	d.waitRunning(running)
	out, _, code = runCLI(t, "job", "--home", d.home, "--json", running)
	rec = nil
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec["state"] != "running" {
		t.Fatalf("job --json of a running job: exit %d\n%s", code, out)
	}
	if _, has := rec["output"]; has {
		t.Fatalf("a running job's record shows output %q", rec["output"])
	}
	d.mustCall("job.cancel", map[string]any{"id": running}, nil)

	if _, errOut, code := runCLI(t, "job", "--home", d.home, "j-nope-1"); code != exitFailure || !strings.Contains(errOut, `no job has an id that starts with "j-nope-1"`) {
		t.Fatalf("job of an unknown id: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "job", "--home", d.home); code != exitUsage || !strings.Contains(errOut, "job ID") {
		t.Fatalf("job without an id: exit %d, stderr %q", code, errOut)
	}
}

// `orchestrd wait ID` waits for the job's end and exits as `run` would
// have: its exit code, 128+n for a signal, 124 for its timeout; with
// --timeout it gives up first with 75, the job still running.
func TestWaitCommandExitsWithTheJobs(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	for _, tc := range []struct {
		spec api.JobSpec
		code int
		say  string
	}{
		{api.JobSpec{Lane: "net", Command: "exit 0"}, 0, ""},
		{api.JobSpec{Lane: "net", Command: "exit 7"}, 7, ""},
		{api.JobSpec{Lane: "net", Command: "kill -TERM $$"}, 128 + int(syscall.SIGTERM), "killed by signal SIGTERM"},
		{api.JobSpec{Lane: "net", Argv: []string{"sleep", "30"}, TimeoutMs: 100}, exitTimeout, "timed out"},
	} {
		id := d.submit(tc.spec)
		_, errOut, code := runCLI(t, "wait", "--home", d.home, id)
		if code != tc.code || !strings.Contains(errOut, tc.say) {
			t.Errorf("wait for %v: exit %d, stderr %q; want %d saying %q", tc.spec, code, errOut, tc.code, tc.say)
		}
	}

	// wait blocks until the end: started before the job ends, it exits
	// with the job's code once it does.
	id := d.submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "30"}})
	w := exec.Command(binary, "wait", "--home", d.home, "--json", id)
	var wout strings.Builder
	w.Stdout = &wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- w.Wait() }()
	// --timeout gives up with 75 while the job runs on.
	_, errOut, code := runCLI(t, "wait", "--home", d.home, "--timeout", "200ms", id)
	if code != exitStillRunning || !strings.Contains(errOut, "still") || !strings.Contains(errOut, "orchestrd cancel "+id) {
		t.Fatalf("wait --timeout: exit %d, stderr %q", code, errOut)
	}
	d.mustCall("job.cancel", map[string]any{"id": id}, nil)
	select {
	case err := <-waited:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitCancelled {
			t.Fatalf("wait for a job cancelled meanwhile: %v, want exit %d", err, exitCancelled)
		}
	case <-time.After(30 * time.Second):
		w.Process.Kill()
		t.Fatal("wait did not return when its job ended")
	}
	var rec api.JobRecord
	if err := json.Unmarshal([]byte(wout.String()), &rec); err != nil || rec.ID != id || rec.State != api.StateCancelled {
		t.Fatalf("wait --json printed %q (%v)", wout.String(), err)
	}

	if _, errOut, code := runCLI(t, "wait", "--home", d.home, "j-nope-1"); code != exitFailure || !strings.Contains(errOut, `no job has an id that starts with "j-nope-1"`) {
		t.Fatalf("wait for an unknown id: exit %d, stderr %q", code, errOut)
	}
}

// `orchestrd job ID` of a job that wrote a megabyte of NULs says it is
// binary in one line (it printed four megabytes of \x00), of one that
// wrote a long text shows its last lines, each bounded; `logs ID` writes
// either whole, byte for byte.
func TestJobCommandShowsBinaryAsSuch(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	const mib = 1 << 20
	bin := d.submit(api.JobSpec{Lane: "net", Command: "head -c 1048576 /dev/zero", MaxOutputBytes: 2 * mib})
	if rec := d.wait(bin); rec.State != api.StateSucceeded || rec.OutputBytes != mib {
		t.Fatalf("the NUL job ended %s with %d bytes", rec.State, rec.OutputBytes)
	}
	out, errOut, code := runCLI(t, "job", "--home", d.home, bin)
	want := "(binary output, 1048576 bytes: orchestrd logs " + bin + ")"
	if code != 0 || len(out) > 4096 || !strings.Contains(out, want) || strings.Contains(out, `\x00`) {
		t.Fatalf("job of a megabyte of NULs: exit %d, stderr %q, %d bytes, want %q:\n%.2000s", code, errOut, len(out), want, out)
	}
	out, errOut, code = runCLI(t, "logs", "--home", d.home, bin)
	if code != 0 || out != strings.Repeat("\x00", mib) {
		t.Fatalf("logs of a megabyte of NULs: exit %d, stderr %q, %d bytes", code, errOut, len(out))
	}

	// 3000 lines, the last one 100 KiB long without a newline.
	text := d.submit(api.JobSpec{Lane: "net", MaxOutputBytes: 2 * mib,
		Command: `i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done; head -c 102400 /dev/zero | tr '\0' y`})
	d.wait(text)
	out, errOut, code = runCLI(t, "job", "--home", d.home, text)
	if code != 0 || len(out) > 4096 || !strings.Contains(out, "\n  line 2999\n  ...yyyy") || strings.Contains(out, "line 2990\n") || !strings.Contains(out, "\n  line 2991\n") ||
		!strings.Contains(out, "orchestrd logs "+text) || strings.Contains(out, "binary") {
		t.Fatalf("job of a long text: exit %d, stderr %q, %d bytes:\n%.3000s", code, errOut, len(out), out)
	}
	out, _, code = runCLI(t, "logs", text, "--home", d.home) // its flags after the ID too
	if code != 0 || !strings.HasPrefix(out, "line 0\nline 1\n") || !strings.HasSuffix(out, "line 2999\n"+strings.Repeat("y", 102400)) {
		t.Fatalf("logs of a long text: exit %d, %d bytes", code, len(out))
	}
}
