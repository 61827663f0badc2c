package executors

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/executors/ptyfd"
	"github.com/orchestrd/orchestrd/wire"
)

// The pool's side of terminals: choosing an executor, spawn_terminal,
// taking the PTY off the socket, and the terminal actors under the pool.

type (
	openTerminal struct {
		spec api.TerminalSpec
		call api.Call
	}
	termGone struct {
		id, inst string
		gen      int
	}
	termOpenExpired struct{ p *pendingTerm }
)

// pendingTerm is a terminal.open waiting for an executor to connect.
type pendingTerm struct {
	spec   api.TerminalSpec
	call   api.Call
	cancel func()
	done   bool
}

func (p *pool) openTerminal(c *actors.Context, m openTerminal) {
	if p.stopping {
		m.call.Fail(api.Errorf(api.CodeShuttingDown, "the daemon is stopping: no terminal opened"))
		return
	}
	pt := &pendingTerm{spec: m.spec, call: m.call}
	if in := p.termInstance(); in != nil {
		p.spawnTerminal(c, in, pt)
		return
	}
	// No executor is connected: wait for one, starting one if none is on
	// its way.
	starting := false
	for _, in := range p.insts {
		starting = starting || in.state == instStarting
	}
	if !starting {
		if p.live() >= p.cfg.MaxInstances || p.holdSet {
			m.call.Fail(api.Errorf(api.CodeInvalidState, "executor pool %s has no executor to spawn a terminal (max_instances %d are busy stopping, or the pool is backing off a crash loop)",
				p.h.name, p.cfg.MaxInstances))
			return
		}
		p.start(c, false)
	}
	wait := p.cfg.StartupTimeout.Duration + time.Second
	pt.cancel = c.After(wait, termOpenExpired{p: pt})
	p.termQueue = append(p.termQueue, pt)
}

// termInstance picks the connected executor with the fewest terminals,
// idle ones first.
func (p *pool) termInstance() *instance {
	var best *instance
	score := func(in *instance) int {
		s := len(in.terms) * 2
		if in.state == instBusy {
			s++
		}
		return s
	}
	for _, in := range p.insts {
		if in.conn == nil || (in.state != instIdle && in.state != instBusy) {
			continue
		}
		if best == nil || score(in) < score(best) || (score(in) == score(best) && in.id < best.id) {
			best = in
		}
	}
	return best
}

// serveTerminals hands the waiting terminal.open calls to a connected
// executor.
func (p *pool) serveTerminals(c *actors.Context) {
	for len(p.termQueue) > 0 {
		in := p.termInstance()
		if in == nil {
			return
		}
		pt := p.termQueue[0]
		p.termQueue = p.termQueue[1:]
		if pt.cancel != nil {
			pt.cancel()
		}
		p.spawnTerminal(c, in, pt)
	}
}

func (p *pool) termOpenExpired(m termOpenExpired) {
	for i, pt := range p.termQueue {
		if pt == m.p {
			p.termQueue = append(p.termQueue[:i], p.termQueue[i+1:]...)
			reason := fmt.Sprintf("no executor of pool %s connected within %s", p.h.name, p.cfg.StartupTimeout.Duration+time.Second)
			p.m.bus.Emit(TerminalOpenFailed{Pool: p.h.name, Reason: reason})
			pt.call.Fail(api.Errorf(api.CodeInvalidState, "terminal.open: %s", reason))
			return
		}
	}
}

// failTerminals fails the waiting terminal.open calls (the pool stops, or
// cannot start an executor).
func (p *pool) failTerminals(code int, reason string) {
	for _, pt := range p.termQueue {
		if pt.cancel != nil {
			pt.cancel()
		}
		p.m.bus.Emit(TerminalOpenFailed{Pool: p.h.name, Reason: reason})
		pt.call.Fail(api.Errorf(code, "terminal.open: %s", reason))
	}
	p.termQueue = nil
}

