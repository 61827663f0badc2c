package executors

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/executors/agent"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// One executor actor per executor process, under its pool: it owns the
// process (spawn, connection, kill, exit), the JSON-RPC connection (the
// daemon's calls, the executor's requests and notifications), the
// notification pipeline towards the store and subscribers (pause,
// resume, the read gate), the task it runs (token, duplicates, message
// counts, permissions) and the terminals it spawned. It tells the pool
// when it is up, idle and gone, and the task's actor how the task ended.
// It stops once its process is reaped, its reader has finished and every
// message it read is committed and published.

// Instance states (api.ExecutorStatus.State).
const (
	instStarting = "starting"
	instIdle     = "idle"
	instBusy     = "busy"
	instStopping = "stopping"
)

// poolShared is what a pool's actors share: read-only after the pool
// started.
type poolShared struct {
	m    *Manager
	h    *poolHandle
	cfg  PoolConfig
	pool actors.Ref
	// lastWords: the last stderr line of the pool's last executor that
	// exited before it connected, for the tasks a crash loop fails.
	lastWords atomic.Pointer[string]
}

// execActor is one executor process.
type execActor struct {
	ps   *poolShared
	id   string
	self actors.Ref
	sys  *actors.System

	sock     string   // transport socket: the path the executor listens on
	sockDir  string   // its directory, the executor's alone; removed when it ends
	pair     *os.File // transport fd: the daemon's end of the socketpair, until connected
	inc      *proc.Incarnation
	pid      int
	conn     *conn
	state    string
	started  time.Time
	expected bool // the daemon asked it to stop (idle, shutdown): its exit is not a crash
	stopDial chan struct{}
	exited   *proc.Exit
	readDone bool // the reader delivered its last inbound (or never ran)
	spawnErr bool
	doneSent bool   // instDone sent: the pool stops the actor
	lostTask string // the task that ended executor_lost when the connection closed
	// confine: an executor of one task (api.TaskConfine), sandboxed so
	// that its agent writes only the task's worktree. When its task ends
	// it is killed, and the task's end (held) is told once its process,
	// and with it its pid namespace and everything in it, is gone.
	confine *api.TaskConfine
	held    *execDone
	heldTo  actors.Ref

	calls  map[string]func(json.RawMessage, *wire.RPCError)
	nextID int
	terms  map[string]*terminal
	run    *running // the task it runs, nil when idle

	// The notification pipeline: buf waits for the store, inflight is
	// there, pending counts both.
	buf   []api.SessionMessage
	spare []api.SessionMessage // a committed batch's array, for buf to reuse
	// pendingBytes: the event data of the pending messages. A line may be
	// 8 MiB: the gate also closes at max_pending_bytes, so that memory per
	// executor is bounded in bytes, not only in messages.
	pendingBytes int
	replies      map[string]wire.RPCID // create_message answers, by task/sequence
	inflight     bool
	pending      int
	paused       bool
	gated        bool
	protoErr     int
	pubArmed     bool
	now          time.Time // when the batch of lines being taken was read
}

// running is the task an executor runs.
type running struct {
	rec       api.TaskRecord
	token     string
	task      actors.Ref
	seen      map[int64]bool // sequences seen above low
	low       int64          // every sequence from the first up to low was seen
	any       bool           // a message was seen (low is set)
	maxSeq    int64
	pending   int   // messages read and not yet committed
	committed int64 // messages committed
	usage     *api.TokenUsage
	sdk       string                  // the agent's own session it ended in
	denied    int                     // tool uses refused
	finishing *finish                 // the executor answered; waiting for its messages
	perms     map[string]func(string) // pending permissions, by approval id
}

type finish struct {
	state api.TaskState
	err   *api.TaskError
	// theirs: err holds what the executor wrote (its error, its
	// status): the event log gets only its digest.
	theirs bool
}

// Messages of an executor actor.
type (
	eStarted struct {
		pid int
		err error
	}
	eExited struct {
		exit   proc.Exit
		stderr []string // its last stderr lines (stderrTail.lines)
	}
	eConnected struct {
		conn net.Conn
		took time.Duration
	}
	eDialFailed  struct{ reason string }
	ePeerRefused struct {
		peer   proc.Peer
		reason string
	}
	rpcIn struct {
		ins  []inbound
		from *conn // told when the batch is taken
	}
	committed struct {
		batch []api.SessionMessage
		err   error
	}
	retryFlush   struct{}
	permAnswered struct {
		taskID string
		reqID  wire.RPCID
		tool   string
		ans    PermissionAnswer
	}
	// runTask: run this task (from its task actor).
	runTask struct {
		rec   api.TaskRecord
		token string
		task  actors.Ref
		// resume: the agent's session the task continues (its
		// session's sdk_session_id), "" for a new one.
		resume string
	}
	// finishNow: end the running task now as state (a stop, a timeout's
	// last stage, the daemon's shutdown), killing the process first when
	// kill is set; answered with execDone.
	finishNow struct {
		taskID string
		state  api.TaskState
		err    *api.TaskError
		kill   string
	}
	// stageMsg: stop_task (1) or cancel_task (2) for the running task.
	stageMsg struct {
		taskID string
		stage  int
		reason string
	}
	killExec     struct{ reason string }
	shutdownExec struct{ reason string }
	spawnTerm    struct{ pt *pendingTerm }
	republishE   struct{}
)

func newExecActor(ps *poolShared, id string) *execActor {
	return &execActor{ps: ps, id: id, state: instStarting, started: time.Now(),
		calls: map[string]func(json.RawMessage, *wire.RPCError){}, replies: map[string]wire.RPCID{},
		terms: map[string]*terminal{}, stopDial: make(chan struct{})}
}

