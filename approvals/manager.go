package approvals

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// MaxPending bounds the approvals pending at once; past it Ask refuses
// (a runaway requester must not eat the daemon's memory).
const MaxPending = 100_000

// finishedKept is how many finished approvals stay in memory for
// approval.get and approval.list without the store.
const finishedKept = 1024

// Options configures a Manager.
type Options struct {
	Config Config
	Bus    *eventlog.Bus
	System *actors.System
	Logger zerolog.Logger
	// Log is the durable record of approvals (the daemon's state store);
	// nil keeps them in memory only.
	Log Log
	// Reaper is what notify_command is spawned with.
	Reaper *proc.Reaper
	// OnPending is called once an approval becomes pending (the daemon
	// hands it to the notifier). It must not block.
	OnPending func(api.Approval)
	// OnEnded is called once a pending approval ends (answered, timed out
	// or cancelled), with its final record, before its events: the
	// daemon's metrics time its resolution. It must not block.
	OnEnded func(api.Approval)
}

// RecoverStats is what Recover did.
type RecoverStats struct {
	Cancelled int // bound to a requester that is gone: cancelled daemon_restarted
	Pending   int // asked again (until their deadline)
	TimedOut  int // their deadline had passed
}

// Manager is the approvals supervisor and the API the front-ends call.
// Every method is non-blocking (but Recover and Shutdown) and safe from
// any goroutine.
type Manager struct {
	opts  Options
	cfg   Config
	bus   *eventlog.Bus
	sys   *actors.System
	log   zerolog.Logger
	store Log
	root  actors.Ref
	idPre string
	seq   atomic.Uint64
	rseq  atomic.Uint64
	rules []*rule // config rules, in order

	stopped atomic.Bool // the approval actors are stopped (Shutdown)
	// planID maps a plan loop's id to its approval (SetPlanID).
	planID atomic.Pointer[func(string) (string, bool)]

	mu       sync.Mutex
	stopping bool
	pending  map[string]*entry // by id
	byReq    map[string]*entry // pending, by request_id
	finished map[string]api.Approval
	finOrder []string
	recorded []*rule // recorded rules, oldest first
}

// supervisorActor is the parent of the approval actors: it spawns one per
// pending approval (Ask hands it the entry).
type supervisorActor struct {
	m        *Manager
	stopping bool
}

type spawnMsg struct{ e *entry }

func (s *supervisorActor) Receive(c *actors.Context) {
	switch msg := c.Message().(type) {
	case actors.Stopping:
		s.stopping = true
	case spawnChildMsg:
		if s.stopping {
			msg.done(actors.Ref{}, api.Errorf(api.CodeShuttingDown, "the daemon is stopping: %s not started", msg.p.Kind))
			return
		}
		msg.done(c.Spawn(msg.p))
	case spawnMsg:
		e := msg.e
		if s.stopping {
			// A child spawned now would never be stopped: the approval
			// stays pending in the store for the next start.
			e.refuseQueued()
			return
		}
		// A panic restarts the actor: the approval's state lives in its
		// entry, so the fresh one goes on where the old one was (its
		// deadline re-armed, nobody told twice); past the restart
		// intensity it is stopped, and the approval stays pending until
		// the daemon restarts (actor.panicked says so).
		ref, err := c.Spawn(actors.Props{Kind: "approval", ID: e.id, OnPanic: actors.Restart, MaxRestarts: 3, Within: time.Minute,
			New: func() actors.Actor { return &approvalActor{e: e} }})
		if err != nil {
			s.m.log.Error().Err(err).Str("approval", e.id).Msg("spawning an approval actor")
			return
		}
		e.setRef(s.m.sys, ref)
	}
}

