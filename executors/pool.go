package executors

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor"
	"github.com/orchestrd/orchestrd/supervisor/proc"
	"github.com/orchestrd/orchestrd/wire"
)

// Instance states (api.ExecutorStatus.State).
const (
	instStarting = "starting"
	instIdle     = "idle"
	instBusy     = "busy"
	instStopping = "stopping"
)

// instance is one executor process, owned by its pool actor.
type instance struct {
	id      string
	gen     int // tells a late report of an earlier instance from this one
	sock    string
	inc     *proc.Incarnation
	pid     int
	conn    *conn
	state   string
	warm    bool // one of the pool's `instances`
	task    *task
	started time.Time
	idle    time.Time // when it last became idle
	// expected: the daemon asked it to stop (idle, shutdown); its exit is
	// not a crash.
	expected bool
	stopDial chan struct{}
	// lostTask is the task that ended executor_lost when the connection
	// closed, before the exit was seen (executor.exited names it).
	lostTask string

	calls  map[string]func(json.RawMessage, *wire.RPCError)
	nextID int
	// terms are the terminals it spawned: it is not shut down idle while
	// one is open, and they close when it exits.
	terms map[string]*terminal

	// The notification pipeline: buf waits for the store, inflight is
	// there, pending counts both.
	buf      []api.SessionMessage
	replies  map[string]wire.RPCID // create_message answers, by task/sequence
	inflight bool
	pending  int
	paused   bool
	gated    bool
	protoErr int
}

// task is one task of the pool, queued or running.
type task struct {
	rec       api.TaskRecord
	token     string
	inst      *instance
	seen      map[int64]bool // sequences seen above low
	low       int64          // every sequence from the first up to low was seen
	any       bool           // a message was seen (low is set)
	maxSeq    int64
	pending   int   // messages read and not yet committed
	committed int64 // messages committed
	usage     *api.TokenUsage
	// override: the state the task ends in whatever the executor says
	// (timeout, stopped, daemon shutdown).
	override  *api.TaskState
	overErr   *api.TaskError
	finishing *finish // the executor answered; waiting for its messages
	timers    []func()
	perms     map[string]func(string) // pending permissions, by approval id
}

type finish struct {
	state api.TaskState
	err   *api.TaskError
}

// pool is the actor of one [executors.NAME] pool.
type pool struct {
	m        *Manager
	h        *poolHandle
	cfg      PoolConfig
	self     actors.Ref
	sys      *actors.System
	queue    []*task
	tasks    map[string]*task
	insts    map[string]*instance
	n        int // instances started
	gen      int
	tracker  *supervisor.Tracker
	holdTill time.Time // no start before (crash-loop backoff)
	holdSet  bool
	stopping bool
	// termQueue: terminal.open calls waiting for an executor to connect.
	termQueue []*pendingTerm
	pubArmed  bool // a republish is due
}

func newPool(m *Manager, h *poolHandle) *pool {
	return &pool{m: m, h: h, cfg: h.cfg, tasks: map[string]*task{}, insts: map[string]*instance{},
		tracker: supervisor.NewTracker(h.cfg.Restart.Policy(), nil)}
}

// Messages of the pool actor.
type (
	queueTask struct{ t *task }
	stopTask  struct {
		id    string
		force bool
		call  api.Call
	}
	instStarted struct {
		id  string
		gen int
		pid int
		err error
	}
	instExited struct {
		id   string
		gen  int
		exit proc.Exit
	}
	instConnected struct {
		id   string
		gen  int
		conn net.Conn
		took time.Duration
	}
	instDialFailed struct {
		id     string
		gen    int
		reason string
	}
	rpcIn struct {
		id  string
		gen int
		in  inbound
	}
	committed struct {
		id    string
		gen   int
		batch []api.SessionMessage
		err   error
	}
	retryFlush struct {
		id  string
		gen int
	}
	permAnswered struct {
		taskID string
		reqID  wire.RPCID
		appr   string
		tool   string
		ans    PermissionAnswer
	}
	taskTimer struct {
		id    string
		stage int
	}
	idleCheck struct {
		id    string
		gen   int
		since time.Time
	}
	killInst struct {
		id     string
		gen    int
		reason string
	}
	killAll   struct{ reason string }
	republish struct{}
	startWarm struct{}
	release   struct{}
)

func (p *pool) Receive(c *actors.Context) {
	switch msg := c.Message().(type) {
	case actors.Started:
		p.self, p.sys = c.Self(), c.System()
		for range p.cfg.Instances {
			p.start(c, true)
		}
		p.publish()
	case queueTask:
		if p.stopping {
			p.end(c, msg.t, api.TaskCancelled, &api.TaskError{Code: api.TaskErrDaemonShutdown, Message: "the daemon is stopping"})
			return
		}
		p.tasks[msg.t.rec.ID] = msg.t
		p.queue = append(p.queue, msg.t)
		p.dispatch(c)
	case stopTask:
		p.stopTask(c, msg)
	case openTerminal:
		p.openTerminal(c, msg)
	case termGone:
		p.termGone(c, msg)
	case termOpenExpired:
		p.termOpenExpired(msg)
	case instStarted:
		p.started(c, msg)
	case instConnected:
		p.connected(c, msg)
	case instDialFailed:
		if in := p.inst(msg.id, msg.gen); in != nil {
			p.m.bus.Emit(ExecutorStartFailed{Pool: p.h.name, Executor: in.id, Reason: msg.reason})
			p.kill(in, "startup_timeout")
		}
	case instExited:
		p.exited(c, msg)
	case rpcIn:
		if in := p.inst(msg.id, msg.gen); in != nil {
			p.inbound(c, in, msg.in)
		}
	case committed:
		p.committed(c, msg)
	case retryFlush:
		if in := p.inst(msg.id, msg.gen); in != nil {
			p.flush(c, in)
		}
	case permAnswered:
		p.permAnswered(msg)
	case taskTimer:
		p.taskTimer(c, msg)
	case idleCheck:
		p.idleCheck(c, msg)
	case killInst:
		if in := p.inst(msg.id, msg.gen); in != nil {
			p.kill(in, msg.reason)
		}
	case startWarm:
		p.holdSet = false
		p.fillWarm(c)
		p.dispatch(c)
		p.termStart(c)
	case release:
		p.holdSet = false
		p.dispatch(c)
	case stopAll:
		p.stopAll(c)
	case killAll:
		for _, in := range p.insts {
			p.kill(in, msg.reason)
		}
	case actors.Stopping:
		for _, in := range p.insts {
			p.kill(in, "executor pool stopped")
		}
	case republish:
		p.pubArmed = false
	}
	switch c.Message().(type) {
	case rpcIn, committed:
		// The hot path (a message per notification): what executor.list
		// shows is refreshed within republishAfter, not per message.
		if !p.pubArmed {
			p.pubArmed = true
			c.After(republishAfter, republish{})
		}
		return
	}
	p.publish()
}

