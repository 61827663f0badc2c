package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// follow runs `orchestrd events -f args...` on home with the real clock
// and returns once the CLI has read the clock (so whatever is emitted from
// then on is "from now"). stop cancels it and returns its exit code.
func followEvents(t *testing.T, home string, args ...string) (out *notifyBuffer, stop func() int) {
	t.Helper()
	var once sync.Once
	started := make(chan struct{})
	env := eventsEnv{loc: time.UTC, now: func() time.Time {
		now := time.Now()
		once.Do(func() { close(started) })
		return now
	}}
	ctx, cancel := context.WithCancel(context.Background())
	out = &notifyBuffer{wrote: make(chan struct{}, 1)}
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- runEvents(ctx, append([]string{"-f"}, args...), home, out, &errb, env) }()
	stopped := false
	stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("events -f %v exited %d: %s", args, code, errb.String())
			}
			return code
		case <-time.After(eventsWaitTimeout):
			t.Fatal("events -f did not stop")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	select {
	case <-started:
	case code := <-done:
		stopped = true
		t.Fatalf("events -f %v exited %d before following: %s", args, code, errb.String())
	case <-time.After(eventsWaitTimeout):
		t.Fatal("events -f never read the clock")
	}
	return out, stop
}

// printedLanes is the lane column of human output, one entry a line.
func printedLanes(out string) []string {
	var lanes []string
	for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := eventColumns(ln); len(f) > 3 {
			lanes = append(lanes, f[3])
		}
	}
	return lanes
}

// --follow starts from now (issue 6: it printed the whole history first);
// -n N and --since give a tail of the history before following.
func TestEventsFollowStartsNow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want string // lanes printed: the history's tail, then the new events
	}{
		{"from now", nil, "new new-started"},
		{"-n 2", []string{"-n", "2"}, "h3 h4 new new-started"},
		{"-n 0", []string{"-n", "0"}, "new new-started"},
		{"-n beyond the history", []string{"-n", "99"}, "h1 h2 h3 h4 new new-started"},
		{"--since", []string{"--since", "2025-11-21T03:02:00Z"}, "h3 h4 new new-started"},
		{"--since and -n", []string{"--since", "2025-11-21T03:01:00Z", "-n", "1"}, "h4 new new-started"},
		{"-n with a filter", []string{"-n", "1", "--kind", "lane.started"}, "h2 new-started"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			path := filepath.Join(home, "events.ndjson")
			// The history, at logT0, logT0+1m, ...
			writeEventLog(t, path, []eventlog.Event{lanes.LaneRecovered{Lane: "h1"}, lanes.LaneStarted{Lane: "h2"},
				lanes.LaneRecovered{Lane: "h3"}, lanes.LaneRecovered{Lane: "h4"}}, nil)
			b := openEventBus(t, eventlog.Options{Path: path})
			out, stop := followEvents(t, home, c.args...)
			b.Emit(lanes.LaneRecovered{Lane: "new"})
			b.Emit(lanes.LaneStarted{Lane: "new-started"})
			out.waitFor(t, "new-started")
			stop()
			if got := strings.Join(printedLanes(out.String()), " "); got != c.want {
				t.Fatalf("printed lanes %q, want %q:\n%s", got, c.want, out)
			}
		})
	}
}

// -n N without --follow prints the last N matching events.
func TestEventsTail(t *testing.T) {
	t.Parallel()
	home := eventsHome(t, []eventlog.Event{
		lanes.JobQueued{JobID: "j1", Lane: "a"},   // seq 1
		lanes.JobQueued{JobID: "j2", Lane: "b"},   // 2
		lanes.JobQueued{JobID: "j3", Lane: "a"},   // 3
		lanes.LaneRecovered{Lane: "a"},            // 4
		lanes.JobFinished{JobID: "j1", Lane: "a"}, // 5
		lanes.JobQueued{JobID: "j4", Lane: "b"},   // 6
	}, nil)
	wantSeqs(t, home, []seqCase{
		{[]string{"-n", "2"}, "5 6"},
		{[]string{"-n", "1", "--lane", "a"}, "5"},
		{[]string{"-n", "2", "--kind", "job.queued"}, "3 6"},
		{[]string{"-n", "100"}, "1 2 3 4 5 6"},
		{[]string{"-n", "0"}, ""},
		{[]string{"-n", "3", "--since", "2025-11-21T03:04:00Z"}, "5 6"},
	})
	code, out, _ := runEventsTest(t, context.Background(), home, "--json", "-n", "1")
	if code != 0 || !strings.HasPrefix(out, `{"ts":`) || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"j4"`) {
		t.Fatalf("--json -n 1: code %d %q", code, out)
	}
	for _, bad := range []string{"-1", "x", ""} {
		code, out, errs := runEventsTest(t, context.Background(), home, "-n", bad)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "want a number of events >= 0") {
			t.Errorf("-n %q: code %d stdout %q stderr %q", bad, code, out, errs)
		}
	}
}

// Connection churn stays in the log but is not printed unless asked for
// (issue 6: 2,000 connections made 4,000 lines that drowned the rest).
func TestEventsHidesConnectionChurn(t *testing.T) {
	t.Parallel()
	home := eventsHome(t, []eventlog.Event{
		control.ConnOpened{ConnID: "c1"},                          // 1
		lanes.LaneRecovered{Lane: "a"},                            // 2
		control.ConnClosed{ConnID: "c1", Reason: "eof"},           // 3
		eventlog.ConnRefused{Reason: "uid"},                       // 4
		eventlog.ConnProtocolError{Peer: "control", Error: "bad"}, // 5
		control.ConnOpened{ConnID: "c2"},                          // 6
	}, nil)
	wantSeqs(t, home, []seqCase{
		{nil, "2 4 5"},
		{[]string{"--json"}, "2 4 5"},
		{[]string{"--kind", "conn.*"}, "1 3 4 5 6"},
		{[]string{"--kind", "conn.opened"}, "1 6"},
		{[]string{"--kind", "*"}, "1 2 3 4 5 6"},
		{[]string{"--kind", "lane.*,conn.closed"}, "2 3"},
		{[]string{"-n", "1"}, "5"},
	})
	// Only churn in the log: the "nothing matched" note says why.
	churn := eventsHome(t, []eventlog.Event{control.ConnOpened{ConnID: "c1"}, control.ConnClosed{ConnID: "c1"}}, nil)
	code, out, errs := runEventsTest(t, context.Background(), churn)
	if code != 0 || out != "" || !strings.Contains(errs, "2 connection events not shown, --kind 'conn.*' shows them") {
		t.Fatalf("only churn: code %d stdout %q stderr %q", code, out, errs)
	}
}