// Start starts the approvals supervisor. The recorded rules are read from
// the Log now.
func Start(opts Options) (*Manager, error) {
	if opts.Config.Timeout.Duration <= 0 {
		opts.Config.Timeout = DefaultConfig().Timeout
	}
	crs, err := configRules(opts.Config.Rules)
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, cfg: opts.Config, bus: opts.Bus, sys: opts.System,
		log: opts.Logger.With().Str("component", "approvals").Logger(), store: opts.Log,
		idPre: api.RandomHex(3) + "-", rules: crs,
		pending: map[string]*entry{}, byReq: map[string]*entry{}, finished: map[string]api.Approval{}}
	if m.store != nil {
		rs, err := m.store.Rules()
		if err != nil {
			return nil, fmt.Errorf("reading the recorded approval rules: %w", err)
		}
		for _, r := range rs {
			m.recorded = append(m.recorded, recordedRule(r))
		}
	}
	m.root, err = opts.System.Spawn(actors.Props{Kind: "approvals", OnPanic: actors.Restart,
		New: func() actors.Actor { return &supervisorActor{m: m} }})
	if err != nil {
		return nil, fmt.Errorf("starting the approvals supervisor: %w", err)
	}
	return m, nil
}

func (m *Manager) newID() string { return "a-" + m.idPre + fmt.Sprint(m.seq.Add(1)) }

func (m *Manager) newRuleID() string { return "r-" + m.idPre + fmt.Sprint(m.rseq.Add(1)) }

// Ask puts req to a person, or answers it by a rule (see the contract in
// the package doc of Request). answer is called exactly once, with the
// approval in its terminal state, on any goroutine; it must not block.
func (m *Manager) Ask(req Request, answer func(api.Approval)) (Pending, error) {
	return m.ask(req, answer, nil)
}

// ask is Ask; recorded (if not nil) is called once the approval's first
// record is committed (approval.request answers then).
func (m *Manager) ask(req Request, answer func(api.Approval), recorded func(api.Approval, error)) (Pending, error) {
	now := time.Now().UTC()
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = m.cfg.Timeout.Duration
	}
	a := api.Approval{ID: m.newID(), State: api.ApprovalPending, Source: req.Source, Kind: req.Kind,
		RequestID: req.RequestID, ToolName: req.ToolName, ToolInput: req.ToolInput, Cwd: req.Cwd,
		SessionID: req.SessionID, TaskID: req.TaskID, PermissionSuggestions: req.PermissionSuggestions,
		AssistantContext: req.AssistantContext, Content: req.Content, Specs: req.Specs, LoopID: req.LoopID,
		CreatedAt: now, Deadline: now.Add(timeout)}
	if a.Kind == "" {
		a.Kind = api.KindTool
	}
	if req.Unheard != "" {
		return m.cancelUnheard(a, req.Unheard, answer, recorded)
	}
	if r := m.matchRule(&req); r != nil {
		return m.autoResolve(a, r, answer, recorded)
	}
	e := &entry{m: m, id: a.ID, a: a, bound: req.Bound, answer: answer, requester: req.Requester}
	m.mu.Lock()
	switch {
	case m.stopping:
		m.mu.Unlock()
		return nil, api.Errorf(api.CodeShuttingDown, "the daemon is stopping: approval not asked")
	case len(m.pending) >= MaxPending:
		m.mu.Unlock()
		return nil, api.Errorf(api.CodeQueueFull, "%d approvals are pending already: approval not asked", MaxPending)
	case req.RequestID != "" && m.byReq[req.RequestID] != nil:
		m.mu.Unlock()
		return nil, api.Errorf(api.CodeInvalidState, "request_id %s is already pending as approval %s",
			req.RequestID, m.byReq[req.RequestID].id)
	}
	m.pending[a.ID] = e
	if req.RequestID != "" {
		m.byReq[req.RequestID] = e
	}
	m.mu.Unlock()
	if err := m.recordRequested(a, func(err error) {
		if recorded != nil {
			recorded(a, err)
		}
		if err != nil {
			// Not recorded: the approval cannot be trusted to outlive the
			// daemon; its requester hears a cancellation.
			e.Cancel("store_unavailable")
		}
	}); err != nil {
		m.forgetPending(e)
		return nil, err
	}
	m.sys.Send(m.root, spawnMsg{e: e})
	return e, nil
}