// republishAfter bounds how stale executor.list may be while notifications
// stream.
const republishAfter = 20 * time.Millisecond

func (p *pool) inst(id string, gen int) *instance {
	if in := p.insts[id]; in != nil && in.gen == gen {
		return in
	}
	return nil
}

// publish refreshes what executor.list shows.
func (p *pool) publish() {
	st := api.PoolStatus{Name: p.h.name, Instances: p.cfg.Instances, MaxInstances: p.cfg.MaxInstances,
		Queued: len(p.queue), Executors: make([]api.ExecutorStatus, 0, len(p.insts))}
	for _, in := range p.insts {
		e := api.ExecutorStatus{Pool: p.h.name, ID: in.id, Pid: in.pid, State: in.state, Paused: in.paused,
			Pending: in.pending, StartedAt: in.started}
		if in.task != nil {
			e.TaskID = in.task.rec.ID
		}
		st.Executors = append(st.Executors, e)
	}
	slices.SortFunc(st.Executors, func(a, b api.ExecutorStatus) int { return strings.Compare(a.ID, b.ID) })
	p.h.mu.Lock()
	p.h.snap = st
	p.h.mu.Unlock()
	p.h.queued.Store(int64(len(p.queue)))
}

// ---- processes ----

// start spawns one executor process.
func (p *pool) start(c *actors.Context, warm bool) {
	p.n++
	p.gen++
	in := &instance{id: fmt.Sprintf("%s-%d", p.h.name, p.n), gen: p.gen, state: instStarting, warm: warm,
		started: time.Now(), calls: map[string]func(json.RawMessage, *wire.RPCError){}, replies: map[string]wire.RPCID{},
		stopDial: make(chan struct{})}
	in.sock = filepath.Join(p.m.dir, in.id+".sock")
	argv := slices.Clone(p.cfg.Command)
	substituted := false
	for i, a := range argv {
		if strings.Contains(a, "{socket}") {
			argv[i] = strings.ReplaceAll(a, "{socket}", in.sock)
			substituted = true
		}
	}
	if !substituted {
		argv = append(argv, "--socket", in.sock)
	}
	path := argv[0]
	if lp, err := lookPath(path); err == nil {
		path = lp
	}
	env := slices.Clone(p.m.env)
	for _, k := range sortedKeys(p.cfg.Env) {
		env = append(env, k+"="+p.cfg.Env[k])
	}
	env = append(env, "ORCHESTRD_EXECUTOR_ID="+in.id, "ORCHESTRD_EXECUTOR_SOCKET="+in.sock)
	dir := p.cfg.Cwd
	if dir == "" {
		dir = p.m.opts.Home
		if p.m.opts.Sandbox {
			// The home is hidden from it: the user's home directory.
			if h, err := os.UserHomeDir(); err == nil {
				dir = h
			} else {
				dir = "/"
			}
		}
	}
	iso := proc.Isolation{NoNetwork: p.cfg.Network == NetworkNone, DeathSignal: syscall.SIGKILL}
	if p.m.opts.Sandbox {
		iso.Sandbox = true
		argv = append([]string{p.m.opts.Exe, "sandbox-exec", "--hide", p.m.hide, "--"}, argv...)
		path = p.m.opts.Exe
	}
	p.insts[in.id] = in
	sys, self, id, gen := p.sys, p.self, in.id, in.gen
	in.inc = proc.Spawn(proc.Spec{Path: path, Args: argv, Env: env, Dir: dir, Stderr: p.m.opts.Stderr,
		Isolation: iso,
		Reaper:    p.m.opts.Reaper,
		OnStart:   func(pid int, err error) { sys.Send(self, instStarted{id: id, gen: gen, pid: pid, err: err}) },
		OnExit:    func(e proc.Exit) { sys.Send(self, instExited{id: id, gen: gen, exit: e}) },
	})
}

