package lanes

import (
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/wire"
)

// Messages a job actor handles.
type (
	jobDispatched struct {
		runner   actors.Ref
		runnerID string
		pid      int
		gen      int // the runner's incarnation the lane chose
		w        wire.Job
		direct   bool // the lane hands it to the runner itself (no JobLog)
		stdinOK  bool // the runner takes streamed stdin
	}
	// dispatchRecorded: the job's dispatch (the epoch-th) is committed,
	// or failed with err.
	dispatchRecorded struct {
		epoch int
		err   error
	}
	// jobPublished: the terminal record is committed and published.
	jobPublished struct{}
	// submitRecorded: the job's submission is committed, or failed.
	submitRecorded struct{ err error }
	// recordRunning: the job (dispatched for the epoch-th time) has run
	// for runningRecordDelay; record it running if it still is.
	recordRunning struct{ epoch int }
	// flushOutput: time to write what the job (dispatched for the
	// epoch-th time) printed since the last flush to the store.
	flushOutput struct{ epoch int }
	// outputRecorded: the last flush (of the kept bytes from off on) is
	// committed, or failed with err.
	outputRecorded struct {
		off int
		err error
	}
	jobAcked    struct{}
	jobRejected struct{ reason string }
	jobOutput   struct {
		stream wire.Stream
		data   []byte
		// written: the runner connection's reader wrote data into the
		// job's stream itself (outRoutes); the actor only says so on the
		// bus (job.output).
		written bool
	}
	jobResult struct{ res wire.Result }
	// jobLost: the runner holding the job is gone; reason is one of the
	// Err* constants.
	jobLost struct{ reason string }
	// jobBounced: the runner the lane chose was gone before the job was
	// written to it. The runner tells the lane (which frees the slot) and
	// the lane tells the job, after the jobDispatched it sent it.
	jobBounced struct {
		runnerID string
		gen      int // the runner's incarnation it was meant for
		job      actors.Ref
		w        wire.Job
	}
	// requeueJob (to the lane): put a bounced job back at the queue's head.
	requeueJob struct {
		id  string
		job actors.Ref
		w   wire.Job
	}
	jobCancel struct {
		force bool // SIGKILL at once, without the job's kill grace
		reply func(wasRunning bool, err error)
	}
	jobDequeued    struct{ failed string } // failed: the job cannot run (an Err*), else it was cancelled
	jobShutdown    struct{}                // daemon stopping: a queued job ends cancelled
	cancelOnRunner struct {
		jobID string
		force bool
	}
	dequeueJob struct {
		id  string
		job actors.Ref
	}
)

// jobActor owns one job from submit to its single terminal state, then
// publishes it and stops.
type jobActor struct {
	sh       *shared
	lane     actors.Ref
	rec      api.JobRecord
	out      *outStream // its output: the capped copy, the readers
	runner   actors.Ref
	cancelRq []func(bool, error)
	// cancelSent: a cancel went to the runner the job was dispatched to
	// (or will instead of the job, if it has not been handed over yet).
	// cancelForce: a cancel asked for SIGKILL at once.
	cancelSent, cancelForce bool
	// limitErr: the job was measured over a limit of its lane and is
	// being stopped for it (memory_exceeded, cpu_exceeded; jobusage.go).
	limitErr string
	started  time.Time

	// The dispatch under way: the runner's incarnation, the job's frame
	// until it is handed over (assigned), the epoch of its record, and
	// the error that record ended with.
	gen      int
	w        wire.Job
	stdinOK  bool
	assigned bool
	epoch    int
	storeErr error

	// streamed says chunks came (then Result.output, a JSON string that
	// cannot carry every byte, is not used); partial holds, per stream,
	// the start of a UTF-8 character cut by a chunk boundary, sent with
	// the next chunk of job.output (see emitOutput).
	streamed bool
	partial  [2][]byte
	// stdin streamed to the job (stdin.go), when submitted with
	// stdin_stream.
	stdin *stdinFeed

	// The output written to the store as it streams (flushOutput): the
	// kept bytes and the count queued so far, whether a flush is in
	// flight, whether one failed (logged once).
	flushedKept            int
	flushedTotal           int64
	flushing, flushFailing bool

	// A submission not yet committed: its spec to record, and the answer
	// to job.submit once it is (submitRecorded). refused: its record
	// could not be written; the job goes without running, and refusal is
	// the answer job.submit gets once it is gone (see drop).
	spec    api.JobSpec
	reply   func(id string, err error)
	refused error

	// What its process tree costs (usage.go): the tracker of the dispatch
	// under way (used by one sample at a time, off the actor), whether a
	// sample is under way, and the sum of the last one done.
	usageT    *usageTracker
	sampling  bool
	usage     api.Usage
	usageSeen bool
	// How often it is sampled, and its lane's limits (jobusage.go), as
	// its runner's actor gave them with its root.
	sampleEvery time.Duration
	limits      LaneConfig
}

