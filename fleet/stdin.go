package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orchestrd/orchestrd/api"
)

// A cluster job's streamed stdin (job.stdin on any node): each piece is
// stored in the input stream under the job's subject before its call is
// answered, whether the job runs yet or not; the node that takes the job
// reads the pieces in order and gives each to the job through its lane
// (Local.Stdin, which answers at the job's pace), then deletes it. The
// stream keeps at most inputPerJob pieces a job (discard new, per
// subject): a piece sent while that many wait is refused by the stream and
// sent again once the job's node took one (it says so on the taken
// subject), so a client that streams stdin waits as the job reads, and
// what waits is bounded, on disk, whoever is slow. The job's end purges
// what is left.

// stdinTry bounds one try of a piece; the call goes on until the job
// ends or the piece is kept.
const stdinTry = opTimeout

// Stdin gives cluster job id, submitted with stdin_stream, the next piece
// of its stdin (eof: then its end); reply runs once it is kept for the job.
func (f *Fleet) Stdin(id string, data []byte, eof bool, reply func(error)) {
	go func() { reply(f.stdin(id, data, eof)) }()
}

func (f *Fleet) stdin(id string, data []byte, eof bool) error {
	if !validJobID(id) {
		return api.Errorf(api.CodeNotFound, "job %s not found", id)
	}
	f.mu.Lock()
	busy := f.stdinBusy[id]
	f.stdinBusy[id] = true
	f.mu.Unlock()
	if busy {
		return api.Errorf(api.CodeInvalidState, "job %s: a job.stdin call is already waiting; send the next once it is answered", id)
	}
	defer func() {
		f.mu.Lock()
		delete(f.stdinBusy, id)
		f.mu.Unlock()
	}()
	open := func() error {
		ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
		defer cancel()
		e, _, found, err := f.getJob(ctx, id)
		switch {
		case err != nil:
			return fmt.Errorf("giving cluster job %s its stdin: %w", id, err)
		case !found:
			return api.Errorf(api.CodeNotFound, "job %s not found", id)
		case !e.StdinStream:
			return api.Errorf(api.CodeInvalidState, "job %s was not submitted with stdin_stream: its stdin is not streamed", id)
		case e.Record.State.Terminal():
			return api.Errorf(api.CodeInvalidState, "job %s finished (%s); its stdin is closed", id, e.Record.State)
		case e.StdinRefused != "":
			ae := &api.Error{Code: api.CodeInvalidState,
				Message: fmt.Sprintf("job %s: node %s, which runs it, refused its stdin (what came after was dropped): %s", id, e.Record.Node, e.StdinRefused)}
			if e.StdinUnsupported {
				ae.Data = map[string]string{"stdin": "unsupported"}
			}
			return ae
		}
		return nil
	}
	if err := open(); err != nil {
		return err
	}
	msg := nats.NewMsg(inSubjPfx + id)
	msg.Data = data
	if eof {
		msg.Header.Set(hdrEOF, "1")
	}
	// One id for every try of this piece: a try whose answer was lost
	// and that was kept is not kept twice.
	pieceID := id + "." + api.RandomHex(8)
	var taken chan *nats.Msg
	var sub *nats.Subscription
	defer func() {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
	}()
	lastCheck := time.Now()
	for {
		ctx, cancel := context.WithTimeout(f.ctx, stdinTry)
		_, err := f.js.PublishMsg(ctx, msg, jetstream.WithMsgID(pieceID))
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			return nil
		}
		if f.ctx.Err() != nil {
			return api.Errorf(api.CodeShuttingDown, "the fleet is stopping")
		}
		var ae *jetstream.APIError
		full := errors.As(err, &ae) && ae.ErrorCode == 10077 // stream store failed: inputPerJob wait, or the stream is full
		if !full && !noStream(err) && !timedOut {
			return fmt.Errorf("giving cluster job %s its stdin: %w", id, err)
		}
		if full && sub == nil {
			// Woken when the job's node takes a piece.
			taken = make(chan *nats.Msg, 1)
			if sub, err = f.nc.ChanSubscribe(inTakenPfx+id, taken); err != nil {
				return fmt.Errorf("giving cluster job %s its stdin: %w", id, err)
			}
			continue // a piece may have been taken before the subscription
		}
		select {
		case <-taken:
		case <-time.After(retryPause):
		case <-f.ctx.Done():
		}
		if time.Since(lastCheck) >= time.Second {
			// The job may have ended meanwhile (its stdin closed).
			lastCheck = time.Now()
			if err := open(); err != nil {
				return err
			}
		}
	}
}

