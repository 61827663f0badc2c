package eventlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"
)

func TestSeqContiguousUnderConcurrentEmit(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path})
	c := newCollector()
	b.Subscribe(nil, c)
	const goroutines, per = 8, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				b.Emit(jobQueued{JobID: fmt.Sprintf("g%d-%d", g, i), Lane: "l", Queued: i})
			}
		}()
	}
	wg.Wait()
	if got := b.Seq(); got != goroutines*per {
		t.Fatalf("Seq() = %d, want %d", got, goroutines*per)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	lines := rawLines(t, path)
	if len(lines) != goroutines*per {
		t.Fatalf("%d lines in file, want %d", len(lines), goroutines*per)
	}
	lastPer := map[string]int{}
	for i, raw := range lines {
		l, err := ParseLine(raw)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if l.Seq != uint64(i+1) {
			t.Fatalf("line %d has seq %d: file not in seq order", i, l.Seq)
		}
		// Per-goroutine emission order is preserved.
		var g, n int
		fmt.Sscanf(l.Fields["job_id"].(string), "g%d-%d", &g, &n)
		key := strconv.Itoa(g)
		if prev, ok := lastPer[key]; ok && n != prev+1 {
			t.Fatalf("goroutine %d: %d after %d", g, n, prev)
		}
		lastPer[key] = n
	}
	seen := map[uint64]bool{}
	for _, r := range c.records() {
		if seen[r.Seq] {
			t.Fatalf("seq %d delivered twice", r.Seq)
		}
		seen[r.Seq] = true
	}
	if len(seen) != goroutines*per {
		t.Fatalf("%d records delivered, want %d", len(seen), goroutines*per)
	}
}

func TestLineFormat(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path})
	before := time.Now()
	var logged []*Record
	for _, ev := range sampleEvents() {
		r := b.Emit(ev)
		if _, eph := ev.(Ephemeral); !eph {
			logged = append(logged, r)
		}
	}
	after := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	lines := rawLines(t, path)
	if len(lines) != len(logged) {
		t.Fatalf("%d lines, want %d", len(lines), len(logged))
	}
	for i, raw := range lines {
		r := logged[i]
		if !bytes.Equal(raw, r.Line) {
			t.Errorf("file line %d differs from Record.Line:\n%s\n%s", i, raw, r.Line)
		}
		prefix := fmt.Sprintf(`{"ts":"%s","seq":%d,"kind":"%s",`, r.TS.UTC().Format(time.RFC3339Nano), r.Seq, r.Kind)
		if !bytes.HasPrefix(raw, []byte(prefix)) {
			t.Errorf("line %d does not start with %s:\n%s", i, prefix, raw)
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, raw)
		}
		ts, err := time.Parse(time.RFC3339Nano, m["ts"].(string))
		if err != nil || ts.Location() != time.UTC {
			t.Errorf("line %d: ts %q not RFC3339Nano UTC (%v)", i, m["ts"], err)
		}
		if ts.Before(before.Add(-time.Second)) || ts.After(after.Add(time.Second)) {
			t.Errorf("line %d: ts %v outside the test", i, ts)
		}
		if m["seq"].(json.Number).String() != strconv.Itoa(i+1) || m["kind"] != r.Kind {
			t.Errorf("line %d: seq/kind %v %v", i, m["seq"], m["kind"])
		}
		delete(m, "ts")
		delete(m, "seq")
		delete(m, "kind")
		if want := fieldsOf(t, r.Event); !reflect.DeepEqual(m, want) {
			t.Errorf("line %d fields\n got %v\nwant %v", i, m, want)
		}
	}
}

func TestLineFormatEdgeCases(t *testing.T) {
	b := openTest(t, Options{})
	cases := []struct {
		ev   Event
		want string
	}{
		{emptyEvent{}, `"kind":"test.empty"}`},
		{scalarEvent(7), `"kind":"test.scalar","value":7}`},
		{badEvent{C: make(chan int)}, `"kind":"test.bad","eventlog_error":"json: unsupported type: chan int"}`},
		{htmlEvent{S: "a < b && c > d"}, `"kind":"test.html","s":"a < b && c > d"}`},
	}
	for _, c := range cases {
		r := b.Emit(c.ev)
		if !bytes.HasSuffix(r.Line, []byte(c.want)) {
			t.Errorf("%T: line %s, want suffix %s", c.ev, r.Line, c.want)
		}
		if _, err := ParseLine(r.Line); err != nil {
			t.Errorf("%T: %v", c.ev, err)
		}
	}
	if b.Emit(nil) != nil {
		t.Error("Emit(nil) != nil")
	}
}

