package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 11, 21, 3, 0, 0, 0, time.UTC)

// writeLog writes lines built from events with fixed timestamps (t0 + i
// minutes) and seqs, plus any extra raw lines after the index given.
func writeLog(t *testing.T, path string, evs []Event, extra map[int]string) {
	t.Helper()
	var buf bytes.Buffer
	for i, ev := range evs {
		if s, ok := extra[i]; ok {
			buf.WriteString(s + "\n")
		}
		body, err := marshalValue(ev)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(appendLine(nil, t0.Add(time.Duration(i)*time.Minute), uint64(i+1), ev.Kind(), body))
		buf.WriteByte('\n')
	}
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func seqsOf(lines []Line) []uint64 {
	var s []uint64
	for _, l := range lines {
		s = append(s, l.Seq)
	}
	return s
}

func TestReadFilters(t *testing.T) {
	path := logPath(t)
	evs := []Event{
		daemonStarted{Pid: 1},                                            // 1 03:00
		laneStarted{Lane: "a"},                                           // 2 03:01
		laneStarted{Lane: "b"},                                           // 3 03:02
		jobQueued{JobID: "j1", Lane: "a"},                                // 4 03:03
		jobDispatched{JobID: "j1", Lane: "a", RunnerID: "a-1"},           // 5 03:04
		jobQueued{JobID: "j2", Lane: "b"},                                // 6 03:05
		runnerExited{Lane: "a", RunnerID: "a-1", Cause: "killed_memory"}, // 7 03:06
		jobOrphaned{JobID: "j1", Lane: "a", RunnerID: "a-1"},             // 8 03:07
		jobFinished{JobID: "j2", Lane: "b", State: "succeeded"},          // 9 03:08
		runnerRestartScheduled{Lane: "a", RunnerID: "a-1", DelayMs: 500}, // 10 03:09
	}
	writeLog(t, path, evs, map[int]string{
		3: `not json at all`,
		6: `{"ts":"yesterday","seq":99,"kind":"x"}`,
		8: `{"ts":"2025-11-21T03:07:30Z","kind":"no.seq"}`,
	})
	cases := []struct {
		name string
		q    Query
		want []uint64
	}{
		{"all", Query{}, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"kind exact", Query{Kinds: []string{"job.queued"}}, []uint64{4, 6}},
		{"kind prefix", Query{Kinds: []string{"runner.*"}}, []uint64{7, 10}},
		{"kinds mixed", Query{Kinds: []string{"lane.*", "job.finished"}}, []uint64{2, 3, 9}},
		{"kind star", Query{Kinds: []string{"*"}}, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"lane", Query{Lane: "a"}, []uint64{2, 4, 5, 7, 8, 10}},
		{"job", Query{Job: "j1"}, []uint64{4, 5, 8}},
		{"since", Query{Since: t0.Add(7 * time.Minute)}, []uint64{8, 9, 10}},
		{"since exact ts is inclusive", Query{Since: t0.Add(9 * time.Minute)}, []uint64{10}},
		{"combined", Query{Kinds: []string{"job.*"}, Lane: "a", Since: t0.Add(4 * time.Minute)}, []uint64{5, 8}},
		{"no match", Query{Lane: "nope"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines, st := readAll(t, path, c.q)
			if got := seqsOf(lines); !slices.Equal(got, c.want) {
				t.Fatalf("seqs %v, want %v", got, c.want)
			}
			if st.Malformed != 3 || st.Lines != 10 || st.Matched != uint64(len(c.want)) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
	lines, _ := readAll(t, path, Query{Job: "j1"})
	l := lines[1]
	if l.Kind != "job.dispatched" || !l.TS.Equal(t0.Add(4*time.Minute)) || l.Fields["runner_id"] != "a-1" ||
		l.Fields["ts"] != nil || !bytes.HasPrefix(l.Raw, []byte(`{"ts":"2025-11-21T03:04:00Z","seq":5,`)) {
		t.Fatalf("line %+v", l)
	}
}

func TestReadErrors(t *testing.T) {
	_, err := ReadWithStats(context.Background(), filepath.Join(t.TempDir(), "events.ndjson"), Query{}, func(Line) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing log: %v", err)
	}
	_, err = ReadWithStats(context.Background(), filepath.Join(t.TempDir(), "nodir", "events.ndjson"), Query{Follow: true}, func(Line) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing dir with follow: %v", err)
	}

	path := logPath(t)
	writeLog(t, path, []Event{laneRecovered{Lane: "a"}, laneRecovered{Lane: "b"}}, nil)
	stop := errors.New("stop")
	n := 0
	err = Read(context.Background(), path, Query{}, func(Line) error { n++; return stop })
	if err != stop || n != 1 {
		t.Fatalf("fn error: %v after %d lines", err, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Read(ctx, path, Query{Follow: true}, func(Line) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled follow: %v", err)
	}
}

func TestReadOnlyRotatedFiles(t *testing.T) {
	path := logPath(t)
	writeLog(t, rotatedName(path, 1), []Event{laneRecovered{Lane: "a"}}, nil)
	lines, _ := readAll(t, path, Query{})
	if len(lines) != 1 {
		t.Fatalf("%d lines", len(lines))
	}
}

func TestReadLongAndTornLines(t *testing.T) {
	old := maxLine
	maxLine = 1000
	defer func() { maxLine = old }()
	path := logPath(t)
	b := openTest(t, Options{Path: path})
	b.Emit(laneRecovered{Lane: "a"})
	b.Emit(runnerSpawnFailed{Lane: "a", Error: strings.Repeat("e", 200<<10)}) // > maxLine, > read buffer
	b.Emit(laneRecovered{Lane: "b"})
	b.Close()
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"ts":"2025-11-21T03:00:00Z","seq":4,"kind":"torn`) // no newline
	f.Close()
	lines, st := readAll(t, path, Query{})
	if got := seqsOf(lines); !slices.Equal(got, []uint64{1, 3}) || st.Malformed != 2 {
		t.Fatalf("seqs %v stats %+v", got, st)
	}
}

// follower runs Read with Follow and passes lines to a channel.
type follower struct {
	lines  chan Line
	errc   chan error
	cancel context.CancelFunc
}

func follow(t *testing.T, path string, q Query) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{lines: make(chan Line, 1<<16), errc: make(chan error, 1), cancel: cancel}
	q.Follow = true
	go func() {
		f.errc <- Read(ctx, path, q, func(l Line) error { f.lines <- l; return nil })
	}()
	t.Cleanup(func() { f.stop(t) })
	return f
}

// next waits for n lines.
func (f *follower) next(t *testing.T, n int) []Line {
	t.Helper()
	var out []Line
	deadline := time.After(waitTimeout)
	for len(out) < n {
		select {
		case l := <-f.lines:
			out = append(out, l)
		case err := <-f.errc:
			t.Fatalf("Read returned early: %v (after %d lines)", err, len(out))
		case <-deadline:
			t.Fatalf("timed out: %d of %d lines (seqs %v)", len(out), n, seqsOf(out))
		}
	}
	return out
}

func (f *follower) stop(t *testing.T) {
	if f.cancel == nil {
		return
	}
	f.cancel()
	f.cancel = nil
	select {
	case err := <-f.errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Read ended with %v, want context.Canceled", err)
		}
	case <-time.After(waitTimeout):
		t.Error("Read did not return after cancel")
	}
}

func TestFollow(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path, MaxBytes: 4000, MaxFiles: 20})
	for i := range 3 {
		b.Emit(jobQueued{JobID: fmt.Sprint(i), Lane: "f"})
	}
	b.Emit(laneRecovered{Lane: "other"})
	f := follow(t, path, Query{Lane: "f"})
	f.next(t, 3)

	// Appended after start, then across many rotations. Emit in steps so
	// the follower never falls more than MaxFiles rotations behind.
	want := uint64(5)
	for step := range 20 {
		for range 25 {
			b.Emit(jobQueued{JobID: fmt.Sprint(step), Lane: "f"})
			b.Emit(laneRecovered{Lane: "other"}) // filtered out
		}
		for _, l := range f.next(t, 25) {
			if l.Seq != want {
				t.Fatalf("step %d: seq %d, want %d", step, l.Seq, want)
			}
			want += 2
		}
	}
	if _, err := os.Stat(rotatedName(path, 5)); err != nil {
		t.Fatalf("expected several rotations: %v", err)
	}
	f.stop(t)
	select {
	case l := <-f.lines:
		t.Fatalf("extra line %s", l.Raw)
	default:
	}
}

func TestFollowPollingFallback(t *testing.T) {
	old := inotifyInit
	inotifyInit = func() (int, error) { return -1, errors.New("no inotify here") }
	defer func() { inotifyInit = old }()
	path := logPath(t)
	b := openTest(t, Options{Path: path, MaxBytes: 250, MaxFiles: 10})
	b.Emit(laneRecovered{Lane: "a"})
	f := follow(t, path, Query{})
	f.next(t, 1)
	for i := range 6 { // two lines per file: a few rotations
		b.Emit(jobQueued{JobID: fmt.Sprint(i), Lane: "a"})
		if l := f.next(t, 1)[0]; l.Seq != uint64(i+2) {
			t.Fatalf("seq %d, want %d", l.Seq, i+2)
		}
	}
	if _, err := os.Stat(rotatedName(path, 2)); err != nil {
		t.Fatalf("expected rotations: %v", err)
	}
}

func TestFollowStartsBeforeLogExists(t *testing.T) {
	path := logPath(t)
	// Only a rotated file: Read starts, then the daemon creates the log.
	writeLog(t, rotatedName(path, 1), []Event{laneRecovered{Lane: "old"}}, nil)
	f := follow(t, path, Query{})
	if l := f.next(t, 1)[0]; l.Fields["lane"] != "old" {
		t.Fatalf("got %s", l.Raw)
	}
	b := openTest(t, Options{Path: path})
	b.Emit(laneRecovered{Lane: "new"})
	if l := f.next(t, 1)[0]; l.Fields["lane"] != "new" || l.Seq != 2 {
		t.Fatalf("got %s", l.Raw)
	}
}

// TestFollowCatchUp drives the follow loop's rotation handling by hand: the
// follower is idle while the log rotates several times.
func TestFollowCatchUp(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxFiles int
		lost     bool
	}{
		{"kept", 20, false},
		{"rotated out", 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := logPath(t)
			b := openTest(t, Options{Path: path, MaxBytes: 1000, MaxFiles: c.maxFiles})
			b.Emit(laneRecovered{Lane: "a"})
			b.Close()
			var got []uint64
			r := &reader{ctx: context.Background(), path: path, match: newKindMatcher(nil),
				fn: func(l Line) error { got = append(got, l.Seq); return nil }}
			cur, err := openLogFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.drain(cur); err != nil {
				t.Fatal(err)
			}
			b = openTest(t, Options{Path: path, MaxBytes: 1000, MaxFiles: c.maxFiles})
			for i := range 60 { // ~6 rotations
				b.Emit(jobQueued{JobID: fmt.Sprint(i), Lane: "a"})
			}
			b.Close()
			for range 10 {
				next, err := r.checkRotation(cur)
				if err != nil {
					t.Fatal(err)
				}
				cur.f.Close()
				if next == nil {
					break
				}
				cur = next
				r.drain(cur)
			}
			defer cur.f.Close()
			for i := 1; i < len(got); i++ {
				if got[i] <= got[i-1] {
					t.Fatalf("out of order or duplicated: %v", got)
				}
			}
			if got[len(got)-1] != 61 {
				t.Fatalf("did not reach the end: %v", got)
			}
			contiguous := len(got) == 61
			if contiguous == c.lost {
				t.Fatalf("contiguous=%v with lost=%v: %v", contiguous, c.lost, got)
			}
		})
	}
}

func TestFollowTruncated(t *testing.T) {
	path := logPath(t)
	writeLog(t, path, []Event{laneRecovered{Lane: "a"}, laneRecovered{Lane: "b"}}, nil)
	var got []string
	r := &reader{ctx: context.Background(), path: path, match: newKindMatcher(nil),
		fn: func(l Line) error { got = append(got, l.Fields["lane"].(string)); return nil }}
	cur, _ := openLogFile(path)
	defer cur.f.Close()
	r.drain(cur)
	writeLog(t, path, []Event{laneRecovered{Lane: "c"}}, nil) // truncates and rewrites
	r.drain(cur)
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("got %v", got)
	}
}
