package eventlog

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func runTestCLI(t *testing.T, ctx context.Context, home string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runCLI(ctx, args, home, &out, &errb, testEnv(time.UTC))
	return code, out.String(), errb.String()
}

func testEnv(loc *time.Location) cliEnv {
	return cliEnv{now: func() time.Time { return t0.Add(time.Hour) }, loc: loc}
}

func cliHome(t *testing.T, evs []Event, extra map[int]string) string {
	home := t.TempDir()
	writeLog(t, filepath.Join(home, "events.ndjson"), evs, extra)
	return home
}

func TestCLIHuman(t *testing.T) {
	evs := []Event{
		DaemonStarted{Pid: 1, Version: "v1", Home: "/h", Lanes: []string{"review", "build-long-name"}},
		RunnerExited{Lane: "review", RunnerID: "review-1", Pid: 42, ExitCode: intp(137), Signal: "SIGKILL", UptimeMs: 5000, Cause: "killed_memory", Spawned: true},
		RunnerRestartScheduled{Lane: "review", RunnerID: "review-1", DelayMs: 500, RestartsInWindow: 2, Reason: "exited", Policy: "crash_loop"},
		RunnerKilled{Lane: "build-long-name", RunnerID: "b-1", Pid: 7, Reason: "memory_limit", Detail: `rss 2.1 GiB > 2 GiB, "hard"`},
		JobFinished{JobID: "j1", Lane: "review", State: "failed", Error: "boom", DurationMs: 900},
		ActorPanicked{Actor: "lane/review", Panic: "index out of range [3] with length 3", Stack: "goroutine 1 [running]:\nmain.main()\n\t/x.go:1\n", Directive: "restart"},
		LaneRecovered{Lane: "review"},
	}
	code, out, errs := runTestCLI(t, context.Background(), cliHome(t, evs, nil))
	if code != 0 || errs != "" {
		t.Fatalf("code %d stderr %q", code, errs)
	}
	want := `03:00:00.000       1  daemon.started            -         pid=1 home=/h lanes=["review","build-long-name"] version=v1
03:01:00.000       2  runner.exited             review    runner_id=review-1 pid=42 cause=killed_memory exit_code=137 signal=SIGKILL uptime_ms=5000 spawned=true
03:02:00.000       3  runner.restart_scheduled  review    runner_id=review-1 reason=exited policy=crash_loop delay_ms=500 restarts_in_window=2
03:03:00.000       4  runner.killed             build-long-name  runner_id=b-1 pid=7 reason=memory_limit detail="rss 2.1 GiB > 2 GiB, \"hard\""
03:04:00.000       5  job.finished              review           job_id=j1 state=failed error=boom duration_ms=900
03:05:00.000       6  actor.panicked            -                actor=lane/review panic="index out of range [3] with length 3" directive=restart
    stack:
        goroutine 1 [running]:
        main.main()
        	/x.go:1
03:06:00.000       7  lane.recovered            review
`
	if out != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
	// Columns line up: every event line has its kind at the same offset.
	for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(ln, " ") {
			continue
		}
		if ln[20:22] != "  " || ln[22] == ' ' || ln[46:48] != "  " {
			t.Errorf("misaligned: %q", ln)
		}
	}
}

func TestCLITimeZoneAndDays(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, "events.ndjson")
	var buf bytes.Buffer
	for i, ts := range []time.Time{t0.Add(-25 * time.Hour), t0.Add(-2 * time.Hour), t0} {
		buf.Write(appendLine(nil, ts, uint64(i+1), "lane.recovered", []byte(`{"lane":"a"}`)))
		buf.WriteByte('\n')
	}
	os.WriteFile(path, buf.Bytes(), 0o600)
	var out, errb bytes.Buffer
	zone := time.FixedZone("XST", 5*3600)
	if code := runCLI(context.Background(), nil, home, &out, &errb, testEnv(zone)); code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	// t0 is 03:00 UTC = 08:00 XST on the 21st; "now" is the 21st.
	// A day line precedes the first line (not today) and marks the change.
	want := `-- Thu 2025-11-20 XST --
07:00:00.000       1  lane.recovered            a
-- Fri 2025-11-21 XST --
06:00:00.000       2  lane.recovered            a
08:00:00.000       3  lane.recovered            a
`
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	_, utc, _ := runTestCLI(t, context.Background(), home, "--utc", "--since", "2025-11-21T02:00:00Z")
	if utc != "03:00:00.000       3  lane.recovered            a\n" {
		t.Fatalf("--utc: %q", utc)
	}
}