type emptyEvent struct{}

func (emptyEvent) Kind() string { return "test.empty" }

type scalarEvent int

func (scalarEvent) Kind() string { return "test.scalar" }

type badEvent struct {
	C chan int `json:"c"`
}

func (badEvent) Kind() string { return "test.bad" }

type htmlEvent struct {
	S string `json:"s"`
}

func (htmlEvent) Kind() string { return "test.html" }

func TestEphemeralDeliveredNotLogged(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path})
	c := newCollector()
	b.Subscribe(nil, c)
	b.Emit(jobQueued{JobID: "j1", Lane: "l"})
	r := b.Emit(jobOutput{JobID: "j1", Stream: "stdout", Data: "line <1>\n"})
	b.Emit(jobQueued{JobID: "j2", Lane: "l"})
	if r.Seq != 0 || r.Line != nil || r.TS.IsZero() {
		t.Fatalf("ephemeral record: seq %d line %q ts %v", r.Seq, r.Line, r.TS)
	}
	if got := c.kinds(); !slices.Equal(got, []string{"job.queued", "job.output", "job.queued"}) {
		t.Fatalf("delivered %v", got)
	}
	want := `{"event":"job.output","data":{"job_id":"j1","stream":"stdout","data":"line <1>\n"}}` + "\n"
	if string(r.Wire()) != want {
		t.Fatalf("Wire() = %s, want %s", r.Wire(), want)
	}
	if b.Seq() != 2 {
		t.Fatalf("ephemeral event consumed a seq: Seq() = %d", b.Seq())
	}
	b.Close()
	lines, _ := readAll(t, path, Query{})
	if len(lines) != 2 || lines[0].Seq != 1 || lines[1].Seq != 2 {
		t.Fatalf("file has %d lines: %v", len(lines), lines)
	}
	for _, l := range lines {
		if l.Kind == "job.output" {
			t.Fatal("job.output in the log")
		}
	}
}

func TestWire(t *testing.T) {
	b := openTest(t, Options{Path: logPath(t)})
	c := newCollector()
	b.Subscribe(nil, c)

	r := b.Emit(runnerSpawned{Lane: "l", RunnerID: "l-1", Pid: 5, Attempt: 1, Network: "none"})
	want := `{"event":"runner.spawned","data":` + string(r.Line) + "}\n"
	if string(r.Wire()) != want {
		t.Fatalf("Wire() = %s\nwant %s", r.Wire(), want)
	}
	var ev struct {
		Event string          `json:"event"`
		Data  json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.Wire(), &ev); err != nil || ev.Event != "runner.spawned" {
		t.Fatalf("Wire not a control event: %v %+v", err, ev)
	}

	// job.finished: the log has the summary, the wire the whole record.
	rec := &struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		Output string `json:"output"`
	}{"j1", "succeeded", "all good"}
	r = b.Emit(jobFinished{JobID: "j1", Lane: "l", State: "succeeded", DurationMs: 10, Record: rec})
	rec.Output = "mutated after Emit" // must not show: Wire was computed at delivery
	wantWire := `{"event":"job.finished","data":{"job":{"id":"j1","state":"succeeded","output":"all good"}}}` + "\n"
	if string(r.Wire()) != wantWire {
		t.Fatalf("job.finished Wire() = %s\nwant %s", r.Wire(), wantWire)
	}
	if bytes.Contains(r.Line, []byte(`"job"`)) || bytes.Contains(r.Line, []byte("all good")) {
		t.Fatalf("job record leaked into the log line: %s", r.Line)
	}

	// Concurrent Wire callers get the same cached bytes.
	r = b.Emit(laneRecovered{Lane: "l"})
	var wg sync.WaitGroup
	outs := make([][]byte, 8)
	for i := range outs {
		wg.Add(1)
		go func() { defer wg.Done(); outs[i] = r.Wire() }()
	}
	wg.Wait()
	for _, o := range outs {
		if &o[0] != &outs[0][0] {
			t.Fatal("Wire not cached")
		}
	}
}

