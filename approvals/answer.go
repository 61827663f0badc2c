package approvals

import (
	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

// spawnChildMsg asks the approvals supervisor to spawn p as its child.
type spawnChildMsg struct {
	p    actors.Props
	done func(actors.Ref, error)
}

// SpawnChild spawns p under the approvals supervisor (the Telegram bot):
// restarted by it like an approval's actor, stopped with it. done hears
// the child's ref, or why it was not spawned; it must not block.
func (m *Manager) SpawnChild(p actors.Props, done func(actors.Ref, error)) {
	m.sys.Send(m.root, spawnChildMsg{p: p, done: done})
}

// Answer resolves pending approval id with decision d as res says who
// (res.By and the rest; the door that is not a call: the Telegram bot).
// reply hears the terminal approval once it is committed, or why not
// (not found, already over: api.CodeInvalidState). A plan or a merge
// takes Allow and Deny (approve, reject), a plan Reply (iterate); a tool
// all four. AlwaysAllow applies the request's first permission
// suggestion.
func (m *Manager) Answer(id string, d api.Decision, res api.Resolution, reply func(api.Approval, error)) {
	res.Decision = d
	check := func(a api.Approval) error {
		switch {
		case d == api.DecisionReply && a.Kind == api.KindMerge:
			return api.Errorf(api.CodeInvalidState, "approval %s is a loop's merge: there is no one to reply to", a.ID)
		case d == api.DecisionAlwaysAllow && a.Kind != api.KindTool:
			return api.Errorf(api.CodeInvalidState, "approval %s is a %s, not a tool call: always allow takes tool calls", a.ID, a.Kind)
		}
		return nil
	}
	e := m.lookupPending(id)
	if e == nil {
		a, ok, err := m.Get(id)
		switch {
		case err != nil:
			reply(api.Approval{}, err)
		case !ok:
			reply(api.Approval{}, api.Errorf(api.CodeNotFound, "approval %s not found", id))
		case a.State == api.ApprovalPending:
			reply(api.Approval{}, api.Errorf(api.CodeInvalidState, "approval %s is pending but not held by this daemon", a.ID))
		default:
			reply(api.Approval{}, alreadyErr(a.ID, a.State))
		}
		return
	}
	if d == api.DecisionAlwaysAllow {
		if a := e.snapshot(); len(a.PermissionSuggestions) > 0 {
			i := 0
			res.SuggestionIndex, res.Suggestion = &i, a.PermissionSuggestions[0]
		}
	}
	e.send(resolveMsg{state: d.State(), res: res, check: check, reply: reply})
}