func (p *pool) started(c *actors.Context, m instStarted) {
	in := p.inst(m.id, m.gen)
	if in == nil {
		return
	}
	if m.err != nil {
		delete(p.insts, in.id)
		p.m.bus.Emit(ExecutorStartFailed{Pool: p.h.name, Executor: in.id, Reason: proc.ExplainSpawnError(m.err).Error()})
		p.crashed(c, in, 0)
		return
	}
	in.pid = m.pid
	p.m.bus.Emit(ExecutorSpawned{Pool: p.h.name, Executor: in.id, Pid: in.pid, Socket: in.sock})
	sys, self, id, gen, sock, stop := p.sys, p.self, in.id, in.gen, in.sock, in.stopDial
	deadline := in.started.Add(p.cfg.StartupTimeout.Duration)
	t0 := in.started
	go func() {
		for {
			conn, err := net.DialTimeout("unix", sock, time.Second)
			if err == nil {
				sys.Send(self, instConnected{id: id, gen: gen, conn: conn, took: time.Since(t0)})
				return
			}
			if time.Now().After(deadline) {
				sys.Send(self, instDialFailed{id: id, gen: gen, reason: fmt.Sprintf("no connection on %s after %s: %v",
					sock, time.Since(t0).Round(time.Millisecond), err)})
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
}

func (p *pool) connected(c *actors.Context, m instConnected) {
	in := p.inst(m.id, m.gen)
	if in == nil || in.state != instStarting {
		m.conn.Close()
		return
	}
	sys, self, id, gen := p.sys, p.self, in.id, in.gen
	in.conn = startConn(m.conn, 0, func(x inbound) { sys.Send(self, rpcIn{id: id, gen: gen, in: x}) })
	in.state, in.idle = instIdle, time.Now()
	p.m.bus.Emit(ExecutorConnected{Pool: p.h.name, Executor: in.id, Pid: in.pid, StartMs: m.took.Milliseconds()})
	p.tracker.Stable(in.id, time.Now())
	if p.stopping {
		p.askShutdown(c, in, "server_restart")
		return
	}
	p.dispatch(c)
	p.serveTerminals(c)
	p.armIdle(c, in)
}

func (p *pool) exited(c *actors.Context, m instExited) {
	in := p.inst(m.id, m.gen)
	if in == nil {
		return
	}
	delete(p.insts, in.id)
	close(in.stopDial)
	if in.conn != nil {
		in.conn.close()
	}
	p.endTerminals(in, api.TermExecutorExited)
	sig := ""
	if m.exit.Signal != 0 {
		sig = signalName(m.exit.Signal)
	}
	ev := ExecutorExited{Pool: p.h.name, Executor: in.id, Pid: m.exit.Pid, Code: m.exit.Code, Signal: sig,
		Expected: in.expected, Task: in.lostTask}
	if t := in.task; t != nil {
		ev.Task = t.rec.ID
		p.lost(c, t, fmt.Sprintf("executor %s (pid %d) exited (%s) while it ran the task", in.id, m.exit.Pid, exitWords(m.exit)))
	}
	p.m.bus.Emit(ev)
	if p.stopping {
		p.checkDone()
		return
	}
	if !in.expected {
		p.crashed(c, in, m.exit.Uptime)
		return
	}
	p.fillWarm(c)
	p.dispatch(c)
}

// crashed applies the restart policy after an executor died unasked (or
// never started): a pause before the next start only in a crash loop.
func (p *pool) crashed(c *actors.Context, in *instance, uptime time.Duration) {
	now := time.Now()
	d := p.tracker.Exited("pool", now, uptime)
	p.m.bus.Emit(ExecutorRestartScheduled{Pool: p.h.name, DelayMs: d.Delay.Milliseconds(),
		RestartsInWindow: d.RestartsInWindow, Policy: d.Reason})
	if d.Degraded {
		// A crash loop past max_r: the queued tasks would wait for ever.
		for _, t := range p.queue {
			p.end(c, t, api.TaskFailed, &api.TaskError{Code: api.TaskErrStartFailed,
				Message: fmt.Sprintf("executor pool %s is crash-looping (%d restarts within %s)", p.h.name,
					d.RestartsInWindow, p.tracker.Policy().MaxT)})
		}
		p.queue = nil
		p.failTerminals(api.CodeInvalidState, fmt.Sprintf("executor pool %s is crash-looping", p.h.name))
	}
	if d.Delay > 0 {
		p.holdTill, p.holdSet = now.Add(d.Delay), true
		c.After(d.Delay, startWarm{})
		return
	}
	p.fillWarm(c)
	p.dispatch(c)
	p.termStart(c)
}

// termStart starts an executor for waiting terminal.open calls when none
// is on its way.
func (p *pool) termStart(c *actors.Context) {
	if len(p.termQueue) == 0 || p.stopping || p.holdSet || p.live() >= p.cfg.MaxInstances {
		return
	}
	for _, in := range p.insts {
		if in.state == instStarting {
			return
		}
	}
	p.start(c, false)
}

// fillWarm starts instances until `instances` are up.
func (p *pool) fillWarm(c *actors.Context) {
	if p.stopping || p.holdSet {
		return
	}
	for p.live() < p.cfg.Instances {
		p.start(c, true)
	}
}

// live counts the instances not stopping.
func (p *pool) live() int {
	n := 0
	for _, in := range p.insts {
		if in.state != instStopping {
			n++
		}
	}
	return n
}

// kill kills an instance's process group; its exit follows.
func (p *pool) kill(in *instance, reason string) {
	in.expected = in.expected || reason != "startup_timeout"
	in.state = instStopping
	p.m.bus.Emit(ExecutorKilled{Pool: p.h.name, Executor: in.id, Pid: in.pid, Reason: reason})
	if in.conn != nil {
		in.conn.close()
	}
	in.inc.Kill()
}

// ---- tasks ----

// dispatch gives queued tasks to idle executors and starts more executors
// (up to max_instances) for those left.
func (p *pool) dispatch(c *actors.Context) {
	if p.stopping {
		return
	}
	for len(p.queue) > 0 {
		var idle *instance
		for _, in := range p.insts {
			if in.state == instIdle && (idle == nil || in.id < idle.id) {
				idle = in
			}
		}
		if idle == nil {
			break
		}
		t := p.queue[0]
		p.queue = p.queue[1:]
		p.run(c, t, idle)
	}
	if len(p.queue) == 0 || p.holdSet {
		return
	}
	starting := 0
	for _, in := range p.insts {
		if in.state == instStarting {
			starting++
		}
	}
	for need := len(p.queue) - starting; need > 0 && p.live() < p.cfg.MaxInstances; need-- {
		p.start(c, false)
	}
}

// run sends execute_prompt.
func (p *pool) run(c *actors.Context, t *task, in *instance) {
	now := time.Now().UTC()
	t.token, t.inst, t.seen = randomHex(32), in, map[int64]bool{}
	in.task, in.state = t, instBusy
	t.rec.State, t.rec.StartedAt, t.rec.Instance = api.TaskRunning, &now, in.id
	p.m.update(t.rec)
	p.record("started", t.rec)
	p.m.bus.Emit(TaskStarted{TaskID: t.rec.ID, SessionID: t.rec.SessionID, Executor: p.h.name, Instance: in.id, Pid: in.pid})
	tools := t.rec.Tools
	if tools == nil {
		tools = []string{}
	}
	id := t.rec.ID
	p.call(c, in, "execute_prompt", map[string]any{"session_token": t.token, "session_id": t.rec.SessionID,
		"task_id": t.rec.ID, "prompt": t.rec.Prompt, "cwd": t.rec.Cwd, "tools": tools,
		"permission_mode": t.rec.PermissionMode, "timeout_ms": t.rec.TimeoutMs, "stream": true},
		func(res json.RawMessage, e *wire.RPCError) { p.answered(c, id, res, e) })
	t.timers = append(t.timers, c.After(time.Duration(t.rec.TimeoutMs)*time.Millisecond, taskTimer{id: id, stage: 1}))
}

// answered is execute_prompt's response.
func (p *pool) answered(c *actors.Context, id string, res json.RawMessage, e *wire.RPCError) {
	t := p.tasks[id]
	if t == nil || t.finishing != nil || t.rec.State.Terminal() {
		return
	}
	f := &finish{state: api.TaskFailed}
	if e != nil {
		f.err = &api.TaskError{Code: fmt.Sprintf("rpc_%d", e.Code), Message: e.Message}
	} else {
		var r struct {
			Status     string          `json:"status"`
			TokenUsage *api.TokenUsage `json:"token_usage"`
			Error      *struct {
				Message string `json:"message"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			f.err = &api.TaskError{Code: "bad_result", Message: "execute_prompt's result is not an object: " + err.Error()}
		} else {
			t.usage = r.TokenUsage
			switch r.Status {
			case "completed":
				f.state = api.TaskCompleted
			case "cancelled":
				f.state = api.TaskCancelled
			case "failed":
			default:
				f.err = &api.TaskError{Code: "bad_result", Message: fmt.Sprintf("execute_prompt's status %q is not completed, failed or cancelled", r.Status)}
			}
			if r.Error != nil && f.err == nil {
				f.err = &api.TaskError{Code: r.Error.Code, Message: r.Error.Message}
			}
		}
	}
	if t.override != nil {
		f.state, f.err = *t.override, t.overErr
	}
	t.finishing = f
	if t.pending == 0 {
		p.end(c, t, f.state, f.err)
	}
}

// lost ends a running task whose executor went away: failed,
// executor_lost, at once, never run again.
func (p *pool) lost(c *actors.Context, t *task, why string) {
	if t.rec.State.Terminal() {
		return
	}
	state, err := api.TaskFailed, &api.TaskError{Code: api.TaskErrExecutorLost, Message: why}
	if t.override != nil {
		state, err = *t.override, t.overErr
	}
	p.end(c, t, state, err)
}

// end finishes a task: recorded, announced, its waiters answered.
func (p *pool) end(c *actors.Context, t *task, state api.TaskState, err *api.TaskError) {
	if t.rec.State.Terminal() {
		return
	}
	for _, cancel := range t.timers {
		cancel()
	}
	t.timers = nil
	for _, cancel := range t.perms {
		cancel("task_ended")
	}
	t.perms = nil
	now := time.Now().UTC()
	t.rec.State, t.rec.Error, t.rec.FinishedAt = state, err, &now
	t.rec.MessageCount = t.committed + int64(t.pending)
	t.rec.TokenUsage = t.usage
	delete(p.tasks, t.rec.ID)
	if i := slices.Index(p.queue, t); i >= 0 {
		p.queue = slices.Delete(p.queue, i, i+1)
	}
	p.m.bus.Emit(TaskFinished{TaskID: t.rec.ID, SessionID: t.rec.SessionID, Executor: p.h.name, State: state,
		Error: err, MessageCount: t.rec.MessageCount, TokenUsage: t.usage})
	p.m.finished(t.rec)
	p.record("finished", t.rec)
	if in := t.inst; in != nil && in.task == t {
		in.task = nil
		if in.state == instBusy {
			in.state, in.idle = instIdle, time.Now()
			p.armIdle(c, in)
		}
	}
	p.dispatch(c)
	p.checkDone()
}

// record queues a task's record; a refused or failed write is logged
// (the task goes on in memory; after a crash the store's version wins).
func (p *pool) record(what string, rec api.TaskRecord) {
	m := p.m
	done := func(err error) {
		if err != nil {
			m.opts.Logger.Error().Err(err).Str("task", rec.ID).Msg("recording the task " + what)
		}
		if what == "finished" {
			m.forget(rec.ID)
		}
	}
	var err error
	switch what {
	case "started":
		err = m.log.TaskStarted(rec, done)
	default:
		err = m.log.TaskFinished(rec, done)
	}
	if err != nil {
		done(err)
	}
}

func (p *pool) stopTask(c *actors.Context, m stopTask) {
	t := p.tasks[m.id]
	if t == nil {
		m.call.Fail(api.Errorf(api.CodeInvalidState, "task %s is not queued or running", m.id))
		return
	}
	if t.inst == nil { // queued
		p.end(c, t, api.TaskCancelled, &api.TaskError{Code: api.TaskErrStopped, Message: "stopped while queued"})
		m.call.Respond(map[string]any{"task": t.rec})
		return
	}
	st := api.TaskCancelled
	t.override, t.overErr = &st, &api.TaskError{Code: api.TaskErrStopped, Message: "stopped by task.stop"}
	// Answered when the task ends.
	call := m.call
	p.m.wait(t.rec.ID, func(rec api.TaskRecord) { call.Respond(map[string]any{"task": rec}) })
	if m.force {
		p.stage(c, t, 3, "user_cancelled")
		return
	}
	p.stage(c, t, 1, "user_cancelled")
}

func (p *pool) taskTimer(c *actors.Context, m taskTimer) {
	t := p.tasks[m.id]
	if t == nil || t.inst == nil {
		return
	}
	if m.stage == 1 && t.override == nil {
		st := api.TaskTimeout
		t.override, t.overErr = &st, &api.TaskError{Code: api.TaskErrTimeout,
			Message: fmt.Sprintf("no result within timeout_ms %d", t.rec.TimeoutMs)}
	}
	reason := "timeout"
	if t.overErr != nil && t.overErr.Code == api.TaskErrStopped {
		reason = "user_cancelled"
	}
	p.stage(c, t, m.stage, reason)
}

// stage runs one step of ending a task the executor is running: 1
// stop_task, 2 cancel_task, 3 the executor's group killed.
func (p *pool) stage(c *actors.Context, t *task, stage int, reason string) {
	in := t.inst
	grace := p.cfg.StopGrace.Duration
	switch stage {
	case 1:
		p.call(c, in, "stop_task", map[string]any{"session_token": t.token, "task_id": t.rec.ID, "reason": reason}, nil)
		t.timers = append(t.timers, c.After(grace, taskTimer{id: t.rec.ID, stage: 2}))
	case 2:
		p.notify(in, "cancel_task", map[string]any{"session_token": t.token, "task_id": t.rec.ID})
		t.timers = append(t.timers, c.After(grace, taskTimer{id: t.rec.ID, stage: 3}))
	default:
		p.kill(in, "task "+t.rec.ID+": "+reason)
		p.end(c, t, *t.override, t.overErr)
	}
}

// ---- idle and shutdown ----

func (p *pool) armIdle(c *actors.Context, in *instance) {
	c.After(p.cfg.IdleTimeout.Duration, idleCheck{id: in.id, gen: in.gen, since: in.idle})
}

func (p *pool) idleCheck(c *actors.Context, m idleCheck) {
	in := p.inst(m.id, m.gen)
	if in == nil || in.state != instIdle || !in.idle.Equal(m.since) || p.live() <= p.cfg.Instances || len(in.terms) > 0 {
		return
	}
	p.askShutdown(c, in, "idle_timeout")
}

// askShutdown sends shutdown and kills the group after shutdown_timeout.
func (p *pool) askShutdown(c *actors.Context, in *instance, reason string) {
	if in.state == instStopping {
		return
	}
	in.expected, in.state = true, instStopping
	to := p.cfg.ShutdownTimeout.Duration
	p.m.bus.Emit(ExecutorStopping{Pool: p.h.name, Executor: in.id, Reason: reason, TimeoutMs: to.Milliseconds()})
	if in.conn != nil {
		p.call(c, in, "shutdown", map[string]any{"reason": reason, "timeout_ms": to.Milliseconds()}, nil)
	}
	c.After(to, killInst{id: in.id, gen: in.gen, reason: reason + ": no exit within shutdown_timeout"})
}

func (p *pool) stopAll(c *actors.Context) {
	p.stopping = true
	p.failTerminals(api.CodeShuttingDown, "the daemon is stopping")
	for _, in := range p.insts {
		p.endTerminals(in, api.TermDaemonShutdown)
	}
	shut := &api.TaskError{Code: api.TaskErrDaemonShutdown, Message: "the daemon stopped"}
	for _, t := range slices.Clone(p.queue) {
		p.end(c, t, api.TaskCancelled, shut)
	}
	for _, in := range p.insts {
		if t := in.task; t != nil {
			st := api.TaskCancelled
			t.override, t.overErr = &st, shut
			p.end(c, t, st, shut)
		}
		if in.conn == nil {
			p.kill(in, "daemon shutdown")
			continue
		}
		in.state = instBusy // askShutdown skips stopping ones
		p.askShutdown(c, in, "server_restart")
	}
	p.checkDone()
}

// checkDone closes done once a stopping pool has no process left.
func (p *pool) checkDone() {
	if !p.stopping || len(p.insts) > 0 {
		return
	}
	select {
	case <-p.h.done:
	default:
		close(p.h.done)
	}
}

// ---- JSON-RPC ----

// call sends a request; h (may be nil) gets its response on the actor.
func (p *pool) call(c *actors.Context, in *instance, method string, params any, h func(json.RawMessage, *wire.RPCError)) {
	if in.conn == nil {
		return
	}
	in.nextID++
	id := fmt.Sprintf("d-%d", in.nextID)
	line, err := wire.AppendRPCRequest(nil, wire.RPCStringID(id), method, params)
	if err != nil {
		p.m.opts.Logger.Error().Err(err).Str("method", method).Msg("encoding a request to an executor")
		return
	}
	if h == nil {
		h = func(json.RawMessage, *wire.RPCError) {}
	}
	in.calls[id] = h
	p.send(in, append(line, '\n'))
}

func (p *pool) notify(in *instance, method string, params any) {
	if in.conn == nil {
		return
	}
	line, err := wire.AppendRPCNotification(nil, method, params)
	if err != nil {
		return
	}
	p.send(in, append(line, '\n'))
}

func (p *pool) respond(in *instance, id wire.RPCID, result any) {
	line, err := wire.AppendRPCResult(nil, id, result)
	if err != nil {
		line, _ = wire.AppendRPCError(nil, id, wire.RPCErrorf(wire.CodeInternal, "encoding the result: %v", err))
	}
	p.send(in, append(line, '\n'))
}

func (p *pool) fail(in *instance, id wire.RPCID, code int, format string, args ...any) {
	line, _ := wire.AppendRPCError(nil, id, wire.RPCErrorf(code, format, args...))
	p.send(in, append(line, '\n'))
}

// send queues a line; an executor that stopped reading is killed.
func (p *pool) send(in *instance, line []byte) {
	if in.conn == nil || in.conn.send(line) {
		return
	}
	if in.state != instStopping {
		p.protocolError(in, fmt.Sprintf("the executor stopped reading its socket (%d lines queued for it): killed", writeQueue))
		p.kill(in, "write_queue_full")
	}
}

// protocolError emits executor.protocol_error: the first 10 of an
// executor, then one in 100.
func (p *pool) protocolError(in *instance, problem string) {
	in.protoErr++
	if in.protoErr <= 10 || in.protoErr%100 == 0 {
		if in.protoErr > 10 {
			problem = fmt.Sprintf("%s (%d protocol errors so far)", problem, in.protoErr)
		}
		p.m.bus.Emit(ExecutorProtocolError{Pool: p.h.name, Executor: in.id, Problem: problem})
	}
}

func (p *pool) inbound(c *actors.Context, in *instance, x inbound) {
	switch {
	case x.err != nil:
		if in.state == instStopping {
			return
		}
		// The socket closed: the process is going or gone. The task ends
		// now; the exit follows.
		if t := in.task; t != nil {
			in.lostTask = t.rec.ID
			p.lost(c, t, fmt.Sprintf("executor %s (pid %d) closed its connection while it ran the task: %v", in.id, in.pid, x.err))
		}
		p.kill(in, "connection_closed")
		in.expected = false
	case x.bad != nil:
		p.protocolError(in, x.bad.Message)
		if !x.bad.Response {
			line, _ := wire.AppendRPCError(nil, x.bad.ID, &x.bad.RPCError)
			p.send(in, append(line, '\n'))
		}
	default:
		p.message(c, in, x.msg)
	}
}

func (p *pool) message(c *actors.Context, in *instance, m wire.RPCMessage) {
	switch m.Kind {
	case wire.RPCKindResult, wire.RPCKindError:
		key := strings.Trim(m.ID.String(), `"`)
		h, ok := in.calls[key]
		if !ok {
			p.protocolError(in, "a response to "+m.ID.String()+", which the daemon never asked")
			return
		}
		delete(in.calls, key)
		h(m.Result, m.Error)
	case wire.RPCKindRequest:
		p.request(c, in, m)
	case wire.RPCKindNotification:
		p.notification(c, in, m)
	}
}

// tokenParams are the fields every executor message for a task carries.
type tokenParams struct {
	SessionToken string `json:"session_token"`
	TaskID       string `json:"task_id"`
}

// taskOf checks a message's token: the live token of the task this
// executor runs, or nil (and an event).
func (p *pool) taskOf(in *instance, method string, params json.RawMessage) *task {
	var tp tokenParams
	_ = json.Unmarshal(params, &tp)
	return p.taskOfToken(in, method, tp)
}

// taskOfToken is taskOf for params already decoded.
func (p *pool) taskOfToken(in *instance, method string, tp tokenParams) *task {
	t := in.task
	if t == nil || tp.SessionToken == "" || tp.SessionToken != t.token || (tp.TaskID != "" && tp.TaskID != t.rec.ID) {
		p.m.bus.Emit(ExecutorBadToken{Pool: p.h.name, Executor: in.id, Method: method})
		return nil
	}
	return t
}

const (
	codeBadToken = -32001
	codeNoSecret = -32002
)

func (p *pool) request(c *actors.Context, in *instance, m wire.RPCMessage) {
	switch m.Method {
	case "get_api_key", "request_permission", "get_execution_context", "create_message":
	default:
		p.fail(in, m.ID, wire.CodeMethodNotFound, "method not found: %s", m.Method)
		return
	}
	t := p.taskOf(in, m.Method, m.Params)
	if t == nil {
		p.fail(in, m.ID, codeBadToken, "invalid session_token: not the token of a task running on this executor")
		return
	}
	switch m.Method {
	case "get_api_key":
		p.apiKey(in, t, m)
	case "request_permission":
		p.permission(c, in, t, m)
	case "get_execution_context":
		p.context(in, t, m)
	case "create_message":
		p.createMessage(c, in, t, m)
	}
}

func (p *pool) apiKey(in *instance, t *task, m wire.RPCMessage) {
	var a struct {
		SessionToken  string `json:"session_token"`
		Service       string `json:"service"`
		CredentialKey string `json:"credential_key"`
	}
	if e := wire.DecodeRPCParams(m, &a); e != nil {
		p.fail(in, m.ID, e.Code, "%s", e.Message)
		return
	}
	name := a.Service
	if name == "" {
		name = a.CredentialKey
	}
	if name == "" {
		p.fail(in, m.ID, wire.CodeInvalidParams, "get_api_key: give service or credential_key")
		return
	}
	var (
		val string
		exp time.Time
		ok  bool
	)
	if p.m.opts.Secrets != nil {
		val, exp, ok = p.m.opts.Secrets.Lookup(name)
	}
	if !ok {
		p.m.bus.Emit(SecretRefused{TaskID: t.rec.ID, Service: name, Executor: in.id})
		p.fail(in, m.ID, codeNoSecret, "no API key configured for %s", name)
		return
	}
	res := map[string]any{"api_key": val}
	if !exp.IsZero() {
		res["expires_at"] = exp.UnixMilli()
	}
	p.m.bus.Emit(SecretIssued{TaskID: t.rec.ID, Service: name, Executor: in.id})
	p.respond(in, m.ID, res)
}

// editTools are what acceptEdits approves without asking.
var editTools = map[string]bool{"Edit": true, "Write": true, "MultiEdit": true, "NotebookEdit": true}

func (p *pool) permission(c *actors.Context, in *instance, t *task, m wire.RPCMessage) {
	var a struct {
		SessionToken string          `json:"session_token"`
		TaskID       string          `json:"task_id"`
		ToolName     string          `json:"tool_name"`
		ToolInput    json.RawMessage `json:"tool_input"`
		ToolParams   json.RawMessage `json:"tool_params"`
	}
	if e := wire.DecodeRPCParams(m, &a); e != nil {
		p.fail(in, m.ID, e.Code, "%s", e.Message)
		return
	}
	if a.ToolName == "" {
		p.fail(in, m.ID, wire.CodeInvalidParams, "request_permission: tool_name is missing")
		return
	}
	input := a.ToolInput
	if len(input) == 0 {
		input = a.ToolParams
	}
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	decide := func(ok bool, reason string) {
		p.m.bus.Emit(TaskPermissionDecided{TaskID: t.rec.ID, ToolName: a.ToolName, Approved: ok, Reason: reason})
		p.respond(in, m.ID, map[string]any{"approved": ok, "reason": reason})
	}
	switch {
	case t.rec.PermissionMode == api.ModeBypass:
		decide(true, "mode=bypassPermissions")
		return
	case t.rec.PermissionMode == api.ModeAcceptEdits && editTools[a.ToolName]:
		decide(true, "mode=acceptEdits")
		return
	case p.m.opts.Permissions == nil:
		decide(false, "no approver is configured")
		return
	}
	sys, self, taskID, reqID, tool := p.sys, p.self, t.rec.ID, m.ID, a.ToolName
	id, cancel, err := p.m.opts.Permissions.Ask(PermissionRequest{Pool: p.h.name, TaskID: taskID,
		SessionID: t.rec.SessionID, Cwd: t.rec.Cwd, ToolName: a.ToolName, ToolInput: input,
		Timeout: p.cfg.PermissionTimeout.Duration}, func(ans PermissionAnswer) {
		sys.Send(self, permAnswered{taskID: taskID, reqID: reqID, tool: tool, ans: ans})
	})
	if err != nil {
		decide(false, "not asked: "+err.Error())
		return
	}
	if t.perms == nil {
		t.perms = map[string]func(string){}
	}
	t.perms[id] = cancel
	p.m.bus.Emit(TaskPermissionRequested{TaskID: taskID, ToolName: a.ToolName, ApprovalID: id})
}

func (p *pool) permAnswered(m permAnswered) {
	t := p.tasks[m.taskID]
	if t == nil || t.inst == nil {
		return // the task ended; its executor heard nothing more
	}
	delete(t.perms, m.ans.ApprovalID)
	p.m.bus.Emit(TaskPermissionDecided{TaskID: t.rec.ID, ToolName: m.tool, Approved: m.ans.Approved, Reason: m.ans.Reason})
	p.respond(t.inst, m.reqID, map[string]any{"approved": m.ans.Approved, "reason": m.ans.Reason})
}

// context answers get_execution_context from the store, off the actor.
func (p *pool) context(in *instance, t *task, m wire.RPCMessage) {
	cn, log, rec, cfg := in.conn, p.m.log, t.rec, p.cfg
	go func() {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		defer cancel()
		ms, err := log.SessionMessages(ctx, rec.SessionID, 1000)
		var line []byte
		if err != nil {
			line, _ = wire.AppendRPCError(nil, m.ID, wire.RPCErrorf(wire.CodeInternal, "reading the session's messages: %v", err))
		} else {
			msgs := make([]map[string]any, 0, len(ms))
			for _, x := range ms {
				msgs = append(msgs, map[string]any{"sequence": x.Sequence, "event_type": x.EventType,
					"event_data": x.EventData, "task_id": x.TaskID, "timestamp": x.Timestamp})
			}
			mcp := cfg.MCPServers
			if mcp == nil {
				mcp = []MCPServer{}
			}
			files := cfg.ContextFiles
			if files == nil {
				files = []string{}
			}
			res := map[string]any{"session_id": rec.SessionID, "task_id": rec.ID, "messages": msgs,
				"mcp_servers": mcp, "context_files": files}
			if cfg.ModelConfig != nil {
				res["model_config"] = cfg.ModelConfig
			}
			line, err = wire.AppendRPCResult(nil, m.ID, res)
			if err != nil {
				line, _ = wire.AppendRPCError(nil, m.ID, wire.RPCErrorf(wire.CodeInternal, "encoding the context: %v", err))
			}
		}
		cn.send(append(line, '\n'))
	}()
}

func (p *pool) createMessage(c *actors.Context, in *instance, t *task, m wire.RPCMessage) {
	var a struct {
		SessionToken string `json:"session_token"`
		TaskID       string `json:"task_id"`
		Message      struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			Type    string          `json:"type"`
		} `json:"message"`
	}
	if e := wire.DecodeRPCParams(m, &a); e != nil {
		p.fail(in, m.ID, e.Code, "%s", e.Message)
		return
	}
	var raw struct {
		Message json.RawMessage `json:"message"`
	}
	_ = json.Unmarshal(m.Params, &raw)
	typ := a.Message.Type
	if typ == "" {
		typ = "message"
	}
	seq := t.maxSeq + 1
	in.replies[fmt.Sprintf("%s/%d", t.rec.ID, seq)] = m.ID
	p.accept(c, in, t, api.SessionMessage{SessionID: t.rec.SessionID, TaskID: t.rec.ID, Sequence: seq,
		EventType: typ, EventData: raw.Message, Timestamp: time.Now().UnixMilli(), ReceivedAt: time.Now().UTC()})
}

func (p *pool) notification(c *actors.Context, in *instance, m wire.RPCMessage) {
	switch m.Method {
	case "report_message", "report_progress", "report_error":
	default:
		p.protocolError(in, "unknown notification "+m.Method)
		return
	}
	if m.Method == "report_message" {
		// The hot path: one decode gives the token and the message.
		var a struct {
			SessionToken string          `json:"session_token"`
			TaskID       string          `json:"task_id"`
			Sequence     int64           `json:"sequence"`
			Timestamp    int64           `json:"timestamp"`
			EventType    string          `json:"event_type"`
			EventData    json.RawMessage `json:"event_data"`
		}
		e := wire.DecodeRPCParams(m, &a)
		t := p.taskOfToken(in, m.Method, tokenParams{SessionToken: a.SessionToken, TaskID: a.TaskID})
		if t == nil {
			return
		}
		if e != nil {
			p.protocolError(in, "report_message: "+e.Message)
			return
		}
		if a.EventType == "" {
			p.protocolError(in, "report_message without event_type")
			return
		}
		p.accept(c, in, t, api.SessionMessage{SessionID: t.rec.SessionID, TaskID: t.rec.ID, Sequence: a.Sequence,
			EventType: a.EventType, EventData: a.EventData, Timestamp: a.Timestamp, ReceivedAt: time.Now().UTC()})
		return
	}
	t := p.taskOf(in, m.Method, m.Params)
	if t == nil {
		return
	}
	switch m.Method {
	case "report_progress":
		var a struct {
			Progress json.RawMessage `json:"progress"`
		}
		_ = json.Unmarshal(m.Params, &a)
		p.m.bus.Emit(TaskProgress{TaskID: t.rec.ID, Progress: a.Progress})
	case "report_error":
		var a struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(m.Params, &a)
		p.m.bus.Emit(TaskErrorReported{TaskID: t.rec.ID, Code: a.Error.Code, Message: a.Error.Message})
	}
}

// ---- the pipeline ----

// accept takes one message into the pipeline (a duplicate sequence is
// ignored).
func (p *pool) accept(c *actors.Context, in *instance, t *task, msg api.SessionMessage) {
	// Duplicates: every sequence up to t.low was seen; seen holds only
	// those above it (out of order), so an in-order stream keeps it empty.
	// The first message sets where the task's sequences start (0 or 1 in
	// practice): one below it is taken for a duplicate.
	if !t.any {
		t.any, t.low = true, msg.Sequence-1
	}
	if msg.Sequence <= t.low || t.seen[msg.Sequence] {
		return
	}
	t.seen[msg.Sequence] = true
	for t.seen[t.low+1] {
		delete(t.seen, t.low+1)
		t.low++
	}
	t.maxSeq = max(t.maxSeq, msg.Sequence)
	t.pending++
	in.pending++
	in.buf = append(in.buf, msg)
	p.flush(c, in)
	p.water(in)
}

// flush hands what waits to the store, one batch at a time.
func (p *pool) flush(c *actors.Context, in *instance) {
	if in.inflight || len(in.buf) == 0 {
		return
	}
	batch := in.buf
	in.buf = nil
	in.inflight = true
	sys, self, id, gen := p.sys, p.self, in.id, in.gen
	if err := p.m.log.Messages(batch, func(err error) {
		sys.Send(self, committed{id: id, gen: gen, batch: batch, err: err})
	}); err != nil {
		// Refused at once (the store's queue is full): kept, tried again.
		in.inflight = false
		in.buf = append(batch, in.buf...)
		c.After(20*time.Millisecond, retryFlush{id: in.id, gen: in.gen})
	}
}

func (p *pool) committed(c *actors.Context, m committed) {
	in := p.insts[m.id]
	if in == nil || in.gen != m.gen {
		in = nil
	}
	if m.err != nil {
		p.m.opts.Logger.Error().Err(m.err).Int("messages", len(m.batch)).Msg("recording executor messages; trying again")
		if in != nil {
			in.inflight = false
			in.buf = append(m.batch, in.buf...)
			c.After(200*time.Millisecond, retryFlush{id: in.id, gen: in.gen})
		}
		return
	}
	slices.SortStableFunc(m.batch, func(a, b api.SessionMessage) int {
		if a.TaskID != b.TaskID {
			return 0
		}
		return int(a.Sequence - b.Sequence)
	})
	for _, msg := range m.batch {
		p.m.bus.Emit(TaskMessage{TaskID: msg.TaskID, SessionID: msg.SessionID, Sequence: msg.Sequence,
			EventType: msg.EventType, EventData: msg.EventData})
		if t := p.tasks[msg.TaskID]; t != nil {
			t.pending--
			t.committed++
		}
		if in != nil {
			key := fmt.Sprintf("%s/%d", msg.TaskID, msg.Sequence)
			if id, ok := in.replies[key]; ok {
				delete(in.replies, key)
				p.respond(in, id, map[string]any{"message_id": key, "created_at": msg.ReceivedAt.Format(time.RFC3339Nano)})
			}
		}
	}
	if in == nil {
		return
	}
	in.inflight = false
	in.pending -= len(m.batch)
	p.water(in)
	p.flush(c, in)
	for _, msg := range m.batch {
		if t := p.tasks[msg.TaskID]; t != nil && t.finishing != nil && t.pending == 0 {
			p.end(c, t, t.finishing.state, t.finishing.err)
		}
	}
}

// water sends pause/resume around the marks and stops reading the socket
// at four times the high mark.
func (p *pool) water(in *instance) {
	switch {
	case !in.paused && in.pending > p.cfg.HighWater:
		in.paused = true
		p.notify(in, "pause_notifications", map[string]any{})
		p.m.bus.Emit(ExecutorPaused{Pool: p.h.name, Executor: in.id, Pending: in.pending})
	case in.paused && in.pending < p.cfg.LowWater:
		in.paused = false
		p.notify(in, "resume_notifications", map[string]any{})
		p.m.bus.Emit(ExecutorResumed{Pool: p.h.name, Executor: in.id, Pending: in.pending})
	}
	gate := in.pending >= 4*p.cfg.HighWater
	if in.conn != nil && gate != in.gated {
		in.gated = gate
		in.conn.gate(gate)
	}
}