// recordRequested queues a's first record. A write refused at once (a
// full queue, a closed store) is the error returned (and done is not
// called); a later failure is done's.
func (m *Manager) recordRequested(a api.Approval, done func(error)) error {
	if m.store == nil {
		done(nil)
		return nil
	}
	var (
		mu        sync.Mutex
		returned  bool
		immediate error
	)
	m.store.RecordRequested(a, func(err error) {
		if err != nil {
			m.writeFailed(a.ID, "record approval "+a.ID+" requested", err)
		}
		mu.Lock()
		if !returned {
			immediate = err
			if err != nil {
				mu.Unlock()
				return
			}
		}
		mu.Unlock()
		done(err)
	})
	mu.Lock()
	returned = true
	err := immediate
	mu.Unlock()
	if err != nil {
		return &api.Error{Code: api.CodeStoreUnavailable,
			Message: fmt.Sprintf("approval not asked: it could not be recorded in the state store: %v", err)}
	}
	return nil
}

func (m *Manager) writeFailed(id, what string, err error) {
	m.bus.Emit(ApprovalWriteFailed{ID: id, What: what, Error: err.Error()})
	m.log.Error().Err(err).Str("what", what).Msg("state store write failed")
}

// matchRule is the first rule that answers req: config rules, then
// recorded ones. Plans and merges are never answered by a rule (rules are
// of tools).
func (m *Manager) matchRule(req *Request) *rule {
	if req.Kind == api.KindPlan || req.Kind == api.KindMerge {
		return nil
	}
	p := newProbe(req)
	for _, r := range m.rules {
		if r.matches(p) {
			return r
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.recorded {
		if r.matches(p) {
			return r
		}
	}
	return nil
}

// autoResolve answers a at once by rule r and records it finished.
func (m *Manager) autoResolve(a api.Approval, r *rule, answer func(api.Approval), recorded func(api.Approval, error)) (Pending, error) {
	d := api.DecisionAllow
	if r.Decision == "deny" {
		d = api.DecisionDeny
	}
	a.State = d.State()
	a.Resolution = &api.Resolution{Decision: d, Message: r.Message, By: api.ByRule, RuleID: r.ID, At: a.CreatedAt}
	return m.finishAtOnce(a, ApprovalAutoResolved{ID: a.ID, Rule: r.ID, Decision: string(d), ToolName: eventlog.Ident(a.ToolName)},
		answer, recorded)
}

// cancelUnheard records a cancelled (reason) at once: its requester could
// not act on an answer (Request.Unheard).
func (m *Manager) cancelUnheard(a api.Approval, reason string, answer func(api.Approval), recorded func(api.Approval, error)) (Pending, error) {
	a.State = api.ApprovalCancelled
	a.Resolution = &api.Resolution{By: api.ByDaemon, Reason: reason, At: a.CreatedAt}
	return m.finishAtOnce(a, ApprovalCancelled{ID: a.ID, Reason: reason}, answer, recorded)
}

// finishAtOnce records a, already finished (its state and resolution
// set), tells event, and answers its requester: an approval no person is
// asked about.
func (m *Manager) finishAtOnce(a api.Approval, event eventlog.Event, answer func(api.Approval), recorded func(api.Approval, error)) (Pending, error) {
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		return nil, api.Errorf(api.CodeShuttingDown, "the daemon is stopping: approval not asked")
	}
	m.mu.Unlock()
	// Kept before it is recorded: whoever hears of it (approval.request's
	// answer) finds it.
	m.keepFinished(a)
	if err := m.recordRequested(a, func(err error) {
		if recorded != nil {
			recorded(a, err)
		}
	}); err != nil {
		return nil, err
	}
	m.bus.Emit(event)
	if answer != nil {
		answer(a)
	}
	return overAlready(a.ID), nil
}

// overAlready is the Pending of an approval a rule answered (or one
// cancelled at once).
type overAlready string

func (d overAlready) ID() string  { return string(d) }
func (overAlready) Cancel(string) {}

func (m *Manager) keepFinished(a api.Approval) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.finished[a.ID]; !ok {
		m.finOrder = append(m.finOrder, a.ID)
	}
	m.finished[a.ID] = a
	for len(m.finOrder) > finishedKept {
		delete(m.finished, m.finOrder[0])
		m.finOrder = m.finOrder[1:]
	}
}

