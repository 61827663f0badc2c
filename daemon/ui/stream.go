package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// A page's stream: GET /ui/stream?kinds=K,K&job=ID is a text/event-stream
// of the bus's records of those kinds, each the control socket's event
// line ({"event","data"}) as one SSE message. The queue between the bus
// and the browser is bounded (Config.StreamQueue records, streamQueueBytes
// bytes): what does not fit is counted, and once the browser has taken
// what was queued it hears `event: missed` with the count, so the page
// says so and reloads what it shows rather than showing stale state as
// current. Every write has writeTimeout: a browser that takes nothing for
// that long loses its stream (its page reconnects and reloads).

const (
	streamQueueBytes = 1 << 20
	writeTimeout     = 15 * time.Second
	keepAlive        = 20 * time.Second
	maxStreamKinds   = 64
)

// stream is one open page's queue: a Sink of the bus. A page that only
// reloads (signal) gets no records, only `event: changed` with how many
// came and of which kinds, at most every signalEvery: it costs the bus a
// counter, and its page is never stale (it reloads what it shows).
type stream struct {
	limit  int
	job    []byte // `"job_id":"ID"` or `"ID"`: only records naming it, when set
	signal bool
	wake   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu     sync.Mutex
	queue  [][]byte
	bytes  int
	missed int64
	count  int64           // signal: records since the last changed
	kinds  map[string]bool // signal: their kinds
}

// signalEvery is how often a signal stream says what changed, at most.
const signalEvery = 250 * time.Millisecond

func newStream(limit int) *stream {
	return &stream{limit: limit, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Deliver queues r's wire line, or counts it missed; it never blocks.
func (st *stream) Deliver(r *eventlog.Record) {
	if st.signal {
		if st.job != nil && !bytes.Contains(r.Line, st.job) {
			return
		}
		st.mu.Lock()
		st.count++
		if st.kinds == nil {
			st.kinds = map[string]bool{}
		}
		st.kinds[r.Kind] = true
		st.mu.Unlock()
		st.poke()
		return
	}
	line := r.Wire()
	if st.job != nil && !bytes.Contains(line, st.job) {
		return
	}
	st.mu.Lock()
	if len(st.queue) >= st.limit || st.bytes+len(line) > streamQueueBytes {
		st.missed++
	} else {
		st.queue = append(st.queue, line) // Wire's bytes are never changed: kept as they are
		st.bytes += len(line)
	}
	st.mu.Unlock()
	st.poke()
}

func (st *stream) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// changed empties a signal stream's count: its message, or nil.
func (st *stream) changed() []byte {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.count == 0 {
		return nil
	}
	ks := make([]string, 0, len(st.kinds))
	for k := range st.kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	b, _ := json.Marshal(map[string]any{"n": st.count, "kinds": ks})
	st.count, st.kinds = 0, nil
	return b
}

// take empties the queue.
func (st *stream) take() ([][]byte, int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	q, m := st.queue, st.missed
	st.queue, st.bytes, st.missed = nil, 0, 0
	return q, m
}

func (st *stream) close() { st.once.Do(func() { close(st.done) }) }

// open registers a stream, or says the dashboard is closing.
func (s *Server) open(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams[st] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) forget(st *stream) {
	s.mu.Lock()
	delete(s.streams, st)
	s.mu.Unlock()
	s.wg.Done()
}

// parseKinds checks a stream's kinds: each a known kind or pattern.
func parseKinds(v string) ([]string, error) {
	var kinds []string
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if !eventlog.Known(k) {
			return nil, fmt.Errorf("unknown event kind %q", k)
		}
		kinds = append(kinds, k)
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("no event kinds asked for")
	}
	if len(kinds) > maxStreamKinds {
		return nil, fmt.Errorf("at most %d event kinds, got %d", maxStreamKinds, len(kinds))
	}
	return kinds, nil
}

// streamEvents serves GET /ui/stream.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	kinds, err := parseKinds(r.URL.Query().Get("kinds"))
	if err != nil {
		http.Error(w, "stream: "+err.Error(), http.StatusBadRequest)
		return
	}
	st := newStream(s.cfg.StreamQueue)
	st.signal = r.URL.Query().Get("mode") == "signal"
	if job := r.URL.Query().Get("job"); job != "" {
		if !validID(job) {
			http.Error(w, "stream: not a job id", http.StatusBadRequest)
			return
		}
		st.job = []byte(`"job_id":"` + job + `"`)
	} else if id := r.URL.Query().Get("id"); id != "" {
		// A page of one thing (a job, a task, an approval): the records
		// that name it, in whatever field.
		if !validID(id) {
			http.Error(w, "stream: not an id", http.StatusBadRequest)
			return
		}
		st.job = []byte(`"` + id + `"`)
	}
	if !s.open(st) {
		http.Error(w, "the daemon is stopping", http.StatusServiceUnavailable)
		return
	}
	defer s.forget(st)
	unsub := s.opts.Bus.Subscribe(kinds, st)
	defer unsub()
	sse := newSSE(w)
	if err := sse.send("hello", []byte(`{"queue":`+strconv.Itoa(s.cfg.StreamQueue)+`}`)); err != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-st.done:
			sse.send("bye", []byte(`{"reason":"the daemon is stopping"}`))
			return
		case <-tick.C:
			if err := sse.comment("keep-alive"); err != nil {
				return
			}
		case <-st.wake:
			if st.signal {
				// At most one message per signalEvery: what came meanwhile
				// is in it.
				select {
				case <-time.After(signalEvery):
				case <-r.Context().Done():
					return
				case <-st.done:
					continue
				}
				if b := st.changed(); b != nil {
					if err := sse.send("changed", b); err != nil {
						return
					}
				}
				continue
			}
			q, missed := st.take()
			for _, line := range q {
				sse.buffer("", bytes.TrimRight(line, "\n"))
			}
			if missed > 0 {
				sse.buffer("missed", []byte(`{"missed":`+strconv.FormatInt(missed, 10)+`}`))
			}
			if err := sse.flush(); err != nil {
				return
			}
		}
	}
}

