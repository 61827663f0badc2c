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

// Terminals: the pool chooses the executor, the executor actor sends
// spawn_terminal, takes the PTY off the socket and starts the terminal's
// actor as its child.

type (
	openTerminal struct {
		spec api.TerminalSpec
		call api.Call
	}
	termGone        struct{ id string }
	termOpenExpired struct{ p *pendingTerm }
)

// pendingTerm is a terminal.open waiting for an executor to connect.
type pendingTerm struct {
	spec   api.TerminalSpec
	call   api.Call
	cancel func()
}

func (p *pool) openTerminal(c *actors.Context, m openTerminal) {
	if p.stopping {
		m.call.Fail(api.Errorf(api.CodeShuttingDown, "the daemon is stopping: no terminal opened"))
		return
	}
	pt := &pendingTerm{spec: m.spec, call: m.call}
	if in := p.termInstance(); in != nil {
		in.terms++ // not shut down idle meanwhile; the executor says how many it has
		c.Send(in.ref, spawnTerm{pt: pt})
		return
	}
	// No executor is connected: wait for one, starting one if none is on
	// its way.
	if !p.starting() {
		if p.live() >= p.ps.cfg.MaxInstances || p.holdSet {
			m.call.Fail(api.Errorf(api.CodeInvalidState, "executor pool %s has no executor to spawn a terminal (max_instances %d are busy stopping, or the pool is backing off a crash loop)",
				p.ps.h.name, p.ps.cfg.MaxInstances))
			return
		}
		p.start(c)
	}
	wait := p.ps.cfg.StartupTimeout.Duration + time.Second
	pt.cancel = c.After(wait, termOpenExpired{p: pt})
	p.termQueue = append(p.termQueue, pt)
}

// termInstance picks the connected executor with the fewest terminals,
// idle ones first.
func (p *pool) termInstance() *inst {
	var best *inst
	score := func(in *inst) int {
		s := in.terms * 2
		if in.state == instBusy {
			s++
		}
		return s
	}
	for _, in := range p.insts {
		if in.state != instIdle && in.state != instBusy || in.own != "" {
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
		in.terms++ // until the executor says how many it has
		c.Send(in.ref, spawnTerm{pt: pt})
	}
}

// termStart starts an executor for waiting terminal.open calls when none
// is on its way.
func (p *pool) termStart(c *actors.Context) {
	if len(p.termQueue) == 0 || p.stopping || p.holdSet || p.live() >= p.ps.cfg.MaxInstances || p.starting() {
		return
	}
	p.start(c)
}

func (p *pool) termOpenExpired(m termOpenExpired) {
	for i, pt := range p.termQueue {
		if pt == m.p {
			p.termQueue = append(p.termQueue[:i], p.termQueue[i+1:]...)
			reason := fmt.Sprintf("no executor of pool %s connected within %s", p.ps.h.name, p.ps.cfg.StartupTimeout.Duration+time.Second)
			p.ps.m.bus.Emit(TerminalOpenFailed{Pool: p.ps.h.name, Reason: reason})
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
		p.ps.m.bus.Emit(TerminalOpenFailed{Pool: p.ps.h.name, Reason: reason})
		pt.call.Fail(api.Errorf(code, "terminal.open: %s", reason))
	}
	p.termQueue = nil
}

// spawnTerminal sends spawn_terminal; the response carries the PTY.
func (e *execActor) spawnTerminal(c *actors.Context, pt *pendingTerm) {
	if e.conn == nil || e.exited != nil || e.state == instStopping {
		e.termFailed(pt, "executor %s is stopping", e.id)
		return
	}
	env := pt.spec.Env
	if env == nil {
		env = map[string]string{}
	}
	params := map[string]any{"session_token": api.RandomHex(32), "cwd": pt.spec.Cwd, "shell": pt.spec.Shell,
		"env": env, "use_tmux": false, "cols": pt.spec.Cols, "rows": pt.spec.Rows}
	e.call("spawn_terminal", params, func(res json.RawMessage, er *wire.RPCError) {
		e.terminalSpawned(c, pt, res, er)
	})
}

func (e *execActor) termFailed(pt *pendingTerm, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	e.ps.m.bus.Emit(TerminalOpenFailed{Pool: e.ps.h.name, Executor: e.id, Reason: reason})
	pt.call.Fail(api.Errorf(api.CodeInternal, "terminal.open: %s", reason))
	e.ps.m.sys.Send(e.ps.pool, instTerms{id: e.id, n: len(e.terms)})
}

func (e *execActor) terminalSpawned(c *actors.Context, pt *pendingTerm, res json.RawMessage, er *wire.RPCError) {
	if er != nil {
		e.termFailed(pt, "executor %s refused spawn_terminal: %s (code %d)", e.id, er.Message, er.Code)
		return
	}
	// The PTY came with the response's first byte, so it is queued by now.
	f, err := e.conn.takeFD()
	if err != nil {
		e.protocolError("spawn_terminal's response: " + err.Error())
		e.termFailed(pt, "executor %s answered spawn_terminal without passing the PTY: %v", e.id, err)
		return
	}
	if err := ptyfd.IsMaster(f); err != nil {
		f.Close()
		e.protocolError("spawn_terminal's response: " + err.Error())
		e.termFailed(pt, "executor %s passed a descriptor that is not a PTY master", e.id)
		return
	}
	var r struct {
		TerminalID string `json:"terminal_id"`
		PtyPid     int    `json:"pty_pid"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		f.Close()
		e.termFailed(pt, "spawn_terminal's result is not {terminal_id, pty_pid}: %v", err)
		return
	}
	if e.state == instStopping {
		f.Close()
		e.termFailed(pt, "executor %s is stopping", e.id)
		return
	}
	st := api.TerminalStatus{ID: e.ps.m.newTerminalID(), Pool: e.ps.h.name, Executor: e.id, ExecTermID: r.TerminalID,
		PtyPid: r.PtyPid, Cwd: pt.spec.Cwd, Shell: pt.spec.Shell, Cols: pt.spec.Cols, Rows: pt.spec.Rows,
		State: api.TerminalOpen, OpenedAt: time.Now().UTC()}
	t := newTerminal(e.ps.m, f, st, e.self)
	ref, err := c.Spawn(actors.Props{Kind: "terminal", ID: st.ID, OnPanic: actors.Stop,
		New: func() actors.Actor { return &termActor{t: t} }})
	if err != nil {
		f.Close()
		e.termFailed(pt, "starting the terminal's actor: %v", err)
		return
	}
	t.ref = ref
	e.terms[st.ID] = t
	e.ps.m.mu.Lock()
	e.ps.m.terms[st.ID] = t
	e.ps.m.mu.Unlock()
	e.ps.m.sys.Send(e.ps.pool, instTerms{id: e.id, n: len(e.terms)})
	e.ps.m.bus.Emit(TerminalOpened{TerminalID: st.ID, Pool: st.Pool, Executor: st.Executor, PtyPid: st.PtyPid,
		Cwd: st.Cwd, Cols: st.Cols, Rows: st.Rows})
	pt.call.Respond(map[string]any{"terminal": st})
}
