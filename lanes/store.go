package lanes

import (
	"sort"
	"sync"

	"github.com/orchestrd/orchestrd/api"
)

// store holds the published record of every live job (queued, dispatched,
// running) and a small cache of recently finished ones. Job actors own
// their jobs' state and publish snapshots here; the control socket reads
// them without asking an actor. Waiters registered before a job ends are
// called exactly once when it does.
//
// A finished job leaves the live jobs at once: its terminal record is
// committed to the state store before it is published here (finish), so a
// reader that misses it in memory finds it in the state store; the cache
// only saves that read for the jobs just finished (and, with no state
// store, it is all there is).
type store struct {
	mu     sync.Mutex
	jobs   map[string]*entry   // live jobs only
	counts map[api.State]int64 // live jobs per non-terminal state; terminal states cumulative
	done   finishedCache
}

type entry struct {
	rec     api.JobRecord
	out     *outStream // its output while it runs
	waiters map[int]func(api.JobRecord)
	nextW   int
}

// newStore makes a store whose cache of finished records holds at most
// maxJobs of them and maxBytes in all (see recordCost).
func newStore(maxJobs int, maxBytes int64) *store {
	return &store{jobs: map[string]*entry{}, counts: map[api.State]int64{},
		done: finishedCache{recs: map[string]api.JobRecord{}, maxJobs: maxJobs, maxBytes: maxBytes}}
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
	if e, ok := s.jobs[id]; ok {
		delete(s.jobs, id)
		s.counts[e.rec.State]--
	}
	s.mu.Unlock()
}

// update publishes a non-terminal snapshot.
func (s *store) update(rec api.JobRecord) {
	s.mu.Lock()
	if e, ok := s.jobs[rec.ID]; ok {
		s.counts[e.rec.State]--
		s.counts[rec.State]++
		e.rec = rec
	}
	s.mu.Unlock()
}

// finish publishes the terminal record: the job leaves the live jobs for
// the cache, and its waiters are called (outside the lock). Call it only
// once the record is committed to the state store. It reports false if
// the job is not live (it had already finished).
func (s *store) finish(rec api.JobRecord) bool {
	s.mu.Lock()
	e, ok := s.jobs[rec.ID]
	if !ok {
		s.mu.Unlock()
		return false
	}
	delete(s.jobs, rec.ID)
	s.counts[e.rec.State]--
	s.counts[rec.State]++
	s.done.put(rec)
	// Copied under the lock: a waiter's cancel deletes from the map.
	ws := make([]func(api.JobRecord), 0, len(e.waiters))
	for _, w := range e.waiters {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w(rec)
	}
	return true
}

// finishedOutput is the bytes the cache of finished records holds now.
func (s *store) finishedOutput() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done.bytes
}

// get returns a live job's record or a cached finished one.
func (s *store) get(id string) (api.JobRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.jobs[id]; ok {
		return e.rec, true
	}
	rec, ok := s.done.recs[id]
	return rec, ok
}

// stream returns a live job's output stream and record; out is nil for a
// finished job in the cache.
func (s *store) stream(id string) (out *outStream, rec api.JobRecord, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.jobs[id]; ok {
		return e.out, e.rec, true
	}
	rec, ok = s.done.recs[id]
	return nil, rec, ok
}

// list returns the matching jobs memory holds (live and cached), oldest
// first, without their output: the daemon without a state store lists
// these.
func (s *store) list(f api.Filter) []api.JobRecord {
	match := func(r api.JobRecord) bool {
		return (f.State == "" || string(r.State) == f.State) && (f.Lane == "" || r.Lane == f.Lane)
	}
	s.mu.Lock()
	out := make([]api.JobRecord, 0, len(s.jobs)+len(s.done.recs))
	for _, e := range s.jobs {
		if match(e.rec) {
			out = append(out, e.rec)
		}
	}
	for _, r := range s.done.recs {
		if match(r) {
			out = append(out, r)
		}
	}
	s.mu.Unlock()
	for i := range out {
		out[i].Output = "" // lists stay small; job.get has the output
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// wait calls fn once the job is terminal: at once (on this goroutine) if it
// is a cached finished one. found is false for a job memory does not hold
// (unknown, or finished and read from the state store).
func (s *store) wait(id string, fn func(api.JobRecord)) (cancel func(), found bool) {
	s.mu.Lock()
	e, ok := s.jobs[id]
	if !ok {
		rec, done := s.done.recs[id]
		s.mu.Unlock()
		if done {
			fn(rec)
		}
		return func() {}, done
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

// finishedCache holds the most recently finished records, with their
// output, first in first out, within maxJobs records and maxBytes in all.
// A record alone over maxBytes is not cached. Its owner's lock guards it.
type finishedCache struct {
	recs     map[string]api.JobRecord
	order    []string // ids in recs, oldest first, from head on
	head     int
	bytes    int64
	maxJobs  int
	maxBytes int64
}

// recordOverhead is what a cached record costs beyond its strings: the
// struct, its map entry and its place in order.
const recordOverhead = 512

// recordCost is what a record is counted for in the cache's bound.
func recordCost(r api.JobRecord) int64 {
	n := recordOverhead + len(r.ID) + len(r.Lane) + len(r.RunnerID) + len(r.Error) + len(r.Command) + len(r.Cwd) +
		len(r.Signal) + len(r.StoppedBy) + len(r.Output)
	for _, a := range r.Argv {
		n += len(a) + 16
	}
	return int64(n)
}

func (c *finishedCache) put(rec api.JobRecord) {
	cost := recordCost(rec)
	if c.maxJobs < 1 || cost > c.maxBytes {
		return
	}
	for len(c.recs) >= c.maxJobs || c.bytes+cost > c.maxBytes {
		c.evictOldest()
	}
	c.recs[rec.ID] = rec
	c.order = append(c.order, rec.ID)
	c.bytes += cost
}

func (c *finishedCache) evictOldest() {
	id := c.order[c.head]
	c.order[c.head] = ""
	c.head++
	c.bytes -= recordCost(c.recs[id])
	delete(c.recs, id)
	if c.head > len(c.order)/2 && c.head > 64 { // let go of the front
		c.order = append([]string(nil), c.order[c.head:]...)
		c.head = 0
	}
}
