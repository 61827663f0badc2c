package executors

import (
	"fmt"
	"slices"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor"
)

// The pool actor of one [executors.NAME]: the queue of tasks waiting for an
// executor, which executors there are and what each is doing, the restart
// policy, the idle timeout, terminal.open's choice of executor, and the
// pool's shutdown. Its children are one executor actor per process
// (executor.go) and one task actor per task (task.go).

// inst is what the pool knows of one executor actor.
type inst struct {
	id    string
	ref   actors.Ref
	state string // starting, idle, busy, stopping
	pid   int
	task  string // the task it was given, until it is idle again
	terms int
	idle  time.Time // when it last became idle
	// own is the task an executor of one task was started for (a
	// confined task's: see api.TaskConfine); "" for the pool's shared
	// executors. It takes no other task and no terminal, counts against
	// no max_instances, and goes with its task.
	own string
}

// queued is a task in the pool: its id and its actor (in p.queue while
// it waits for an executor).
type queued struct {
	id  string
	ref actors.Ref
	// confine: the task runs on an executor of its own (api.TaskConfine).
	confine *api.TaskConfine
}

type pool struct {
	ps       *poolShared
	queue    []*queued
	tasks    map[string]*queued
	insts    map[string]*inst
	exiting  map[string]actors.Ref // gone executors whose actors drain their last messages
	n        int                   // instances started
	tracker  *supervisor.Tracker
	holdSet  bool // no start before the crash-loop backoff's end
	stopping bool
	// termQueue: terminal.open calls waiting for an executor to connect.
	termQueue []*pendingTerm
}

func newPool(m *Manager, h *poolHandle) *pool {
	return &pool{ps: &poolShared{m: m, h: h, cfg: h.cfg}, tasks: map[string]*queued{}, insts: map[string]*inst{}, exiting: map[string]actors.Ref{},
		tracker: supervisor.NewTracker(h.cfg.Restart.Policy(), nil)}
}

// Messages of the pool actor.
type (
	queueTask struct {
		rec    api.TaskRecord
		resume string // its session's sdk_session_id, as stored
	}
	stopTask struct {
		id    string
		force bool
		call  api.Call
	}
	instUp struct {
		id  string
		pid int
	}
	instFree  struct{ id string }
	instTerms struct {
		id string
		n  int
	}
	instGone struct {
		id       string
		expected bool
		uptime   time.Duration
	}
	instDone      struct{ id string }
	taskDone      struct{ id string }
	assignRefused struct{ instance string }
	idleCheck     struct {
		id    string
		since time.Time
	}
	killAll   struct{ reason string }
	startWarm struct{}
)

func (p *pool) Receive(c *actors.Context) {
	switch msg := c.Message().(type) {
	case actors.Started:
		p.ps.pool = c.Self()
		// A fresh incarnation after a panic: the executors of the failed
		// one were stopped (and their processes killed) before this.
		p.ps.h.clearExecs()
		for range p.ps.cfg.Instances {
			p.start(c)
		}
	case queueTask:
		p.queueTask(c, msg)
	case stopTask:
		q := p.tasks[msg.id]
		if q == nil {
			msg.call.Fail(api.Errorf(api.CodeInvalidState, "task %s is not queued or running", msg.id))
			return
		}
		c.Send(q.ref, stopReq{force: msg.force, call: msg.call})
	case instUp:
		if in := p.insts[msg.id]; in != nil && in.state == instStarting {
			in.state, in.pid, in.idle = instIdle, msg.pid, time.Now()
			p.tracker.Stable(in.id, time.Now())
			if p.stopping {
				p.askShutdown(c, in, "server_restart")
				break
			}
			if in.own != "" {
				p.assignOwn(c, in)
				break
			}
			p.dispatch(c)
			p.serveTerminals(c)
			p.armIdle(c, in)
		}
	case instFree:
		if in := p.insts[msg.id]; in != nil && in.state == instBusy {
			in.state, in.task, in.idle = instIdle, "", time.Now()
			p.dispatch(c)
			p.armIdle(c, in)
		}
	case instTerms:
		if in := p.insts[msg.id]; in != nil {
			in.terms = msg.n
			if in.terms == 0 && in.state == instIdle {
				in.idle = time.Now()
				p.armIdle(c, in)
			}
		}
	case instGone:
		if in := p.insts[msg.id]; in != nil {
			p.exiting[msg.id] = in.ref
		}
		p.gone(c, msg)
	case instDone:
		if ref, ok := p.exiting[msg.id]; ok {
			c.Stop(ref)
		}
	case taskDone:
		if q := p.tasks[msg.id]; q != nil {
			c.Stop(q.ref)
		}
		p.taskDone(c, msg.id)
	case actors.Terminated:
		p.terminated(c, msg.Who)
	case assignRefused:
		if in := p.insts[msg.instance]; in != nil && in.own != "" {
			p.askShutdown(c, in, "task_gone")
		} else if in != nil && in.state == instBusy {
			in.state, in.task, in.idle = instIdle, "", time.Now()
			p.dispatch(c)
			p.armIdle(c, in)
		}
	case idleCheck:
		p.idleCheck(c, msg)
	case startWarm:
		p.holdSet = false
		p.fillWarm(c)
		p.dispatch(c)
		p.termStart(c)
	case openTerminal:
		p.openTerminal(c, msg)
	case termOpenExpired:
		p.termOpenExpired(msg)
	case stopAll:
		p.stopAll(c)
	case killAll:
		for _, in := range p.insts {
			in.state = instStopping
			c.Send(in.ref, killExec{reason: msg.reason})
		}
	}
	p.publish()
}