// runningRecordDelay is how long a job runs before the store records it
// running. Most jobs end sooner: their terminal record follows the
// dispatched one, and the commit a running record would cost (one more on
// the writer, in front of the job's end) is saved. Recovery treats
// dispatched and running alike (daemon_lost), so nothing depends on it.
const runningRecordDelay = 100 * time.Millisecond

// outputFlushEvery is how often a running job's new output is written to
// the store (its kept bytes: max_output_bytes), so that a daemon killed
// mid-job leaves all but about its last second (daemon_lost). A job that
// ends sooner never pays: its terminal record has the output whole. One
// flush at a time per job, through the store's write queue; the bytes are
// the record's copy, not copied again.
const outputFlushEvery = time.Second

func (j *jobActor) Receive(c *actors.Context) {
	switch m := c.Message().(type) {
	case actors.Started:
		c.SetState(string(j.rec.State))
		j.out.setActor(c.System(), c.Self())
		if j.reply != nil {
			// First in the store's write queue for this job: its dispatch
			// can only commit after this does.
			self, sys := c.Self(), c.System()
			j.sh.jobs.RecordSubmitted(j.rec, j.spec, func(err error) { sys.Send(self, submitRecorded{err: err}) })
			j.spec = api.JobSpec{}
		}
	case submitRecorded:
		if m.err == nil {
			j.sh.submitted.Add(1)
			j.reply(j.rec.ID, nil)
			j.reply = nil
			return
		}
		j.sh.writeFailed("record job "+j.rec.ID+" submitted", m.err)
		j.refused = storeUnavailable(m.err)
		j.sh.bus.Emit(JobRejected{JobID: j.rec.ID, Lane: j.rec.Lane, Reason: "store_unavailable"})
		switch {
		case j.rec.State == api.StateQueued:
			c.Send(j.lane, dequeueJob{id: j.rec.ID, job: c.Self()}) // -> jobDequeued
		case j.rec.State.Terminal():
			j.drop(c)
		}
		// Dispatched: its dispatch cannot commit without the submission;
		// dispatchRecorded fails and the job comes back (jobBounced).
	case jobDispatched:
		if j.rec.State.Terminal() {
			return
		}
		now := time.Now()
		j.runner, j.gen, j.w, j.assigned, j.stdinOK = m.runner, m.gen, m.w, false, m.stdinOK
		j.rec.State = api.StateDispatched
		j.rec.RunnerID, j.rec.RunnerPid, j.rec.DispatchedAt = m.runnerID, m.pid, &now
		j.started = now
		c.SetState(string(j.rec.State))
		j.sh.store.update(j.rec)
		j.sh.bus.Emit(JobDispatched{JobID: j.rec.ID, Lane: j.rec.Lane, RunnerID: m.runnerID, Pid: m.pid})
		j.epoch++
		if m.direct {
			j.assigned = true
		} else {
			// The dispatch is committed before the runner gets the job:
			// after a crash, a job recorded as queued provably never
			// reached one.
			epoch, self, sys := j.epoch, c.Self(), c.System()
			j.sh.jobs.RecordDispatched(j.rec.ID, m.runnerID, m.pid, now, func(err error) {
				sys.Send(self, dispatchRecorded{epoch: epoch, err: err})
			})
		}
		if len(j.cancelRq) > 0 {
			// A cancel raced with dispatch: the lane had already given the
			// job away. Cancel it on the runner (or do not hand it over).
			j.cancelOnRunner(c)
			for _, r := range j.cancelRq {
				r(true, nil)
			}
			j.cancelRq = nil
		}
	case dispatchRecorded:
		if m.epoch != j.epoch || j.rec.State != api.StateDispatched || j.assigned {
			return
		}
		if m.err != nil && j.refused == nil {
			j.sh.writeFailed("record job "+j.rec.ID+" dispatched", m.err)
			j.storeErr = m.err
		}
		if m.err != nil || j.cancelSent || j.refused != nil {
			// Not handed over: the lane frees the slot and the job ends
			// (bounced), as for a runner gone before it got the job.
			c.Send(j.lane, jobBounced{runnerID: j.rec.RunnerID, gen: j.gen, job: c.Self(), w: j.w})
			j.w = wire.Job{}
			return
		}
		j.assign(c)
	case jobPublished:
		c.StopSelf()
	case jobAcked:
		if j.rec.State == api.StateDispatched {
			// The runner has it (and its actor knows it): acknowledgements
			// of its output and its stdin go there from now on.
			j.onRunner(c)
			j.rec.State = api.StateRunning
			c.SetState(string(j.rec.State))
			j.sh.store.update(j.rec)
			if j.sh.jobs != nil {
				c.After(runningRecordDelay, recordRunning{epoch: j.epoch})
				c.After(outputFlushEvery, flushOutput{epoch: j.epoch})
			}
		}
	case jobRoot:
		j.rooted(c, m)
	case sampleUsage:
		if m.epoch != j.epoch || j.rec.State != api.StateRunning || j.usageT == nil {
			return
		}
		if !j.sampling {
			j.startSample(c)
		}
		c.After(j.sampleEvery, m)
	case usageSampled:
		j.sampling = false
		if m.epoch == j.epoch && m.u.Samples > 0 {
			j.usage, j.usageSeen = m.u, true
			if j.rec.State == api.StateRunning {
				u := m.u
				j.rec.Usage = &u
				j.sh.store.update(j.rec)
				j.checkLimits(c, m.now)
			}
		}
	case recordRunning:
		if m.epoch != j.epoch || j.rec.State != api.StateRunning {
			return // ended (its terminal record says more), or requeued
		}
		id := j.rec.ID
		j.sh.jobs.RecordRunning(id, func(err error) {
			if err != nil {
				j.sh.writeFailed("record job "+id+" running", err)
			}
		})
	case flushOutput:
		if m.epoch != j.epoch || j.rec.State != api.StateRunning {
			return // ended (its terminal record has the output), or requeued
		}
		j.flushOutput(c)
		c.After(outputFlushEvery, m)
	case outputRecorded:
		j.flushing = false
		if m.err != nil {
			// Written again from there by the next flush: the pieces in
			// the store stay whole up to where they end.
			j.flushedKept, j.flushedTotal = m.off, -1
			if !j.flushFailing {
				j.flushFailing = true
				j.sh.writeFailed("record job "+j.rec.ID+" output", m.err)
			}
		}
	case jobOutput:
		if j.rec.State.Terminal() {
			return
		}
		j.streamed = true
		if !m.written {
			j.out.write(streamName(streamIndex(m.stream)), m.data)
		}
		j.emitOutput(m.stream, m.data)
	case jobResult:
		r := m.res
		j.rec.ExitCode = r.ExitCode
		j.rec.Signal, j.rec.StoppedBy, j.rec.OutputCut = r.Signal, r.StoppedBy, r.OutputCut
		j.rec.WasTimeout, j.rec.WasCancelled = r.WasTimeout, r.WasCancelled
		if !j.streamed && !j.out.routed() && r.Status != wire.StatusError && r.Output != "" {
			// A runner that does not stream (Loopr's may not): its
			// Result.output is all there is. An Error's output is the
			// runner's word on why the job did not run (the record's
			// error below), not the job's output.
			j.out.write(StreamStdout, []byte(r.Output))
			j.sh.bus.Emit(JobOutput{JobID: j.rec.ID, Stream: StreamStdout, Data: r.Output})
		}
		if r.DurationMs > 0 {
			j.rec.DurationMs = int64(r.DurationMs)
		}
		if r.Rusage != nil && j.sh.usage.every > 0 {
			j.addRusage(r.Rusage)
		}
		st := api.StateError
		switch r.Status {
		case wire.StatusSuccess:
			st = api.StateSucceeded
		case wire.StatusFailed:
			st = api.StateFailed
		case wire.StatusTimeout:
			st = api.StateTimeout
		case wire.StatusCancelled:
			st = api.StateCancelled
			if j.rec.Error == "" {
				j.rec.Error = api.ErrCancelled
			}
		case wire.StatusError:
			if j.rec.Error == "" {
				j.rec.Error = firstLine(r.Output)
			}
		}
		if j.limitErr != "" && st != api.StateSucceeded {
			// Stopped for a limit (or ended on its own meanwhile, as a
			// failure): failed, for that reason, whatever the runner saw.
			st, j.rec.Error, j.rec.WasCancelled = api.StateFailed, j.limitErr, false
		}
		j.finish(c, st)
	case jobRejected:
		j.rec.Error = m.reason
		j.finish(c, api.StateError)
	case jobLost:
		if j.rec.State.Terminal() {
			return
		}
		j.rec.Error = m.reason
		j.sh.orphaned.Add(1)
		j.sh.bus.Emit(JobOrphaned{JobID: j.rec.ID, Lane: j.rec.Lane, RunnerID: j.rec.RunnerID, Reason: m.reason})
		if m.reason == api.ErrDaemonShutdown {
			j.rec.WasCancelled = true
			j.finish(c, api.StateCancelled)
			return
		}
		j.finish(c, api.StateFailed)
	case jobShutdown:
		if j.rec.State == api.StateQueued {
			j.rec.Error, j.rec.WasCancelled = api.ErrDaemonShutdown, true
			j.finish(c, api.StateCancelled)
		}
	case jobCancel:
		if j.rec.State.Terminal() {
			m.reply(false, api.Errorf(api.CodeInvalidState, "job %s already finished (%s)", j.rec.ID, j.rec.State))
			return
		}
		j.sh.bus.Emit(JobCancelRequested{JobID: j.rec.ID, Lane: j.rec.Lane, State: string(j.rec.State),
			Force: m.force, Again: j.cancelSent})
		j.cancelForce = j.cancelForce || m.force
		if j.rec.State == api.StateQueued {
			j.cancelRq = append(j.cancelRq, m.reply)
			c.Send(j.lane, dequeueJob{id: j.rec.ID, job: c.Self()})
			return
		}
		j.cancelOnRunner(c)
		m.reply(true, nil)
	case jobOverLimit:
		j.overLimit(c, m)
	case jobBounced:
		j.bounced(c, m)
	case jobStdin:
		j.stdinMsg(c, m)
	case jobStdinAcked:
		j.stdinAcked(c, m.bytes)
	case jobDequeued:
		if j.refused != nil {
			j.drop(c)
			return
		}
		if j.rec.State != api.StateQueued {
			return
		}
		if m.failed != "" {
			j.rec.Error = m.failed
			j.finish(c, api.StateFailed)
			return
		}
		for _, r := range j.cancelRq {
			r(false, nil)
		}
		j.cancelRq = nil
		j.rec.Error, j.rec.WasCancelled = api.ErrCancelled, true
		j.finish(c, api.StateCancelled)
	case actors.Stopped:
		if j.reply != nil {
			// Stopped (the daemon stops) before its submission was
			// answered: refused, whatever the store does with it.
			j.reply("", api.Errorf(api.CodeShuttingDown, "daemon is stopping; job not accepted"))
			j.reply = nil
		}
		if j.refused != nil {
			return
		}
		if !j.rec.State.Terminal() {
			// Stopped from above (daemon shutdown or a lane restart).
			j.rec.Error = api.ErrDaemonShutdown
			j.rec.WasCancelled = true
			j.finish(c, api.StateCancelled)
		}
	}
}

