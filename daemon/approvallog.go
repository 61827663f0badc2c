package daemon

import (
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/state"
)

// approvalLog is approvals.Log on the state store: state.Approvals, its
// writes queued with Store.Enqueue so that no actor waits for a commit.
type approvalLog struct{ st *state.Store }

var _ approvals.Log = approvalLog{}

// enqueue queues w; done hears of a write that could not be queued too.
func (l approvalLog) enqueue(w state.Write, done func(error)) {
	if err := l.st.Enqueue(w, done); err != nil && done != nil {
		done(err)
	}
}

func (l approvalLog) RecordRequested(a api.Approval, done func(error)) {
	l.enqueue(state.ApprovalRequested(a), done)
}

func (l approvalLog) RecordResolved(a api.Approval, rules []api.ApprovalRule, done func(error)) {
	l.enqueue(state.ApprovalResolved(a, rules...), done)
}

func (l approvalLog) DeleteRule(id string, done func(error)) { l.enqueue(state.RuleDeleted(id), done) }

func (l approvalLog) Pending() ([]api.Approval, error) { return l.st.Approvals().Pending() }

func (l approvalLog) Get(id string) (api.Approval, bool, error) { return l.st.Approvals().Get(id) }

func (l approvalLog) List(q approvals.Query) ([]api.Approval, error) {
	return l.st.Approvals().List(state.ApprovalQuery{State: q.State, Source: q.Source, Limit: q.Limit})
}

func (l approvalLog) Rules() ([]api.ApprovalRule, error) { return l.st.Approvals().Rules() }
