package eventlog

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait in these tests; nothing sleeps for
// correctness.
const waitTimeout = 10 * time.Second

// collector is a Sink that keeps every record and signals each delivery.
type collector struct {
	mu   sync.Mutex
	recs []*Record
	ch   chan *Record
}

func newCollector() *collector { return &collector{ch: make(chan *Record, 1<<16)} }

func (c *collector) Deliver(r *Record) {
	c.mu.Lock()
	c.recs = append(c.recs, r)
	c.mu.Unlock()
	select {
	case c.ch <- r:
	default:
	}
}

func (c *collector) records() []*Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Record(nil), c.recs...)
}

func (c *collector) kinds() []string {
	var ks []string
	for _, r := range c.records() {
		ks = append(ks, r.Kind)
	}
	return ks
}

// waitFor waits for a delivered record satisfying ok.
func (c *collector) waitFor(t *testing.T, ok func(*Record) bool) *Record {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case r := <-c.ch:
			if ok(r) {
				return r
			}
		case <-deadline:
			t.Fatalf("timed out waiting for a record; got kinds %v", c.kinds())
			return nil
		}
	}
}

func openTest(t *testing.T, opts Options) *Bus {
	t.Helper()
	b, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func logPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "home", "events.ndjson")
}

// readAll reads the whole log (rotated files included) with Read.
func readAll(t *testing.T, path string, q Query) ([]Line, Stats) {
	t.Helper()
	var lines []Line
	st, err := ReadWithStats(context.Background(), path, q, func(l Line) error {
		lines = append(lines, l)
		return nil
	})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return lines, st
}

func rawLines(t *testing.T, name string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for len(data) > 0 {
		i := 0
		for i < len(data) && data[i] != '\n' {
			i++
		}
		if i == len(data) {
			t.Fatalf("%s: last line has no newline: %q", name, data)
		}
		out = append(out, data[:i])
		data = data[i+1:]
	}
	return out
}

func intp(i int) *int       { return &i }
func int32p(i int32) *int32 { return &i }

// sampleEvents has one populated value of each of eventlog's own kinds
// (kinds.go) and of each stand-in (testevents_test.go).
func sampleEvents() []Event {
	return []Event{
		daemonStarted{Pid: 1, Version: "v1", Home: "/h", Lanes: []string{"a", "b"}},
		runnerSpawned{Lane: "review", RunnerID: "review-1", Pid: 42, Attempt: 1, Network: "none"},
		runnerSpawnFailed{Lane: "review", RunnerID: "review-1", Error: "exec: not found"},
		runnerExited{Lane: "review", RunnerID: "review-1", Pid: 42, ExitCode: intp(137), Signal: "SIGKILL", UptimeMs: 5000, Cause: "killed_memory", Spawned: true},
		runnerRestartScheduled{Lane: "review", RunnerID: "review-1", DelayMs: 500},
		laneStarted{Lane: "review", Runners: 2},
		laneRecovered{Lane: "review"},
		jobQueued{JobID: "j1", Lane: "review", Queued: 3},
		jobDispatched{JobID: "j1", Lane: "review", RunnerID: "review-1"},
		jobFinished{JobID: "j1", Lane: "review", State: "failed", ExitCode: int32p(1), DurationMs: 900, Record: map[string]any{"id": "j1"}},
		jobOrphaned{JobID: "j1", Lane: "review", RunnerID: "review-1"},
		jobOutput{JobID: "j1", Stream: "stdout", Data: "hello\n"},
		connOpened{ConnID: "c1", Pid: 99, UID: 1000},
		ConnRefused{Socket: "/h/control.sock", Pid: 98, UID: 1001, Reason: "uid"},
		ConnRefused{Socket: "127.0.0.1:7878", Peer: "127.0.0.1:40000", Pid: 99, UID: 1000, Method: "plan.approve", Reason: "started"},
		ConnProtocolError{ConnID: "c1", Peer: "control", Error: "bad json", Fatal: true},
		subscriberOverflowed{ConnID: "c1", Policy: "drop_oldest", Dropped: 10},
		actorPanicked{Actor: "lane/review", Panic: "index out of range", Stack: "goroutine 1 [running]:\nmain.main()\n\t/x.go:1"},
		LogDropped{Dropped: 3},
	}
}

// fieldsOf is ev's own JSON object, decoded the way ParseLine decodes.
func fieldsOf(t *testing.T, ev Event) map[string]any {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ParseLine(append([]byte(`{"ts":"2025-01-01T00:00:00Z","seq":1,"kind":"x",`), b[1:]...))
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return l.Fields
}
