// Package eventlog is the supervisor's event bus and its on-disk log.
//
// Every supervisor decision is a typed Event, defined by the package that
// emits it and registered here (Register); kinds.go has the interfaces and
// the kinds several packages share. Bus.Emit stamps an event with a
// timestamp and, unless it is Ephemeral, a sequence number; hands it
// synchronously to the subscribers whose kind patterns match; and queues one
// NDJSON line for a writer goroutine that appends to <home>/events.ndjson and
// rotates it by size. Emit never waits for the disk: when the writer falls
// behind, lines are dropped and counted, and the writer logs an
// eventlog.dropped line with the count once it catches up.
//
// A log line is one JSON object: ts (RFC 3339, nanoseconds, UTC), seq and
// kind first, then the event's own fields:
//
//	{"ts":"2025-11-21T03:12:45.123456789Z","seq":1042,"kind":"runner.exited","lane":"review",...}
//
// Seq continues across daemon restarts and is never handed out twice: Open
// reads the last seq back from the log, and with Options.ReserveSeq the
// numbers also come from ranges reserved ahead in durable storage (the
// daemon's state.db), so the numbers of lines a daemon killed with -9 had
// handed out to subscribers but not yet written are not reused. Within one
// run seq is contiguous over logged events: a gap there means lines were
// dropped, and the eventlog.dropped line after the gap says how many. A gap
// between one run's last line and the next run's first is the unused rest
// of the dead run's reserved range; SeqSkipped says how many numbers the
// new run skipped (the daemon puts it in daemon.started as seq_skipped).
// Event fields must not be named ts, seq or kind.
//
// Read reads the log back (rotated files oldest first, then the current
// file) and can follow it across rotations; `orchestrd events` (in
// cmd/orchestrd) prints it.
package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/wire"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxBytes = 16 << 20
	DefaultMaxFiles = 3
	DefaultBuffer   = 65536
)

// maxBatch bounds one writer Write so memory stays bounded when a large
// backlog is queued.
const maxBatch = 1 << 20

// Options configures Open.
type Options struct {
	Path     string         // events.ndjson path; "" = no file (subscribers only)
	MaxBytes int64          // rotate when the file would exceed this; default 16 MiB
	MaxFiles int            // rotated files kept: events.ndjson.1 (newest) .. .N; default 3
	Buffer   int            // lines queued for the writer goroutine; default 65536
	Logger   zerolog.Logger // the bus's own problems: write and rotation errors, sink panics

	// SeqFrom: seq continues above it as well as above the log's last
	// line. It is the highest number an earlier bus on this log may have
	// handed out (the end of its reserved range).
	SeqFrom uint64
	// ReserveSeq, if set, keeps seq inside ranges reserved in durable
	// storage: SeqReserved is the last number reserved at Open; when fewer
	// than SeqBlock/2 of the reserved numbers are left, Emit calls
	// ReserveSeq (one call at a time). It must not block: it reserves the
	// next range asynchronously and calls done, from any goroutine, with
	// that range's last number or the error. A bus that runs past its
	// reservation (storage too slow or failing) goes on numbering and logs
	// it: Emit never waits.
	ReserveSeq  func(done func(last uint64, err error))
	SeqReserved uint64
	SeqBlock    uint64
}

// Record is one emitted event as subscribers see it. Records are shared
// between all subscribers and must not be modified.
type Record struct {
	Seq   uint64    // monotonic, contiguous over logged (non-ephemeral) events; 0 for ephemeral
	TS    time.Time // when Emit stamped it
	Kind  string
	Event Event
	// Line is the log JSON object without the newline:
	// {"ts":RFC3339Nano UTC,"seq":N,"kind":K, ...the event's own fields}.
	// It is nil for ephemeral events, which are never logged.
	Line []byte

	body     []byte // ephemeral WireDataer events: the event's own JSON (the others have their wire at once)
	wireOnce sync.Once
	wire     []byte
}