// flushOutput queues what the job kept of its output since the last flush
// (and how much it wrote: past max_output_bytes only the count grows) for
// the store, unless the last flush is still on its way.
func (j *jobActor) flushOutput(c *actors.Context) {
	if j.flushing {
		return
	}
	data, total := j.out.keptFrom(j.flushedKept)
	if len(data) == 0 && total == j.flushedTotal {
		return
	}
	off := j.flushedKept
	j.flushedKept, j.flushedTotal, j.flushing = off+len(data), total, true
	self, sys := c.Self(), c.System()
	j.sh.jobs.RecordOutput(j.rec.ID, int64(off), data, total, func(err error) {
		sys.Send(self, outputRecorded{off: off, err: err})
	})
}

// drop ends a job whose submission could not be recorded, once its lane
// has let go of it (dequeued, or bounced back from its runner): it leaves
// without a terminal state, and job.submit hears the refusal.
func (j *jobActor) drop(c *actors.Context) {
	j.sh.store.remove(j.rec.ID)
	if j.reply != nil {
		j.reply("", j.refused)
		j.reply = nil
	}
	c.StopSelf()
}

// bounced puts a job whose runner was gone before it got the job back in
// its lane's queue; a job already cancelled meanwhile ends cancelled.
func (j *jobActor) bounced(c *actors.Context, m jobBounced) {
	if j.rec.State != api.StateDispatched {
		return
	}
	if j.refused != nil {
		j.drop(c)
		return
	}
	if j.storeErr != nil {
		j.rec.Error = "state store: " + j.storeErr.Error()
		j.finish(c, api.StateError)
		return
	}
	if j.cancelSent {
		j.rec.Error, j.rec.WasCancelled = api.ErrCancelled, true
		j.finish(c, api.StateCancelled)
		return
	}
	runnerID := j.rec.RunnerID
	j.offRunner()
	j.runner = actors.Ref{}
	j.rec.State = api.StateQueued
	j.rec.RunnerID, j.rec.RunnerPid, j.rec.DispatchedAt = "", 0, nil
	j.started = time.Time{}
	c.SetState(string(j.rec.State))
	j.sh.store.update(j.rec)
	j.sh.bus.Emit(JobRequeued{JobID: j.rec.ID, Lane: j.rec.Lane, RunnerID: runnerID, Reason: api.ErrRunnerLost})
	if j.sh.jobs != nil {
		id := j.rec.ID
		j.sh.jobs.RecordRequeued(id, func(err error) {
			if err != nil {
				j.sh.writeFailed("record job "+id+" requeued", err)
			}
		})
	}
	c.Send(j.lane, requeueJob{id: j.rec.ID, job: c.Self(), w: m.w})
}

