package lanes

import (
	"context"
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// JobLog is the durable record of the job path: what lanes needs of the
// state store (the daemon hands it state.Jobs behind this interface).
//
// The Record methods queue a write and return at once. done is called
// exactly once: with nil once the write is committed, or with the error
// that ended it (bad input, a full write queue, a closed or failing store;
// then possibly before the method returns). It may run on any goroutine
// (the store's writer): it must return quickly and must not call the
// JobLog. Writes one goroutine records are applied in that order.
type JobLog interface {
	RecordSubmitted(rec api.JobRecord, spec api.JobSpec, done func(error))
	RecordDispatched(id, runnerID string, runnerPid int, at time.Time, done func(error))
	RecordRunning(id string, done func(error))
	RecordRequeued(id string, done func(error))
	RecordFinished(rec api.JobRecord, done func(error))
	// RecordOutput records a piece of a running job's kept output as it
	// streams: data, the bytes at off of what its record keeps (not
	// copied: they never change), and total, what the job wrote so far.
	// The job's terminal record (RecordFinished) has its output whole and
	// supersedes the pieces; FinishAll puts them in the record of a job a
	// dead daemon left.
	RecordOutput(id string, off int64, data []byte, total int64, done func(error))
	// FinishAll records many terminal records in one go (recovery) and
	// returns once they are committed. Each record's output is what its
	// job streamed into the store (RecordOutput) before the daemon died.
	FinishAll(ctx context.Context, recs []api.JobRecord) error
	// Get reads a job's record with its output.
	Get(id string) (api.JobRecord, bool, error)
	// List reads one page of jobs (see JobQuery).
	List(q JobQuery) (JobPage, error)
	// Unfinished reads the jobs a dead daemon left unfinished, in
	// submission order, with the specs they were submitted with.
	Unfinished() ([]UnfinishedJob, error)
}

// JobQuery selects jobs for JobLog.List; empty fields match everything.
type JobQuery struct {
	State, Lane string
	Since       time.Time // created at or after
	Limit       int       // the most jobs a page holds; 0: all
	Cursor      string    // the next of the previous page
	Newest      bool      // newest first, else oldest first
	NotPrefix   string    // leaves out jobs whose id starts with it
}

// JobPage is one page of JobLog.List.
type JobPage struct {
	Jobs []api.JobRecord
	// After[i] is the cursor that continues the listing after Jobs[i].
	After []string
	// Next is the cursor of the page after this one, "" for the last.
	Next string
}

// UnfinishedJob is a job recorded and never finished.
type UnfinishedJob struct {
	Record api.JobRecord
	Spec   api.JobSpec
}

// storeUnavailable is the error a submission gets when its record could
// not be written: the job is not accepted.
func storeUnavailable(err error) *api.Error {
	return &api.Error{Code: api.CodeStoreUnavailable,
		Message: fmt.Sprintf("job not accepted: it could not be recorded in the state store: %v", err)}
}

// writeFailed logs a job write that failed.
func (sh *shared) writeFailed(what string, err error) {
	sh.bus.Emit(StateWriteFailed{What: what, Error: err.Error()})
	sh.log.Error().Err(err).Str("what", what).Msg("state store write failed")
}

// recordFinished writes a job's terminal record and, once it is committed
// (or the write failed, which is logged), calls publish: the store then
// has what waiters and subscribers are about to be told. Without a JobLog
// publish runs at once.
func (sh *shared) recordFinished(rec api.JobRecord, publish func()) {
	if sh.jobs == nil {
		publish()
		return
	}
	sh.jobs.RecordFinished(rec, func(err error) {
		if err != nil {
			sh.writeFailed("record job "+rec.ID+" finished", err)
		}
		publish()
	})
}