func TestSubscribePatterns(t *testing.T) {
	b := openTest(t, Options{})
	all, jobs, exact, star, multi := newCollector(), newCollector(), newCollector(), newCollector(), newCollector()
	b.Subscribe(nil, all)
	b.Subscribe([]string{"job.*"}, jobs)
	b.Subscribe([]string{"runner.exited"}, exact)
	b.Subscribe([]string{"*"}, star)
	b.Subscribe([]string{"lane.*", "daemon.started"}, multi)
	for _, ev := range sampleEvents() {
		b.Emit(ev)
	}
	b.Emit(jobless{})
	var wantAll, wantJobs, wantMulti []string
	for _, ev := range sampleEvents() {
		k := ev.Kind()
		wantAll = append(wantAll, k)
		if len(k) > 4 && k[:4] == "job." {
			wantJobs = append(wantJobs, k)
		}
		if k == "daemon.started" || k[:5] == "lane." {
			wantMulti = append(wantMulti, k)
		}
	}
	wantAll = append(wantAll, "jobless.x")
	for _, c := range []struct {
		name string
		c    *collector
		want []string
	}{
		{"all", all, wantAll}, {"*", star, wantAll}, {"job.*", jobs, wantJobs},
		{"exact", exact, []string{"runner.exited"}}, {"multi", multi, wantMulti},
	} {
		if got := c.c.kinds(); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v\nwant %v", c.name, got, c.want)
		}
	}
	if !slices.Contains(wantJobs, "job.output") {
		t.Error("job.* should include the ephemeral job.output")
	}
}

type jobless struct{}

func (jobless) Kind() string { return "jobless.x" } // "job.*" must not match "jobless.x"

func TestUnsubscribe(t *testing.T) {
	b := openTest(t, Options{})
	a, c := newCollector(), newCollector()
	unA := b.Subscribe(nil, a)
	b.Subscribe(nil, c)
	b.Emit(laneRecovered{Lane: "1"})
	unA()
	unA() // idempotent
	b.Emit(laneRecovered{Lane: "2"})
	if n := len(a.records()); n != 1 {
		t.Fatalf("unsubscribed sink got %d records", n)
	}
	if n := len(c.records()); n != 2 {
		t.Fatalf("remaining sink got %d records", n)
	}

	// Subscribing and unsubscribing while others emit is race-free.
	stop := testio.Hammer(4, func() bool { b.Emit(laneRecovered{Lane: "x"}); return true })
	for range 200 {
		un := b.Subscribe([]string{"lane.*"}, newCollector())
		un()
	}
	stop()
}

func TestSinkMayEmitAndPanic(t *testing.T) {
	b := openTest(t, Options{Path: logPath(t)})
	c := newCollector()
	// A sink that emits (like a subscriber reporting its own overflow) must
	// not deadlock; a panicking sink must not take down the emitter.
	b.Subscribe([]string{"conn.opened"}, SinkFunc(func(r *Record) {
		b.Emit(subscriberOverflowed{ConnID: "c", Policy: "disconnect", Dropped: 1})
	}))
	b.Subscribe([]string{"conn.opened"}, SinkFunc(func(*Record) { panic("bad sink") }))
	b.Subscribe(nil, c)
	b.Emit(connOpened{ConnID: "c"})
	if got := c.kinds(); !slices.Equal(got, []string{"subscriber.overflowed", "conn.opened"}) {
		t.Fatalf("got %v", got)
	}
}