// Wire returns the control-socket line {"event":K,"data":D}\n, computed once
// and cached (safe for concurrent callers). D is the WireData() JSON for
// WireDataer events, the event's own JSON for ephemeral events, and the Line
// object otherwise. For WireDataer events Emit computes it before delivering,
// on the emitting goroutine, so that a record the emitter later mutates is
// never marshalled concurrently.
func (r *Record) Wire() []byte {
	r.wireOnce.Do(func() {
		data := r.Line
		if r.body != nil {
			data = r.body
		}
		if wd, ok := r.Event.(WireDataer); ok {
			if b, err := marshalValue(wd.WireData()); err == nil {
				data = b
			} else if data == nil {
				data = errorObject(err)
			}
		}
		if data == nil {
			data = []byte("null")
		}
		r.wire = appendWire(make([]byte, 0, wireLen(r.Kind, data)), r.Kind, data)
	})
	return r.wire
}

// appendWire appends the control-socket line {"event":kind,"data":data}\n.
func appendWire(w []byte, kind string, data []byte) []byte {
	w = append(w, `{"event":`...)
	w = wire.AppendJSONString(w, kind, false)
	w = append(w, `,"data":`...)
	w = append(w, data...)
	return append(w, "}\n"...)
}

// wireLen is the length of appendWire's line for a kind that needs no
// escaping.
func wireLen(kind string, data []byte) int {
	return len(`{"event":"","data":}`+"\n") + len(kind) + len(data)
}

// Sink receives records. Deliver is called synchronously inside Emit, from
// whatever goroutine emits, possibly concurrently; it must not block (hand the
// record to a buffered channel or ring and return). It may call Emit.
type Sink interface{ Deliver(r *Record) }

// SinkFunc is a function as a Sink, under Sink's rules.
type SinkFunc func(*Record)

// Deliver calls f(r).
func (f SinkFunc) Deliver(r *Record) { f(r) }

// EventSink is a Sink that reads only a record's Kind, Seq, TS, Event and
// Line (made for every logged event), never its Wire (a counter of events,
// such as the daemon's metrics; the dashboard's recent errors): Emit does
// not marshal a WireDataer event's data ahead for it, so subscribing one to
// job.finished costs the emitter no JSON of the record's output.
type EventSink interface {
	Sink
	EventsOnly()
}

type subscriber struct {
	match      kindMatcher
	sink       Sink
	eventsOnly bool // an EventSink: Wire is not computed for it
	gone       atomic.Bool
}

// Bus is the event bus. Create it with Open.
type Bus struct {
	log   zerolog.Logger
	limit logLimiter
	hooks hooks

	// mu makes seq assignment and enqueueing one step, so the writer receives
	// lines in seq order. Only taken when there is a file.
	mu      sync.Mutex
	closed  bool // guarded by mu; Emit stops enqueueing
	queue   chan []byte
	seq     atomic.Uint64
	dropped atomic.Uint64 // lines not enqueued because the queue was full
	// droppedTotal counts every line dropped since Open (dropped is
	// reset by each eventlog.dropped line); DroppedTotal reads it.
	droppedTotal atomic.Uint64

	subMu sync.Mutex // serialises Subscribe/unsubscribe copy-on-write
	subs  atomic.Pointer[[]*subscriber]

	// Seq reservation (Options.ReserveSeq).
	reserve   func(done func(last uint64, err error))
	seqBlock  uint64
	seqLimit  atomic.Uint64 // last reserved number
	seqRetry  atomic.Uint64 // after a failed reservation: not before this seq
	reserving atomic.Bool
	skipped   uint64

	w         *writer
	done      chan struct{} // closed when the writer goroutine has exited
	closeOnce sync.Once
	closeErr  error
}

// hooks are test seams.
type hooks struct {
	beforeWrite func() // called by the writer goroutine before each Write
	// checkEvery overrides how often the writer checks that its path
	// still names its file (default reopenCheckInterval).
	checkEvery time.Duration
}

// reopenCheckInterval bounds how often a writing writer stats its path to
// find the file removed or replaced (by hand or by an outside rotation),
// in which case it opens the path afresh.
const reopenCheckInterval = time.Second

// Open creates the bus and, when opts.Path is set, opens the log for
// appending (creating its directory with mode 0700 and the file with mode
// 0600 if missing, and making an existing log and its rotated files 0600)
// and starts the writer goroutine. Seq continues from the
// last line already in the log.
func Open(opts Options) (*Bus, error) { return open(opts, hooks{}) }