// publish refreshes the pool's half of executor.list (each executor
// writes its own line).
func (p *pool) publish() {
	p.ps.h.queued.Store(int64(len(p.queue)))
}

// ---- executors ----

// start starts one executor actor, which spawns its process.
func (p *pool) start(c *actors.Context) { p.startFor(c, nil) }

// startFor starts an executor actor: one of the pool's (q nil), or one
// of task q's own, confined as its record says. It reports whether the
// actor started.
func (p *pool) startFor(c *actors.Context, q *queued) bool {
	p.n++
	id := fmt.Sprintf("%s-%d", p.ps.h.name, p.n)
	var confine *api.TaskConfine
	if q != nil {
		confine = q.confine
	}
	ref, err := c.Spawn(actors.Props{Kind: "executor", ID: id, OnPanic: actors.Stop,
		New: func() actors.Actor { e := newExecActor(p.ps, id); e.confine = confine; return e }})
	if err != nil {
		p.ps.m.bus.Emit(ExecutorStartFailed{Pool: p.ps.h.name, Executor: id, Reason: "starting its actor: " + err.Error()})
		return false
	}
	in := &inst{id: id, ref: ref, state: instStarting}
	if q != nil {
		in.own = q.id
	}
	p.insts[id] = in
	return true
}

// assignOwn gives an executor of one task, now up, its task; one whose
// task has gone meanwhile is shut down.
func (p *pool) assignOwn(c *actors.Context, in *inst) {
	q := p.tasks[in.own]
	if q == nil {
		p.askShutdown(c, in, "task_gone")
		return
	}
	in.state, in.task = instBusy, q.id
	c.Send(q.ref, assign{exec: in.ref, instance: in.id, pid: in.pid})
}

func (p *pool) gone(c *actors.Context, m instGone) {
	in := p.insts[m.id]
	if in == nil {
		return
	}
	delete(p.insts, m.id)
	if in.own != "" && in.task == "" {
		// An executor of one task that never got it (it exited before it
		// connected): its task has no other to wait for.
		if q := p.tasks[in.own]; q != nil {
			msg := fmt.Sprintf("its executor %s exited before it connected", in.id)
			if w := p.ps.lastWords.Load(); w != nil {
				msg += "; it said: " + *w
			}
			c.Send(q.ref, cancelReq{state: api.TaskFailed, err: &api.TaskError{Code: api.TaskErrStartFailed, Message: msg}})
		}
	}
	if in.task != "" {
		// Given a task it may never have heard of: the task must not wait
		// for an executor that is gone (a second end is ignored).
		if q := p.tasks[in.task]; q != nil {
			c.Send(q.ref, execDone{taskID: in.task, state: api.TaskFailed, err: &api.TaskError{Code: api.TaskErrExecutorLost,
				Message: fmt.Sprintf("executor %s exited before it ran the task", in.id)}})
		}
	}
	if p.stopping {
		p.checkDone()
		return
	}
	if !m.expected {
		p.crashed(c, m.uptime)
		return
	}
	p.fillWarm(c)
	p.dispatch(c)
	p.termStart(c)
}