// sse writes text/event-stream messages with a deadline each.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// buffer adds one message (event "" is the default, message); data is
// one line of JSON.
func (e *sse) buffer(event string, data []byte) {
	if event != "" {
		e.buf = append(e.buf, "event: "...)
		e.buf = append(e.buf, event...)
		e.buf = append(e.buf, '\n')
	}
	e.buf = append(e.buf, "data: "...)
	e.buf = append(e.buf, data...)
	e.buf = append(e.buf, '\n', '\n')
}

func (e *sse) send(event string, data []byte) error {
	e.buffer(event, data)
	return e.flush()
}

func (e *sse) comment(c string) error {
	e.buf = append(e.buf, ": "+c+"\n\n"...)
	return e.flush()
}

func (e *sse) flush() error {
	if len(e.buf) == 0 {
		return nil
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := e.w.Write(e.buf)
	if err == nil {
		err = e.rc.Flush()
	}
	if cap(e.buf) > 256<<10 {
		e.buf = nil
	} else {
		e.buf = e.buf[:0]
	}
	return err
}

// streamOutput serves GET /ui/jobs/{id}/output: the job's output as
// job.stream gives it (an observer: a slow tab never holds the job back;
// what it misses is a gap it is told of), then `event: end` with the
// record. Each piece is an SSE message whose data is job.stream's piece.
func (s *Server) streamOutput(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID(id) {
		http.Error(w, "not a job id", http.StatusBadRequest)
		return
	}
	st := newStream(1)
	if !s.open(st) {
		http.Error(w, "the daemon is stopping", http.StatusServiceUnavailable)
		return
	}
	defer s.forget(st)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-st.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	sse := newSSE(w)
	var mu sync.Mutex // push runs on the pump's goroutine; the end on this one
	res, err := s.opts.Caller.Invoke(ctx, from(ctx), "job.stream", map[string]any{"id": id, "observe": true},
		func(event string, data []byte, taken func(bool)) {
			mu.Lock()
			err := sse.send("out", data)
			mu.Unlock()
			if err != nil {
				cancel()
			}
			taken(err == nil)
		})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			b, _ := jsonMarshal(map[string]string{"error": err.Error()})
			sse.send("failed", b)
		}
		return
	}
	sse.send("end", res)
}

// validID says id looks like one of the daemon's ids (letters, digits,
// - and _), so it can go into a filter and a URL as it is.
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