func open(opts Options, h hooks) (*Bus, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = DefaultMaxFiles
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	b := &Bus{log: opts.Logger, hooks: h, done: make(chan struct{})}
	b.limit.interval = 10 * time.Second
	if opts.ReserveSeq != nil {
		b.reserve, b.seqBlock = opts.ReserveSeq, max(opts.SeqBlock, 2)
		b.seqLimit.Store(opts.SeqReserved)
	}
	if opts.Path == "" {
		b.startSeq(0, opts.SeqFrom)
		close(b.done)
		return b, nil
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("eventlog: %w", err)
	}
	last, torn := lastSeq(opts.Path)
	f, fi, err := openAppend(opts.Path)
	if err != nil {
		return nil, err
	}
	if err := privateRotated(opts.Path); err != nil {
		f.Close()
		return nil, err
	}
	b.startSeq(last, opts.SeqFrom)
	b.queue = make(chan []byte, opts.Buffer)
	b.w = &writer{bus: b, path: opts.Path, maxBytes: opts.MaxBytes, maxFiles: opts.MaxFiles, f: f, fi: fi,
		size: fi.Size(), torn: torn, checkEvery: reopenCheckInterval, checked: time.Now()}
	if h.checkEvery != 0 {
		b.w.checkEvery = h.checkEvery
	}
	go b.w.run()
	return b, nil
}

// openAppend opens the log at path for appending, creating it 0600. A file
// that already exists with a looser mode (an old log, one copied in with
// mode 0666) is made 0600: what the daemon logs is for its user only.
func openAppend(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("eventlog: %w", err)
	}
	st, err := f.Stat()
	if err == nil && st.Mode().Perm() != 0o600 {
		if err = f.Chmod(0o600); err != nil {
			err = fmt.Errorf("making %s private (mode 0600, was %#o): %w", path, st.Mode().Perm(), err)
		} else {
			st, err = f.Stat()
		}
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("eventlog: %w", err)
	}
	return f, st, nil
}

// privateRotated makes the rotated files of path 0600, as openAppend does
// the current one.
func privateRotated(path string) error {
	for _, n := range rotatedIndexes(path) {
		name := rotatedName(path, n)
		st, err := os.Stat(name)
		if err != nil || st.Mode().Perm() == 0o600 {
			continue
		}
		if err := os.Chmod(name, 0o600); err != nil {
			return fmt.Errorf("eventlog: making %s private (mode 0600, was %#o): %w", name, st.Mode().Perm(), err)
		}
	}
	return nil
}

// startSeq makes seq continue above both the log's last line and from.
func (b *Bus) startSeq(last, from uint64) {
	if from > last {
		b.skipped = from - last
		last = from
	}
	b.seq.Store(last)
}

// SeqSkipped is how many numbers this bus skipped at Open, between the
// log's last line and the end of the range an earlier bus had reserved:
// the numbers a daemon that died did not use, or used for lines it never
// wrote.
func (b *Bus) SeqSkipped() uint64 { return b.skipped }

// reserveAhead asks for the next seq range when fewer than half a block of
// reserved numbers are left after seq.
func (b *Bus) reserveAhead(seq uint64) {
	limit := b.seqLimit.Load()
	if seq > limit {
		b.limit.do("seq-unreserved", func(suppressed int) {
			b.log.Warn().Uint64("seq", seq).Uint64("reserved_to", limit).Int("suppressed", suppressed).
				Msg("eventlog: seq runs past its durable reservation: after a crash now, numbers could be handed out again")
		})
	}
	if seq+b.seqBlock/2 < limit || seq < b.seqRetry.Load() || !b.reserving.CompareAndSwap(false, true) {
		return
	}
	b.reserve(b.seqReserved)
}

// seqReserved is ReserveSeq's done.
func (b *Bus) seqReserved(last uint64, err error) {
	if err != nil {
		b.seqRetry.Store(b.seq.Load() + b.seqBlock/16) // not at every Emit
		b.limit.do("seq-reserve", func(suppressed int) {
			b.log.Error().Err(err).Int("suppressed", suppressed).Msg("eventlog: reserving seq numbers")
		})
	} else {
		for {
			cur := b.seqLimit.Load()
			if last <= cur || b.seqLimit.CompareAndSwap(cur, last) {
				break
			}
		}
	}
	b.reserving.Store(false)
}