// crashed applies the restart policy after an executor died unasked (or
// never started): a pause before the next start only in a crash loop.
func (p *pool) crashed(c *actors.Context, uptime time.Duration) {
	now := time.Now()
	d := p.tracker.Exited("pool", now, uptime)
	p.ps.m.bus.Emit(ExecutorRestartScheduled{Pool: p.ps.h.name, DelayMs: d.Delay.Milliseconds(),
		RestartsInWindow: d.RestartsInWindow, Policy: d.Reason})
	if d.Degraded {
		// A crash loop past max_r: the queued tasks would wait for ever.
		msg := fmt.Sprintf("executor pool %s is crash-looping (%s within %s)", p.ps.h.name,
			api.Count(d.RestartsInWindow, "restart"), p.tracker.Policy().MaxT)
		if w := p.ps.lastWords.Load(); w != nil {
			msg += "; its last executor said: " + *w
		}
		err := &api.TaskError{Code: api.TaskErrStartFailed, Message: msg}
		for _, q := range p.queue {
			c.Send(q.ref, cancelReq{state: api.TaskFailed, err: err})
		}
		p.queue = nil
		p.failTerminals(api.CodeInvalidState, fmt.Sprintf("executor pool %s is crash-looping", p.ps.h.name))
	}
	if d.Delay > 0 {
		p.holdSet = true
		c.After(d.Delay, startWarm{})
		return
	}
	p.fillWarm(c)
	p.dispatch(c)
	p.termStart(c)
}

// fillWarm starts executors until `instances` are up.
func (p *pool) fillWarm(c *actors.Context) {
	if p.stopping || p.holdSet {
		return
	}
	for p.live() < p.ps.cfg.Instances {
		p.start(c)
	}
}

// live counts the pool's shared executors not stopping.
func (p *pool) live() int {
	n := 0
	for _, in := range p.insts {
		if in.state != instStopping && in.own == "" {
			n++
		}
	}
	return n
}

func (p *pool) starting() bool {
	for _, in := range p.insts {
		if in.state == instStarting && in.own == "" {
			return true
		}
	}
	return false
}

// terminated: a child actor stopped. Those the pool stopped are already
// forgotten; one still known failed (a panic: actor.panicked says where),
// and what it held is ended here.
func (p *pool) terminated(c *actors.Context, who actors.Ref) {
	for id, ref := range p.exiting {
		if ref.Equal(who) {
			delete(p.exiting, id)
			p.checkDone()
			return
		}
	}
	for id, in := range p.insts {
		if in.ref.Equal(who) {
			// Its Stopping killed its process and ended its task; the
			// exit will not be reported.
			p.ps.m.bus.Emit(ExecutorExited{Pool: p.ps.h.name, Executor: id, Pid: in.pid, Code: -1, Task: in.task})
			p.ps.h.setExec(id, nil)
			p.gone(c, instGone{id: id, expected: in.state == instStopping})
			return
		}
	}
	for id, q := range p.tasks {
		if !q.ref.Equal(who) {
			continue
		}
		// The task's actor failed before it ended the task: end it here,
		// and stop what its executor still does for it.
		m := p.ps.m
		m.mu.Lock()
		rec, ok := m.live[id]
		m.mu.Unlock()
		if ok && !rec.State.Terminal() {
			now := time.Now().UTC()
			rec.State, rec.FinishedAt = api.TaskFailed, &now
			rec.Error = &api.TaskError{Code: api.TaskErrActorFailed, Message: "the daemon's actor of this task failed (see the actor.panicked event); its executor was killed"}
			m.bus.Emit(TaskFinished{TaskID: id, SessionID: rec.SessionID, Executor: p.ps.h.name, State: rec.State,
				Error: rec.Error, MessageCount: rec.MessageCount})
			m.recordEnd(rec)
			for _, in := range p.insts {
				if in.task == id {
					c.Send(in.ref, finishNow{taskID: id, state: api.TaskFailed, kill: "task " + id + ": its actor failed"})
				}
			}
		}
		p.taskDone(c, id)
		return
	}
}

// ---- tasks ----

