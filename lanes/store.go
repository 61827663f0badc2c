package lanes

import (
	"math"
	"sort"
	"sync"

	"github.com/orchestrd/orchestrd/api"
)

// store holds the published record of every live job and of the most
// recent finished ones. Job actors own their jobs' state and publish
// snapshots here; the control socket reads them without asking an actor.
// Waiters registered before a job ends are called exactly once when it does.
type store struct {
	mu          sync.Mutex
	jobs        map[string]*entry
	finished    []string // ring of finished ids, oldest first
	maxFinished int
	counts      map[api.State]int64 // live jobs per non-terminal state; terminal states cumulative

	// The output of finished jobs is bounded too (see boundOutput):
	// outKept bytes are held; finished[:outGone] have no output any more
	// (dropped, or they had none), so the oldest kept one is next.
	outBudget int64
	outKept   int64
	outGone   int
	onEvict   func(rec api.JobRecord, bytes int)
}

type entry struct {
	rec     api.JobRecord
	out     *outStream // its output while it runs; nil once finished
	waiters map[int]func(api.JobRecord)
	nextW   int
}

func newStore(maxFinished int) *store {
	return &store{jobs: map[string]*entry{}, maxFinished: maxFinished, counts: map[api.State]int64{},
		outBudget: math.MaxInt64}
}

// boundOutput keeps the output of finished jobs within budget bytes in
// all: past it, the oldest finished jobs lose their output (their records
// stay, with output_evicted), and onEvict, if set, is called for each
// (outside the lock) with the record and the bytes dropped. Call it before
// the store is used.
func (s *store) boundOutput(budget int64, onEvict func(rec api.JobRecord, bytes int)) {
	s.outBudget, s.onEvict = budget, onEvict
}

func (s *store) add(rec api.JobRecord, out *outStream) {
	s.mu.Lock()
	s.jobs[rec.ID] = &entry{rec: rec, out: out}
	s.counts[rec.State]++
	s.mu.Unlock()
}

// remove forgets a job that was never accepted (its record could not be
// written).
func (s *store) remove(id string) {
	s.mu.Lock()
	if e, ok := s.jobs[id]; ok && !e.rec.State.Terminal() {
		delete(s.jobs, id)
		s.counts[e.rec.State]--
	}
	s.mu.Unlock()
}

// update publishes a non-terminal snapshot.
func (s *store) update(rec api.JobRecord) {
	s.mu.Lock()
	if e, ok := s.jobs[rec.ID]; ok && !e.rec.State.Terminal() {
		s.counts[e.rec.State]--
		s.counts[rec.State]++
		e.rec = rec
	}
	s.mu.Unlock()
}

// finish publishes the terminal record, evicts the oldest finished jobs past
// the bound and calls the waiters (outside the lock). It reports false if
// the job had already finished.
func (s *store) finish(rec api.JobRecord) bool {
	s.mu.Lock()
	e, ok := s.jobs[rec.ID]
	if !ok || e.rec.State.Terminal() {
		s.mu.Unlock()
		return false
	}
	s.counts[e.rec.State]--
	s.counts[rec.State]++
	e.rec = rec
	e.out = nil
	ws := e.waiters
	e.waiters = nil
	s.finished = append(s.finished, rec.ID)
	s.outKept += int64(len(rec.Output))
	for len(s.finished) > s.maxFinished {
		old := s.finished[0]
		s.finished = s.finished[1:]
		s.outKept -= int64(len(s.jobs[old].rec.Output))
		s.outGone = max(0, s.outGone-1)
		delete(s.jobs, old) // terminal counts are cumulative: kept
	}
	if cap(s.finished) > 4*s.maxFinished+64 {
		s.finished = append([]string(nil), s.finished...)
	}
	type eviction struct {
		rec api.JobRecord
		n   int
	}
	var evicted []eviction
	for s.outKept > s.outBudget && s.outGone < len(s.finished) {
		old := s.jobs[s.finished[s.outGone]]
		s.outGone++
		if n := len(old.rec.Output); n > 0 {
			s.outKept -= int64(n)
			old.rec.Output, old.rec.OutputEvicted = "", true
			if s.onEvict != nil {
				evicted = append(evicted, eviction{old.rec, n})
			}
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		w(rec)
	}
	for _, e := range evicted {
		s.onEvict(e.rec, e.n)
	}
	return true
}

// finishedOutput is the bytes of output finished jobs hold now.
func (s *store) finishedOutput() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outKept
}

func (s *store) get(id string) (api.JobRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.jobs[id]
	if !ok {
		return api.JobRecord{}, false
	}
	return e.rec, true
}

// stream returns a live job's output stream and record; out is nil for a
// finished job (or one not in memory).
func (s *store) stream(id string) (out *outStream, rec api.JobRecord, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.jobs[id]
	if !ok {
		return nil, api.JobRecord{}, false
	}
	return e.out, e.rec, true
}

// list returns matching jobs, oldest first.
func (s *store) list(f api.Filter) []api.JobRecord {
	s.mu.Lock()
	out := make([]api.JobRecord, 0, len(s.jobs))
	for _, e := range s.jobs {
		if (f.State == "" || string(e.rec.State) == f.State) && (f.Lane == "" || e.rec.Lane == f.Lane) {
			r := e.rec
			r.Output = "" // lists stay small; job.get has the output
			out = append(out, r)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// wait calls fn once the job is terminal: at once (on this goroutine) if it
// already is. found is false for an unknown job.
func (s *store) wait(id string, fn func(api.JobRecord)) (cancel func(), found bool) {
	s.mu.Lock()
	e, ok := s.jobs[id]
	if !ok {
		s.mu.Unlock()
		return func() {}, false
	}
	if e.rec.State.Terminal() {
		rec := e.rec
		s.mu.Unlock()
		fn(rec)
		return func() {}, true
	}
	if e.waiters == nil {
		e.waiters = map[int]func(api.JobRecord){}
	}
	k := e.nextW
	e.nextW++
	e.waiters[k] = fn
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(e.waiters, k)
		s.mu.Unlock()
	}, true
}

func (s *store) stateCounts() map[api.State]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[api.State]int64, len(s.counts))
	for k, v := range s.counts {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}
