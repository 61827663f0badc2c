package fleet

import (
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// A node's own sweep. Another node ends the unfinished jobs of a node that
// is gone (sweepLost); a live node's it leaves alone. So a live node ends
// its own strays: a take whose write landed but whose reply was lost (the
// node did not run it, and a redelivery skips a record that is not
// queued), and a job whose end could not be written for endRetryFor (the
// end is kept and written once the fleet answers). Both are rare; the
// sweep scans only while there is one to look for.

// keptEnds: how many ends that could not be written a node keeps for its
// sweep; beyond, such a job ends error, end_lost.
const keptEnds = 1024

// doubt says a write of this node's to the jobs bucket may have landed
// unconfirmed: sweepOwn looks until a scan made well after it finds
// nothing left.
func (f *Fleet) doubt() {
	f.mu.Lock()
	f.doubtAt = time.Now()
	f.mu.Unlock()
}

// keepEnd keeps an end that could not be written, for sweepOwn.
func (f *Fleet) keepEnd(e jobEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.unended) < keptEnds {
		f.unended[e.Record.ID] = e
		return
	}
	f.doubtAt = time.Now()
}

// sweepOwn ends each unfinished job recorded under this node's live
// incarnation that it neither runs nor is taking: cluster.job_ended_late.
func (f *Fleet) sweepOwn() {
	f.mu.Lock()
	since, kept := f.doubtAt, len(f.unended)
	f.mu.Unlock()
	if since.IsZero() && kept == 0 {
		return
	}
	scanned := time.Now()
	var todo []string
	err := f.scanJobs(f.ctx, func(e jobEntry, _ uint64) {
		if e.Record.Node == f.name && e.Incarnation == f.inc && !e.Record.State.Terminal() && e.Record.State != api.StateQueued {
			todo = append(todo, e.Record.ID)
		}
	})
	if err != nil {
		f.log.Debug().Err(err).Msg("sweeping this node's own unfinished jobs")
		return
	}
	listed := make(map[string]bool, len(todo))
	left := 0
	for _, id := range todo {
		listed[id] = true
		if !f.endOwn(id) {
			left++
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.unended {
		if !listed[id] {
			// Ended by now, or no longer this node's (declared lost
			// meanwhile): its drop was told when it happened.
			delete(f.unended, id)
		}
	}
	// A write whose reply was lost may still be applied a little later:
	// the doubt stands until a scan made well after it is clean.
	if left == 0 && f.doubtAt.Equal(since) && scanned.Sub(since) > 2*opTimeout {
		f.doubtAt = time.Time{}
	}
}

// endOwn ends job id if it is still this node's, unfinished, and neither
// run nor being taken here; done: nothing is left to do for it.
func (f *Fleet) endOwn(id string) (done bool) {
	f.mu.Lock()
	busy := f.running[id] != nil
	kept, hasKept := f.unended[id]
	f.mu.Unlock()
	if busy {
		// Its run (or its take, in flight) writes its end.
		return true
	}
	forget := func() {
		f.mu.Lock()
		delete(f.unended, id)
		f.mu.Unlock()
	}
	why := "end_unrecorded"
	end := func(e jobEntry) jobEntry {
		now := time.Now().UTC()
		switch {
		case hasKept:
			e.Record, e.Kept = kept.Record, kept.Kept
		case e.Record.State == api.StateDispatched:
			why = "take_unconfirmed"
			e.Record.State, e.Record.Error = api.StateError, "not_run: its take was written, but this node was not told so"
			e.Record.FinishedAt = &now
		default:
			why = "end_lost"
			e.Record.State, e.Record.Error = api.StateError, "end_lost: its end could not be written to the fleet"
			e.Record.FinishedAt = &now
		}
		return e
	}
	for range 10 {
		e, done, err := f.endUnfinished(f.ctx, id, f.name, f.inc, end)
		if done {
			forget()
			if e.Record.ID != "" {
				f.log.Warn().Str("job_id", id).Str("state", string(e.Record.State)).Str("why", why).Msg("a job of this node's left unfinished in the fleet is ended now")
				f.emit(ClusterJobEndedLate{JobID: id, State: string(e.Record.State), Why: why})
			}
			return true
		}
		if !isWrongSeq(err) {
			f.log.Debug().Err(err).Str("job_id", id).Msg("ending a job of this node's left unfinished")
			return false
		}
	}
	return false
}