// DroppedTotal is how many log lines were dropped since Open (the writer
// fell behind, or a write lost them): the sum of every eventlog.dropped
// line's count, and those not reported yet. Read without a lock.
func (b *Bus) DroppedTotal() uint64 { return b.droppedTotal.Load() }

// Seq returns the last assigned seq.
func (b *Bus) Seq() uint64 { return b.seq.Load() }

// Emit records ev: it assigns seq and ts, queues the log line (unless ev is
// Ephemeral), delivers the record to matching subscribers, and returns it.
// It is safe from any goroutine and never waits for the disk. Subscribers
// see records from one goroutine in order; records from concurrent emitters
// may reach a subscriber out of seq order. After Close, Emit still assigns
// seq and delivers but nothing more is written. Emit(nil) returns nil.
func (b *Bus) Emit(ev Event) *Record {
	if ev == nil {
		return nil
	}
	r := &Record{}
	b.emit(r, ev, nil)
	return r
}

// EmitAll emits each event of evs in order, as Emit does, for the events
// that come in batches (an executor's messages): their records are one
// allocation, and the control-socket lines of the ephemeral ones share a
// few. Nil events are skipped.
func (b *Bus) EmitAll(evs []Event) {
	recs := make([]Record, len(evs))
	var lines []byte
	for i, ev := range evs {
		if ev != nil {
			b.emit(&recs[i], ev, &lines)
		}
	}
}

// emit fills r for ev and emits it. lines, when not nil, is where an
// ephemeral event's control-socket line is appended (a line keeps the
// array it was made in; a full one is left for a new one).
func (b *Bus) emit(r *Record, ev Event, lines *[]byte) {
	kind := ev.Kind()
	r.Kind, r.Event = kind, ev
	eb := encPool.Get().(*encBuf)
	body := b.encode(eb, kind, ev)
	if _, ok := ev.(Ephemeral); ok {
		r.TS = time.Now()
		if _, wd := ev.(WireDataer); wd {
			r.body = bytes.Clone(body)
		} else {
			// Its control-socket line is all it will be: made now, in
			// one allocation (the flood of task.message comes this way).
			n := wireLen(kind, body)
			switch {
			case lines == nil:
				r.wire = appendWire(make([]byte, 0, n), kind, body)
			default:
				if cap(*lines)-len(*lines) < n {
					*lines = make([]byte, 0, max(n, linesBlock))
				}
				start := len(*lines)
				*lines = appendWire(*lines, kind, body)
				r.wire = (*lines)[start:len(*lines):len(*lines)]
			}
			r.wireOnce.Do(func() {})
		}
	} else {
		line := make([]byte, 0, linePrefixMax+len(kind)+len(body))
		if b.queue == nil {
			r.Seq = b.seq.Add(1)
			r.TS = time.Now()
			r.Line = appendLine(line, r.TS, r.Seq, kind, body)
		} else {
			b.mu.Lock()
			r.Seq = b.seq.Add(1)
			r.TS = time.Now()
			r.Line = appendLine(line, r.TS, r.Seq, kind, body)
			if !b.closed {
				select {
				case b.queue <- r.Line:
				default:
					b.dropped.Add(1)
					b.droppedTotal.Add(1)
				}
			}
			b.mu.Unlock()
		}
		if b.reserve != nil {
			b.reserveAhead(r.Seq)
		}
	}
	eb.put()
	b.deliver(r)
}

// linesBlock is how much of EmitAll's control-socket lines one allocation
// holds.
const linesBlock = 32 << 10

