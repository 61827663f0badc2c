package approvals

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// entry is one approval while it is pending (and until its resolution is
// published): what its actor, Ask's caller and the methods share. Its
// actor decides: resolutions reach it as messages, the first one it sees
// wins.
type entry struct {
	m         *Manager
	id        string
	bound     bool
	recovered bool
	answer    func(api.Approval) // nil for a recovered approval: nobody asked this daemon
	requester actors.Ref         // linked to, when not zero (Request.Requester)

	mu      sync.Mutex
	a       api.Approval // pending until over
	ref     actors.Ref
	queued  []any // sent before the actor was spawned
	claimed api.ApprovalState
	over    bool
	waiters map[int]func(api.Approval)
	nextW   int
	overFns []func()
}

// Messages of an approval actor.
type (
	// resolveMsg resolves the approval (the first one wins). reply, if
	// not nil, hears the terminal approval once it is committed, or why
	// not.
	resolveMsg struct {
		state api.ApprovalState
		res   api.Resolution
		check func(api.Approval) error // refuses it for this approval (plan.* on a tool)
		reply func(api.Approval, error)
	}
	timeoutMsg   struct{}
	committedMsg struct{}
)

func (e *entry) ID() string { return e.id }

// Cancel ends the approval cancelled (reason) by its requester.
func (e *entry) Cancel(reason string) { e.cancelBy(reason, api.ByRequest) }

func (e *entry) cancelBy(reason, by string) {
	e.send(resolveMsg{state: api.ApprovalCancelled, res: api.Resolution{By: by, Reason: reason}})
}

func (e *entry) snapshot() api.Approval {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.a
}

func (e *entry) setRef(sys *actors.System, r actors.Ref) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ref = r
	for _, q := range e.queued {
		sys.Send(r, q)
	}
	e.queued = nil
}

// refuseQueued answers the messages sent to an actor that will not start
// (the daemon is stopping).
func (e *entry) refuseQueued() {
	e.mu.Lock()
	q := e.queued
	e.queued = nil
	e.mu.Unlock()
	for _, msg := range q {
		if r, ok := msg.(resolveMsg); ok && r.reply != nil {
			r.reply(api.Approval{}, api.Errorf(api.CodeShuttingDown, "the daemon is stopping: approval %s stays pending for its next start", e.id))
		}
	}
}

// send hands msg to the actor; one for an approval that is over is
// answered here (the actor is gone or going).
func (e *entry) send(msg resolveMsg) {
	e.mu.Lock()
	if e.over {
		st := e.a.State
		e.mu.Unlock()
		if msg.reply != nil {
			msg.reply(api.Approval{}, alreadyErr(e.id, st))
		}
		return
	}
	if e.m.stopped.Load() {
		e.mu.Unlock()
		if msg.reply != nil {
			msg.reply(api.Approval{}, api.Errorf(api.CodeShuttingDown, "the daemon is stopping: approval %s stays pending for its next start", e.id))
		}
		return
	}
	if e.ref.IsZero() {
		e.queued = append(e.queued, msg)
	} else {
		e.m.sys.Send(e.ref, msg)
	}
	e.mu.Unlock()
}

func alreadyErr(id string, st api.ApprovalState) error {
	return api.Errorf(api.CodeInvalidState, "approval %s is already %s", id, st)
}

// addWaiter calls f with the terminal approval once it is published (at
// once if it is); the func returned stops waiting.
func (e *entry) addWaiter(f func(api.Approval)) (stop func()) {
	e.mu.Lock()
	if e.over {
		a := e.a
		e.mu.Unlock()
		f(a)
		return func() {}
	}
	if e.waiters == nil {
		e.waiters = map[int]func(api.Approval){}
	}
	n := e.nextW
	e.nextW++
	e.waiters[n] = f
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		delete(e.waiters, n)
		e.mu.Unlock()
	}
}

// onOver runs f once the approval's resolution is published.
func (e *entry) onOver(f func()) {
	e.mu.Lock()
	if e.over {
		e.mu.Unlock()
		f()
		return
	}
	e.overFns = append(e.overFns, f)
	e.mu.Unlock()
}

// approvalActor is one pending approval: its deadline and its resolution.
type approvalActor struct {
	e           *entry
	cancelTimer func()
}

func (a *approvalActor) Receive(c *actors.Context) {
	e, m := a.e, a.e.m
	switch msg := c.Message().(type) {
	case actors.Started:
		snap := e.snapshot()
		c.SetState("pending")
		a.cancelTimer = c.After(max(0, time.Until(snap.Deadline)), timeoutMsg{})
		if !e.requester.IsZero() && c.Restarts() == 0 {
			// Linked: a watch outlives this actor's restarts.
			c.Watch(e.requester)
			c.Send(e.requester, actors.Link{Ref: c.Self()})
		}
		if e.recovered || c.Restarts() > 0 {
			// Recovered: announced by the daemon that asked. Restarted
			// after a panic: announced by the first incarnation.
			return
		}
		m.bus.Emit(ApprovalRequested{ID: snap.ID, Source: snap.Source, ApprovalKind: snap.Kind, ToolName: eventlog.Ident(snap.ToolName),
			Cwd: snap.Cwd, SessionID: snap.SessionID, RequestID: snap.RequestID, Deadline: snap.Deadline})
		if snap.Kind == api.KindPlan {
			specs := specsOrEmpty(snap.Specs)
			m.bus.Emit(PlanAwaitingApproval{ID: planEventID(snap), ApprovalID: snap.ID, Content: snap.Content, Specs: specs,
				ContentBytes: len(snap.Content), SpecsCount: specsCount(specs)})
		}
		if m.opts.OnPending != nil {
			m.opts.OnPending(snap)
		}
	case timeoutMsg:
		a.resolve(c, resolveMsg{state: api.ApprovalTimedOut,
			res: api.Resolution{Decision: api.DecisionTimeout, By: api.ByTimeout}})
	case resolveMsg:
		a.resolve(c, msg)
	case actors.Terminated:
		if !e.requester.IsZero() && msg.Who.Equal(e.requester) {
			// The requester's connection actor stopped (gone, panicked).
			a.resolve(c, resolveMsg{state: api.ApprovalCancelled,
				res: api.Resolution{By: api.ByRequest, Reason: api.CancelRequesterGone}})
		}
	case committedMsg:
		c.StopSelf()
	}
}