func TestEmitAfterClose(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path})
	c := newCollector()
	b.Subscribe(nil, c)
	b.Emit(laneRecovered{Lane: "a"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	r := b.Emit(laneRecovered{Lane: "b"})
	if r.Seq != 2 || len(c.records()) != 2 {
		t.Fatalf("after Close: seq %d, %d delivered", r.Seq, len(c.records()))
	}
	if n := len(rawLines(t, path)); n != 1 {
		t.Fatalf("%d lines in file after Emit-after-Close, want 1", n)
	}
}

func TestCloseFlushesEverything(t *testing.T) {
	path := logPath(t)
	const n = 50000
	b := openTest(t, Options{Path: path, Buffer: n}) // room for all: nothing can drop
	for i := range n {
		b.Emit(jobQueued{JobID: strconv.Itoa(i), Lane: "l"})
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(rawLines(t, path)); got != n {
		t.Fatalf("%d lines after Close, want %d", got, n)
	}
}

func TestOpenPermsAndAppend(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "home")
	path := filepath.Join(dir, "events.ndjson")
	b := openTest(t, Options{Path: path})
	b.Emit(laneRecovered{Lane: "a"})
	b.Emit(laneRecovered{Lane: "b"})
	b.Close()
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, %v", st.Mode(), err)
	}
	st, err = os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, %v", st.Mode(), err)
	}

	// Reopening appends and continues seq.
	b2 := openTest(t, Options{Path: path})
	if b2.Seq() != 2 {
		t.Fatalf("reopened Seq() = %d, want 2", b2.Seq())
	}
	if r := b2.Emit(laneRecovered{Lane: "c"}); r.Seq != 3 {
		t.Fatalf("seq after reopen = %d", r.Seq)
	}
	b2.Close()
	lines, _ := readAll(t, path, Query{})
	if len(lines) != 3 || lines[2].Seq != 3 || lines[0].Fields["lane"] != "a" {
		t.Fatalf("after reopen: %+v", lines)
	}
}

func TestOpenAfterTornLine(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path})
	b.Emit(laneRecovered{Lane: "a"})
	b.Close()
	// A crash in the middle of a write leaves a partial line.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"ts":"2025-01-01T00:00:00Z","seq":2,"kind":"lane.rec`)
	f.Close()

	b2 := openTest(t, Options{Path: path})
	if b2.Seq() != 1 {
		t.Fatalf("Seq() after torn line = %d, want 1", b2.Seq())
	}
	b2.Emit(laneRecovered{Lane: "b"})
	b2.Close()
	lines, st := readAll(t, path, Query{})
	if len(lines) != 2 || lines[1].Seq != 2 || lines[1].Fields["lane"] != "b" || st.Malformed != 1 {
		t.Fatalf("lines %+v stats %+v", lines, st)
	}
}

func TestOpenSeqFromRotatedFile(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path, MaxBytes: 300})
	for range 10 {
		b.Emit(jobQueued{JobID: "j", Lane: "l"})
	}
	b.Close()
	rot := rawLines(t, rotatedName(path, 1))
	last, _ := ParseLine(rot[len(rot)-1])
	if last.Seq >= 10 {
		t.Fatalf("want the current file to hold the newest lines; .1 ends at %d", last.Seq)
	}
	os.Truncate(path, 0) // current empty: seq comes from events.ndjson.1
	b2 := openTest(t, Options{Path: path, MaxBytes: 300})
	if b2.Seq() != last.Seq {
		t.Fatalf("Seq() = %d, want %d", b2.Seq(), last.Seq)
	}
}

func TestRotation(t *testing.T) {
	path := logPath(t)
	const maxBytes, maxFiles = 2000, 2
	b := openTest(t, Options{Path: path, MaxBytes: maxBytes, MaxFiles: maxFiles})
	const n = 500
	for i := range n {
		b.Emit(jobQueued{JobID: fmt.Sprintf("job-%04d", i), Lane: "rot", Queued: i})
	}
	b.Close()

	if _, err := os.Stat(rotatedName(path, maxFiles+1)); !os.IsNotExist(err) {
		t.Fatalf("%s exists: more than MaxFiles kept", rotatedName(path, maxFiles+1))
	}
	var total int
	for _, name := range []string{rotatedName(path, 2), rotatedName(path, 1), path} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > maxBytes {
			t.Errorf("%s is %d bytes > MaxBytes", name, st.Size())
		}
		for _, raw := range rawLines(t, name) { // every file ends on a line boundary
			if _, err := ParseLine(raw); err != nil {
				t.Fatalf("%s: line split across files? %v: %q", name, err, raw)
			}
			total++
		}
	}
	lines, st := readAll(t, path, Query{})
	if st.Malformed != 0 || len(lines) != total {
		t.Fatalf("Read: %d lines (%d in files), %d malformed", len(lines), total, st.Malformed)
	}
	// What is kept is the newest, contiguous run ending at the last seq.
	for i, l := range lines {
		if want := uint64(n - len(lines) + i + 1); l.Seq != want {
			t.Fatalf("line %d seq %d, want %d", i, l.Seq, want)
		}
	}

	// A smaller MaxFiles on a later run removes the surplus.
	b = openTest(t, Options{Path: path, MaxBytes: maxBytes, MaxFiles: 1})
	for range 100 {
		b.Emit(jobQueued{JobID: "job-xxxx", Lane: "rot"})
	}
	b.Close()
	if _, err := os.Stat(rotatedName(path, 2)); !os.IsNotExist(err) {
		t.Fatal("events.ndjson.2 survived MaxFiles=1")
	}
}