// spawnTerminal sends spawn_terminal; the response carries the PTY.
func (p *pool) spawnTerminal(c *actors.Context, in *instance, pt *pendingTerm) {
	env := pt.spec.Env
	if env == nil {
		env = map[string]string{}
	}
	params := map[string]any{"session_token": randomHex(32), "cwd": pt.spec.Cwd, "shell": pt.spec.Shell,
		"env": env, "use_tmux": false, "cols": pt.spec.Cols, "rows": pt.spec.Rows}
	id, gen := in.id, in.gen
	p.call(c, in, "spawn_terminal", params, func(res json.RawMessage, e *wire.RPCError) {
		p.terminalSpawned(c, id, gen, pt, res, e)
	})
}

func (p *pool) terminalSpawned(c *actors.Context, instID string, gen int, pt *pendingTerm, res json.RawMessage, e *wire.RPCError) {
	in := p.inst(instID, gen)
	fail := func(format string, args ...any) {
		reason := fmt.Sprintf(format, args...)
		p.m.bus.Emit(TerminalOpenFailed{Pool: p.h.name, Executor: instID, Reason: reason})
		pt.call.Fail(api.Errorf(api.CodeInternal, "terminal.open: %s", reason))
	}
	if in == nil {
		fail("executor %s went away before it answered spawn_terminal", instID)
		return
	}
	if e != nil {
		fail("executor %s refused spawn_terminal: %s (code %d)", instID, e.Message, e.Code)
		return
	}
	// The PTY came with the response's first byte, so it is queued by now.
	f, err := in.conn.takeFD()
	if err != nil {
		p.protocolError(in, "spawn_terminal's response: "+err.Error())
		fail("executor %s answered spawn_terminal without passing the PTY: %v", instID, err)
		return
	}
	if err := ptyfd.IsMaster(f); err != nil {
		f.Close()
		p.protocolError(in, "spawn_terminal's response: "+err.Error())
		fail("executor %s passed a descriptor that is not a PTY master", instID)
		return
	}
	var r struct {
		TerminalID string `json:"terminal_id"`
		PtyPid     int    `json:"pty_pid"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		f.Close()
		fail("spawn_terminal's result is not {terminal_id, pty_pid}: %v", err)
		return
	}
	if p.stopping {
		f.Close()
		pt.call.Fail(api.Errorf(api.CodeShuttingDown, "the daemon is stopping: no terminal opened"))
		return
	}
	st := api.TerminalStatus{ID: p.m.newTerminalID(), Pool: p.h.name, Executor: in.id, ExecTermID: r.TerminalID,
		PtyPid: r.PtyPid, Cwd: pt.spec.Cwd, Shell: pt.spec.Shell, Cols: pt.spec.Cols, Rows: pt.spec.Rows,
		State: api.TerminalOpen, OpenedAt: time.Now().UTC()}
	t := newTerminal(p.m, f, st, p.self, in.id, in.gen)
	ref, err := c.Spawn(actors.Props{Kind: "terminal", ID: st.ID, OnPanic: actors.Stop,
		New: func() actors.Actor { return &termActor{t: t} }})
	if err != nil {
		f.Close()
		fail("starting the terminal's actor: %v", err)
		return
	}
	t.ref = ref
	if in.terms == nil {
		in.terms = map[string]*terminal{}
	}
	in.terms[st.ID] = t
	p.m.mu.Lock()
	p.m.terms[st.ID] = t
	p.m.mu.Unlock()
	p.m.bus.Emit(TerminalOpened{TerminalID: st.ID, Pool: st.Pool, Executor: st.Executor, PtyPid: st.PtyPid,
		Cwd: st.Cwd, Cols: st.Cols, Rows: st.Rows})
	pt.call.Respond(map[string]any{"terminal": st})
}

func (p *pool) termGone(c *actors.Context, m termGone) {
	in := p.inst(m.inst, m.gen)
	if in == nil {
		return
	}
	delete(in.terms, m.id)
	if len(in.terms) == 0 && in.state == instIdle {
		in.idle = time.Now()
		p.armIdle(c, in)
	}
}

// endTerminals closes the terminals of an executor.
func (p *pool) endTerminals(in *instance, reason string) {
	for _, t := range in.terms {
		p.m.sys.Send(t.ref, termEnd{reason: reason})
	}
}