// assign hands the dispatched job to its runner (its dispatch is
// recorded). A runner gone or replaced meanwhile bounces it back.
func (j *jobActor) assign(c *actors.Context) {
	j.assigned = true
	c.Send(j.runner, assignJob{job: c.Self(), gen: j.gen, w: j.w, out: j.out})
	j.w = wire.Job{}
}

// cancelOnRunner cancels the dispatched job on its runner; one not yet
// handed over is not handed over (dispatchRecorded). Each cancel goes to
// the runner: a second one SIGKILLs a job its first gave SIGTERM.
func (j *jobActor) cancelOnRunner(c *actors.Context) {
	if j.assigned {
		c.Send(j.runner, cancelOnRunner{jobID: j.rec.ID, force: j.cancelForce})
	}
	j.cancelSent = true
}

func (j *jobActor) finish(c *actors.Context, st api.State) {
	if j.rec.State.Terminal() {
		return
	}
	j.out.seal() // what a runner's reader still writes is after the end
	now := time.Now()
	j.rec.State = st
	j.rec.FinishedAt = &now
	if j.usageSeen {
		u := j.usage
		j.rec.Usage = &u
	}
	j.usageT = nil
	if j.rec.DurationMs == 0 && !j.started.IsZero() {
		j.rec.DurationMs = now.Sub(j.started).Milliseconds()
	}
	j.flushPartial()
	j.out.record(&j.rec)
	j.out.gone()
	j.stdinEnded(api.Errorf(api.CodeInvalidState, "job %s finished (%s); its stdin is closed", j.rec.ID, st))
	for _, r := range j.cancelRq {
		r(false, api.Errorf(api.CodeInvalidState, "job %s finished (%s) before it could be cancelled", j.rec.ID, st))
	}
	j.cancelRq = nil
	// The terminal record is committed before waiters and subscribers
	// hear of it: no client sees an end the store does not have. The
	// actor stops once it is published (jobPublished).
	rec, sh := j.rec, j.sh
	_, stopping := c.Message().(actors.Stopped)
	self, sys := c.Self(), c.System()
	out := j.out
	sh.recordFinished(rec, func() {
		defer out.end(rec) // readers get their EOF once the end is published
		if sh.store.finish(rec) {
			sh.bus.Emit(JobFinished{JobID: rec.ID, Lane: rec.Lane, RunnerID: rec.RunnerID,
				State: string(rec.State), ExitCode: rec.ExitCode, Error: rec.Error, DurationMs: rec.DurationMs, Record: rec,
				Signal: rec.Signal, OutputBytes: rec.OutputBytes, OutputTruncated: rec.OutputTruncated, StoppedBy: rec.StoppedBy, OutputCut: rec.OutputCut})
		}
		if !stopping {
			sys.Send(self, jobPublished{})
		}
	})
}