// resolve claims the approval's one resolution, then commits it; the
// commit's callback publishes it.
func (a *approvalActor) resolve(c *actors.Context, msg resolveMsg) {
	e, m := a.e, a.e.m
	e.mu.Lock()
	claimed, snap := e.claimed, e.a
	e.mu.Unlock()
	if claimed != "" {
		if msg.reply != nil {
			msg.reply(api.Approval{}, alreadyErr(e.id, claimed))
		}
		return
	}
	if msg.check != nil {
		if err := msg.check(snap); err != nil {
			msg.reply(api.Approval{}, err)
			return
		}
	}
	if a.cancelTimer != nil {
		a.cancelTimer()
	}
	final := snap
	res := msg.res
	res.At = time.Now().UTC()
	var rules []api.ApprovalRule
	if res.Decision == api.DecisionAlwaysAllow && len(res.Suggestion) > 0 && final.Kind == api.KindTool {
		rules = suggestionRules(final, res.Suggestion, m.newRuleID, res.At)
		if len(rules) > 0 {
			res.RuleID = rules[0].ID
		}
	}
	final.State, final.Resolution = msg.state, &res
	e.mu.Lock()
	e.claimed = msg.state
	e.mu.Unlock()
	c.SetState(string(msg.state))
	self := c.Self()
	publish := func(err error) {
		if err != nil {
			m.writeFailed(e.id, "record approval "+e.id+" "+string(final.State), err)
		}
		e.publish(final, rules, msg.reply)
		m.sys.Send(self, committedMsg{})
	}
	if m.store == nil {
		publish(nil)
		return
	}
	m.store.RecordResolved(final, rules, publish)
}

// publish tells everyone the approval is over: its rules take effect, then
// the events, the requester, the resolver, the waiters.
func (e *entry) publish(final api.Approval, rules []api.ApprovalRule, reply func(api.Approval, error)) {
	m := e.m
	m.addRules(rules)
	m.keepFinished(final)
	e.mu.Lock()
	e.a, e.over = final, true
	waiters, overFns := e.waiters, e.overFns
	e.waiters, e.overFns = nil, nil
	e.mu.Unlock()
	m.forgetPending(e)
	if m.opts.OnEnded != nil {
		m.opts.OnEnded(final)
	}
	r := final.Resolution
	switch final.State {
	case api.ApprovalTimedOut:
		m.bus.Emit(ApprovalTimedOut{ID: final.ID})
	case api.ApprovalCancelled:
		ev := ApprovalCancelled{ID: final.ID, Reason: r.Reason}
		if r.By == api.ByControl || r.By == api.ByCLI || r.By == api.ByUI {
			ev.By, ev.BySession, ev.ByPid = r.By, r.BySession, r.ByPid
		}
		m.bus.Emit(ev)
	default:
		m.bus.Emit(ApprovalResolved{ID: final.ID, Decision: string(r.Decision), By: r.By, BySession: r.BySession,
			ByPid: r.ByPid, RuleID: r.RuleID, SuggestionIndex: r.SuggestionIndex})
		if final.Kind == api.KindPlan {
			switch final.State {
			case api.ApprovalAllowed, api.ApprovalAlwaysAllowed:
				m.bus.Emit(PlanApproved{ID: planEventID(final), ApprovalID: final.ID, SpecsSpawned: specsCount(final.Specs), By: r.By,
					BySession: r.BySession, ByPid: r.ByPid})
			case api.ApprovalDenied:
				m.bus.Emit(PlanRejected{ID: planEventID(final), ApprovalID: final.ID, Reason: r.Message, By: r.By, BySession: r.BySession, ByPid: r.ByPid})
			case api.ApprovalReplied:
				m.bus.Emit(PlanIterated{ID: planEventID(final), ApprovalID: final.ID, Feedback: r.UserMessage, By: r.By, BySession: r.BySession,
					ByPid: r.ByPid})
			}
		}
	}
	if e.answer != nil {
		e.answer(final)
	}
	if reply != nil {
		reply(final, nil)
	}
	for _, w := range waiters {
		w(final)
	}
	for _, f := range overFns {
		f()
	}
}

// specsOrEmpty is a plan's specs, [] when it has none.
func specsOrEmpty(s json.RawMessage) json.RawMessage {
	if len(s) == 0 || string(s) == "null" {
		return json.RawMessage("[]")
	}
	return s
}

// specsCount is the number of a plan's specs (0 if they are not an array).
func specsCount(s json.RawMessage) int {
	var xs []json.RawMessage
	if json.Unmarshal(s, &xs) != nil {
		return 0
	}
	return len(xs)
}

// planEventID is the id a plan.* event names: the plan's loop (Loopr's
// client knows its plans by their loops), or the approval itself for a
// plan no loop asked (approval.request kind plan).
func planEventID(a api.Approval) string {
	if a.LoopID != "" {
		return a.LoopID
	}
	return a.ID
}