func (e *execActor) Receive(c *actors.Context) {
	switch msg := c.Message().(type) {
	case actors.Started:
		e.self, e.sys = c.Self(), c.System()
		e.spawn()
	case eStarted:
		e.spawned(msg)
	case eConnected:
		e.connected(msg)
	case eDialFailed:
		e.ps.m.bus.Emit(ExecutorStartFailed{Pool: e.ps.h.name, Executor: e.id, Reason: msg.reason})
		e.kill("startup_timeout")
	case ePeerRefused:
		e.ps.m.bus.Emit(ExecutorPeerRefused{Pool: e.ps.h.name, Executor: e.id, Pid: e.pid,
			PeerPid: msg.peer.Pid, PeerUID: msg.peer.UID, Reason: msg.reason})
		e.kill("peer_refused")
	case eExited:
		e.exitedMsg(msg)
	case rpcIn:
		// A batch of lines: the messages it brings go to the store
		// together, and the marks are checked once.
		e.now = time.Now().UTC()
		for _, x := range msg.ins {
			e.inbound(c, x)
		}
		e.flush(c)
		e.water()
		msg.from.taken()
	case committed:
		e.committed(c, msg)
	case retryFlush:
		e.flush(c)
	case permAnswered:
		e.permAnswered(msg)
	case runTask:
		e.runTask(msg)
	case finishNow:
		e.finishNow(msg)
	case stageMsg:
		e.stage(msg)
	case killExec:
		e.kill(msg.reason)
	case shutdownExec:
		e.askShutdown(c, msg.reason)
	case spawnTerm:
		e.spawnTerminal(c, msg.pt)
	case termGone:
		if _, ok := e.terms[msg.id]; ok {
			delete(e.terms, msg.id)
			e.ps.m.sys.Send(e.ps.pool, instTerms{id: e.id, n: len(e.terms)})
		}
	case republishE:
		e.pubArmed = false
	case actors.Stopping:
		// The pool stops (the daemon's end) or this actor failed: no
		// process of its outlives it, its task and terminals end.
		e.endTerminals(api.TermDaemonShutdown)
		if e.inc != nil && e.exited == nil {
			e.kill("executor actor stopped")
		}
		if r := e.run; r != nil {
			e.done(r, finish{state: api.TaskFailed, err: &api.TaskError{Code: api.TaskErrExecutorLost,
				Message: fmt.Sprintf("executor %s stopped while it ran the task", e.id)}})
		}
		if d := e.held; d != nil {
			// Killed above; its exit will not be heard here.
			e.held = nil
			e.sys.Send(e.heldTo, *d)
		}
	}
	switch c.Message().(type) {
	case rpcIn, committed:
		// The hot path (a message per notification): what executor.list
		// shows is refreshed within republishAfter, not per message.
		if !e.pubArmed {
			e.pubArmed = true
			c.After(republishAfter, republishE{})
		}
	default:
		e.publish()
	}
	e.maybeStop(c)
}

// republishAfter bounds how stale executor.list may be while notifications
// stream.
const republishAfter = 20 * time.Millisecond

// publish refreshes this executor's line in executor.list.
func (e *execActor) publish() {
	st := api.ExecutorStatus{Pool: e.ps.h.name, ID: e.id, Pid: e.pid, State: e.state, Paused: e.paused,
		Pending: e.pending, StartedAt: e.started}
	if e.run != nil {
		st.TaskID = e.run.rec.ID
	}
	e.ps.h.setExec(e.id, &st)
}

// maybeStop asks the pool to stop the actor once nothing of its process
// is left: reaped, its reader done, every message it read committed and
// published.
func (e *execActor) maybeStop(c *actors.Context) {
	if e.exited == nil || !e.readDone || e.inflight || len(e.buf) > 0 {
		return
	}
	e.ps.h.setExec(e.id, nil)
	if !e.doneSent {
		e.doneSent = true
		// The pool stops this actor, so that its Terminated always
		// follows instGone and instDone.
		c.Send(e.ps.pool, instDone{id: e.id})
	}
}

// ---- the process ----

// spawn starts the executor process, connected to the daemon in a way no
// other process can take: transport fd, a socketpair whose end it
// inherits as descriptor 3; transport socket, a path in a 0700 directory
// of its own under the daemon's home, which every other sandbox hides (a
// sandboxed executor sees only its own, see Manager), and whose listener
// is checked to be this process (spawned).
func (e *execActor) spawn() {
	m, cfg := e.ps.m, e.ps.cfg
	var extra []*os.File
	var env []string
	argv := agentArgv(cfg, m.opts.Exe, m.stateDirs[e.ps.h.name], m.opts.Sandbox)
	fail := func(err error) {
		sys, self := e.sys, e.self
		sys.Send(self, eStarted{err: err})
	}
	if cfg.Transport == TransportFD {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fail(fmt.Errorf("making its socketpair: %w", err))
			return
		}
		e.pair = os.NewFile(uintptr(fds[0]), "executor-"+e.id)
		extra = []*os.File{os.NewFile(uintptr(fds[1]), "daemon")} // its descriptor 3
		argv = placeholder(argv, "{fd}", "3", "--fd")
		env = append(env, "ORCHESTRD_EXECUTOR_FD=3")
	} else {
		dir, err := m.socketDir(e.id)
		if err != nil {
			fail(err)
			return
		}
		e.sockDir, e.sock = dir, filepath.Join(dir, socketName)
		argv = placeholder(argv, "{socket}", e.sock, "--socket")
		env = append(env, "ORCHESTRD_EXECUTOR_SOCKET="+e.sock)
	}
	path := argv[0]
	if lp, err := lookPath(path); err == nil {
		path = lp
	}
	base := proc.CleanEnv(m.env, cfg.InheritEnv)
	for _, k := range sortedKeys(cfg.Env) {
		base = append(base, k+"="+cfg.Env[k])
	}
	env = append(append(base, "ORCHESTRD_EXECUTOR_ID="+e.id), env...)
	dir := cfg.Cwd
	if dir == "" {
		dir = m.opts.Home
		if m.opts.Sandbox {
			// The home is hidden from it: the user's home directory.
			if h, err := os.UserHomeDir(); err == nil {
				dir = h
			} else {
				dir = "/"
			}
		}
	}
	iso := proc.Isolation{NoNetwork: cfg.Network == NetworkNone, DeathSignal: syscall.SIGKILL}
	if m.opts.Sandbox {
		iso.Sandbox = true
		pre := []string{m.opts.Exe, "sandbox-exec", "--hide", m.hide}
		for _, h := range m.opts.Hide {
			pre = append(pre, "--hide", h)
		}
		if e.sockDir != "" {
			pre = append(pre, "--expose", e.sockDir)
		}
		if sd := m.stateDirs[e.ps.h.name]; sd != "" {
			// The agent's sessions and settings: read-write, in the
			// home hidden (or not) around it.
			pre = append(pre, "--expose", sd)
		}
		if e.confine != nil {
			ro, rw, err := confinement(e.confine, cfg.WriteCheckout)
			if err != nil {
				fail(err)
				return
			}
			pre = append(pre, proc.ConfineArgs(ro, rw)...)
			dir = rw[0]
		}
		argv = append(append(pre, "--"), argv...)
		path = m.opts.Exe
	}
	sys, self := e.sys, e.self
	tail, err := newStderrTail(m.opts.Stderr)
	if err != nil {
		fail(fmt.Errorf("making its stderr pipe: %w", err))
		return
	}
	e.inc = proc.Spawn(proc.Spec{Path: path, Args: argv, Env: env, Dir: dir, Stderr: tail.w,
		ExtraFiles: extra,
		Isolation:  iso,
		Reaper:     m.opts.Reaper,
		OnStart: func(pid int, err error) {
			tail.started()
			sys.Send(self, eStarted{pid: pid, err: err})
		},
		OnExit: func(x proc.Exit) {
			tail.settle()
			sys.Send(self, eExited{exit: x, stderr: tail.lines()})
		},
	})
}