// feedStdin gives the job it runs here the pieces of its stdin kept in
// the input stream, in order, each once the lane took the one before (the
// job's pace), deleting each once given, until its end, the job's end
// (ctx) or the lane's refusal.
func (j *runJob) feedStdin(ctx context.Context) {
	f := j.f
	subj := inSubjPfx + j.id
	wake, unsub, err := f.wakeOn(subj)
	if err != nil {
		f.log.Warn().Err(err).Str("job_id", j.id).Msg("reading a cluster job's stdin: it gets none")
		return
	}
	defer unsub()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	refused := false
	for next := uint64(1); ctx.Err() == nil; {
		gctx, gcancel := context.WithTimeout(ctx, opTimeout)
		m, err := f.in.GetMsg(gctx, next, jetstream.WithGetMsgSubject(subj))
		gcancel()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				f.log.Debug().Err(err).Str("job_id", j.id).Msg("reading a cluster job's stdin")
			}
			select {
			case <-wake:
			case <-tick.C:
			case <-ctx.Done():
			}
			continue
		}
		next = m.Sequence + 1
		eof := m.Header.Get(hdrEOF) != ""
		if !refused {
			given := make(chan error, 1)
			f.local.Stdin(j.id, m.Data, eof, func(err error) { given <- err })
			select {
			case err = <-given:
			case <-ctx.Done():
				return
			}
			if err != nil {
				// The lane takes no more (the job's runner takes no
				// streamed stdin, or its stdin closed): what comes is
				// taken and dropped, so that its sender is not held.
				refused = true
				f.log.Warn().Err(err).Str("job_id", j.id).Msg("a cluster job's stdin is refused by its lane; the rest is dropped")
				j.refuseStdin(err)
			}
		}
		dctx, dcancel := context.WithTimeout(ctx, opTimeout)
		if err := f.in.DeleteMsg(dctx, m.Sequence); err != nil {
			f.log.Debug().Err(err).Str("job_id", j.id).Msg("deleting a piece of a cluster job's stdin")
		}
		dcancel()
		_ = f.nc.Publish(inTakenPfx+j.id, nil)
		if eof {
			return
		}
	}
}

// purgeStdin drops what is left of job id's stdin (it ended).
func (f *Fleet) purgeStdin(id string) {
	ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
	defer cancel()
	if err := f.in.Purge(ctx, jetstream.WithPurgeSubject(inSubjPfx+id)); err != nil {
		f.log.Debug().Err(err).Str("job_id", id).Msg("purging a cluster job's stdin")
	}
}

// refuseStdin records in the job's record that its lane refused its stdin,
// so that the next job.stdin, on whichever node, is told (a piece already
// kept was answered when it was kept).
func (j *runJob) refuseStdin(err error) {
	why := err.Error()
	if len(why) > maxRefusal {
		why = why[:maxRefusal]
	}
	var ae *api.Error
	unsupported := false
	if errors.As(err, &ae) {
		if d, ok := ae.Data.(map[string]string); ok && d["stdin"] == "unsupported" {
			unsupported = true
		}
	}
	j.amend("stdin_refused", func(e *jobEntry) { e.StdinRefused, e.StdinUnsupported = why, unsupported })
}

// maxRefusal bounds the reason a record keeps for a refused stdin.
const maxRefusal = 512
