package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orchestrd/orchestrd/api"
)

// getJob reads id's entry and revision.
// A read that reaches no leader is made again (again) until ctx ends.
func (f *Fleet) getJob(ctx context.Context, id string) (jobEntry, uint64, bool, error) {
	var e kvRecord
	err := again(ctx, func(ctx context.Context, _ int) error {
		var err error
		e, err = f.readKey(ctx, jobsBucket, id)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return jobEntry{}, 0, false, nil
	}
	if err != nil {
		return jobEntry{}, 0, false, fmt.Errorf("reading cluster job %s: %w", id, err)
	}
	je, err := f.readJob(id, e.value)
	if err == nil {
		err = f.checkClaim(ctx, je)
	}
	if re, ok := isRefused(err); ok {
		re.rev = e.rev
		f.refused(re)
	}
	if err != nil {
		return jobEntry{}, 0, false, fmt.Errorf("reading cluster job %s: %w", id, err)
	}
	return je, e.rev, true, nil
}

// putJob writes e over revision rev (a CAS).
func (f *Fleet) putJob(ctx context.Context, e jobEntry, rev uint64) (uint64, error) {
	b, err := f.sealJob(e)
	if err != nil {
		return 0, err
	}
	return f.jobs.Update(ctx, e.Record.ID, b, rev)
}

// scanJobs calls fn with every job in the bucket (one ordered read of the
// bucket, not a request per key).
//
// The watch reads the replica its consumer was placed on, which may lag
// the stream's leader: it goes on past its first "all read" until it has
// seen the last write the leader had when the scan began (seen under
// load: a job ended and waited for was missing from job.list). fn may so
// get a record twice, the later one newer.
func (f *Fleet) scanJobs(ctx context.Context, fn func(jobEntry, uint64)) error {
	var last uint64
	err := again(ctx, func(ctx context.Context, _ int) error {
		st, err := f.jobs.Status(ctx)
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); err == nil && ok && bs.StreamInfo().State.Msgs > 0 {
			last = bs.StreamInfo().State.LastSeq
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("reading the cluster jobs: %w", err)
	}
	// Deletes too: their revisions count towards last.
	w, err := f.jobs.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("reading the cluster jobs: %w", err)
	}
	defer func() { _ = w.Stop() }()
	idle := time.NewTimer(opTimeout)
	defer idle.Stop()
	var seen uint64
	initial := true
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				initial = false
			} else {
				seen = max(seen, e.Revision())
				if e.Operation() == jetstream.KeyValuePut {
					if je, err := f.readJob(e.Key(), e.Value()); err == nil {
						fn(je, e.Revision())
					} else if re, ok := isRefused(err); ok {
						f.refused(re)
					} else {
						f.log.Debug().Err(err).Msg("skipping a cluster job record")
					}
				}
			}
			if !initial && seen >= last {
				return nil
			}
			idle.Reset(opTimeout)
		case <-idle.C:
			return fmt.Errorf("reading the cluster jobs: nothing for %v", opTimeout)
		case <-ctx.Done():
			return fmt.Errorf("reading the cluster jobs: %w", ctx.Err())
		}
	}
}

// Submit records spec as a queued cluster job, then commits it into its
// lane's work queue; reply gets the id once both are done.
func (f *Fleet) Submit(spec api.JobSpec, reply func(id string, err error)) {
	if !validToken(spec.Lane) || !f.Serves(spec.Lane) {
		reply("", api.Errorf(api.CodeNotFound, "lane %q is not served by any live node of the fleet", spec.Lane))
		return
	}
	id := f.newID(spec.Lane)
	go func() {
		select {
		case f.submits <- struct{}{}:
		case <-f.ctx.Done():
			reply("", api.Errorf(api.CodeShuttingDown, "the fleet is stopping"))
			return
		}
		defer func() { <-f.submits }()
		reply(f.submit(id, spec))
	}()
}

