package approvals

import "github.com/orchestrd/orchestrd/api"

// Log is the durable record of approvals: what approvals needs of the
// state store (the daemon hands it state.Approvals behind this interface,
// daemon/approvallog.go).
//
// The Record methods queue a write and return at once; done is called
// exactly once, with nil once the write is committed or with the error
// that ended it, on any goroutine (the store's writer): it must return
// quickly and must not call the Log. Writes queued from one goroutine are
// committed in that order.
type Log interface {
	// RecordRequested inserts a new approval (pending, or already
	// resolved when a rule answered it at once).
	RecordRequested(a api.Approval, done func(error))
	// RecordResolved writes a pending approval's terminal state and
	// resolution and, in the same commit, the rules an AlwaysAllow
	// recorded (none, one, or several: a Claude Code addRules suggestion
	// carries a list of rules, one row each).
	RecordResolved(a api.Approval, rules []api.ApprovalRule, done func(error))
	// DeleteRule deletes a recorded rule; done gets ErrNotFound (state's)
	// wrapped when there is none.
	DeleteRule(id string, done func(error))
	// Pending reads the approvals a previous daemon left pending, oldest
	// first.
	Pending() ([]api.Approval, error)
	// Get reads one approval by id (or by the requester's request_id).
	Get(id string) (api.Approval, bool, error)
	// List reads approvals newest first.
	List(q Query) ([]api.Approval, error)
	// Rules reads the recorded rules, oldest first.
	Rules() ([]api.ApprovalRule, error)
}

// Query selects approvals for Log.List; empty fields match everything.
type Query struct {
	State  string // an api.ApprovalState
	Source string
	Limit  int // 0: all
}
