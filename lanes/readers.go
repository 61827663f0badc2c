package lanes

import (
	"context"
	"errors"
	"io"

	"github.com/orchestrd/orchestrd/api"
)

// ReadToEnd reads r to its job's end, the one way every reader of a job's
// output does: fn gets each piece of output and each gap (Gap > 0, no
// Data: bytes dropped for a reader that fell behind, or not kept) in offset
// order; a piece's Data is valid until fn returns. It returns nil once the
// job has ended and fn had everything; otherwise fn's error (it stops there),
// ctx's error, or ErrReaderClosed. It does not close r: the caller does
// ("ended" after nil) and reads r.Record() and r.Counts().
func (r *OutputReader) ReadToEnd(ctx context.Context, fn func(OutputPiece) error) error {
	for {
		p, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(p); err != nil {
			return err
		}
	}
}

// ReadOutput attaches a reader to job id's output (see OutputReader); who
// names it in job.stream_opened. A running job's reader gets the output
// the job's record keeps, a gap to what is still held, then every byte
// live until the job ends (follow), or only what is kept now (!follow). A
// finished job's reader gets its record's output (from the cache of
// finished records or the state store), then a gap for what the record did
// not keep.
func (m *Manager) ReadOutput(id, who string, follow bool) (*OutputReader, error) {
	return m.readOutput(id, who, follow, false)
}

// ObserveOutput is ReadOutput for a reader that must never hold the job
// back (the dashboard's): one that falls behind skips ahead, told of the
// gap (GapBehind), and the job runs at full speed.
func (m *Manager) ObserveOutput(id, who string) (*OutputReader, error) {
	return m.readOutput(id, who, true, true)
}

func (m *Manager) readOutput(id, who string, follow, observer bool) (*OutputReader, error) {
	if c, ok := m.owned(id); ok {
		return m.readCluster(c, id, who, follow, observer)
	}
	out, rec, ok := m.sh.store.stream(id)
	if ok && out != nil {
		s, from := out, "running"
		if !follow {
			s = out.snapshot(rec)
		}
		r := s.attach(who, observer)
		m.sh.bus.Emit(JobStreamOpened{JobID: id, Reader: who, From: from})
		return r, nil
	}
	rec, ok, err := m.lookup(id)
	switch {
	case err != nil:
		return nil, api.Errorf(api.CodeInternal, "reading job %s: %v", id, err)
	case !ok:
		return nil, api.Errorf(api.CodeNotFound, "job %s not found", id)
	case !rec.State.Terminal():
		return nil, api.Errorf(api.CodeInvalidState, "job %s is recorded as %s but is not live in this daemon", id, rec.State)
	}
	r := finishedStream(m.sh, rec).attach(who, observer)
	m.sh.bus.Emit(JobStreamOpened{JobID: id, Reader: who, From: "record"})
	return r, nil
}

// Stdin gives job id, submitted with stdin_stream, the next piece of its
// stdin (eof: and then its end). reply runs once the piece is on its way
// to the job's runner, which may wait for the job to read (flow control):
// send the next piece after it. One call at a time per job.
//
// A cluster job's stdin goes to the fleet, wherever the job runs (this
// node too: every piece takes the one way, so none overtakes another).
func (m *Manager) Stdin(id string, data []byte, eof bool, reply func(error)) {
	if len(data) > MaxStdinChunk {
		reply(api.Errorf(api.CodeInvalidParams, "invalid params for job.stdin: %d bytes in one call, more than %d", len(data), MaxStdinChunk))
		return
	}
	if c, ok := m.owned(id); ok {
		c.Stdin(id, data, eof, reply)
		return
	}
	m.StdinHere(id, data, eof, reply)
}

// StdinHere is Stdin for a job that runs on this node: the fleet gives a
// cluster job it runs here its stdin through it.
func (m *Manager) StdinHere(id string, data []byte, eof bool, reply func(error)) {
	out, rec, ok := m.sh.store.stream(id)
	if !ok {
		if rec, found, _ := m.lookup(id); found {
			reply(api.Errorf(api.CodeInvalidState, "job %s is %s; its stdin is closed", id, rec.State))
			return
		}
		reply(api.Errorf(api.CodeNotFound, "job %s not found", id))
		return
	}
	if out == nil || !out.toActor(m.sys, jobStdin{data: data, eof: eof, reply: reply}) {
		reply(api.Errorf(api.CodeInvalidState, "job %s finished (%s); its stdin is closed", id, rec.State))
	}
}

// StdinGone ends job id's streamed stdin: the client streaming it went
// away.
func (m *Manager) StdinGone(id string) {
	if c, ok := m.owned(id); ok {
		c.Stdin(id, nil, true, func(error) {})
		return
	}
	if out, _, ok := m.sh.store.stream(id); ok && out != nil {
		out.toActor(m.sys, jobStdin{owner: true})
	}
}