// maxSDKSessionID bounds an agent's session id kept (Claude Code's and
// Codex's are UUIDs): a longer one is dropped, not stored.
const maxSDKSessionID = 256

// validUsage reports whether an executor's token usage is numbers a sum
// can take: none negative, the cost finite and below a million dollars.
func validUsage(u *api.TokenUsage) bool {
	return u.InputTokens >= 0 && u.OutputTokens >= 0 && u.CacheReadTokens >= 0 && u.CacheWriteTokens >= 0 &&
		u.CostUSD >= 0 && u.CostUSD < 1e6 && !math.IsNaN(u.CostUSD)
}

// agentArgv is the executor's argv for a pool: its command as it is for
// agent = "command"; for a built-in agent kind, this binary's `executor
// --agent KIND --state-dir DIR [--model M] [--sandboxed] -- COMMAND...`,
// COMMAND the agent's binary and extra arguments (default: the kind's).
func agentArgv(cfg PoolConfig, exe, stateDir string, sandboxed bool) []string {
	if cfg.Agent == "" || cfg.Agent == agent.KindCommand {
		return slices.Clone(cfg.Command)
	}
	argv := []string{exe, "executor", "--agent", cfg.Agent}
	if stateDir != "" {
		argv = append(argv, "--state-dir", stateDir)
	}
	if cfg.ModelConfig != nil && cfg.ModelConfig.Model != "" {
		argv = append(argv, "--model", cfg.ModelConfig.Model)
	}
	if sandboxed {
		argv = append(argv, "--sandboxed")
	}
	argv = append(argv, "--")
	if len(cfg.Command) == 0 {
		return append(argv, agent.DefaultBinary(cfg.Agent))
	}
	return append(argv, cfg.Command...)
}

// placeholder puts value in place of key in the arguments that hold it,
// or, when none does, appends flag and value.
func placeholder(argv []string, key, value, flag string) []string {
	found := false
	for i, a := range argv {
		if strings.Contains(a, key) {
			argv[i] = strings.ReplaceAll(a, key, value)
			found = true
		}
	}
	if !found {
		argv = append(argv, flag, value)
	}
	return argv
}