// submit records the job, then queues it. Both are tried again while they
// reach no stream leader (again), so that a submission rides out an
// election: a second try of the record that finds it made reads it back
// (the first try was carried out but its answer lost), and the queue
// drops a second copy of the message by its id.
func (f *Fleet) submit(id string, spec api.JobSpec) (string, error) {
	ctx, cancel := context.WithTimeout(f.ctx, submitFor)
	defer cancel()
	e := queuedEntry(id, spec, time.Now().UTC())
	b, err := f.sealJob(e)
	if err != nil {
		return "", err
	}
	var rev uint64
	err = again(ctx, func(ctx context.Context, try int) error {
		var err error
		rev, err = f.jobs.Create(ctx, id, b)
		if try > 0 && errors.Is(err, jetstream.ErrKeyExists) {
			// Ids are this node's own: the record there is an earlier
			// try's if it was made at this submission's moment.
			cur, crev, found, gerr := f.getJob(ctx, id)
			if gerr == nil && found && cur.Record.CreatedAt.Equal(e.Record.CreatedAt) {
				rev = crev
				return nil
			}
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("recording cluster job %s: %w", id, err)
	}
	msg, err := json.Marshal(jobMessage{ID: id, Spec: spec, CreatedAt: e.Record.CreatedAt, Rev: rev})
	if err != nil {
		return "", fmt.Errorf("encoding cluster job %s: %w", id, err)
	}
	err = again(ctx, func(ctx context.Context, _ int) error {
		_, err := f.js.Publish(ctx, laneSubjPfx+spec.Lane, msg, jetstream.WithMsgID(id))
		return err
	})
	if err == nil {
		return id, nil
	}
	perr := fmt.Errorf("queueing cluster job %s on lane %s: %w", id, spec.Lane, err)
	now := time.Now().UTC()
	e.Record.State, e.Record.Error, e.Record.FinishedAt = api.StateError, "not_queued: "+err.Error(), &now
	uctx, ucancel := context.WithTimeout(f.ctx, opTimeout)
	defer ucancel()
	if _, uerr := f.putJob(uctx, e, rev); uerr != nil {
		f.log.Warn().Err(uerr).Str("job_id", id).Msg("recording a cluster job that could not be queued")
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) && (ae.ErrorCode == 10077 /* stream store failed: the queue is full */) {
		return "", api.Errorf(api.CodeQueueFull, "%v", perr)
	}
	return "", perr
}

// startTaking starts a taker per lane this node serves.
func (f *Fleet) startTaking(ctx context.Context) error {
	type taker struct {
		lane string
		c    jetstream.Consumer
		wake chan struct{}
	}
	var ts []taker
	for _, l := range f.lanes {
		var c jetstream.Consumer
		var err error
		w := f.startWait("taking lane " + l + "'s jobs")
		for {
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			c, err = f.laneConsumer(octx, l)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			w.failed(err)
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
		if err != nil {
			return fmt.Errorf("serving lane %s in the fleet: %w", l, err)
		}
		ts = append(ts, taker{lane: l, c: c, wake: make(chan struct{}, 1)})
	}
	for _, t := range ts {
		f.wakes = append(f.wakes, t.wake)
	}
	wakes := f.wakes
	f.local.OnSlotFreed(func() {
		for _, w := range wakes {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	})
	for _, t := range ts {
		f.takeWG.Add(1)
		go f.take(t.lane, t.c, t.wake)
	}
	return nil
}

// take pulls lane's jobs while the lane has free slots: as many at once as
// it has slots free and not yet promised to a take in flight, each taken
// (recorded, acknowledged, started) on its own goroutine.
func (f *Fleet) take(lane string, c jetstream.Consumer, wake chan struct{}) {
	defer f.takeWG.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	pause := func(d time.Duration) bool {
		select {
		case <-f.takeCtx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// promised: slots of takes in flight, not yet in the lane's count (a
	// take ends once its job is queued in the lane, or skipped).
	var promised atomic.Int64
	for f.takeCtx.Err() == nil {
		free := f.local.FreeSlots(lane) - int(promised.Load())
		if free <= 0 {
			select {
			case <-wake:
			case <-tick.C:
			case <-f.takeCtx.Done():
				return
			}
			continue
		}
		batch, done, err := fetch(f.takeCtx, c, min(free, maxTakeBatch), time.Second)
		if err != nil {
			f.log.Debug().Err(err).Str("lane", lane).Msg("pulling a job")
			if !pause(250 * time.Millisecond) {
				return
			}
			continue
		}
		for msg := range batch.Messages() {
			promised.Add(1)
			f.takeWG.Add(1)
			go func() {
				defer f.takeWG.Done()
				var once sync.Once
				// Once the lane counts the job (or it was not taken), the
				// slot is the lane's to report, not a promise.
				f.takeOne(lane, msg, func() {
					once.Do(func() {
						promised.Add(-1)
						select {
						case wake <- struct{}{}:
						default:
						}
					})
				})
			}()
		}
		done()
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && f.takeCtx.Err() == nil {
			f.log.Debug().Err(err).Str("lane", lane).Msg("pulling a job")
			if !pause(250 * time.Millisecond) {
				return
			}
		}
	}
}

// maxTakeBatch: the most jobs one pull asks for.
const maxTakeBatch = 64

// takeOne takes msg's job: recorded as this node's (a CAS on the queued
// record), then acknowledged, then run. A job whose record is not queued
// (cancelled, or taken by a node that died before acknowledging) is
// acknowledged and skipped: a redelivery never starts a job twice.
func (f *Fleet) takeOne(lane string, msg jetstream.Msg, queued func()) {
	defer queued()
	if f.takeCtx.Err() != nil {
		_ = msg.Nak()
		return
	}
	m, err := decodeJobMessage(lane, msg.Data())
	if err != nil {
		f.log.Warn().Err(err).Str("lane", lane).Msg("dropping a message that is not a job from the lane's queue")
		_ = msg.Term()
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
	defer cancel()
	// The first try writes over the revision the submission made, unread:
	// a record changed since (cancelled, or taken by a node that died
	// before acknowledging) fails it, and is read.
	e, rev, known := queuedEntry(m.ID, m.Spec, m.CreatedAt), m.Rev, m.Rev > 0 && !m.CreatedAt.IsZero()
	// Known here before the take is written: a cancel that comes between
	// the take and the lane's start finds it (serveCancel).
	j := &runJob{f: f, id: m.ID, lane: lane, started: make(chan struct{}), over: make(chan struct{})}
	f.mu.Lock()
	if f.running[j.id] != nil {
		// A redelivery while this node's own take of it is in flight:
		// later, when the record says what became of it.
		f.mu.Unlock()
		_ = msg.NakWithDelay(time.Second)
		return
	}
	f.running[j.id] = j
	f.mu.Unlock()
	taken := false
	defer func() {
		if !taken {
			f.mu.Lock()
			if f.running[j.id] == j {
				delete(f.running, j.id)
			}
			f.mu.Unlock()
		}
	}()
	for attempt := 0; ; attempt++ {
		if !known {
			var found bool
			var err error
			e, rev, found, err = f.getJob(ctx, m.ID)
			if re, ok := isRefused(err); ok && re.bucket == sealJobs && re.rev > 0 {
				// A record no node may write over the queued job (a
				// take by a node whose certificate does not list the
				// lane, a forgery): the job is as the message says, and
				// this take goes over it.
				e, rev, found, err = queuedEntry(m.ID, m.Spec, m.CreatedAt), re.rev, true, nil
			}
			if err != nil || attempt >= 10 {
				f.log.Debug().Err(err).Str("job_id", m.ID).Msg("taking a job: trying again later")
				_ = msg.NakWithDelay(time.Second)
				return
			}
			if !found || e.Record.State != api.StateQueued {
				// An acknowledgement lost is a redelivery, skipped again.
				_ = msg.Ack()
				return
			}
		}
		known = false
		now := time.Now().UTC()
		e.Record.State, e.Record.Node, e.Record.DispatchedAt = api.StateDispatched, f.name, &now
		e.Incarnation = f.inc
		nrev, err := f.putJob(ctx, e, rev)
		if fn := f.lostTakeReply.Load(); err == nil && fn != nil && (*fn)(m.ID) {
			err = errTestLostReply
		}
		if isWrongSeq(err) {
			continue
		}
		if err != nil {
			// The write may have landed all the same (its reply lost):
			// then the record says this node took a job it does not
			// run, and a redelivery skips it. This node's sweep ends it.
			f.doubt()
			f.log.Debug().Err(err).Str("job_id", m.ID).Msg("taking a job: trying again later")
			_ = msg.NakWithDelay(time.Second)
			return
		}
		// Taken: the record says so, whatever becomes of the
		// acknowledgement (a redelivery finds it taken and skips it), so
		// it is not waited for.
		_ = msg.Ack()
		j.entry, j.rev = e, nrev
		if f.weakCAS.Load() {
			// Another node's take of the same revision may have
			// succeeded too, and landed last: it runs the job, not this one.
			f.casSettle("take", m.ID)
			stood, cur, err := f.casStood(m.ID, func(c jobEntry) bool {
				return c.Record.Node == f.name && c.Incarnation == f.inc
			})
			if err != nil {
				taken = true
				now := time.Now().UTC()
				j.end(api.JobRecord{State: api.StateError, Error: "not_run: its take could not be read back: " + err.Error(), FinishedAt: &now})
				return
			}
			if !stood {
				f.log.Warn().Str("job_id", m.ID).Str("taken_by", cur.Record.Node).Msg("another node's take of a job landed after this node's (NATS older than 2.10): it runs there, not here")
				f.emit(ClusterTakeLost{JobID: m.ID, Lane: lane, TakenBy: cur.Record.Node})
				return
			}
		}
		// The take claimed, once for good: only then does the record of a
		// taker count (checkClaim), and only then does the job run.
		// Its own time: the take is written, and the claims' stream may be
		// electing its leader (a server just lost: the take's opTimeout
		// ran out in TestFleetExternalNATS under -race, and the job ended
		// not_run); tried again as an end is (endRetryFor).
		cctx, ccancel := context.WithTimeout(f.ctx, endRetryFor)
		err = f.claimTake(cctx, m.ID)
		ccancel()
		if err != nil {
			taken = true
			if re, ok := isRefused(err); ok {
				f.refused(re)
			}
			now := time.Now().UTC()
			j.end(api.JobRecord{State: api.StateError, Error: "not_run: its take could not be claimed: " + err.Error(), FinishedAt: &now})
			return
		}
		f.emit(ClusterJobTaken{JobID: m.ID, Lane: lane})
		taken = true
		if fn := f.beforeRun.Load(); fn != nil {
			(*fn)(j.id)
		}
		f.run(j, m.Spec, queued)
		return
	}
}

// The tests' faults (lostTakeReply, endUnreachable).
var (
	errTestLostReply   = errors.New("the reply was lost (a test's fault)")
	errTestUnreachable = errors.New("the fleet is unreachable (a test's fault)")
)

// runningAfter: how long a job runs before its record says running (a
// shorter one's record goes from dispatched to its end).
const runningAfter = 200 * time.Millisecond

// runJob is a job this node took.
type runJob struct {
	f        *Fleet
	id, lane string

	mu    sync.Mutex
	entry jobEntry
	rev   uint64
	ended bool
	over  chan struct{} // closed when ended is set

	// Under f.mu: a cancel came before the lane had the job (it ends
	// cancelled, never started); the lane is being given it (a cancel
	// waits for started, closed once it has it or refused it).
	cancelled, starting bool
	started             chan struct{}

	// stopIn stops the feed of its streamed stdin (feedStdin), under mu.
	stopIn context.CancelFunc

	// The sink's; done reads them after the last sink.
	pending []pendingPiece
	pubErrs int
	// republished counts pieces published again after a failure.
	republished int
	published   int64
}

func (f *Fleet) run(j *runJob, spec api.JobSpec, queued func()) {
	f.mu.Lock()
	cancelled := j.cancelled
	j.starting = !cancelled
	f.mu.Unlock()
	if cancelled {
		now := time.Now().UTC()
		j.end(api.JobRecord{State: api.StateCancelled, WasCancelled: true, Error: api.ErrCancelled, FinishedAt: &now})
		return
	}
	err := f.local.Run(j.id, spec, j.sink, j.done)
	close(j.started)
	queued()
	if err == nil && spec.StdinStream {
		ctx, stop := context.WithCancel(f.ctx)
		j.mu.Lock()
		j.stopIn = stop
		ended := j.ended
		j.mu.Unlock()
		if ended {
			stop()
		}
		go j.feedStdin(ctx)
	}
	if err != nil {
		now := time.Now().UTC()
		j.end(api.JobRecord{State: api.StateError, Error: "not_run: " + err.Error(), FinishedAt: &now})
		return
	}
	// The record says running once the job has run runningAfter: a job
	// that ends sooner goes from dispatched to its end, one replicated
	// write fewer (the end carries when it started). On the fleet's
	// goroutines, not the take's: StopTaking does not wait for it.
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		t := time.NewTimer(runningAfter)
		defer t.Stop()
		select {
		case <-j.over:
			return
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		j.amend("running", func(e *jobEntry) { e.Record.State = api.StateRunning })
	}()
}

// amend changes the job's record while it runs here (best effort): a CAS
// from the revision this node last wrote, under mu, so that the end and
// the other amendments follow each other; nothing once it has ended.
func (j *runJob) amend(what string, change func(*jobEntry)) {
	f := j.f
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ended {
		return
	}
	e := j.entry
	change(&e)
	ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
	defer cancel()
	if rev, err := f.putJob(ctx, e, j.rev); err == nil {
		j.entry, j.rev = e, rev
	} else {
		f.log.Debug().Err(err).Str("job_id", j.id).Str("what", what).Msg("recording a change to a cluster job running here")
	}
}

// sink publishes a piece of the job's output, at most pubWindow messages
// unacknowledged (the job waits meanwhile: backpressure). Each piece
// carries its offset in the output (hdrOffset): one whose publication
// fails is published again (settle), after its successors.
func (j *runJob) sink(stream string, data []byte) {
	for len(data) > 0 {
		n := min(len(data), pieceMax)
		p := pendingPiece{stream: stream, off: j.published, data: bytes.Clone(data[:n])}
		p.sig = j.f.id.sign(pieceMsg(j.id, j.f.name, p.off, p.stream, p.data))
		j.published += int64(n)
		data = data[n:]
		fut, err := j.f.js.PublishMsgAsync(p.msg(j.id, j.f.name))
		if err != nil {
			j.republish(p, err)
			continue
		}
		p.fut, p.sent = fut, time.Now()
		j.pending = append(j.pending, p)
		if len(j.pending) >= pubWindow {
			j.settle(1)
		}
	}
}

// pendingPiece is a piece of output published and not yet acknowledged.
type pendingPiece struct {
	fut    jetstream.PubAckFuture
	sent   time.Time
	stream string
	off    int64
	data   []byte
	sig    string // this node's signature (pieceMsg)
}

// msg is the piece as node, the job's taker, publishes it.
func (p pendingPiece) msg(id, node string) *nats.Msg {
	msg := nats.NewMsg(outSubj(id, node))
	msg.Header.Set(hdrStream, p.stream)
	msg.Header.Set(hdrOffset, strconv.FormatInt(p.off, 10))
	msg.Header.Set(hdrSig, p.sig)
	msg.Data = p.data
	return msg
}

// settle waits for the oldest n publications; a failed one, or one not
// acknowledged within pieceAckWait of its sending, is published again.
// (A piece sent to a stream leader as it steps down is neither stored nor
// answered: its acknowledgement never comes, and neither do those of the
// pieces sent with it, each waited for from its own sending.)
func (j *runJob) settle(n int) {
	for ; n > 0 && len(j.pending) > 0; n-- {
		p := j.pending[0]
		j.pending = j.pending[1:]
		select {
		case <-p.fut.Ok(): // acknowledged already: never taken for late
			continue
		default:
		}
		wait := time.NewTimer(max(0, time.Until(p.sent.Add(pieceAckWait))))
		select {
		case <-p.fut.Ok():
		case err := <-p.fut.Err():
			j.republish(p, err)
		case <-wait.C:
			j.republish(p, errors.New("no acknowledgement"))
		case <-j.f.ctx.Done():
			j.pubErr(j.f.ctx.Err())
		}
		wait.Stop()
	}
}

// republish publishes a piece again whose publication failed (the
// output stream electing a leader takes seconds), every
// republishEvery within endRetryFor; the job waits meanwhile. A piece
// that then still fails is lost: counted, and told by the record's
// output falling short.
func (j *runJob) republish(p pendingPiece, first error) {
	f := j.f
	f.log.Debug().Err(first).Str("job_id", j.id).Int64("offset", p.off).Msg("publishing a piece of a cluster job's output again")
	ctx, cancel := context.WithTimeout(f.ctx, endRetryFor)
	defer cancel()
	for {
		octx, ocancel := context.WithTimeout(ctx, opTimeout)
		_, err := f.js.PublishMsg(octx, p.msg(j.id, f.name))
		ocancel()
		if err == nil {
			j.republished++
			return
		}
		select {
		case <-ctx.Done():
			j.pubErr(err)
			return
		case <-time.After(republishEvery):
		}
	}
}

func (j *runJob) pubErr(err error) {
	if j.pubErrs == 0 {
		j.f.log.Warn().Err(err).Str("job_id", j.id).Msg("publishing a cluster job's output: some is lost")
	}
	j.pubErrs++
}

// done records the job's end: a CAS from the revision this node wrote. If
// the record has ended meanwhile (node_lost: this node was stopped or cut
// off), the end is not recorded: cluster.result_dropped.
func (j *runJob) done(rec api.JobRecord) {
	j.f.ending.Add(1)
	defer j.f.ending.Add(-1)
	j.settle(len(j.pending))
	if j.republished > 0 || j.pubErrs > 0 {
		j.f.emit(ClusterOutputRepublished{JobID: j.id, Pieces: j.republished, Lost: j.pubErrs})
	}
	j.end(rec)
}

func (j *runJob) end(rec api.JobRecord) {
	f := j.f
	f.ending.Add(1)
	defer f.ending.Add(-1)
	defer func() {
		f.mu.Lock()
		if f.running[j.id] == j {
			delete(f.running, j.id)
		}
		f.mu.Unlock()
	}()
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.ended {
		close(j.over)
	}
	j.ended = true
	if j.stopIn != nil {
		j.stopIn()
	}
	if e := j.entry; e.StdinStream {
		defer f.purgeStdin(j.id)
	}
	e := j.entry
	old := e.Record
	if rec.OutputBytes == 0 {
		rec.OutputBytes = j.published
	}
	kept := keptBytes(rec, e.MaxOutput)
	r := rec
	r.ID, r.Lane, r.Node, r.Output = j.id, j.lane, f.name, ""
	r.CreatedAt, r.Command, r.Argv, r.Cwd = old.CreatedAt, old.Command, old.Argv, old.Cwd
	if old.DispatchedAt != nil {
		r.DispatchedAt = old.DispatchedAt
	}
	if r.FinishedAt == nil {
		now := time.Now().UTC()
		r.FinishedAt = &now
	}
	if !r.State.Terminal() {
		r.State, r.Error = api.StateError, "not_terminal: the lane ended the job as "+string(rec.State)
	}
	e.Record, e.Kept = r, kept
	drop := func(recorded, why string) {
		f.log.Warn().Str("job_id", j.id).Str("state", string(r.State)).Str("why", why).Msg("a cluster job's end is not recorded")
		f.emit(ClusterResultDropped{JobID: j.id, State: string(r.State), Recorded: recorded, Why: why})
	}
	ctx, cancel := context.WithTimeout(f.ctx, endRetryFor)
	defer cancel()
	rev := j.rev
	for {
		var err error
		if fn := f.endUnreachable.Load(); fn != nil && (*fn)(j.id) {
			cancel() // endRetryFor, passed
			err = errTestUnreachable
		} else {
			octx, ocancel := context.WithTimeout(ctx, opTimeout)
			_, err = f.putJob(octx, e, rev)
			ocancel()
		}
		if err == nil {
			break
		}
		if isWrongSeq(err) {
			octx, ocancel := context.WithTimeout(ctx, opTimeout)
			cur, crev, found, gerr := f.getJob(octx, j.id)
			ocancel()
			re, forged := isRefused(gerr)
			switch {
			case forged && re.bucket == sealJobs && re.rev > 0:
				// Not a record another node may write over this node's
				// job: this node's end goes over it.
				rev = re.rev
				continue
			case gerr != nil:
			case !found:
				drop("", "record_gone")
				return
			case cur.Record.State.Terminal():
				drop(string(cur.Record.State), "already_ended: "+cur.Record.Error)
				return
			case cur.Record.Node != f.name || cur.Incarnation != f.inc:
				drop(string(cur.Record.State), "taken_by_another_node")
				return
			default:
				rev = crev
				continue
			}
		}
		select {
		case <-ctx.Done():
			drop("", "unreachable: "+err.Error())
			// The record stands unfinished under this live node, which
			// no other node's sweep ends: this node's own does, with the
			// end kept here.
			f.keepEnd(e)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	if f.weakCAS.Load() {
		// A node that declared this one lost may have failed the job
		// on the same revision, its write landing last: that end stands.
		f.casSettle("end", j.id)
		stood, cur, err := f.casStood(j.id, func(c jobEntry) bool { return sameEnd(c, r, f.name, f.inc) })
		if err == nil && !stood {
			drop(string(cur.Record.State), "overwritten: "+cur.Record.Error)
		}
	}
}

// sameEnd says whether c is the end r that node's incarnation inc wrote.
func sameEnd(c jobEntry, r api.JobRecord, node, inc string) bool {
	return c.Record.State == r.State && c.Record.Error == r.Error && c.Record.Node == node && c.Incarnation == inc &&
		c.Record.FinishedAt != nil && r.FinishedAt != nil && c.Record.FinishedAt.Equal(*r.FinishedAt)
}

// casSettle waits, on a server older than 2.10 (weakCAS), for a CAS of
// this node's that succeeded and a concurrent one of another node's on the
// same revision, which may have succeeded too, to both be applied
// (declareSettle, as a declaration waits), before casStood reads which
// stands: the last write.
func (f *Fleet) casSettle(what, id string) {
	if fn := f.afterCAS.Load(); fn != nil {
		(*fn)(what, id)
	}
	select {
	case <-f.ctx.Done():
	case <-time.After(declareSettle):
	}
}

// casStood reads job id's record back from the leader after casSettle;
// stood: it is there and mine says it is still this node's write. An
// error: it could not be read for 2*opTimeout.
func (f *Fleet) casStood(id string, mine func(jobEntry) bool) (stood bool, cur jobEntry, err error) {
	ctx, cancel := context.WithTimeout(f.ctx, 2*opTimeout)
	defer cancel()
	cur, _, found, err := f.getJob(ctx, id)
	if err != nil {
		return false, cur, err
	}
	return found && mine(cur), cur, nil
}

// keptBytes is how much of its output stream the record keeps: what the
// lane kept, else all of it up to max_output_bytes (the lanes' default
// when the spec gave none).
func keptBytes(rec api.JobRecord, maxOut uint64) int64 {
	switch {
	case rec.Output != "":
		return int64(len(rec.Output))
	case !rec.OutputTruncated:
		return rec.OutputBytes
	case maxOut > 0:
		return min(rec.OutputBytes, int64(maxOut))
	}
	return min(rec.OutputBytes, defaultKeptBytes)
}

// cancelRequest is a cancel sent to the node that runs a job.
type cancelRequest struct {
	ID    string `json:"id"`
	Force bool   `json:"force,omitempty"`
}

type cancelReply struct {
	WasRunning bool   `json:"was_running"`
	Code       int    `json:"code,omitempty"`
	Error      string `json:"error,omitempty"`
}

// serveCancel answers orchestrd.node.<this>.cancel.
func (f *Fleet) serveCancel(m *nats.Msg) {
	var req cancelRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || !validJobID(req.ID) {
		b, _ := json.Marshal(cancelReply{Code: api.CodeInvalidParams, Error: "not a cancel of a cluster job"})
		_ = m.Respond(b)
		return
	}
	f.cancelHere(req, func(wasRunning bool, err error) {
		rep := cancelReply{WasRunning: wasRunning}
		if err != nil {
			rep.Code, rep.Error = api.CodeInternal, err.Error()
			var ae *api.Error
			if errors.As(err, &ae) {
				rep.Code, rep.Error = ae.Code, ae.Message
			}
		}
		b, _ := json.Marshal(rep)
		_ = m.Respond(b)
	})
}

// cancelHere cancels a job this node took: through the lane once it has
// it; before that, the take ends it cancelled, unstarted.
func (f *Fleet) cancelHere(req cancelRequest, reply func(bool, error)) {
	f.local.Cancel(req.ID, req.Force, func(wasRunning bool, err error) {
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
			reply(wasRunning, err)
			return
		}
		f.mu.Lock()
		j := f.running[req.ID]
		starting := j != nil && j.starting
		if j != nil && !starting {
			j.cancelled = true
		}
		f.mu.Unlock()
		if j == nil || !starting {
			if j == nil {
				reply(false, err)
			} else {
				reply(false, nil)
			}
			return
		}
		// Being given to the lane: asked again once it has it.
		go func() {
			select {
			case <-j.started:
				f.local.Cancel(req.ID, req.Force, reply)
			case <-time.After(opTimeout):
				reply(false, err)
			}
		}()
	})
}

// Cancel cancels a queued job (its record, which the taker then skips) or
// a running one (through the node that runs it).
func (f *Fleet) Cancel(id string, force bool, reply func(wasRunning bool, err error)) {
	go func() { reply(f.cancel1(id, force)) }()
}

func (f *Fleet) cancel1(id string, force bool) (bool, error) {
	ctx, cancel := context.WithTimeout(f.ctx, 2*opTimeout)
	defer cancel()
	for {
		e, rev, found, err := f.getJob(ctx, id)
		switch {
		case err != nil:
			return false, err
		case !found:
			return false, api.Errorf(api.CodeNotFound, "no job %q", id)
		case e.Record.State.Terminal():
			return false, api.Errorf(api.CodeInvalidState, "job %s already finished (%s)", id, e.Record.State)
		case e.Record.State == api.StateQueued:
			now := time.Now().UTC()
			r := &e.Record
			r.State, r.WasCancelled, r.Error, r.FinishedAt = api.StateCancelled, true, api.ErrCancelled, &now
			_, err := f.putJob(ctx, e, rev)
			if isWrongSeq(err) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("cancelling cluster job %s: %w", id, err)
			}
			if e.StdinStream {
				f.purgeStdin(id)
			}
			return false, nil
		}
		b, _ := json.Marshal(cancelRequest{ID: id, Force: force})
		m, err := f.nc.RequestWithContext(ctx, nodeSubjPfx+e.Record.Node+".cancel", b)
		if err != nil {
			return false, api.Errorf(api.CodeInternal, "cancelling job %s on node %s: %v", id, e.Record.Node, err)
		}
		var rep cancelReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			return false, api.Errorf(api.CodeInternal, "cancelling job %s on node %s: a bad answer", id, e.Record.Node)
		}
		if rep.Code != 0 {
			return rep.WasRunning, &api.Error{Code: rep.Code, Message: rep.Error}
		}
		return rep.WasRunning, nil
	}
}

// Get reads a job's record; a finished job's carries its output, read back
// from the output stream.
func (f *Fleet) Get(id string) (api.JobRecord, bool, error) {
	ctx, cancel := context.WithTimeout(f.ctx, stepTimeout)
	defer cancel()
	e, _, found, err := f.getJob(ctx, id)
	if err != nil || !found {
		return api.JobRecord{}, found, err
	}
	r := e.Record
	if r.State.Terminal() && e.Kept > 0 {
		out, err := f.readOutput(f.ctx, id, e.Kept)
		if err != nil {
			return api.JobRecord{}, true, err
		}
		r.Output = string(out)
		r.OutputEvicted = int64(len(out)) < e.Kept
	}
	return r, true, nil
}

// readOutput reads up to limit bytes of id's output from the stream: the
// pieces its taker (its take claim's) wrote.
//
// Each step (the taker, the last message, each message) has stepTimeout of
// its own, not the whole read: a long output read message by message from
// a starved cluster takes as long as its size asks, while a step that
// makes no progress still fails.
func (f *Fleet) readOutput(ctx context.Context, id string, limit int64) ([]byte, error) {
	step := func(op func(ctx context.Context, try int) error) error {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		defer cancel()
		return again(sctx, op)
	}
	var c takeClaim
	var found bool
	err := step(func(ctx context.Context, _ int) error {
		var err error
		c, found, err = f.outputTaker(ctx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading cluster job %s's output: %w", id, err)
	}
	if !found {
		return nil, nil
	}
	subj := outSubj(id, c.Node)
	var last *jetstream.RawStreamMsg
	err = step(func(ctx context.Context, _ int) error {
		var err error
		last, err = f.out.GetLastMsgForSubject(ctx, subj)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading cluster job %s's output: %w", id, err)
	}
	// Message by message from the stream's leader (the next one of the
	// job's subject from a sequence on), not through a consumer: a
	// consumer is made by the JetStream meta group, a round on every
	// server per read, and one placed on a server that has died is never
	// made (seen with an operator's cluster that lost a server).
	// Pieces are put back in offset order (a piece published again lands
	// after its successors).
	var out []byte
	asm := newAssembler(func(_ string, data []byte) error {
		out = append(out, data[:min(int64(len(data)), limit-int64(len(out)))]...)
		return nil
	})
	for seq := uint64(1); int64(len(out)) < limit; {
		var m *jetstream.RawStreamMsg
		err := step(func(ctx context.Context, _ int) error {
			var err error
			m, err = f.out.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break // the rest is gone (the stream's limits)
		}
		if err != nil {
			return nil, fmt.Errorf("reading cluster job %s's output: %w", id, err)
		}
		if off, _, why := checkPiece(c, id, m.Header, m.Data); why != "" {
			f.outputRefused(id, c.Node, why)
		} else {
			_ = asm.add(off, true, "", m.Data)
		}
		if m.Sequence >= last.Sequence {
			break
		}
		seq = m.Sequence + 1
	}
	_ = asm.flush()
	return out, nil
}

// Wait calls fn once with the job's terminal record (with its output),
// until cancel is called.
func (f *Fleet) Wait(id string, fn func(api.JobRecord)) (func(), error) {
	gctx, gcancel := context.WithTimeout(f.ctx, opTimeout)
	_, _, found, err := f.getJob(gctx, id)
	gcancel()
	// A read that failed (the fleet electing a leader) is no answer: the
	// wait goes on, and reads again.
	if err == nil && !found {
		return nil, api.Errorf(api.CodeNotFound, "no job %q", id)
	}
	if err != nil && !validJobID(id) {
		return nil, err
	}
	ctx, cancel := context.WithCancel(f.ctx)
	go func() {
		ended, err := f.waitTerminal(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn().Err(err).Str("job_id", id).Msg("waiting for a cluster job")
			}
			return
		}
		if ended.Kept == 0 {
			// The record as watched is all of it.
			fn(ended.Record)
			return
		}
		// The record is read again with its output. A read that is behind
		// what the watch saw (a leader just elected, catching up) is read
		// again: a waiter is only ever answered with an end.
		for behind := 0; ; {
			rec, found, err := f.Get(id)
			switch {
			case err == nil && found && rec.State.Terminal():
				fn(rec)
				return
			case err == nil:
				if behind++; behind == 1 {
					f.log.Warn().Str("job_id", id).Str("read", string(rec.State)).Str("watched", string(ended.Record.State)).
						Msg("a read of a cluster job is behind its end: reading again")
				}
				if behind >= staleReads {
					f.log.Warn().Str("job_id", id).Msg("answering a cluster job's waiter with its end as watched, without its output")
					fn(ended.Record)
					return
				}
			default:
				f.log.Warn().Err(err).Str("job_id", id).Msg("reading an ended cluster job for its waiter: trying again")
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return cancel, nil
}

// staleReads: how many reads behind a watched end a waiter takes (250 ms
// apart) before it is answered with the end as watched.
const staleReads = 40

// waitTerminal waits for id's record to be terminal: told by the shared
// watch, and read once the watch is live and every pollTerminal (a watch
// being made again after its server died misses what happened meanwhile).
// pollTerminal: how often.
const pollTerminal = 2 * time.Second

func (f *Fleet) waitTerminal(ctx context.Context, id string) (jobEntry, error) {
	ch, live, remove := f.jw.add(id)
	defer remove()
	poll := time.NewTicker(pollTerminal)
	defer poll.Stop()
	polled := func() (jobEntry, bool) {
		gctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		je, _, found, err := f.getJob(gctx, id)
		if err == nil && found && je.Record.State.Terminal() {
			return je, true
		}
		return jobEntry{}, false
	}
	select {
	case <-ctx.Done():
		return jobEntry{}, ctx.Err()
	case r := <-ch:
		return r, nil
	case <-live:
	case <-poll.C:
	}
	if r, ok := polled(); ok {
		return r, nil
	}
	for {
		select {
		case <-ctx.Done():
			return jobEntry{}, ctx.Err()
		case r := <-ch:
			return r, nil
		case <-poll.C:
			if r, ok := polled(); ok {
				return r, nil
			}
		}
	}
}

// List lists the cluster jobs matching flt, oldest first, without output;
// with a limit, the newest limit of them.
func (f *Fleet) List(flt api.Filter) ([]api.JobRecord, error) {
	var since time.Time
	if flt.Since != "" {
		if t, err := time.Parse(time.RFC3339, flt.Since); err == nil {
			since = t
		} else if d, err := time.ParseDuration(flt.Since); err == nil {
			since = time.Now().Add(-d)
		} else {
			return nil, api.Errorf(api.CodeInvalidParams, "since %q: want RFC 3339 or a duration like 1h", flt.Since)
		}
	}
	ctx, cancel := context.WithTimeout(f.ctx, 6*opTimeout)
	defer cancel()
	byID := map[string]api.JobRecord{}
	err := f.scanJobs(ctx, func(e jobEntry, _ uint64) {
		r := e.Record
		if flt.Lane != "" && r.Lane != flt.Lane || flt.State != "" && string(r.State) != flt.State ||
			!since.IsZero() && r.CreatedAt.Before(since) {
			delete(byID, r.ID) // a later record of it no longer matches
			return
		}
		byID[r.ID] = r // a later record of a job replaces the earlier
	})
	out := make([]api.JobRecord, 0, len(byID))
	for _, r := range byID {
		out = append(out, r)
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b api.JobRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	lim := api.MaxListLimit
	if flt.Limit > 0 && flt.Limit < lim {
		lim = flt.Limit
	}
	if len(out) > lim {
		out = out[len(out)-lim:]
	}
	return out, nil
}

// Follow delivers the job's output from its first byte, in order, to
// sink until the job ends, and returns its terminal record (without
// output).
func (f *Fleet) Follow(ctx context.Context, id string, sink func(stream string, data []byte) error) (api.JobRecord, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Woken by each piece published from now on, by any node (a plain
	// subscription: the pieces are read from the stream, in order, not
	// from it; and only the taker's).
	wake, unsub, err := f.wakeOn(outSubjPfx + id + ".>")
	if err != nil {
		return api.JobRecord{}, fmt.Errorf("following cluster job %s's output: %w", id, err)
	}
	defer unsub()
	// The record, tried again for a while: the fleet may be electing a
	// leader (just started, or a node died).
	for deadline := time.Now().Add(followSetup); ; {
		gctx, gcancel := context.WithTimeout(ctx, opTimeout)
		_, _, found, err := f.getJob(gctx, id)
		gcancel()
		if err == nil && !found {
			return api.JobRecord{}, api.Errorf(api.CodeNotFound, "no job %q", id)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return api.JobRecord{}, fmt.Errorf("following cluster job %s's output: %w", id, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	term := make(chan api.JobRecord, 1)
	go func() {
		if e, err := f.waitTerminal(ctx, id); err == nil {
			term <- e.Record
		}
	}()
	// The output, message by message from the stream's leader (as
	// readOutput, and for its reasons: no consumer to make, none to lose
	// with a server), from next on, until a read finds nothing newer.
	// The end is recorded only after every piece was stored, so a read
	// that finds nothing once the record has ended has read them all.
	next := uint64(1)
	asm := newAssembler(sink) // pieces in offset order
	var ended *api.JobRecord
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	fails := 0
	// The taker (its take claim): only its pieces are read; none before
	// the claim is (the job runs only once it is).
	var taker takeClaim
	subj := ""
	for {
		caughtUp := false
		if subj == "" {
			gctx, gcancel := context.WithTimeout(ctx, opTimeout)
			c, found, err := f.outputTaker(gctx, id)
			gcancel()
			switch {
			case err != nil:
				if fails++; fails == 1 || fails%20 == 0 {
					f.log.Debug().Err(err).Str("job_id", id).Int("fails", fails).Msg("following a cluster job's output: reading its take")
				}
			case found:
				taker, subj = c, outSubj(id, c.Node)
			default:
				caughtUp = true // nothing to read yet
			}
		}
		for subj != "" && !caughtUp {
			if err := ctx.Err(); err != nil {
				return api.JobRecord{}, err
			}
			gctx, gcancel := context.WithTimeout(ctx, opTimeout)
			m, err := f.out.GetMsg(gctx, next, jetstream.WithGetMsgSubject(subj))
			gcancel()
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				caughtUp = true
				break
			}
			if err != nil {
				if fails++; fails == 1 || fails%20 == 0 {
					f.log.Debug().Err(err).Str("job_id", id).Int("fails", fails).Msg("following a cluster job's output")
				}
				break
			}
			fails = 0
			next = m.Sequence + 1
			off, stream, why := checkPiece(taker, id, m.Header, m.Data)
			if why != "" {
				f.outputRefused(id, taker.Node, why)
				continue
			}
			if err := asm.add(off, true, stream, m.Data); err != nil {
				return api.JobRecord{}, err
			}
		}
		if ended != nil && caughtUp {
			// What never came is skipped: the caller sees the output
			// fall short of the record's output_bytes.
			if err := asm.flush(); err != nil {
				return api.JobRecord{}, err
			}
			return *ended, nil
		}
		if !caughtUp {
			// A read failed: again shortly.
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		select {
		case <-wake:
		case r := <-term:
			ended = &r
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// wakeOn is woken (never blocking the subscription) by each message
// published on subj from now on: a plain subscription for readers that
// read the stream itself (Follow, feedStdin).
func (f *Fleet) wakeOn(subj string) (<-chan struct{}, func(), error) {
	wake := make(chan struct{}, 1)
	sub, err := f.nc.Subscribe(subj, func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return wake, func() { _ = sub.Unsubscribe() }, nil
}

// followSetup bounds how long Follow tries to read a job's record before
// it gives up.
const followSetup = 30 * time.Second

// maxResets bounds an ordered consumer's own attempts to recreate itself
// (unbounded by default, inside a Fetch that then never returns).
const maxResets = 3

// fetch pulls up to n messages, waiting at most wait (or until ctx ends);
// done ends the pull (its goroutine) once its messages are read.
func fetch(ctx context.Context, c jetstream.Consumer, n int, wait time.Duration) (jetstream.MessageBatch, context.CancelFunc, error) {
	fctx, cancel := context.WithTimeout(ctx, wait)
	b, err := c.Fetch(n, jetstream.FetchContext(fctx))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return b, cancel, nil
}