// startSample samples the job's tree on a goroutine, when a place is
// free (usageSampler.slots); the sum comes back as usageSampled.
func (j *jobActor) startSample(c *actors.Context) {
	select {
	case j.sh.usage.slots <- struct{}{}:
	default:
		return // as many samples as allowed are under way: this one is skipped
	}
	j.sampling = true
	t, epoch, self, sys, slots := j.usageT, j.epoch, c.Self(), c.System(), j.sh.usage.slots
	go func() {
		u, now := t.sample()
		<-slots
		sys.Send(self, usageSampled{epoch: epoch, u: u, now: now})
	}()
}

// emitOutput sends a chunk to subscribers as job.output. The bytes go out
// exactly as they came, except that a UTF-8 character the chunk boundary
// cut in two is sent whole with the next chunk of its stream: text then
// stays text ("data") instead of turning into base64 ("data_b64") because
// of where the runner's read happened to end.
func (j *jobActor) emitOutput(s wire.Stream, p []byte) {
	i := streamIndex(s)
	if !j.sh.bus.Wants("job.output") {
		j.partial[i] = nil // nobody listens: no event to make
		return
	}
	if len(j.partial[i]) > 0 {
		p = append(j.partial[i], p...)
		j.partial[i] = nil
	}
	head, tail := splitPartialRune(p)
	if len(tail) > 0 {
		j.partial[i] = append([]byte(nil), tail...)
	}
	if len(head) > 0 {
		j.sh.bus.Emit(JobOutput{JobID: j.rec.ID, Stream: streamName(i), Data: string(head)})
	}
}

// flushPartial sends what emitOutput held back, before the job ends.
func (j *jobActor) flushPartial() {
	for i, p := range j.partial {
		if len(p) > 0 {
			j.sh.bus.Emit(JobOutput{JobID: j.rec.ID, Stream: streamName(i), Data: string(p)})
			j.partial[i] = nil
		}
	}
}

func streamIndex(s wire.Stream) int {
	if s == wire.Stderr {
		return 1
	}
	return 0
}

func streamName(i int) string {
	if i == 1 {
		return "stderr"
	}
	return "stdout"
}

// splitPartialRune splits p before a trailing incomplete UTF-8 sequence
// (the first 1-3 bytes of a multi-byte character), if p is valid UTF-8 up
// to it. Otherwise tail is empty: bytes that are not UTF-8 anyway are not
// held back.
func splitPartialRune(p []byte) (head, tail []byte) {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(p); k++ {
		c := p[len(p)-k]
		if c < utf8.RuneSelf {
			break // ASCII: nothing is cut
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(p[len(p)-k:]) && utf8.Valid(p[:len(p)-k]) {
				return p[:len(p)-k], p[len(p)-k:]
			}
			break
		}
	}
	return p, nil
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	if len(s) > 200 {
		return s[:200]
	}
	return s
}