func (e *execActor) spawned(m eStarted) {
	if m.err != nil {
		if e.pair != nil {
			e.pair.Close()
			e.pair = nil
		}
		e.ps.m.bus.Emit(ExecutorStartFailed{Pool: e.ps.h.name, Executor: e.id, Reason: proc.ExplainSpawnError(m.err).Error()})
		e.spawnErr, e.readDone = true, true
		x := proc.Exit{Code: -1}
		e.exitedMsg(eExited{exit: x})
		return
	}
	e.pid = m.pid
	e.ps.m.bus.Emit(ExecutorSpawned{Pool: e.ps.h.name, Executor: e.id, Pid: e.pid, Socket: e.sock, Transport: e.ps.cfg.Transport})
	sys, self, sock, stop, pid := e.sys, e.self, e.sock, e.stopDial, e.pid
	t0 := e.started
	if e.pair != nil {
		// A socketpair: connected from the start, to this process alone.
		f := e.pair
		e.pair = nil
		conn, err := net.FileConn(f)
		f.Close()
		if err != nil {
			e.ps.m.bus.Emit(ExecutorStartFailed{Pool: e.ps.h.name, Executor: e.id, Reason: "its socketpair: " + err.Error()})
			e.kill("startup_failed")
			return
		}
		e.connected(eConnected{conn: conn, took: time.Since(t0)})
		return
	}
	deadline := e.started.Add(e.ps.cfg.StartupTimeout.Duration)
	go func() {
		for {
			conn, err := net.DialTimeout("unix", sock, time.Second)
			if err == nil {
				// Only the executor's own process (or a child of it,
				// such as the program a wrapper starts) may answer.
				peer, perr := proc.PeerOf(conn.(*net.UnixConn))
				switch {
				case perr != nil:
					conn.Close()
					sys.Send(self, ePeerRefused{reason: "its credentials could not be read: " + perr.Error()})
				case peer.Pid == 0 || !proc.Descends(int(peer.Pid), pid):
					conn.Close()
					sys.Send(self, ePeerRefused{peer: peer, reason: fmt.Sprintf(
						"the process listening on %s (pid %d) is not the executor (pid %d) nor its child", sock, peer.Pid, pid)})
				default:
					sys.Send(self, eConnected{conn: conn, took: time.Since(t0)})
				}
				return
			}
			if time.Now().After(deadline) {
				sys.Send(self, eDialFailed{reason: fmt.Sprintf("no connection on %s after %s: %v",
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

func (e *execActor) connected(m eConnected) {
	if e.state != instStarting || e.exited != nil {
		m.conn.Close()
		return
	}
	sys, self := e.sys, e.self
	e.conn = startConn(m.conn, 0, func(cn *conn, xs []inbound) { sys.Send(self, rpcIn{ins: xs, from: cn}) })
	e.state = instIdle
	e.ps.m.bus.Emit(ExecutorConnected{Pool: e.ps.h.name, Executor: e.id, Pid: e.pid, StartMs: m.took.Milliseconds()})
	e.ps.m.sys.Send(e.ps.pool, instUp{id: e.id, pid: e.pid})
}

func (e *execActor) exitedMsg(m eExited) {
	if e.exited != nil {
		return
	}
	e.exited = &m.exit
	close(e.stopDial)
	if e.sockDir != "" {
		// Its socket goes with it: nothing can answer on it any more.
		if err := os.RemoveAll(e.sockDir); err != nil {
			e.ps.m.opts.Logger.Warn().Err(err).Str("executor", e.id).Msg("removing an executor's socket directory")
		}
	}
	if e.conn != nil {
		e.conn.close()
	} else {
		e.readDone = true
	}
	e.endTerminals(api.TermExecutorExited)
	e.state = instStopping
	sig := ""
	if m.exit.Signal != 0 {
		sig = signalName(m.exit.Signal)
	}
	ev := ExecutorExited{Pool: e.ps.h.name, Executor: e.id, Pid: m.exit.Pid, Code: m.exit.Code, Signal: sig,
		Expected: e.expected, Task: e.lostTask}
	if e.conn == nil && !e.expected {
		// It never connected: what it said is why (sandbox-exec's words,
		// or its program's), bounded and made inert (stderrTail.lines).
		ev.Stderr = m.stderr
		e.ps.m.opts.Logger.Error().Str("pool", e.ps.h.name).Str("executor", e.id).Int("code", m.exit.Code).
			Strs("stderr", m.stderr).Msg("an executor exited before it connected")
		if n := len(m.stderr); n > 0 {
			last := m.stderr[n-1]
			e.ps.lastWords.Store(&last)
		}
	}
	if r := e.run; r != nil {
		ev.Task = r.rec.ID
		e.done(r, finish{state: api.TaskFailed, err: &api.TaskError{Code: api.TaskErrExecutorLost,
			Message: fmt.Sprintf("executor %s (pid %d) exited (%s) while it ran the task", e.id, m.exit.Pid, exitWords(m.exit))}})
	}
	if d := e.held; d != nil {
		e.held = nil
		ev.Task = d.taskID
		e.sys.Send(e.heldTo, *d)
	}
	if !e.spawnErr {
		e.ps.m.bus.Emit(ev)
	}
	e.ps.m.sys.Send(e.ps.pool, instGone{id: e.id, expected: e.expected, uptime: m.exit.Uptime})
}

// kill kills the process group; the exit follows.
func (e *execActor) kill(reason string) {
	if e.exited != nil {
		return
	}
	e.expected = e.expected || reason != "startup_timeout"
	e.state = instStopping
	e.ps.m.bus.Emit(ExecutorKilled{Pool: e.ps.h.name, Executor: e.id, Pid: e.pid, Reason: reason})
	if e.conn != nil {
		e.conn.close()
	}
	e.inc.Kill()
}

// askShutdown sends shutdown and kills the group after shutdown_timeout.
func (e *execActor) askShutdown(c *actors.Context, reason string) {
	if e.exited != nil || (e.state == instStopping && e.expected) {
		return
	}
	e.expected, e.state = true, instStopping
	to := e.ps.cfg.ShutdownTimeout.Duration
	e.ps.m.bus.Emit(ExecutorStopping{Pool: e.ps.h.name, Executor: e.id, Reason: reason, TimeoutMs: to.Milliseconds()})
	if reason != "idle_timeout" {
		e.endTerminals(api.TermDaemonShutdown)
	}
	if e.conn == nil {
		// Still starting: nothing to ask.
		e.kill(reason)
		return
	}
	e.call("shutdown", map[string]any{"reason": reason, "timeout_ms": to.Milliseconds()}, nil)
	c.After(to, killExec{reason: reason + ": no exit within shutdown_timeout"})
}

// endTerminals closes the terminals it spawned. Directly, not by message:
// they are its children, and a stopping actor's children see Stopping
// before any message.
func (e *execActor) endTerminals(reason string) {
	for _, t := range e.terms {
		t.end(reason)
	}
}

// ---- the task ----

func (e *execActor) runTask(m runTask) {
	if e.run != nil || e.state != instIdle {
		// The pool gives tasks to idle executors only; this one is going.
		e.sys.Send(m.task, execDone{taskID: m.rec.ID, state: api.TaskFailed, err: &api.TaskError{Code: api.TaskErrExecutorLost,
			Message: fmt.Sprintf("executor %s went away before it started the task", e.id)}})
		return
	}
	r := &running{rec: m.rec, token: m.token, task: m.task, seen: map[int64]bool{}}
	e.run, e.state = r, instBusy
	tools := r.rec.Tools
	if tools == nil {
		tools = []string{}
	}
	id := r.rec.ID
	params := map[string]any{"session_token": r.token, "session_id": r.rec.SessionID,
		"task_id": id, "prompt": r.rec.Prompt, "cwd": r.rec.Cwd, "tools": tools,
		"permission_mode": r.rec.PermissionMode, "timeout_ms": r.rec.TimeoutMs, "stream": true}
	if r.rec.Loop != nil {
		params["loop"] = r.rec.Loop
	}
	if m.resume != "" {
		params["sdk_session_id"] = m.resume
	}
	e.call("execute_prompt", params,
		func(res json.RawMessage, er *wire.RPCError) { e.answered(id, res, er) })
}

// answered is execute_prompt's response.
func (e *execActor) answered(id string, res json.RawMessage, er *wire.RPCError) {
	r := e.run
	if r == nil || r.rec.ID != id || r.finishing != nil {
		return
	}
	// Every error here holds what the executor wrote.
	f := &finish{state: api.TaskFailed, theirs: true}
	if er != nil {
		f.err = &api.TaskError{Code: fmt.Sprintf("rpc_%d", er.Code), Message: er.Message}
	} else {
		var x struct {
			Status       string          `json:"status"`
			TokenUsage   *api.TokenUsage `json:"token_usage"`
			SDKSessionID string          `json:"sdk_session_id"`
			Denied       int             `json:"denied"`
			Error        *struct {
				Message string `json:"message"`
				Code    string `json:"code"`
				RetryAt string `json:"retry_at"`
			} `json:"error"`
		}
		if err := json.Unmarshal(res, &x); err != nil {
			f.err = &api.TaskError{Code: "bad_result", Message: "execute_prompt's result is not an object: " + err.Error()}
		} else {
			r.usage = x.TokenUsage
			if r.usage != nil && !validUsage(r.usage) {
				// Kept out of every sum: an executor's bad numbers
				// must not make a loop's budget or the metrics lie.
				r.usage = nil
			}
			if len(x.SDKSessionID) <= maxSDKSessionID {
				r.sdk = x.SDKSessionID
			}
			r.denied = max(x.Denied, 0)
			switch x.Status {
			case "completed":
				f.state = api.TaskCompleted
			case "cancelled":
				f.state = api.TaskCancelled
			case "failed":
			default:
				f.err = &api.TaskError{Code: "bad_result", Message: fmt.Sprintf("execute_prompt's status %q is not completed, failed or cancelled", x.Status)}
			}
			if x.Error != nil && f.err == nil {
				f.err = &api.TaskError{Code: x.Error.Code, Message: x.Error.Message}
				if t, err := time.Parse(time.RFC3339, x.Error.RetryAt); err == nil && x.Error.RetryAt != "" {
					t = t.UTC()
					f.err.RetryAt = &t
				}
			}
		}
	}
	r.finishing = f
	if r.pending == 0 {
		e.done(r, *f)
	}
}

// done ends the running task here: its actor hears how (it applies a stop
// or a timeout over it), its permissions are withdrawn, the executor is
// idle again.
func (e *execActor) done(r *running, f finish) {
	if e.run != r {
		return
	}
	e.run = nil
	for _, cancel := range r.perms {
		cancel("task_ended")
	}
	d := execDone{taskID: r.rec.ID, state: f.state, err: f.err, theirs: f.theirs, usage: r.usage, sdk: r.sdk, denied: r.denied,
		count: r.committed + int64(r.pending)}
	if e.confine != nil && e.exited == nil {
		// Nothing the task started may outlive it: its end is told once
		// the process is gone (exitedMsg).
		e.held, e.heldTo = &d, r.task
		if e.state != instStopping {
			e.kill("task_ended")
		}
		return
	}
	e.sys.Send(r.task, d)
	if e.state == instBusy {
		e.state = instIdle
		e.ps.m.sys.Send(e.ps.pool, instFree{id: e.id})
	}
}

func (e *execActor) finishNow(m finishNow) {
	r := e.run
	if r != nil && r.rec.ID != m.taskID {
		return // it ended already: its execDone is on its way
	}
	if m.kill != "" {
		// Also when the task never reached it (its actor failed on the
		// way): the pool counts this executor as given that task.
		e.kill(m.kill)
	}
	if r != nil {
		e.done(r, finish{state: m.state, err: m.err})
	}
}

// stage sends stop_task (1) or cancel_task (2) for the running task.
func (e *execActor) stage(m stageMsg) {
	r := e.run
	if r == nil || r.rec.ID != m.taskID {
		return
	}
	switch m.stage {
	case 1:
		e.call("stop_task", map[string]any{"session_token": r.token, "task_id": r.rec.ID, "reason": m.reason}, nil)
	default:
		e.notify("cancel_task", map[string]any{"session_token": r.token, "task_id": r.rec.ID})
	}
}

// ---- JSON-RPC ----

// call sends a request; h (may be nil) gets its response on the actor.
func (e *execActor) call(method string, params any, h func(json.RawMessage, *wire.RPCError)) {
	if e.conn == nil {
		return
	}
	e.nextID++
	id := fmt.Sprintf("d-%d", e.nextID)
	line, err := wire.AppendRPCRequest(nil, wire.RPCStringID(id), method, params)
	if err != nil {
		e.ps.m.opts.Logger.Error().Err(err).Str("method", method).Msg("encoding a request to an executor")
		return
	}
	if h == nil {
		h = func(json.RawMessage, *wire.RPCError) {}
	}
	e.calls[id] = h
	e.send(line)
}

func (e *execActor) notify(method string, params any) {
	if e.conn == nil {
		return
	}
	line, err := wire.AppendRPCNotification(nil, method, params)
	if err != nil {
		return
	}
	e.send(line)
}

func (e *execActor) respond(id wire.RPCID, result any) {
	line, err := wire.AppendRPCResult(nil, id, result)
	if err != nil {
		line, _ = wire.AppendRPCError(nil, id, wire.RPCErrorf(wire.CodeInternal, "encoding the result: %v", err))
	}
	e.send(line)
}

func (e *execActor) fail(id wire.RPCID, code int, format string, args ...any) {
	line, _ := wire.AppendRPCError(nil, id, wire.RPCErrorf(code, format, args...))
	e.send(line)
}

// send queues a line; an executor that stopped reading is killed.
func (e *execActor) send(line []byte) {
	if e.conn == nil || e.conn.send(line) {
		return
	}
	if e.state != instStopping {
		e.protocolError(fmt.Sprintf("the executor stopped reading its socket (%d lines queued for it): killed", writeQueue))
		e.kill("write_queue_full")
	}
}

// protocolError emits executor.protocol_error: the first 10 of an
// executor, then one in 100.
func (e *execActor) protocolError(problem string) {
	e.protoErr++
	if e.protoErr <= 10 || e.protoErr%100 == 0 {
		if e.protoErr > 10 {
			problem = fmt.Sprintf("%s (%d protocol errors so far)", problem, e.protoErr)
		}
		e.ps.m.bus.Emit(ExecutorProtocolError{Pool: e.ps.h.name, Executor: e.id, Problem: problem})
	}
}

func (e *execActor) inbound(c *actors.Context, x inbound) {
	switch {
	case x.err != nil:
		e.readDone = true
		if e.state == instStopping {
			return
		}
		if errors.Is(x.err, wire.ErrLineTooLong) {
			e.protocolError(x.err.Error()) // the reader stopped there: said before the connection goes
		}
		// The socket closed: the process is going or gone. The task ends
		// now; the exit follows.
		e.state = instStopping
		if r := e.run; r != nil {
			e.lostTask = r.rec.ID
			e.done(r, finish{state: api.TaskFailed, err: &api.TaskError{Code: api.TaskErrExecutorLost,
				Message: fmt.Sprintf("executor %s (pid %d) closed its connection while it ran the task: %v", e.id, e.pid, x.err)}})
		}
		e.kill("connection_closed")
		e.expected = false
	case x.bad != nil:
		e.protocolError(x.bad.Message)
		if !x.bad.Response {
			line, _ := wire.AppendRPCError(nil, x.bad.ID, &x.bad.RPCError)
			e.send(line)
		}
	case x.isReport:
		e.report(c, x.report, nil)
	default:
		e.message(c, x.msg)
	}
}

func (e *execActor) message(c *actors.Context, m wire.RPCMessage) {
	switch m.Kind {
	case wire.RPCKindResult, wire.RPCKindError:
		key := strings.Trim(m.ID.String(), `"`)
		h, ok := e.calls[key]
		if !ok {
			e.protocolError("a response to " + m.ID.String() + ", which the daemon never asked")
			return
		}
		delete(e.calls, key)
		h(m.Result, m.Error)
	case wire.RPCKindRequest:
		e.request(c, m)
	case wire.RPCKindNotification:
		e.notification(c, m)
	}
}

// tokenParams are the fields every executor message for a task carries.
type tokenParams struct {
	SessionToken string `json:"session_token"`
	TaskID       string `json:"task_id"`
}

// taskOf checks a message's token: the live token of the task this
// executor runs, or nil (and an event).
func (e *execActor) taskOf(method string, params json.RawMessage) *running {
	var tp tokenParams
	_ = json.Unmarshal(params, &tp)
	return e.taskOfToken(method, tp)
}

// taskOfToken is taskOf for params already decoded.
func (e *execActor) taskOfToken(method string, tp tokenParams) *running {
	r := e.run
	if r == nil || tp.SessionToken == "" || tp.SessionToken != r.token || (tp.TaskID != "" && tp.TaskID != r.rec.ID) {
		e.ps.m.bus.Emit(ExecutorBadToken{Pool: e.ps.h.name, Executor: e.id, Method: method})
		return nil
	}
	return r
}

const (
	codeBadToken = -32001
	codeNoSecret = -32002
)

func (e *execActor) request(c *actors.Context, m wire.RPCMessage) {
	switch m.Method {
	case "get_api_key", "request_permission", "get_execution_context", "create_message":
	default:
		e.fail(m.ID, wire.CodeMethodNotFound, "method not found: %s", m.Method)
		return
	}
	r := e.taskOf(m.Method, m.Params)
	if r == nil {
		e.fail(m.ID, codeBadToken, "invalid session_token: not the token of a task running on this executor")
		return
	}
	switch m.Method {
	case "get_api_key":
		e.apiKey(r, m)
	case "request_permission":
		e.permission(r, m)
	case "get_execution_context":
		e.context(r, m)
	case "create_message":
		e.createMessage(c, r, m)
	}
}

func (e *execActor) apiKey(r *running, m wire.RPCMessage) {
	var a struct {
		SessionToken  string `json:"session_token"`
		Service       string `json:"service"`
		CredentialKey string `json:"credential_key"`
	}
	if er := wire.DecodeRPCParams(m, &a); er != nil {
		e.fail(m.ID, er.Code, "%s", er.Message)
		return
	}
	name := a.Service
	if name == "" {
		name = a.CredentialKey
	}
	if name == "" {
		e.fail(m.ID, wire.CodeInvalidParams, "get_api_key: give service or credential_key")
		return
	}
	entry, val, exp, reason := e.secret(name)
	if reason != "" {
		e.ps.m.bus.Emit(SecretRefused{TaskID: r.rec.ID, Service: eventlog.Ident(name), Executor: e.id,
			Pool: e.ps.h.name, Reason: reason})
		e.fail(m.ID, codeNoSecret, "no API key configured for %s", name)
		return
	}
	res := map[string]any{"api_key": val}
	if !exp.IsZero() {
		res["expires_at"] = exp.UnixMilli()
	}
	e.ps.m.bus.Emit(SecretIssued{TaskID: r.rec.ID, Service: eventlog.Ident(name), Executor: e.id, Pool: e.ps.h.name, Entry: entry})
	e.respond(m.ID, res)
}

// secret finds the secret name resolves to, if the pool may receive it:
// one of the names its secrets list resolves to the same entry of the
// secrets file. reason is why not ("not_configured", "not_allowed").
// Both refusals answer alike (-32002), so an executor cannot probe which
// secrets exist beyond its pool's.
func (e *execActor) secret(name string) (entry, val string, exp time.Time, reason string) {
	s := e.ps.m.opts.Secrets
	if s == nil {
		return "", "", time.Time{}, "not_configured"
	}
	entry, val, exp, ok := s.Find(name)
	if !ok {
		return "", "", time.Time{}, "not_configured"
	}
	for _, allowed := range e.ps.cfg.Secrets {
		if a, _, _, ok := s.Find(allowed); ok && a == entry {
			return entry, val, exp, ""
		}
	}
	return "", "", time.Time{}, "not_allowed"
}

// maxSuggestions bounds the permission suggestions one request_permission
// passes on to its approval.
const maxSuggestions = 16

// objectsOnly keeps the JSON objects of ss, n at most.
func objectsOnly(ss []json.RawMessage, n int) []json.RawMessage {
	var out []json.RawMessage
	for _, s := range ss {
		if b := bytes.TrimSpace(s); len(b) > 0 && b[0] == '{' && len(out) < n {
			out = append(out, b)
		}
	}
	return out
}

// editTools are what acceptEdits approves without asking.
var editTools = map[string]bool{"Edit": true, "Write": true, "MultiEdit": true, "NotebookEdit": true}

func (e *execActor) permission(r *running, m wire.RPCMessage) {
	var a struct {
		SessionToken string          `json:"session_token"`
		TaskID       string          `json:"task_id"`
		ToolName     string          `json:"tool_name"`
		ToolInput    json.RawMessage `json:"tool_input"`
		ToolParams   json.RawMessage `json:"tool_params"`
		// Suggestions: the agent's permission_suggestions (Claude Code's),
		// what an AlwaysAllow records as a rule.
		Suggestions []json.RawMessage `json:"permission_suggestions"`
	}
	if er := wire.DecodeRPCParams(m, &a); er != nil {
		e.fail(m.ID, er.Code, "%s", er.Message)
		return
	}
	if a.ToolName == "" {
		e.fail(m.ID, wire.CodeInvalidParams, "request_permission: tool_name is missing")
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
		e.ps.m.bus.Emit(TaskPermissionDecided{TaskID: r.rec.ID, ToolName: eventlog.Ident(a.ToolName), Approved: ok, Reason: reason})
		e.respond(m.ID, map[string]any{"approved": ok, "reason": reason})
	}
	switch {
	case r.rec.PermissionMode == api.ModeBypass:
		decide(true, "mode=bypassPermissions")
		return
	case r.rec.PermissionMode == api.ModeAcceptEdits && editTools[a.ToolName]:
		decide(true, "mode=acceptEdits")
		return
	case e.ps.m.opts.Permissions == nil:
		decide(false, "no approver is configured")
		return
	}
	sys, self, taskID, reqID, tool := e.sys, e.self, r.rec.ID, m.ID, a.ToolName
	id, cancel, err := e.ps.m.opts.Permissions.Ask(PermissionRequest{Pool: e.ps.h.name, TaskID: taskID,
		SessionID: r.rec.SessionID, Cwd: r.rec.Cwd, ToolName: a.ToolName, ToolInput: input,
		Suggestions: objectsOnly(a.Suggestions, maxSuggestions), Timeout: e.ps.cfg.PermissionTimeout.Duration}, func(ans PermissionAnswer) {
		sys.Send(self, permAnswered{taskID: taskID, reqID: reqID, tool: tool, ans: ans})
	})
	if err != nil {
		decide(false, "not asked: "+err.Error())
		return
	}
	if r.perms == nil {
		r.perms = map[string]func(string){}
	}
	r.perms[id] = cancel
	e.ps.m.bus.Emit(TaskPermissionRequested{TaskID: taskID, ToolName: eventlog.Ident(a.ToolName), ApprovalID: id})
}

func (e *execActor) permAnswered(m permAnswered) {
	r := e.run
	if r == nil || r.rec.ID != m.taskID {
		return // the task ended; its executor heard nothing more
	}
	delete(r.perms, m.ans.ApprovalID)
	e.ps.m.bus.Emit(TaskPermissionDecided{TaskID: r.rec.ID, ToolName: eventlog.Ident(m.tool), Approved: m.ans.Approved, Reason: m.ans.Reason})
	e.respond(m.reqID, map[string]any{"approved": m.ans.Approved, "reason": m.ans.Reason})
}

// context answers get_execution_context from the store, off the actor.
func (e *execActor) context(r *running, m wire.RPCMessage) {
	cn, log, rec, cfg := e.conn, e.ps.m.log, r.rec, e.ps.cfg
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
		cn.send(line)
	}()
}

func (e *execActor) createMessage(c *actors.Context, r *running, m wire.RPCMessage) {
	var a struct {
		SessionToken string `json:"session_token"`
		TaskID       string `json:"task_id"`
		Message      struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			Type    string          `json:"type"`
		} `json:"message"`
	}
	if er := wire.DecodeRPCParams(m, &a); er != nil {
		e.fail(m.ID, er.Code, "%s", er.Message)
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
	seq := r.maxSeq + 1
	e.replies[fmt.Sprintf("%s/%d", r.rec.ID, seq)] = m.ID
	e.accept(c, r, api.SessionMessage{SessionID: r.rec.SessionID, TaskID: r.rec.ID, Sequence: seq,
		EventType: typ, EventData: raw.Message, Timestamp: time.Now().UnixMilli(), ReceivedAt: time.Now().UTC()})
}

func (e *execActor) notification(c *actors.Context, m wire.RPCMessage) {
	switch m.Method {
	case "report_message":
		// The reader decodes nearly all of them (inbound.report); these
		// are the rest, with a problem to name.
		var a wire.ReportMessage
		e.report(c, a, wire.DecodeRPCParams(m, &a))
	case "report_progress":
		r := e.taskOf(m.Method, m.Params)
		if r == nil {
			return
		}
		var a struct {
			Progress json.RawMessage `json:"progress"`
		}
		_ = json.Unmarshal(m.Params, &a)
		e.ps.m.bus.Emit(TaskProgress{TaskID: r.rec.ID, Progress: a.Progress})
	case "report_error":
		r := e.taskOf(m.Method, m.Params)
		if r == nil {
			return
		}
		var a struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(m.Params, &a)
		e.ps.m.bus.Emit(TaskErrorReported{TaskID: r.rec.ID, Code: a.Error.Code, Message: a.Error.Message})
	default:
		e.protocolError("unknown notification " + m.Method)
	}
}

// report takes a report_message (er: what was wrong with its params).
func (e *execActor) report(c *actors.Context, a wire.ReportMessage, er *wire.RPCError) {
	r := e.taskOfToken("report_message", tokenParams{SessionToken: a.SessionToken, TaskID: a.TaskID})
	if r == nil {
		return
	}
	if er != nil {
		e.protocolError("report_message: " + er.Message)
		return
	}
	if a.EventType == "" {
		e.protocolError("report_message without event_type")
		return
	}
	e.accept(c, r, api.SessionMessage{SessionID: r.rec.SessionID, TaskID: r.rec.ID, Sequence: a.Sequence,
		EventType: a.EventType, EventData: a.EventData, Timestamp: a.Timestamp, ReceivedAt: e.now})
}

// ---- the pipeline ----

// accept takes one message into the pipeline (a duplicate sequence is
// ignored).
func (e *execActor) accept(c *actors.Context, r *running, msg api.SessionMessage) {
	// Duplicates: every sequence up to r.low was seen; seen holds only
	// those above it (out of order), so an in-order stream keeps it empty.
	// The first message sets where the task's sequences start (0 or 1 in
	// practice): one below it is taken for a duplicate.
	if !r.any {
		r.any, r.low = true, msg.Sequence-1
	}
	if msg.Sequence <= r.low || r.seen[msg.Sequence] {
		return
	}
	r.seen[msg.Sequence] = true
	if len(r.seen) > e.maxOutOfOrder() {
		e.skipGap(r)
	}
	for r.seen[r.low+1] {
		delete(r.seen, r.low+1)
		r.low++
	}
	r.maxSeq = max(r.maxSeq, msg.Sequence)
	r.pending++
	e.pending++
	e.pendingBytes += len(msg.EventData)
	e.buf = append(e.buf, msg)
	// flush and water follow once the batch of lines is taken (rpcIn).
}

// maxOutOfOrder bounds the sequences a task holds above its contiguous
// mark (each a map entry, ~40 bytes): 4 x high_water, the read gate's
// count, so an executor that never fills a gap cannot grow the daemon's
// memory for the task's life.
func (e *execActor) maxOutOfOrder() int { return 4 * e.ps.cfg.HighWater }

// skipGap stops waiting for the gaps below the lower half of the
// sequences held: the mark moves up to the median one, those held below it
// are let go (they were seen), and task.sequences_skipped says which
// sequences are no longer awaited (Missing of them were never seen). One
// of them that arrives later is taken for a duplicate and dropped, as the
// event says. Half at a time, so an executor that never fills a gap costs
// one event per limit/2 messages, not one per message.
func (e *execActor) skipGap(r *running) {
	held := slices.Sorted(maps.Keys(r.seen))
	mark := held[len(held)/2]
	from := r.low + 1
	missing := mark - r.low
	for _, s := range held[:len(held)/2+1] {
		delete(r.seen, s)
		missing--
	}
	r.low = mark
	e.ps.m.bus.Emit(TaskSequencesSkipped{TaskID: r.rec.ID, Executor: e.id, From: from, To: mark,
		Missing: missing, Limit: e.maxOutOfOrder()})
}

// flush hands what waits to the store, one batch at a time.
func (e *execActor) flush(c *actors.Context) {
	if e.inflight || len(e.buf) == 0 {
		return
	}
	batch := e.buf
	e.buf, e.spare = e.spare, nil
	e.inflight = true
	sys, self := e.sys, e.self
	if err := e.ps.m.log.Messages(batch, func(err error) {
		sys.Send(self, committed{batch: batch, err: err})
	}); err != nil {
		// Refused at once (the store's queue is full): kept, tried again.
		e.inflight = false
		e.buf = append(batch, e.buf...)
		c.After(20*time.Millisecond, retryFlush{})
	}
}

func (e *execActor) committed(c *actors.Context, m committed) {
	if m.err != nil {
		e.ps.m.opts.Logger.Error().Err(m.err).Int("messages", len(m.batch)).Msg("recording executor messages; trying again")
		e.inflight = false
		e.buf = append(m.batch, e.buf...)
		c.After(200*time.Millisecond, retryFlush{})
		return
	}
	bySeq := func(a, b api.SessionMessage) int {
		if a.TaskID != b.TaskID {
			return 0
		}
		return cmp.Compare(a.Sequence, b.Sequence)
	}
	if !slices.IsSortedFunc(m.batch, bySeq) {
		slices.SortStableFunc(m.batch, bySeq)
	}
	r := e.run
	// Published in order, as one batch of events.
	tms := make([]TaskMessage, len(m.batch))
	evs := make([]eventlog.Event, len(m.batch))
	for i, msg := range m.batch {
		tms[i] = TaskMessage{TaskID: msg.TaskID, SessionID: msg.SessionID, Sequence: msg.Sequence,
			EventType: msg.EventType, EventData: msg.EventData}
		evs[i] = &tms[i]
	}
	e.ps.m.bus.EmitAll(evs)
	e.ps.h.messages.Add(int64(len(evs)))
	for _, msg := range m.batch {
		if r != nil && msg.TaskID == r.rec.ID {
			r.pending--
			r.committed++
		}
		if len(e.replies) > 0 {
			key := fmt.Sprintf("%s/%d", msg.TaskID, msg.Sequence)
			if id, ok := e.replies[key]; ok {
				delete(e.replies, key)
				e.respond(id, map[string]any{"message_id": key, "created_at": msg.ReceivedAt.Format(time.RFC3339Nano)})
			}
		}
	}
	if r != nil {
		e.ps.m.counted(r.rec.ID, r.committed) // task.list and task.get show a running task's count
	}
	e.inflight = false
	e.pending -= len(m.batch)
	for _, msg := range m.batch {
		e.pendingBytes -= len(msg.EventData)
	}
	// The batch is done with: its array takes the next messages.
	clear(m.batch)
	e.spare = m.batch[:0]
	e.water()
	e.flush(c)
	if r != nil && r.finishing != nil && r.pending == 0 {
		e.done(r, *r.finishing)
	}
}

// water sends pause/resume around the marks and stops reading the socket
// at four times the high mark, or at max_pending_bytes of event data.
func (e *execActor) water() {
	cfg := e.ps.cfg
	switch {
	case !e.paused && e.pending > cfg.HighWater:
		e.paused = true
		e.notify("pause_notifications", map[string]any{})
		e.ps.m.bus.Emit(ExecutorPaused{Pool: e.ps.h.name, Executor: e.id, Pending: e.pending})
	case e.paused && e.pending < cfg.LowWater:
		e.paused = false
		e.notify("resume_notifications", map[string]any{})
		e.ps.m.bus.Emit(ExecutorResumed{Pool: e.ps.h.name, Executor: e.id, Pending: e.pending})
	}
	gate := e.pending >= 4*cfg.HighWater || e.pendingBytes >= cfg.MaxPendingBytes
	if e.conn != nil && gate != e.gated {
		e.gated = gate
		e.conn.gate(gate)
	}
}