func TestCLIJSON(t *testing.T) {
	home := cliHome(t, sampleEvents(), nil)
	code, out, _ := runTestCLI(t, context.Background(), home, "--json", "--kind", "*")
	file, _ := os.ReadFile(filepath.Join(home, "events.ndjson"))
	if code != 0 || out != string(file) {
		t.Fatalf("--json output differs from the file (code %d)", code)
	}
	code, out, _ = runTestCLI(t, context.Background(), "", "--json", "--home", home, "--kind", "job.queued")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"kind":"job.queued"`) {
		t.Fatalf("--home/--kind: code %d %q", code, out)
	}
}

func TestCLIFilters(t *testing.T) {
	home := cliHome(t, []Event{
		JobQueued{JobID: "j1", Lane: "a"},                    // 03:00
		RunnerExited{Lane: "a", RunnerID: "a-1"},             // 03:01
		JobQueued{JobID: "j2", Lane: "b"},                    // 03:02
		JobFinished{JobID: "j1", Lane: "a", State: "ok"},     // 03:03
		RunnerSpawned{Lane: "b", RunnerID: "b-1"},            // 03:04
		JobDispatched{JobID: "j2", Lane: "b", RunnerID: "x"}, // 03:05
	}, nil)
	for _, c := range []struct {
		args []string
		seqs string
	}{
		{[]string{"--kind", "runner.*"}, "2 5"},
		{[]string{"--kind", "job.queued,job.finished", "--kind", "runner.exited"}, "1 2 3 4"},
		{[]string{"--lane", "b"}, "3 5 6"},
		{[]string{"--job", "j2"}, "3 6"},
		{[]string{"--since", "2025-11-21T03:04:00Z"}, "5 6"},
		{[]string{"--since", "57m"}, "4 5 6"}, // now is 04:00
		{[]string{"--since", "03:03"}, "4 5 6"},
		{[]string{"-f=false", "--lane", "a", "--kind", "job.*"}, "1 4"},
	} {
		code, out, errs := runTestCLI(t, context.Background(), home, c.args...)
		var seqs []string
		for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(ln); len(f) > 1 {
				seqs = append(seqs, f[1])
			}
		}
		if code != 0 || strings.Join(seqs, " ") != c.seqs {
			t.Errorf("%v: code %d seqs %v, want %s; stderr %q", c.args, code, seqs, c.seqs, errs)
		}
	}
}

func TestCLIErrors(t *testing.T) {
	home := cliHome(t, []Event{LaneRecovered{Lane: "a"}}, map[int]string{0: "garbage"})
	for _, c := range []struct {
		name   string
		home   string
		args   []string
		code   int
		stderr string // substring; must be one line
	}{
		{"bad flag", home, []string{"--nope"}, 2, "orchestrd events: flag provided but not defined: -nope (see --help)"},
		{"missing value", home, []string{"--kind"}, 2, "flag needs an argument: -kind"},
		{"positional", home, []string{"extra"}, 2, `unexpected argument "extra"`},
		{"bad since", home, []string{"--since", "yesterday"}, 2, `bad --since "yesterday"`},
		{"no home", "", nil, 2, "no home directory; pass --home DIR"},
		{"missing log", filepath.Join(home, "nope"), nil, 1, "no event log at " + filepath.Join(home, "nope", "events.ndjson") + " (is the daemon running with --home " + filepath.Join(home, "nope") + "?)"},
		{"malformed noted", home, nil, 0, "skipped 1 malformed line(s)"},
		{"unknown kind warned", home, []string{"--kind", "job.finish"}, 0, `warning: --kind "job.finish" matches no known kind`},
		{"no match noted", home, []string{"--lane", "zzz"}, 0, "no matching events (1 read from"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runTestCLI(t, context.Background(), c.home, c.args...)
			if code != c.code || !strings.Contains(errs, c.stderr) {
				t.Fatalf("code %d, stderr %q; want %d, %q", code, errs, c.code, c.stderr)
			}
			if c.code == 2 && (strings.Count(errs, "\n") != 1 || out != "") {
				t.Fatalf("usage error should be one line on stderr: %q / %q", errs, out)
			}
		})
	}
}

func TestCLIHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		code, out, errs := runTestCLI(t, context.Background(), "/srv/orchestrd", arg)
		// The format of the other client commands: "usage: ...", a blank
		// line, "options:" and the flags.
		if code != 0 || errs != "" || !strings.HasPrefix(out, "usage: orchestrd events [--home DIR] ") ||
			!strings.Contains(out, "]\n\noptions:\n  -f\t") || !strings.Contains(out, "\n  -follow\n") ||
			!strings.Contains(out, "\n  -n N\n") || !strings.Contains(out, "(default: /srv/orchestrd)") {
			t.Fatalf("%s: code %d stderr %q\n%s", arg, code, errs, out)
		}
	}
}

// notifyBuffer is a concurrency-safe writer that signals each write.
type notifyBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *notifyBuffer) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for !strings.Contains(b.String(), s) {
		select {
		case <-b.wrote:
		case <-deadline:
			t.Fatalf("timed out waiting for %q in\n%s", s, b.String())
		}
	}
}

func TestCLIFollow(t *testing.T) {
	home := t.TempDir()
	b := openTest(t, Options{Path: filepath.Join(home, "events.ndjson"), MaxBytes: 600})
	b.Emit(LaneStarted{Lane: "a", Runners: 1})
	ctx, cancel := context.WithCancel(context.Background())
	out := &notifyBuffer{wrote: make(chan struct{}, 1)}
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- runCLI(ctx, []string{"-f", "--lane", "a"}, home, out, &errb, testEnv(time.UTC)) }()
	out.waitFor(t, "lane.started")
	for i := range 5 { // rotates along the way
		b.Emit(JobQueued{JobID: "job-" + string(rune('0'+i)), Lane: "a"})
		b.Emit(JobQueued{JobID: "other", Lane: "b"})
		out.waitFor(t, "job_id=job-"+string(rune('0'+i)))
	}
	cancel() // Ctrl-C
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("follow exited %d: %s", code, errb.String())
		}
	case <-time.After(waitTimeout):
		t.Fatal("follow did not stop")
	}
	if strings.Contains(out.String(), "other") {
		t.Fatalf("lane filter ignored while following:\n%s", out)
	}
}