func TestRotationOversizeLine(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path, MaxBytes: 200, MaxFiles: 5})
	b.Emit(laneRecovered{Lane: "a"})
	big := b.Emit(runnerSpawnFailed{Lane: "a", RunnerID: "a-1", Error: string(bytes.Repeat([]byte("x"), 500))})
	b.Emit(laneRecovered{Lane: "b"})
	b.Close()
	lines, st := readAll(t, path, Query{})
	if len(lines) != 3 || st.Malformed != 0 {
		t.Fatalf("%d lines, %d malformed", len(lines), st.Malformed)
	}
	// The oversize line is alone in its file.
	got := rawLines(t, rotatedName(path, 1))
	if len(got) != 1 || !bytes.Equal(got[0], big.Line) {
		t.Fatalf("events.ndjson.1 = %q", got)
	}
}

func TestDropCounting(t *testing.T) {
	path := logPath(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	b, err := open(Options{Path: path, Buffer: 4}, hooks{beforeWrite: func() {
		once.Do(func() {
			entered <- struct{}{}
			<-release // the disk is stuck
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newCollector()
	b.Subscribe([]string{"eventlog.dropped"}, c)

	b.Emit(jobQueued{JobID: "first"})
	select {
	case <-entered: // the writer holds "first" and is blocked
	case <-time.After(waitTimeout):
		t.Fatal("writer never wrote")
	}
	const emitted = 20
	start := time.Now()
	for i := 1; i < emitted; i++ {
		b.Emit(jobQueued{JobID: strconv.Itoa(i)})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Emit blocked on a stuck writer for %v", d)
	}
	const want = emitted - 1 - 4 // one with the writer, four queued
	if n := b.DroppedTotal(); n != want {
		t.Fatalf("DroppedTotal %d while the writer is stuck, want %d", n, want)
	}
	close(release)
	r := c.waitFor(t, func(*Record) bool { return true })
	if ev := r.Event.(LogDropped); ev.Dropped != want {
		t.Fatalf("eventlog.dropped %d, want %d", ev.Dropped, want)
	}
	if r.Seq != emitted+1 {
		t.Fatalf("dropped line seq %d, want %d", r.Seq, emitted+1)
	}
	b.Close()
	lines, _ := readAll(t, path, Query{})
	var seqs []uint64
	for _, l := range lines {
		seqs = append(seqs, l.Seq)
	}
	// first, the four that were queued, then the dropped line after the gap.
	if !slices.Equal(seqs, []uint64{1, 2, 3, 4, 5, emitted + 1}) {
		t.Fatalf("file seqs %v", seqs)
	}
	if last := lines[len(lines)-1]; last.Kind != "eventlog.dropped" || last.Fields["dropped"].(json.Number).String() != strconv.Itoa(want) {
		t.Fatalf("last line %s", last.Raw)
	}
	if n := b.DroppedTotal(); n != want { // not reset by the eventlog.dropped line
		t.Fatalf("DroppedTotal %d after the dropped line, want %d", n, want)
	}
}

// eventsOnlySink counts records and says it never reads their Wire.
type eventsOnlySink struct{ n atomic.Int64 }

func (s *eventsOnlySink) Deliver(*Record) { s.n.Add(1) }
func (s *eventsOnlySink) EventsOnly()     {}

// countedWire is a WireDataer that counts how often its data is made.
type countedWire struct{ made *atomic.Int64 }

func (countedWire) Kind() string { return "job.finished" }
func (e countedWire) WireData() any {
	e.made.Add(1)
	return map[string]int{"n": 1}
}

// An EventSink on a WireDataer kind costs the emitter no marshalling; a
// plain Sink beside it still gets the wire made before delivery.
func TestEventSinkSkipsWire(t *testing.T) {
	b := openTest(t, Options{})
	es := &eventsOnlySink{}
	b.Subscribe([]string{"job.finished"}, es)
	var made atomic.Int64
	b.Emit(countedWire{made: &made})
	if es.n.Load() != 1 || made.Load() != 0 {
		t.Fatalf("an EventSink alone: delivered %d, WireData made %d times; want 1, 0", es.n.Load(), made.Load())
	}
	c := newCollector()
	b.Subscribe([]string{"job.finished"}, c)
	r := b.Emit(countedWire{made: &made})
	if es.n.Load() != 2 || made.Load() != 1 {
		t.Fatalf("with a plain Sink too: delivered %d, WireData made %d times; want 2, 1", es.n.Load(), made.Load())
	}
	if !bytes.Contains(r.Wire(), []byte(`{"n":1}`)) || made.Load() != 1 {
		t.Fatalf("Wire %s (made %d times)", r.Wire(), made.Load())
	}
}

func TestWriteErrorCountsLostLines(t *testing.T) {
	path := logPath(t)
	var calls int
	var bus *Bus
	// The hook runs on the writer goroutine, so it may swap the file.
	b, err := open(Options{Path: path}, hooks{beforeWrite: func() {
		calls++
		switch calls {
		case 1: // this write fails: the file is read-only
			ro, _ := os.Open(os.DevNull)
			bus.w.f.Close()
			bus.w.f = ro
		case 2: // the disk is back
			bus.w.f.Close()
			bus.w.f, _, _ = openAppend(path)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	bus = b
	defer b.Close()
	c := newCollector()
	b.Subscribe([]string{"eventlog.dropped"}, c)
	b.Emit(laneRecovered{Lane: "lost"})
	deadline := time.After(waitTimeout)
	for {
		b.Emit(laneRecovered{Lane: "ok"}) // the next successful write reports the loss
		select {
		case r := <-c.ch:
			if ev := r.Event.(LogDropped); ev.Dropped < 1 {
				t.Fatalf("dropped = %d", ev.Dropped)
			}
			b.Close()
			lines, _ := readAll(t, path, Query{})
			for _, l := range lines {
				if l.Fields["lane"] == "lost" {
					t.Fatal("the failed line is in the file")
				}
			}
			if lines[len(lines)-1].Kind != "eventlog.dropped" && !slices.ContainsFunc(lines, func(l Line) bool { return l.Kind == "eventlog.dropped" }) {
				t.Fatal("no eventlog.dropped line in the file")
			}
			return
		case <-deadline:
			t.Fatal("no eventlog.dropped after a failed write")
		case <-time.After(time.Millisecond):
		}
	}
}

// waitForLine polls the log until a line for lane appears in path.
func waitForLine(t *testing.T, path, lane string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), `"lane":"`+lane+`"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line for %s in %s: %q", lane, path, b)
		}
		time.Sleep(time.Millisecond)
	}
}

// A log deleted, or renamed away by an outside rotation, while the daemon
// runs is replaced by a fresh file at the same path; lines never go on to
// a file nobody can find.
func TestLogRemovedOrRenamedIsReopened(t *testing.T) {
	path := logPath(t)
	b, err := open(Options{Path: path}, hooks{checkEvery: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.Emit(laneRecovered{Lane: "first"})
	waitForLine(t, path, "first")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b.Emit(laneRecovered{Lane: "after-remove"})
	waitForLine(t, path, "after-remove")

	moved := path + ".moved"
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	b.Emit(laneRecovered{Lane: "after-rename"})
	waitForLine(t, path, "after-rename")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	lines, _ := readAll(t, path, Query{})
	if len(lines) != 1 || lines[0].Fields["lane"] != "after-rename" {
		t.Fatalf("the reopened log holds %+v, want only the line after the rename", lines)
	}
	old, _ := os.ReadFile(moved)
	if !strings.Contains(string(old), `"after-remove"`) || strings.Contains(string(old), `"after-rename"`) {
		t.Fatalf("the renamed file: %q", old)
	}
}

// Wants says whether a live subscriber matches a kind.
func TestWants(t *testing.T) {
	b := openTest(t, Options{})
	if b.Wants("job.output") {
		t.Fatal("wanted with no subscriber")
	}
	unsub := b.Subscribe([]string{"job.*"}, newCollector())
	if !b.Wants("job.output") || b.Wants("runner.exited") {
		t.Fatal("job.* subscriber: wrong answer")
	}
	unsub()
	if b.Wants("job.output") {
		t.Fatal("wanted after unsubscribe")
	}
}