// encode marshals ev into eb and returns its JSON object (aliasing eb's
// buffer). Events that fail to marshal are still logged, with an
// eventlog_error field; non-object JSON is wrapped as {"value":...}.
func (b *Bus) encode(eb *encBuf, kind string, ev Event) []byte {
	eb.buf.Reset()
	if a, ok := ev.(Appender); ok {
		eb.app = a.AppendJSON(eb.app[:0]) // kept for the next event: appending allocates only when it grows
		return eb.app
	}
	if err := eb.enc.Encode(ev); err != nil {
		b.limit.do("marshal", func(suppressed int) {
			b.log.Error().Err(err).Str("kind", kind).Int("suppressed", suppressed).Msg("eventlog: event does not marshal")
		})
		return errorObject(err)
	}
	body := bytes.TrimRight(eb.buf.Bytes(), "\n")
	if len(body) == 0 || body[0] != '{' {
		return append(append([]byte(`{"value":`), body...), '}')
	}
	return body
}

func errorObject(err error) []byte {
	b := wire.AppendJSONString([]byte(`{"eventlog_error":`), err.Error(), false)
	return append(b, '}')
}

// linePrefixMax bounds the bytes appendLine adds besides kind and body.
const linePrefixMax = len(`{"ts":"","seq":,"kind":"",}`) + len("2006-01-02T15:04:05.999999999Z07:00") + 20 + 8