func (m *Manager) forgetPending(e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending[e.id] == e {
		delete(m.pending, e.id)
	}
	if rid := e.a.RequestID; rid != "" && m.byReq[rid] == e {
		delete(m.byReq, rid)
	}
}

// lookupPending finds a pending approval by id or request_id.
func (m *Manager) lookupPending(id string) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.pending[id]; e != nil {
		return e
	}
	return m.byReq[id]
}

// Await calls answer once with approval id in its terminal state: when it
// ends, or at once if it has. A requester that outlived a restart (a loop
// waiting for its plan's approval) hears the approval it asked before.
// An approval that is not known is CodeNotFound. stop forgets answer.
func (m *Manager) Await(id string, answer func(api.Approval)) (stop func(), err error) {
	if e := m.lookupPending(id); e != nil {
		return e.addWaiter(answer), nil
	}
	a, ok, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "approval %s not found", id)
	}
	if !a.State.Terminal() {
		return nil, api.Errorf(api.CodeInvalidState, "approval %s is pending but not held by this daemon", id)
	}
	answer(a)
	return func() {}, nil
}

// Get finds an approval by id or request_id: pending, finished in memory,
// or in the store.
func (m *Manager) Get(id string) (api.Approval, bool, error) {
	if e := m.lookupPending(id); e != nil {
		return e.snapshot(), true, nil
	}
	m.mu.Lock()
	a, ok := m.finished[id]
	if !ok {
		for _, f := range m.finished {
			if f.RequestID != "" && f.RequestID == id {
				a, ok = f, true
				break
			}
		}
	}
	m.mu.Unlock()
	if ok {
		return a, true, nil
	}
	if m.store == nil {
		return api.Approval{}, false, nil
	}
	a, ok, err := m.store.Get(id)
	if err != nil {
		return api.Approval{}, false, fmt.Errorf("reading approval %s: %w", id, err)
	}
	return a, ok, nil
}