func (p *pool) queueTask(c *actors.Context, m queueTask) {
	id := m.rec.ID
	ref, err := c.Spawn(actors.Props{Kind: "task", ID: id, OnPanic: actors.Stop,
		New: func() actors.Actor { return &taskActor{ps: p.ps, rec: m.rec, resume: m.resume} }})
	if err != nil {
		rec := m.rec
		now := time.Now().UTC()
		rec.State, rec.FinishedAt = api.TaskFailed, &now
		rec.Error = &api.TaskError{Code: api.TaskErrStartFailed, Message: "starting the task's actor: " + err.Error()}
		p.ps.m.bus.Emit(TaskFinished{TaskID: id, SessionID: rec.SessionID, Executor: p.ps.h.name, State: rec.State, Error: rec.Error})
		p.ps.m.recordEnd(rec)
		return
	}
	q := &queued{id: id, ref: ref}
	if p.ps.m.opts.Sandbox {
		q.confine = m.rec.Confine
	}
	p.tasks[id] = q
	if p.stopping {
		c.Send(ref, cancelReq{state: api.TaskCancelled, err: &api.TaskError{Code: api.TaskErrDaemonShutdown, Message: "the daemon is stopping"}})
		return
	}
	if q.confine != nil {
		// Its own executor, now: not in the queue of the shared ones.
		if !p.startFor(c, q) {
			c.Send(ref, cancelReq{state: api.TaskFailed, err: &api.TaskError{Code: api.TaskErrStartFailed,
				Message: "its executor's actor could not be started (see executor.start_failed)"}})
		}
		return
	}
	p.queue = append(p.queue, q)
	p.dispatch(c)
}

func (p *pool) taskDone(c *actors.Context, id string) {
	q := p.tasks[id]
	if q == nil {
		return
	}
	delete(p.tasks, id)
	if i := slices.Index(p.queue, q); i >= 0 {
		p.queue = slices.Delete(p.queue, i, i+1)
	}
	for _, in := range p.insts {
		if in.task == id {
			in.task = ""
		}
		if in.own == id && in.state != instStopping {
			// Its task ended before it did (cancelled while it started):
			// it goes with it.
			p.askShutdown(c, in, "task_gone")
		}
	}
	p.checkDone()
}

// dispatch gives queued tasks to idle executors and starts more executors
// (up to max_instances) for those left.
func (p *pool) dispatch(c *actors.Context) {
	if p.stopping {
		return
	}
	for len(p.queue) > 0 {
		var idle *inst
		for _, in := range p.insts {
			if in.state == instIdle && in.own == "" && (idle == nil || in.id < idle.id) {
				idle = in
			}
		}
		if idle == nil {
			break
		}
		q := p.queue[0]
		p.queue = p.queue[1:]
		idle.state, idle.task = instBusy, q.id
		c.Send(q.ref, assign{exec: idle.ref, instance: idle.id, pid: idle.pid})
	}
	if len(p.queue) == 0 || p.holdSet {
		return
	}
	starting := 0
	for _, in := range p.insts {
		if in.state == instStarting && in.own == "" {
			starting++
		}
	}
	for need := len(p.queue) - starting; need > 0 && p.live() < p.ps.cfg.MaxInstances; need-- {
		p.start(c)
	}
}

// ---- idle and shutdown ----

func (p *pool) armIdle(c *actors.Context, in *inst) {
	c.After(p.ps.cfg.IdleTimeout.Duration, idleCheck{id: in.id, since: in.idle})
}

func (p *pool) idleCheck(c *actors.Context, m idleCheck) {
	in := p.insts[m.id]
	if in == nil || in.state != instIdle || !in.idle.Equal(m.since) || p.live() <= p.ps.cfg.Instances || in.terms > 0 {
		return
	}
	p.askShutdown(c, in, "idle_timeout")
}

func (p *pool) askShutdown(c *actors.Context, in *inst, reason string) {
	in.state = instStopping
	c.Send(in.ref, shutdownExec{reason: reason})
}

func (p *pool) stopAll(c *actors.Context) {
	p.stopping = true
	p.failTerminals(api.CodeShuttingDown, "the daemon is stopping")
	shut := &api.TaskError{Code: api.TaskErrDaemonShutdown, Message: "the daemon stopped"}
	for _, q := range p.tasks {
		c.Send(q.ref, cancelReq{state: api.TaskCancelled, err: shut})
	}
	p.queue = nil
	for _, in := range p.insts {
		p.askShutdown(c, in, "server_restart")
	}
	p.checkDone()
}

// checkDone closes done once a stopping pool has no executor and no task
// left.
func (p *pool) checkDone() {
	if !p.stopping || len(p.insts) > 0 || len(p.tasks) > 0 || len(p.exiting) > 0 {
		return
	}
	select {
	case <-p.ps.h.done:
	default:
		close(p.ps.h.done)
	}
}