// appendLine appends {"ts":...,"seq":N,"kind":K, + body's fields.
func appendLine(dst []byte, ts time.Time, seq uint64, kind string, body []byte) []byte {
	dst = append(dst, `{"ts":"`...)
	dst = ts.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"kind":`...)
	dst = wire.AppendJSONString(dst, kind, false)
	inner := bytes.TrimSpace(body[1:]) // after '{'
	if len(inner) > 0 && inner[0] != '}' {
		dst = append(dst, ',')
	}
	return append(dst, inner...)
}

type encBuf struct {
	buf bytes.Buffer
	enc *json.Encoder
	app []byte // what an Appender appended to
}

var encPool = sync.Pool{New: func() any {
	e := &encBuf{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false) // "a < b" stays readable in the log
	return e
}}

func (e *encBuf) put() {
	if e.buf.Cap() > 64<<10 || cap(e.app) > 64<<10 {
		return // don't keep a huge buffer alive for one large event
	}
	encPool.Put(e)
}

// marshalValue is json.Marshal without HTML escaping and without the newline.
func marshalValue(v any) ([]byte, error) {
	eb := encPool.Get().(*encBuf)
	defer eb.put()
	eb.buf.Reset()
	if err := eb.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimRight(eb.buf.Bytes(), "\n")), nil
}

// Wants reports whether a subscriber would get an event of kind now, so
// that an emitter of a costly ephemeral event (a job's output) can skip
// making one nobody takes. (The answer may be stale by the time it emits:
// a subscriber that comes meanwhile misses it, as it would have missed an
// event emitted a moment before it subscribed.)
func (b *Bus) Wants(kind string) bool {
	p := b.subs.Load()
	if p == nil {
		return false
	}
	for _, s := range *p {
		if s.match.match(kind) && !s.gone.Load() {
			return true
		}
	}
	return false
}

// deliver hands r to every matching subscriber.
func (b *Bus) deliver(r *Record) {
	p := b.subs.Load()
	if p == nil {
		return
	}
	_, wd := r.Event.(WireDataer)
	for _, s := range *p {
		if !s.match.match(r.Kind) || s.gone.Load() {
			continue
		}
		if wd && !s.eventsOnly {
			r.Wire() // marshal WireData on the emitter's goroutine; see Wire
			wd = false
		}
		b.deliverOne(s, r)
	}
}

// deliverOne calls the sink, turning a panic into an error log: a buggy sink
// must not take down whichever actor happened to emit.
func (b *Bus) deliverOne(s *subscriber, r *Record) {
	defer func() {
		if p := recover(); p != nil {
			stack := string(debug.Stack())
			b.limit.do("sink-panic", func(suppressed int) {
				b.log.Error().Str("kind", r.Kind).Str("panic", fmt.Sprint(p)).Str("stack", stack).
					Int("suppressed", suppressed).Msg("eventlog: subscriber panicked in Deliver")
			})
		}
	}()
	s.sink.Deliver(r)
}

// Subscribe delivers records whose kind matches one of kinds to s (all
// records when kinds is empty). A pattern is an exact kind, "*", or a prefix
// ending in ".*" ("job.*" matches job.queued, job.output, ...). The returned
// function unsubscribes; it is idempotent. An EventSink is not handed a
// record whose Wire was made for it (see EventSink). Once it returns, no new Deliver
// call starts except from an Emit that had already checked the subscriber,
// so a sink that tears itself down must tolerate one late call.
func (b *Bus) Subscribe(kinds []string, s Sink) (unsubscribe func()) {
	sub := &subscriber{match: newKindMatcher(kinds), sink: s}
	if _, ok := s.(EventSink); ok {
		sub.eventsOnly = true
	}
	b.subMu.Lock()
	var cur []*subscriber
	if p := b.subs.Load(); p != nil {
		cur = *p
	}
	next := append(slices.Clip(cur), sub)
	b.subs.Store(&next)
	b.subMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			sub.gone.Store(true)
			b.subMu.Lock()
			defer b.subMu.Unlock()
			cur := *b.subs.Load()
			i := slices.Index(cur, sub)
			if i < 0 {
				return
			}
			next := slices.Delete(slices.Clone(cur), i, i+1)
			b.subs.Store(&next)
		})
	}
}

// Close flushes every queued line, writes an eventlog.dropped line if lines
// were dropped, syncs and closes the file. It is idempotent. Emit after Close
// delivers to subscribers only.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		if b.queue == nil {
			return
		}
		b.mu.Lock()
		b.closed = true
		close(b.queue)
		b.mu.Unlock()
		<-b.done
		b.closeErr = b.w.closeErr
	})
	return b.closeErr
}

// kindMatcher matches kinds against subscription / query patterns.
type kindMatcher struct {
	all      bool
	exact    []string
	prefixes []string // "job." for "job.*"
}

func newKindMatcher(patterns []string) kindMatcher {
	var m kindMatcher
	if len(patterns) == 0 {
		m.all = true
	}
	for _, p := range patterns {
		switch {
		case p == "*":
			m.all = true
		case strings.HasSuffix(p, ".*"):
			m.prefixes = append(m.prefixes, strings.TrimSuffix(p, "*"))
		default:
			m.exact = append(m.exact, p)
		}
	}
	return m
}

func (m *kindMatcher) match(kind string) bool {
	if m.all {
		return true
	}
	for _, e := range m.exact {
		if e == kind {
			return true
		}
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(kind, p) {
			return true
		}
	}
	return false
}

// writer owns the file; only its goroutine touches it.
type writer struct {
	bus      *Bus
	path     string
	maxBytes int64
	maxFiles int
	f        *os.File
	fi       os.FileInfo // f's identity, to notice the path naming another file
	size     int64
	// checkEvery and checked pace the path check (see checkPath).
	checkEvery time.Duration
	checked    time.Time
	torn       bool   // the file ends in a partial line: start the next write with "\n"
	lost       uint64 // lines lost to write errors, reported once writes succeed again
	closeErr   error
}

func (w *writer) run() {
	b := w.bus
	defer close(b.done)
	batch := make([]byte, 0, 64<<10)
	open := true
	for open {
		line, ok := <-b.queue
		if !ok {
			break
		}
		batch = append(append(batch[:0], line...), '\n')
	drain:
		for len(batch) < maxBatch {
			select {
			case line, ok := <-b.queue:
				if !ok {
					open = false
					break drain
				}
				batch = append(append(batch, line...), '\n')
			default:
				break drain
			}
		}
		var rec *Record
		if b.dropped.Load() > 0 {
			batch, rec, open = w.appendDropped(batch, open)
		}
		if h := b.hooks.beforeWrite; h != nil {
			h()
		}
		w.write(batch)
		if rec != nil {
			b.deliver(rec)
		}
		if cap(batch) > 4*maxBatch {
			batch = make([]byte, 0, 64<<10)
		}
	}
	// Queue closed and drained. Report anything still unreported.
	if b.dropped.Load() > 0 {
		batch, rec, _ := w.appendDropped(batch[:0], false)
		w.write(batch)
		b.deliver(rec)
	}
	if err := w.f.Sync(); err != nil {
		w.closeErr = fmt.Errorf("eventlog: %w", err)
	}
	if err := w.f.Close(); err != nil && w.closeErr == nil {
		w.closeErr = fmt.Errorf("eventlog: %w", err)
	}
}

// appendDropped appends an eventlog.dropped line for the drops counted so
// far. Holding mu (so no Emit can enqueue meanwhile) it first moves every
// queued line into batch: they have lower seqs than the dropped line.
func (w *writer) appendDropped(batch []byte, open bool) ([]byte, *Record, bool) {
	b := w.bus
	b.mu.Lock()
	for more := open; more; {
		select {
		case line, ok := <-b.queue:
			if !ok {
				open, more = false, false
			} else {
				batch = append(append(batch, line...), '\n')
			}
		default:
			more = false
		}
	}
	n := b.dropped.Swap(0)
	ev := LogDropped{Dropped: n}
	r := &Record{Kind: ev.Kind(), Event: ev, Seq: b.seq.Add(1), TS: time.Now()}
	body := []byte(`{"dropped":` + strconv.FormatUint(n, 10) + `}`)
	r.Line = appendLine(nil, r.TS, r.Seq, r.Kind, body)
	b.mu.Unlock()
	batch = append(append(batch, r.Line...), '\n')
	b.limit.do("dropped", func(suppressed int) {
		b.log.Warn().Uint64("dropped", n).Int("suppressed", suppressed).Msg("eventlog: writer fell behind, lines dropped")
	})
	return batch, r, open
}

// write appends batch (whole lines) to the file, rotating before a line that
// would take the file past maxBytes. A line longer than maxBytes gets a file
// of its own.
func (w *writer) write(batch []byte) {
	if now := time.Now(); now.Sub(w.checked) >= w.checkEvery {
		w.checked = now
		w.checkPath()
	}
	for len(batch) > 0 {
		room := w.maxBytes - w.size
		if int64(len(batch)) <= room {
			w.writeRaw(batch)
			return
		}
		cut := 0
		if room > 0 {
			cut = bytes.LastIndexByte(batch[:room], '\n') + 1
		}
		if cut == 0 && w.size == 0 {
			cut = bytes.IndexByte(batch, '\n') + 1
			if cut == 0 {
				cut = len(batch)
			}
		}
		if cut > 0 {
			w.writeRaw(batch[:cut])
			batch = batch[cut:]
			if len(batch) == 0 {
				return
			}
		}
		if !w.rotate() {
			w.writeRaw(batch)
			return
		}
	}
}

func (w *writer) writeRaw(p []byte) {
	b := w.bus
	if w.torn {
		n, err := w.f.Write([]byte{'\n'})
		w.size += int64(n)
		if err != nil {
			w.fail(err, p, 0)
			return
		}
		w.torn = false
	}
	n, err := w.f.Write(p)
	w.size += int64(n)
	if err != nil {
		w.fail(err, p, n)
		return
	}
	if w.lost > 0 {
		b.dropped.Add(w.lost)
		b.droppedTotal.Add(w.lost)
		w.lost = 0
	}
}

func (w *writer) fail(err error, p []byte, n int) {
	if n > 0 && p[n-1] != '\n' {
		w.torn = true
	}
	lost := bytes.Count(p[n:], []byte{'\n'})
	w.lost += uint64(lost)
	b := w.bus
	b.limit.do("write", func(suppressed int) {
		b.log.Error().Err(err).Str("path", w.path).Int("lines_lost", lost).Int("suppressed", suppressed).
			Msg("eventlog: write failed")
	})
}

// rotate moves the current file aside (RotateFiles) and opens a fresh
// path. On failure it keeps writing to the current file and reports false.
func (w *writer) rotate() bool {
	b := w.bus
	logErr := func(err error) {
		b.limit.do("rotate", func(suppressed int) {
			b.log.Error().Err(err).Str("path", w.path).Int("suppressed", suppressed).Msg("eventlog: rotation failed")
		})
	}
	if err := RotateFiles(w.path, w.maxFiles, logErr); err != nil {
		logErr(err)
		return false
	}
	f, fi, err := openAppend(w.path)
	if err != nil {
		logErr(err)
		return false // keep appending to the renamed file rather than lose lines
	}
	w.f.Close()
	w.f, w.fi, w.size, w.torn = f, fi, fi.Size(), false
	return true
}

// RotateFiles renames path.N-1 -> path.N ... path -> path.1 and removes
// rotated files beyond keep. Failures to move the older files are passed
// to logErr and do not stop it; the error is moving path itself (the
// caller then keeps writing to it). Another append-only log of the daemon
// (the HTTP API's audit.jsonl) rotates with it too.
func RotateFiles(path string, keep int, logErr func(error)) error {
	for _, n := range rotatedIndexes(path) {
		if n >= keep {
			if err := os.Remove(rotatedName(path, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				logErr(err)
			}
		}
	}
	for i := keep - 1; i >= 1; i-- {
		if err := os.Rename(rotatedName(path, i), rotatedName(path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			logErr(err)
		}
	}
	return os.Rename(path, rotatedName(path, 1))
}

// checkPath reopens the log when its path no longer names the file being
// written: someone deleted it, or an outside tool (logrotate without
// copytruncate) renamed it away. Lines would otherwise go to a file nobody
// can find until the next rotation. Any other error leaves things as they
// are.
func (w *writer) checkPath() {
	st, err := os.Stat(w.path)
	switch {
	case err == nil && os.SameFile(st, w.fi):
		return
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return
	}
	f, fi, err := openAppend(w.path)
	b := w.bus
	if err != nil {
		b.limit.do("reopen", func(suppressed int) {
			b.log.Error().Err(err).Str("path", w.path).Int("suppressed", suppressed).Msg("eventlog: reopening the log failed")
		})
		return
	}
	w.f.Close()
	w.f, w.fi, w.size, w.torn = f, fi, fi.Size(), false
	b.log.Warn().Str("path", w.path).Msg("eventlog: the log file was removed or replaced; writing to a new one")
}

func rotatedName(path string, n int) string { return path + "." + strconv.Itoa(n) }

// rotatedIndexes lists the N of existing path.N files, ascending.
func rotatedIndexes(path string) []int {
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil
	}
	prefix := filepath.Base(path) + "."
	var out []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || rest[0] == '0' {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n <= 0 {
			continue
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// lastSeq finds the seq of the last parsable line of the newest non-empty log
// file, and whether the current file ends without a newline (a line torn by
// a crash).
func lastSeq(path string) (seq uint64, torn bool) {
	files := []string{path}
	for _, n := range rotatedIndexes(path) {
		files = append(files, rotatedName(path, n))
	}
	for i, name := range files {
		s, ok, t := tailSeq(name)
		if i == 0 {
			torn = t
		}
		if ok {
			return s, torn
		}
	}
	return 0, torn
}

func tailSeq(name string) (seq uint64, ok, torn bool) {
	f, err := os.Open(name)
	if err != nil {
		return 0, false, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, false, false
	}
	// Walk back in chunks until a parsable line is found (bounded, so a huge
	// corrupt file doesn't stall startup).
	const chunk = 64 << 10
	end := st.Size()
	var tail []byte
	for read := int64(0); end > 0 && read < 4<<20; {
		n := min(int64(chunk), end)
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, end-n); err != nil {
			return 0, false, torn
		}
		if read == 0 {
			torn = buf[len(buf)-1] != '\n'
		}
		end -= n
		read += n
		tail = append(buf, tail...)
		lines := bytes.Split(tail, []byte{'\n'})
		// lines[0] may be partial unless we reached the start of the file.
		first := 1
		if end == 0 {
			first = 0
		}
		for i := len(lines) - 1; i >= first; i-- {
			if l, err := ParseLine(lines[i]); err == nil {
				return l.Seq, true, torn
			}
		}
	}
	return 0, false, torn
}

// logLimiter rate-limits the bus's own error logs per key.
type logLimiter struct {
	interval time.Duration
	mu       sync.Mutex
	last     map[string]time.Time
	count    map[string]int
}

func (l *logLimiter) do(key string, f func(suppressed int)) {
	l.mu.Lock()
	now := time.Now()
	if l.last == nil {
		l.last, l.count = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[key]; ok && now.Sub(t) < l.interval {
		l.count[key]++
		l.mu.Unlock()
		return
	}
	suppressed := l.count[key]
	l.last[key], l.count[key] = now, 0
	l.mu.Unlock()
	f(suppressed)
}