// PendingApprovals is every pending approval, oldest first.
func (m *Manager) PendingApprovals() []api.Approval {
	m.mu.Lock()
	es := make([]*entry, 0, len(m.pending))
	for _, e := range m.pending {
		es = append(es, e)
	}
	m.mu.Unlock()
	out := make([]api.Approval, 0, len(es))
	for _, e := range es {
		if a := e.snapshot(); a.State == api.ApprovalPending {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Rules is the config rules, in order, then the recorded ones, oldest
// first.
func (m *Manager) Rules() []api.ApprovalRule {
	out := make([]api.ApprovalRule, 0, len(m.rules))
	for _, r := range m.rules {
		out = append(out, r.ApprovalRule)
	}
	m.mu.Lock()
	for _, r := range m.recorded {
		out = append(out, r.ApprovalRule)
	}
	m.mu.Unlock()
	return out
}

// DeleteRule deletes a recorded rule; then is called once it is deleted
// from the store (or with why not).
func (m *Manager) DeleteRule(id string, then func(error)) {
	for _, r := range m.rules {
		if r.ID == id {
			then(api.Errorf(api.CodeInvalidState, "rule %s lives in the config file ([[approvals.rules]] #%s): edit the file to remove it",
				id, id[len("config-"):]))
			return
		}
	}
	m.mu.Lock()
	found := false
	for i, r := range m.recorded {
		if r.ID == id {
			m.recorded = append(m.recorded[:i:i], m.recorded[i+1:]...)
			found = true
			break
		}
	}
	m.mu.Unlock()
	if !found {
		then(api.Errorf(api.CodeNotFound, "rule %s not found", id))
		return
	}
	// Out of memory first: it answers nothing from now on, whatever the
	// store says. A deletion the store cannot record fails the call: the
	// rule would be back after a restart, and whoever deleted it must know.
	fin := func(err error) {
		m.bus.Emit(ApprovalRuleDeleted{ID: id})
		if err != nil {
			m.writeFailed("", "delete approval rule "+id, err)
			then(&api.Error{Code: api.CodeStoreUnavailable, Message: fmt.Sprintf(
				"rule %s no longer applies, but its deletion could not be recorded in the state store (it would be back after a restart): %v", id, err)})
			return
		}
		then(nil)
	}
	if m.store == nil {
		fin(nil)
		return
	}
	m.store.DeleteRule(id, fin)
}

// addRules makes recorded rules take effect.
func (m *Manager) addRules(rs []api.ApprovalRule) {
	if len(rs) == 0 {
		return
	}
	m.mu.Lock()
	for _, r := range rs {
		m.recorded = append(m.recorded, recordedRule(r))
	}
	m.mu.Unlock()
	for _, r := range rs {
		cr := recordedRule(r)
		m.bus.Emit(ApprovalRuleAdded{ID: r.ID, Tool: r.Tool, Content: r.Content, Cwd: r.Cwd, SessionID: r.SessionID,
			Decision: r.Decision, FromApproval: r.FromApproval, MatchesNothing: cr.nothing})
	}
}

// Recover reads the approvals a previous daemon left pending: those bound
// to a requester (reachout, executor) end cancelled daemon_restarted; the
// others are pending again until their deadline (past it: timed out now).
func (m *Manager) Recover(ctx context.Context) (RecoverStats, error) {
	var st RecoverStats
	if m.store == nil {
		return st, nil
	}
	as, err := m.store.Pending()
	if err != nil {
		return st, fmt.Errorf("reading the pending approvals: %w", err)
	}
	var wg sync.WaitGroup
	for _, a := range as {
		if a.State != api.ApprovalPending {
			continue
		}
		if a.Source == api.SourceReachout || a.Source == api.SourceExecutor {
			a.State = api.ApprovalCancelled
			a.Resolution = &api.Resolution{By: api.ByDaemon, Reason: api.CancelDaemonRestart, At: time.Now().UTC()}
			wg.Add(1)
			id := a.ID
			fin := a
			m.store.RecordResolved(fin, nil, func(err error) {
				defer wg.Done()
				if err != nil {
					m.writeFailed(id, "record approval "+id+" cancelled", err)
				}
				m.keepFinished(fin)
				m.bus.Emit(ApprovalCancelled{ID: id, Reason: api.CancelDaemonRestart})
				m.bus.Emit(ApprovalRecovered{ID: id, Action: "cancelled"})
			})
			st.Cancelled++
			continue
		}
		e := &entry{m: m, id: a.ID, a: a, recovered: true}
		m.mu.Lock()
		m.pending[a.ID] = e
		if a.RequestID != "" {
			m.byReq[a.RequestID] = e
		}
		m.mu.Unlock()
		if time.Now().After(a.Deadline) {
			st.TimedOut++
		} else {
			st.Pending++
		}
		m.bus.Emit(ApprovalRecovered{ID: a.ID, Action: "pending"})
		m.sys.Send(m.root, spawnMsg{e: e})
	}
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return st, nil
	case <-ctx.Done():
		return st, fmt.Errorf("recording the approvals a previous daemon left: %w", ctx.Err())
	}
}

// Shutdown answers every pending approval bound to a requester (cancelled
// daemon_stopping: its requester hears Timeout) and waits until those
// answers are out; the others stay pending in the store for the next
// start. Then the actors stop.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	var bound []*entry
	for _, e := range m.pending {
		if e.bound {
			bound = append(bound, e)
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range bound {
		wg.Add(1)
		e.onOver(func() { wg.Done() })
		e.cancelBy(api.CancelDaemonStopped, api.ByDaemon)
	}
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = fmt.Errorf("answering the pending approvals before stopping: %w", ctx.Err())
	}
	m.stopped.Store(true)
	if serr := m.sys.Stop(ctx, m.root); serr != nil {
		err = errors.Join(err, fmt.Errorf("stopping the approvals supervisor: %w", serr))
	}
	return err
}
