package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/daemon"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The events command's own tests: they write logs and run the command in
// this process (TestEventsCLIAgainstRealDaemon runs it against a daemon).

// eventsWaitTimeout bounds every wait in these tests; nothing sleeps for
// correctness.
const eventsWaitTimeout = 10 * time.Second

// logT0 is the time of a test log's first line.
var logT0 = time.Date(2025, 11, 21, 3, 0, 0, 0, time.UTC)

// logLine is a log line in the writer's format: ts, seq and kind, then
// body's fields.
func logLine(ts time.Time, seq uint64, kind string, body []byte) []byte {
	b := []byte(`{"ts":"` + ts.UTC().Format(time.RFC3339Nano) + `","seq":` + strconv.FormatUint(seq, 10) + `,"kind":`)
	k, _ := json.Marshal(kind)
	b = append(b, k...)
	if inner := bytes.TrimSpace(body[1:]); len(inner) > 0 && inner[0] != '}' {
		b = append(b, ',')
		return append(b, inner...)
	}
	return append(b, '}')
}

// writeEventLog writes lines built from events with fixed timestamps
// (logT0 + i minutes) and seqs, plus any extra raw lines after the index
// given.
func writeEventLog(t *testing.T, path string, evs []eventlog.Event, extra map[int]string) {
	t.Helper()
	var buf bytes.Buffer
	for i, ev := range evs {
		if s, ok := extra[i]; ok {
			buf.WriteString(s + "\n")
		}
		var body bytes.Buffer
		enc := json.NewEncoder(&body)
		enc.SetEscapeHTML(false) // as the bus writes
		if err := enc.Encode(ev); err != nil {
			t.Fatal(err)
		}
		buf.Write(logLine(logT0.Add(time.Duration(i)*time.Minute), uint64(i+1), ev.Kind(), body.Bytes()))
		buf.WriteByte('\n')
	}
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// openEventBus opens an event bus that the test closes at its end.
func openEventBus(t *testing.T, opts eventlog.Options) *eventlog.Bus {
	t.Helper()
	b, err := eventlog.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// registeredEvents is a zero value of every registered kind.
func registeredEvents() []eventlog.Event {
	var evs []eventlog.Event
	for _, k := range eventlog.Kinds() {
		evs = append(evs, eventlog.Registered(k))
	}
	return evs
}

func runEventsTest(t *testing.T, ctx context.Context, home string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runEvents(ctx, args, home, &out, &errb, eventsTestEnv(time.UTC))
	return code, out.String(), errb.String()
}

func eventsTestEnv(loc *time.Location) eventsEnv {
	return eventsEnv{now: func() time.Time { return logT0.Add(time.Hour) }, loc: loc}
}

func eventsHome(t *testing.T, evs []eventlog.Event, extra map[int]string) string {
	home := t.TempDir()
	writeEventLog(t, filepath.Join(home, "events.ndjson"), evs, extra)
	return home
}

func TestEventsHuman(t *testing.T) {
	t.Parallel()
	killed := 137
	evs := []eventlog.Event{
		daemon.DaemonStarted{Pid: 1, Version: "v1", Home: "/h", Lanes: []string{"review", "build-long-name"}},
		lanes.RunnerExited{Lane: "review", RunnerID: "review-1", Pid: 42, ExitCode: &killed, Signal: "SIGKILL", UptimeMs: 5000, Cause: "killed_memory", Spawned: true},
		lanes.RunnerRestartScheduled{Lane: "review", RunnerID: "review-1", DelayMs: 500, RestartsInWindow: 2, Reason: "exited", Policy: "crash_loop"},
		lanes.RunnerKilled{Lane: "build-long-name", RunnerID: "b-1", Pid: 7, Reason: "memory_limit", Detail: `rss 2.1 GiB > 2 GiB, "hard"`},
		lanes.JobFinished{JobID: "j1", Lane: "review", State: "failed", Error: "boom", DurationMs: 900},
		daemon.ActorPanicked{Actor: "lane/review", Panic: "index out of range [3] with length 3", Stack: "goroutine 1 [running]:\nmain.main()\n\t/x.go:1\n", Directive: "restart"},
		lanes.LaneRecovered{Lane: "review"},
	}
	code, out, errs := runEventsTest(t, context.Background(), eventsHome(t, evs, nil))
	if code != 0 || errs != "" {
		t.Fatalf("code %d stderr %q", code, errs)
	}
	want := `03:00:00.000       1  daemon.started              -         pid=1 failed=0 home=/h lanes=["review","build-long-name"] recovered=false requeued=0 version=v1
03:01:00.000       2  runner.exited               review    runner_id=review-1 pid=42 cause=killed_memory exit_code=137 signal=SIGKILL uptime_ms=5000 spawned=true
03:02:00.000       3  runner.restart_scheduled    review    runner_id=review-1 reason=exited policy=crash_loop delay_ms=500 restarts_in_window=2
03:03:00.000       4  runner.killed               build-long-name  runner_id=b-1 pid=7 reason=memory_limit detail="rss 2.1 GiB > 2 GiB, \"hard\""
03:04:00.000       5  job.finished                review           job_id=j1 state=failed error=boom duration_ms=900
03:05:00.000       6  actor.panicked              -                actor=lane/review panic="index out of range [3] with length 3" directive=restart
    stack:
        goroutine 1 [running]:
        main.main()
        	/x.go:1
03:06:00.000       7  lane.recovered              review
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

func TestEventsTimeZoneAndDays(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	path := filepath.Join(home, "events.ndjson")
	var buf bytes.Buffer
	for i, ts := range []time.Time{logT0.Add(-25 * time.Hour), logT0.Add(-2 * time.Hour), logT0} {
		buf.Write(logLine(ts, uint64(i+1), "lane.recovered", []byte(`{"lane":"a"}`)))
		buf.WriteByte('\n')
	}
	os.WriteFile(path, buf.Bytes(), 0o600)
	var out, errb bytes.Buffer
	zone := time.FixedZone("XST", 5*3600)
	if code := runEvents(context.Background(), nil, home, &out, &errb, eventsTestEnv(zone)); code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	// logT0 is 03:00 UTC = 08:00 XST on the 21st; "now" is the 21st.
	// The first line is not from today: every line shows its date, so the
	// columns stay aligned (and a line read alone, as grep gives it, says
	// its day).
	want := `2025-11-20 07:00:00.000       1  lane.recovered              a
2025-11-21 06:00:00.000       2  lane.recovered              a
2025-11-21 08:00:00.000       3  lane.recovered              a
`
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	_, utc, _ := runEventsTest(t, context.Background(), home, "--utc", "--since", "2025-11-21T02:00:00Z")
	if utc != "03:00:00.000       3  lane.recovered              a\n" {
		t.Fatalf("--utc: %q", utc)
	}
}

// Lines of today show the time alone; a day that begins while following
// is marked by a line, the columns unmoved.
func TestEventsNewDayWhileFollowing(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	h := &humanPrinter{w: w, loc: time.UTC, today: "2025-11-21", kindW: 20, laneW: 4}
	for i, ts := range []time.Time{logT0, logT0.Add(21*time.Hour + 30*time.Minute)} {
		if err := h.print(eventlog.Line{TS: ts, Seq: uint64(i + 1), Kind: "lane.recovered", Fields: map[string]any{"lane": "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	want := `03:00:00.000       1  lane.recovered        a
-- Sat 2025-11-22 UTC --
00:30:00.000       2  lane.recovered        a
`
	if buf.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestEventsJSON(t *testing.T) {
	t.Parallel()
	home := eventsHome(t, registeredEvents(), nil)
	code, out, _ := runEventsTest(t, context.Background(), home, "--json", "--kind", "*")
	file, _ := os.ReadFile(filepath.Join(home, "events.ndjson"))
	if code != 0 || out != string(file) {
		t.Fatalf("--json output differs from the file (code %d)", code)
	}
	code, out, _ = runEventsTest(t, context.Background(), "", "--json", "--home", home, "--kind", "job.queued")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"kind":"job.queued"`) {
		t.Fatalf("--home/--kind: code %d %q", code, out)
	}
}

func TestEventsFilters(t *testing.T) {
	t.Parallel()
	home := eventsHome(t, []eventlog.Event{
		lanes.JobQueued{JobID: "j1", Lane: "a"},                    // 03:00
		lanes.RunnerExited{Lane: "a", RunnerID: "a-1"},             // 03:01
		lanes.JobQueued{JobID: "j2", Lane: "b"},                    // 03:02
		lanes.JobFinished{JobID: "j1", Lane: "a", State: "ok"},     // 03:03
		lanes.RunnerSpawned{Lane: "b", RunnerID: "b-1"},            // 03:04
		lanes.JobDispatched{JobID: "j2", Lane: "b", RunnerID: "x"}, // 03:05
	}, nil)
	wantSeqs(t, home, []seqCase{
		{[]string{"--kind", "runner.*"}, "2 5"},
		{[]string{"--kind", "job.queued,job.finished", "--kind", "runner.exited"}, "1 2 3 4"},
		{[]string{"--lane", "b"}, "3 5 6"},
		{[]string{"--job", "j2"}, "3 6"},
		{[]string{"--since", "2025-11-21T03:04:00Z"}, "5 6"},
		{[]string{"--since", "57m"}, "4 5 6"}, // now is 04:00
		{[]string{"--since", "03:03"}, "4 5 6"},
		{[]string{"-f=false", "--lane", "a", "--kind", "job.*"}, "1 4"},
	})
}

func TestEventsErrors(t *testing.T) {
	t.Parallel()
	home := eventsHome(t, []eventlog.Event{lanes.LaneRecovered{Lane: "a"}}, map[int]string{0: "garbage"})
	for _, c := range []struct {
		name   string
		home   string
		args   []string
		code   int
		stderr string // substring; must be one line
	}{
		{"bad flag", home, []string{"--zzz"}, 2, "orchestrd events: unknown flag --zzz (orchestrd events --help)"},
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
			code, out, errs := runEventsTest(t, context.Background(), c.home, c.args...)
			if code != c.code || !strings.Contains(errs, c.stderr) {
				t.Fatalf("code %d, stderr %q; want %d, %q", code, errs, c.code, c.stderr)
			}
			if c.code == 2 && (strings.Count(errs, "\n") != 1 || out != "") {
				t.Fatalf("usage error should be one line on stderr: %q / %q", errs, out)
			}
		})
	}
}

func TestEventsHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h"} {
		code, out, errs := runEventsTest(t, context.Background(), "/srv/orchestrd", arg)
		// The format of the other client commands: "usage: ...", a blank
		// line, "options:" and the flags.
		if code != 0 || errs != "" || !strings.HasPrefix(out, "usage: orchestrd events [--home DIR] ") ||
			!strings.Contains(out, "]\n\noptions:\n  -cluster\n") || !strings.Contains(out, "\n  -f\t") || !strings.Contains(out, "\n  -follow\n") ||
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
	deadline := time.After(eventsWaitTimeout)
	for !strings.Contains(b.String(), s) {
		select {
		case <-b.wrote:
		case <-deadline:
			t.Fatalf("timed out waiting for %q in\n%s", s, b.String())
		}
	}
}

func TestEventsFollow(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	b := openEventBus(t, eventlog.Options{Path: filepath.Join(home, "events.ndjson"), MaxBytes: 600})
	b.Emit(lanes.LaneStarted{Lane: "a", Runners: 1})
	ctx, cancel := context.WithCancel(context.Background())
	out := &notifyBuffer{wrote: make(chan struct{}, 1)}
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runEvents(ctx, []string{"-f", "--lane", "a"}, home, out, &errb, eventsTestEnv(time.UTC))
	}()
	out.waitFor(t, "lane.started")
	for i := range 5 { // rotates along the way
		b.Emit(lanes.JobQueued{JobID: "job-" + string(rune('0'+i)), Lane: "a"})
		b.Emit(lanes.JobQueued{JobID: "other", Lane: "b"})
		out.waitFor(t, "job_id=job-"+string(rune('0'+i)))
	}
	cancel() // Ctrl-C
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("follow exited %d: %s", code, errb.String())
		}
	case <-time.After(eventsWaitTimeout):
		t.Fatal("follow did not stop")
	}
	if strings.Contains(out.String(), "other") {
		t.Fatalf("lane filter ignored while following:\n%s", out)
	}
}

