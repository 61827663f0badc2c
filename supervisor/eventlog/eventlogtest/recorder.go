package eventlogtest

import (
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Recorder is a bus sink for tests: it keeps every record it is
// delivered, in order, and lets a test wait for one.
type Recorder struct {
	mu     sync.Mutex
	recs   []*eventlog.Record
	notify chan struct{}
}

// NewRecorder is an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{notify: make(chan struct{}, 1)} }

// Deliver keeps rec.
func (r *Recorder) Deliver(rec *eventlog.Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Records is every record kept so far.
func (r *Recorder) Records() []*eventlog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*eventlog.Record(nil), r.recs...)
}

// Take returns the records kept so far and drops them.
func (r *Recorder) Take() []*eventlog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	recs := r.recs
	r.recs = nil
	return recs
}

// Forget drops the records kept so far.
func (r *Recorder) Forget() {
	r.mu.Lock()
	r.recs = nil
	r.mu.Unlock()
}

// Wait returns the first record kept that pred accepts, waiting for it up
// to 10 s; t fails saying what it waited for if none comes.
func (r *Recorder) Wait(t testing.TB, what string, pred func(*eventlog.Record) bool) *eventlog.Record {
	t.Helper()
	rec, _ := r.WaitFrom(t, 0, what, pred)
	return rec
}

// WaitFrom is Wait for a record at or after the from'th kept; it returns
// the record and the index after it.
func (r *Recorder) WaitFrom(t testing.TB, from int, what string, pred func(*eventlog.Record) bool) (*eventlog.Record, int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		recs := r.Records()
		for i := from; i < len(recs); i++ {
			if pred(recs[i]) {
				return recs[i], i + 1
			}
		}
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("timed out waiting for event: %s", what)
			return nil, from
		}
	}
}
