package control

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/wire"
)

// DefaultLane is the lane job.submit uses when none is given.
const DefaultLane = "no-net"

// Result and param shapes of the methods.
type (
	connectParams struct {
		Version string `json:"version"`
	}
	connectResult struct {
		SessionID string `json:"session_id"`
		State     string `json:"state"`
		Version   string `json:"version,omitempty"` // the daemon's
	}
	pongResult struct {
		Pong bool `json:"pong"`
	}
	empty    struct{}
	idParams struct {
		ID    string `json:"id"`
		JobID string `json:"job_id"` // the same, named as job.submit answers
	}
	waitParams struct {
		ID        string `json:"id"`
		JobID     string `json:"job_id"`
		TimeoutMs uint64 `json:"timeout_ms,omitempty"`
	}
	subscribeParams struct {
		Kinds []string `json:"kinds,omitempty"`
	}
	jobIDResult struct {
		JobID string `json:"job_id"`
	}
	jobResult struct {
		Job api.JobRecord `json:"job"`
	}
	jobsResult struct {
		Jobs []api.JobRecord `json:"jobs"`
	}
	cancelResult struct {
		WasRunning bool `json:"was_running"`
	}
	lanesResult struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
	treeResult struct {
		Tree []actors.TreeNode `json:"tree"`
	}
)

var emptyResult = empty{}

// handle parses and answers one request line.
func (a *connActor) handle(c *actors.Context, line []byte) {
	cn := a.cn
	req, perr := wire.ParseRequest(line)
	if perr != nil {
		if perr.Code == wire.CodeParseError || perr.Code == wire.CodeInvalidRequest {
			a.protocolError(perr)
		}
		cn.respond(req.ID, nil, perr)
		return
	}
	be := cn.srv.backend
	switch req.Method {
	case "connect":
		var p connectParams
		if e := wire.DecodeParams(req, &p); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		if cn.session == "" {
			var rnd [4]byte
			rand.Read(rnd[:])
			cn.session = "s-" + strconv.FormatUint(cn.srv.sessions.Add(1), 10) + "-" + hex.EncodeToString(rnd[:])
		}
		cn.respond(req.ID, connectResult{SessionID: cn.session, State: "ready", Version: cn.srv.opts.Version}, nil)

	case "ping":
		if e := wire.DecodeParams(req, &empty{}); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		cn.respond(req.ID, pongResult{Pong: true}, nil)

	case "disconnect":
		if e := wire.DecodeParams(req, &empty{}); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		cn.respond(req.ID, emptyResult, nil)
		cn.setReason(ReasonClientDisconnect)
		c.StopSelf()

	case "job.submit":
		var spec api.JobSpec
		if e := wire.DecodeParams(req, &spec); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		if spec.Lane == "" {
			spec.Lane = DefaultLane
		}
		id, e := be.Submit(spec)
		if e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		cn.respond(req.ID, jobIDResult{JobID: id}, nil)

	case "job.get":
		var p idParams
		if e := decodeID(req, &p.ID, &p.JobID, &p); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		rec, ok := be.Get(p.ID)
		if !ok {
			cn.respond(req.ID, nil, notFound(p.ID))
			return
		}
		cn.respond(req.ID, jobResult{Job: rec}, nil)

	case "job.list":
		var f api.Filter
		if e := wire.DecodeParams(req, &f); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		if f.State != "" && !api.ValidState(f.State) {
			cn.respond(req.ID, nil, wire.Errorf(wire.CodeInvalidParams,
				"invalid params for job.list: unknown state %q (want queued, dispatched, running, succeeded, failed, timeout, cancelled or error)", f.State))
			return
		}
		jobs := be.List(f)
		if jobs == nil {
			jobs = []api.JobRecord{}
		}
		cn.respond(req.ID, jobsResult{Jobs: jobs}, nil)

	case "job.cancel":
		var p idParams
		if e := decodeID(req, &p.ID, &p.JobID, &p); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		id := req.ID
		be.Cancel(p.ID, func(wasRunning bool, err *wire.Error) {
			if err != nil {
				cn.respond(id, nil, err)
				return
			}
			cn.respond(id, cancelResult{WasRunning: wasRunning}, nil)
		})

	case "job.wait":
		var p waitParams
		if e := decodeID(req, &p.ID, &p.JobID, &p); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		a.startWait(c, req.ID, p)

	case "lane.list":
		if e := wire.DecodeParams(req, &empty{}); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		ls := be.Lanes()
		if ls == nil {
			ls = []api.LaneStatus{}
		}
		cn.respond(req.ID, lanesResult{Lanes: ls}, nil)

	case "tree.get":
		if e := wire.DecodeParams(req, &empty{}); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		cn.respond(req.ID, treeResult{Tree: cn.srv.sys.Tree()}, nil)

	case "metrics.get":
		if e := wire.DecodeParams(req, &empty{}); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		m := be.Metrics()
		m.Connections, m.ConnectionsSeen = cn.srv.Stats()
		cn.respond(req.ID, m, nil)

	case "events.subscribe":
		var p subscribeParams
		if e := wire.DecodeParams(req, &p); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		for _, k := range p.Kinds {
			if k == "" {
				cn.respond(req.ID, nil, wire.Errorf(wire.CodeInvalidParams, "invalid params for events.subscribe: empty kind"))
				return
			}
		}
		if cn.srv.bus == nil {
			cn.respond(req.ID, nil, wire.Errorf(wire.CodeInternal, "events are not available"))
			return
		}
		// Subscribe while the answer is being queued: no event can be
		// queued between them, so the client gets {} and then every
		// matching event emitted after it.
		cn.q.pushRespThen(cn.encode(req.ID, emptyResult, nil), func() { cn.subscribe(p.Kinds) })

	case "events.unsubscribe":
		if e := wire.DecodeParams(req, &empty{}); e != nil {
			cn.respond(req.ID, nil, e)
			return
		}
		cn.unsubscribe()
		cn.respond(req.ID, emptyResult, nil)

	default:
		cn.respond(req.ID, nil, wire.Errorf(wire.CodeMethodNotFound, "method not found: %s", req.Method))
	}
}