// seqCase is `orchestrd events` run with args, and the seqs it prints.
type seqCase struct {
	args []string
	seqs string
}

// wantSeqs runs `orchestrd events` on home with each case's args and
// checks that it exits 0 printing the events of the case's seqs.
func wantSeqs(t *testing.T, home string, cases []seqCase) {
	t.Helper()
	for _, c := range cases {
		code, out, errs := runEventsTest(t, context.Background(), home, c.args...)
		if seqs := printedSeqs(t, out); code != 0 || seqs != c.seqs {
			t.Errorf("%v: code %d seqs %q, want %q; stderr %q", c.args, code, seqs, c.seqs, errs)
		}
	}
}

// printedSeqs is the seqs of the events `orchestrd events` printed, joined
// with spaces: of a text line its second field, of a --json line its seq.
func printedSeqs(t *testing.T, out string) string {
	t.Helper()
	var seqs []string
	for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(ln, "{") {
			l, err := eventlog.ParseLine([]byte(ln))
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, strconv.FormatUint(l.Seq, 10))
			continue
		}
		if f := eventColumns(ln); len(f) > 1 {
			seqs = append(seqs, f[1])
		}
	}
	return strings.Join(seqs, " ")
}

// eventColumns is an event line of `orchestrd events` split at blanks,
// time first (its date, when the line shows one, left out); nil for a day
// line.
func eventColumns(ln string) []string {
	f := strings.Fields(ln)
	if len(f) > 0 && f[0] == "--" {
		return nil
	}
	if len(f) > 1 {
		if _, err := time.Parse(time.DateOnly, f[0]); err == nil {
			return f[1:]
		}
	}
	return f
}
