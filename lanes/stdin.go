package lanes

import (
	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// A job's stdin streamed while it runs (job.submit with stdin_stream):
// job.stdin calls hand its job actor pieces of it, one call at a time per
// job; the actor sends them to the job's runner (wire.StdinChunk) while
// less than stdinWindow is sent and unacknowledged (wire.StdinAck), and
// answers each call once its piece is sent, so a client that streams
// stdin waits as the job reads: memory stays bounded whatever the size.
// Nothing goes to a runner before it accepted the job (JobAck), so a job
// that goes back to the queue (its runner gone before it got the job) has
// lost none of it.

// stdinWindow is how much of a job's stdin may be on its way to the
// runner, unacknowledged.
const stdinWindow = 256 << 10

// MaxStdinChunk is the most one job.stdin call carries.
const MaxStdinChunk = 512 << 10

// Messages for stdin.
type (
	// jobStdin (to the job actor): a piece of its stdin, or its end.
	// reply, when set, answers the call once the piece is sent.
	jobStdin struct {
		data  []byte
		eof   bool
		owner bool // from the owner going away: its end, whatever is pending
		reply func(error)
	}
	// jobStdinAcked (runner actor -> job actor): the runner is done with
	// bytes of the job's stdin in all.
	jobStdinAcked struct{ bytes uint64 }
	// toRunnerStdin (job actor -> runner actor) and outputAckMsg (a
	// job's output stream -> runner actor): frames for incarnation gen.
	toRunnerStdin struct {
		gen   int
		jobID string
		data  []byte
		eof   bool
	}
	outputAckMsg struct {
		gen   int
		jobID string
		acked int64
	}
)

// stdinFeed is a job actor's streamed stdin.
type stdinFeed struct {
	sent, acked uint64   // to the runner the job is on
	unacked     [][]byte // sent, not acknowledged: sent again after a bounce
	eofSent     bool
	eof         bool      // the client said its stdin ends
	pending     *jobStdin // waiting for room
	onRunner    bool      // the job was handed to a runner
	// unsupported: the job's runner takes no streamed stdin (a Loopr
	// runner): the job reads nothing, and a piece of data is refused.
	unsupported string
}

// stdinMsg handles job.stdin for the job.
func (j *jobActor) stdinMsg(c *actors.Context, m jobStdin) {
	fail := func(format string, args ...any) {
		if m.reply != nil {
			m.reply(api.Errorf(api.CodeInvalidState, format, args...))
		}
	}
	switch {
	case j.rec.State.Terminal():
		fail("job %s finished (%s); its stdin is closed", j.rec.ID, j.rec.State)
		return
	case j.stdin == nil:
		fail("job %s was not submitted with stdin_stream: its stdin is not streamed", j.rec.ID)
		return
	}
	f := j.stdin
	if m.owner {
		// The client that streams the job's stdin is gone: it ends here.
		if f.pending != nil && f.pending.reply != nil {
			f.pending.reply(api.Errorf(api.CodeInvalidState, "job %s: the stdin stream's client went away", j.rec.ID))
		}
		f.pending, f.eof = nil, true
		j.sendStdin(c)
		return
	}
	switch {
	case f.eof:
		fail("job %s: its stdin was already closed", j.rec.ID)
		return
	case f.pending != nil:
		fail("job %s: a job.stdin call is already waiting; send the next once it is answered", j.rec.ID)
		return
	case f.unsupported != "" && len(m.data) > 0:
		if m.reply != nil {
			m.reply(stdinUnsupported(j.rec.ID, f.unsupported))
		}
		return
	}
	f.pending = &m
	j.sendStdin(c)
}

// stdinUnsupported is job.stdin's error for a job on a runner that takes
// no streamed stdin; its data says so for clients (stdin: unsupported).
func stdinUnsupported(id, runner string) error {
	return &api.Error{Code: api.CodeInvalidState, Data: map[string]string{"stdin": "unsupported"},
		Message: "job " + id + " runs on runner " + runner + ", which takes no streamed stdin (it does not announce " +
			wire.CapStdinStream + "): the job reads nothing"}
}

// sendStdin sends what is pending if the window has room (one piece may
// exceed it when nothing is in flight), then the end once asked for.
func (j *jobActor) sendStdin(c *actors.Context) {
	f := j.stdin
	if f == nil || !f.onRunner {
		return
	}
	if f.unsupported != "" {
		if p := f.pending; p != nil {
			f.pending = nil
			if p.reply != nil && len(p.data) > 0 {
				p.reply(stdinUnsupported(j.rec.ID, f.unsupported))
			} else if p.reply != nil {
				p.reply(nil)
			}
		}
		return
	}
	if p := f.pending; p != nil && (f.sent == f.acked || f.sent-f.acked+uint64(len(p.data)) <= stdinWindow) {
		f.pending = nil
		if len(p.data) > 0 {
			c.Send(j.runner, toRunnerStdin{gen: j.gen, jobID: j.rec.ID, data: p.data})
			f.sent += uint64(len(p.data))
			f.unacked = append(f.unacked, p.data)
		}
		f.eof = f.eof || p.eof
		if p.reply != nil {
			p.reply(nil)
		}
	}
	if f.eof && f.pending == nil && !f.eofSent {
		f.eofSent = true
		c.Send(j.runner, toRunnerStdin{gen: j.gen, jobID: j.rec.ID, eof: true})
	}
}

// stdinAcked takes the runner's StdinAck.
func (j *jobActor) stdinAcked(c *actors.Context, n uint64) {
	f := j.stdin
	if f == nil || n <= f.acked || n > f.sent {
		return
	}
	for done := n - f.acked; done > 0 && len(f.unacked) > 0; {
		d := f.unacked[0]
		if uint64(len(d)) <= done {
			done -= uint64(len(d))
			f.unacked[0] = nil
			f.unacked = f.unacked[1:]
			continue
		}
		f.unacked[0] = d[done:]
		done = 0
	}
	f.acked = n
	j.sendStdin(c)
}

// onRunner: the job's runner (j.runner, j.gen) accepted it (JobAck): its
// output is acknowledged there, and its stdin goes there, if the runner
// takes it. Nothing was sent to a runner before: a job bounced back to
// the queue sent nothing, and keeps what it was given.
func (j *jobActor) onRunner(c *actors.Context) {
	runner, gen, id, sys := j.runner, j.gen, j.rec.ID, c.System()
	j.out.onRunner(func(n int64) { sys.Send(runner, outputAckMsg{gen: gen, jobID: id, acked: n}) })
	f := j.stdin
	if f == nil {
		return
	}
	f.unsupported = ""
	if !j.stdinOK {
		f.unsupported = j.rec.RunnerID
	}
	// A runner counts its acknowledgements from 0; a job bounced before
	// its runner got it had none.
	f.onRunner, f.eofSent, f.acked, f.sent = true, false, 0, 0
	for _, d := range f.unacked {
		c.Send(j.runner, toRunnerStdin{gen: j.gen, jobID: id, data: d})
		f.sent += uint64(len(d))
	}
	j.sendStdin(c)
}

// offRunner: the job went back to the queue before its runner got it.
func (j *jobActor) offRunner() {
	j.out.onRunner(nil)
	if f := j.stdin; f != nil {
		f.onRunner = false
		f.eofSent = false
	}
}

// stdinEnded answers a call still waiting: the job is over.
func (j *jobActor) stdinEnded(err error) {
	if f := j.stdin; f != nil && f.pending != nil {
		if f.pending.reply != nil {
			f.pending.reply(err)
		}
		f.pending = nil
	}
}

// runnerStdin writes a job's stdin frame for the runner actor, if the job
// is still on this incarnation.
func (r *runnerActor) runnerStdin(c *actors.Context, m toRunnerStdin) {
	if m.gen != r.gen || r.down || !r.stdinOK {
		return
	}
	if _, ok := r.jobs[m.jobID]; !ok {
		return
	}
	r.send(c, wire.TypeStdinChunk, wire.StdinChunk{JobID: m.jobID, Data: m.data, EOF: m.eof})
}

// runnerOutputAck acknowledges a job's output to a runner that takes it.
func (r *runnerActor) runnerOutputAck(c *actors.Context, m outputAckMsg) {
	if m.gen != r.gen || r.down || !r.credit {
		return
	}
	if _, ok := r.jobs[m.jobID]; !ok {
		return
	}
	r.send(c, wire.TypeOutputAck, wire.OutputAck{JobID: m.jobID, Acked: uint64(m.acked)})
}