// decodeID decodes params naming a job by "id" or "job_id" (the name
// job.submit answers with); the id ends up in *id.
func decodeID(req wire.Request, id, jobID *string, v any) *wire.Error {
	if e := wire.DecodeParams(req, v); e != nil {
		return e
	}
	if *jobID != "" {
		if *id != "" && *id != *jobID {
			return wire.Errorf(wire.CodeInvalidParams, "invalid params for %s: id %q and job_id %q differ; give one", req.Method, *id, *jobID)
		}
		*id = *jobID
	}
	if *id == "" {
		return wire.Errorf(wire.CodeInvalidParams, "invalid params for %s: id is required (job_id is taken too)", req.Method)
	}
	return nil
}

func notFound(id string) *wire.Error {
	return wire.Errorf(wire.CodeNotFound, "job %s not found", id)
}

// pendingWait is one job.wait in progress.
type pendingWait struct {
	reqID     uint64
	jobID     string
	timeoutMs uint64
	stopWait  func() // the Backend's cancel
	stopTimer func()
}

func (w *pendingWait) cancel() {
	if w.stopWait != nil {
		w.stopWait()
	}
	if w.stopTimer != nil {
		w.stopTimer()
	}
}

// Messages from job.wait callbacks and timers.
type (
	waitDone struct {
		n   uint64
		rec api.JobRecord
	}
	waitTimeout struct{ n uint64 }
)

func (a *connActor) startWait(c *actors.Context, reqID uint64, p waitParams) {
	cn := a.cn
	cn.nextWait++
	n := cn.nextWait
	sys, self := c.System(), c.Self()
	stop, e := cn.srv.backend.Wait(p.ID, func(rec api.JobRecord) {
		sys.Send(self, waitDone{n: n, rec: rec})
	})
	if e != nil {
		cn.respond(reqID, nil, e)
		return
	}
	w := &pendingWait{reqID: reqID, jobID: p.ID, timeoutMs: p.TimeoutMs, stopWait: stop}
	if p.TimeoutMs > 0 {
		w.stopTimer = c.After(time.Duration(p.TimeoutMs)*time.Millisecond, waitTimeout{n: n})
	}
	if cn.waits == nil {
		cn.waits = map[uint64]*pendingWait{}
	}
	cn.waits[n] = w
}

func (a *connActor) waitDone(m waitDone) {
	cn := a.cn
	w, ok := cn.waits[m.n]
	if !ok {
		return // timed out or closed meanwhile
	}
	delete(cn.waits, m.n)
	if w.stopTimer != nil {
		w.stopTimer()
	}
	cn.respond(w.reqID, jobResult{Job: m.rec}, nil)
}

func (a *connActor) waitTimeout(m waitTimeout) {
	cn := a.cn
	w, ok := cn.waits[m.n]
	if !ok {
		return
	}
	delete(cn.waits, m.n)
	if w.stopWait != nil {
		w.stopWait()
	}
	rec, found := cn.srv.backend.Get(w.jobID)
	if found && rec.State.Terminal() {
		// It finished just now; its waitDone is on the way. Answer with it.
		cn.respond(w.reqID, jobResult{Job: rec}, nil)
		return
	}
	state := string(rec.State)
	if !found {
		state = "unknown"
	}
	e := wire.Errorf(wire.CodeInvalidState, "job %s is still %s after %d ms", w.jobID, state, w.timeoutMs)
	if found {
		e.Data = jobResult{Job: rec}
	}
	cn.respond(w.reqID, nil, e)
}
