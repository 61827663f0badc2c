package state

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Approvals is the approvals and approval_rules tables' typed interface.
// Its write methods return once the write is committed; the
// ApprovalRequested, ApprovalResolved and RuleDeleted constructors make the
// same writes for Store.Enqueue (an actor that must not block) and
// Store.Do.
//
// JSON fields (tool_input, permission_suggestions, specs, a resolution's
// suggestion, a rule's suggestion) are kept as the text they came as and
// read back byte for byte.
type Approvals struct{ s *Store }

// Approvals returns the approvals tables' interface.
func (s *Store) Approvals() Approvals { return Approvals{s} }

// Request records a new approval: pending, or already terminal (a rule
// answered it at once) with its resolution.
func (a Approvals) Request(ctx context.Context, ap api.Approval) error {
	return a.s.Do(ctx, ApprovalRequested(ap))
}

// Resolve records a pending approval's terminal state and resolution and,
// in the same transaction, the rules its AlwaysAllow recorded. An approval
// resolves once: a second Resolve fails with ErrFinished (naming the state
// it is in) and changes nothing, its rules included.
func (a Approvals) Resolve(ctx context.Context, ap api.Approval, rules ...api.ApprovalRule) error {
	return a.s.Do(ctx, ApprovalResolved(ap, rules...))
}

// DeleteRule deletes a recorded rule; ErrNotFound when there is none.
func (a Approvals) DeleteRule(ctx context.Context, id string) error {
	return a.s.Do(ctx, RuleDeleted(id))
}

// jsonText checks that a JSON field holds one JSON value and returns it as
// the column's text (NULL when empty).
func jsonText(field string, raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("%s is not valid JSON", field)
	}
	return string(raw), nil
}

// jsonArray writes raw values as one JSON array, each element's bytes as
// they are (but for white space around it, which JSON does not keep).
func jsonArray(field string, vs []json.RawMessage) (any, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, v := range vs {
		v = bytes.TrimSpace(v)
		if len(v) == 0 || !json.Valid(v) {
			return nil, fmt.Errorf("%s[%d] is not valid JSON", field, i)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(v)
	}
	b.WriteByte(']')
	return b.String(), nil
}

// ApprovalRequested is the write Approvals.Request makes.
func ApprovalRequested(a api.Approval) Write { return &approvalRequested{a: a} }

type approvalRequested struct {
	a    api.Approval
	args []any
}

func (w *approvalRequested) what() string { return "record approval " + w.a.ID + " requested" }

func (w *approvalRequested) prepare() error {
	a := &w.a
	switch {
	case a.ID == "":
		return errors.New("the approval has no id")
	case a.Source == "":
		return errors.New("the approval has no source")
	case a.Kind == "":
		return errors.New("the approval has no kind")
	case a.State == "":
		a.State = api.ApprovalPending
	}
	if !api.ValidApprovalState(string(a.State)) {
		return fmt.Errorf("unknown state %q", a.State)
	}
	if a.State.Terminal() != (a.Resolution != nil) {
		if a.Resolution == nil {
			return fmt.Errorf("a %s approval needs its resolution", a.State)
		}
		return errors.New("a pending approval has no resolution")
	}
	input, err := jsonText("tool_input", a.ToolInput)
	if err != nil {
		return err
	}
	sugg, err := jsonArray("permission_suggestions", a.PermissionSuggestions)
	if err != nil {
		return err
	}
	specs, err := jsonText("specs", a.Specs)
	if err != nil {
		return err
	}
	created := a.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	res, err := resolutionArgs(a)
	if err != nil {
		return err
	}
	w.args = append([]any{a.ID, nullStr(a.RequestID), a.Source, a.Kind, string(a.State), nullStr(a.ToolName), input,
		nullStr(a.Cwd), nullStr(a.SessionID), nullStr(a.TaskID), sugg, nullStr(a.AssistantContext),
		nullStr(a.Content), specs, fmtTime(created), fmtTime(a.Deadline), nullStr(a.LoopID)}, res...)
	return nil
}

// resolutionArgs are the values of resolutionCols for a's resolution (all
// NULL when it has none).
func resolutionArgs(a *api.Approval) ([]any, error) {
	r := a.Resolution
	if r == nil {
		return make([]any, 11), nil
	}
	sugg, err := jsonText("resolution.suggestion", r.Suggestion)
	if err != nil {
		return nil, err
	}
	var idx any
	if r.SuggestionIndex != nil {
		idx = int64(*r.SuggestionIndex)
	}
	at := r.At
	if at.IsZero() {
		at = time.Now()
	}
	var pid any
	if r.ByPid != 0 {
		pid = int64(r.ByPid)
	}
	return []any{fmtTime(at), nullStr(string(r.Decision)), nullStr(r.Message), nullStr(r.UserMessage), sugg, idx,
		nullStr(r.By), nullStr(r.RuleID), nullStr(r.Reason), nullStr(r.BySession), pid}, nil
}

func (w *approvalRequested) apply(t *wtx) error {
	ok, err := t.exec1(`INSERT INTO approvals(`+approvalCols+`) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
		?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`, w.args...)
	if err == nil && !ok {
		return ErrExists
	}
	return err
}

// ApprovalResolved is the write Approvals.Resolve makes: a's state and
// resolution, and the rules (recorded by its AlwaysAllow) in the same
// transaction.
func ApprovalResolved(a api.Approval, rules ...api.ApprovalRule) Write {
	return &approvalResolved{a: a, rules: rules}
}

type approvalResolved struct {
	a        api.Approval
	rules    []api.ApprovalRule
	args     []any
	ruleArgs [][]any
}

func (w *approvalResolved) what() string {
	return "record approval " + w.a.ID + " " + string(w.a.State)
}

func (w *approvalResolved) prepare() error {
	a := &w.a
	switch {
	case a.ID == "":
		return errors.New("the approval has no id")
	case !a.State.Terminal():
		return fmt.Errorf("%q is not a terminal state", a.State)
	case a.Resolution == nil:
		return errors.New("the approval has no resolution")
	}
	res, err := resolutionArgs(a)
	if err != nil {
		return err
	}
	w.args = append(append([]any{string(a.State)}, res...), a.ID)
	for i := range w.rules {
		args, err := ruleArgs(&w.rules[i])
		if err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
		w.ruleArgs = append(w.ruleArgs, args)
	}
	return nil
}

func (w *approvalResolved) apply(t *wtx) error {
	ok, err := t.exec1(`UPDATE approvals SET state = ?, resolved_at = ?, decision = ?, message = ?, user_message = ?,
		suggestion = ?, suggestion_index = ?, resolved_by = ?, rule_id = ?, reason = ?, resolved_session = ?,
		resolved_pid = ?
		WHERE id = ? AND resolved_at IS NULL`, w.args...)
	if err == nil && !ok {
		var state string
		err = t.queryRow("SELECT state FROM approvals WHERE id = ?", w.a.ID).Scan(&state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotFound
		case err == nil:
			return fmt.Errorf("%w: it is %s", ErrFinished, state)
		}
	}
	if err != nil {
		return err
	}
	// A rule that cannot be inserted (its id taken) is a plain error: the
	// transaction is rolled back and the approval stays pending.
	for _, args := range w.ruleArgs {
		if _, err := t.exec(`INSERT INTO approval_rules(`+ruleCols+`) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			args...); err != nil {
			return err
		}
	}
	return nil
}

func ruleArgs(r *api.ApprovalRule) ([]any, error) {
	switch {
	case r.ID == "":
		return nil, errors.New("the rule has no id")
	case r.Origin == "":
		return nil, errors.New("the rule has no origin")
	case r.Tool == "":
		return nil, errors.New("the rule has no tool")
	case r.Decision != "allow" && r.Decision != "deny":
		return nil, fmt.Errorf("decision %q is not allow or deny", r.Decision)
	}
	sugg, err := jsonText("suggestion", r.Suggestion)
	if err != nil {
		return nil, err
	}
	created := r.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	return []any{r.ID, r.Origin, r.Tool, nullStr(r.InputField), nullStr(r.InputPattern), nullStr(r.Cwd),
		nullStr(r.SessionID), nullStr(r.Content), r.Decision, nullStr(r.Message), sugg, nullStr(r.FromApproval),
		fmtTime(created)}, nil
}

// RuleDeleted is the write Approvals.DeleteRule makes.
func RuleDeleted(id string) Write { return &ruleDeleted{id: id} }

type ruleDeleted struct{ id string }

func (w *ruleDeleted) what() string { return "delete approval rule " + w.id }
func (w *ruleDeleted) prepare() error {
	if w.id == "" {
		return errors.New("no rule id")
	}
	return nil
}
func (w *ruleDeleted) apply(t *wtx) error {
	ok, err := t.exec1("DELETE FROM approval_rules WHERE id = ?", w.id)
	if err == nil && !ok {
		return ErrNotFound
	}
	return err
}

// The columns of an approval in the order scanApproval reads them (and
// ApprovalRequested writes them): the request, then the resolution.
const (
	approvalCols = `id, request_id, source, kind, state, tool_name, tool_input, cwd, session_id, task_id,
		permission_suggestions, assistant_context, content, specs, created_at, deadline, loop_id, ` + resolutionCols
	resolutionCols = `resolved_at, decision, message, user_message, suggestion, suggestion_index, resolved_by,
		rule_id, reason, resolved_session, resolved_pid`
	ruleCols = `id, origin, tool, input_field, input_pattern, cwd, session_id, content, decision, message,
		suggestion, from_approval, created_at`
)

func rawOf(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

func scanApproval(sc scanner) (api.Approval, error) {
	var (
		a                                                  api.Approval
		state, created                                     string
		reqID, tool, input, cwd, session, task, sugg, actx sql.NullString
		content, specs, deadline, resolved, decision, msg  sql.NullString
		loopID                                             sql.NullString
		umsg, rsugg, by, rule, reason, bySession           sql.NullString
		idx, byPid                                         sql.NullInt64
	)
	if err := sc.Scan(&a.ID, &reqID, &a.Source, &a.Kind, &state, &tool, &input, &cwd, &session, &task, &sugg, &actx,
		&content, &specs, &created, &deadline, &loopID, &resolved, &decision, &msg, &umsg, &rsugg, &idx, &by, &rule,
		&reason, &bySession, &byPid); err != nil {
		return a, err
	}
	var err error
	a.State = api.ApprovalState(state)
	a.RequestID, a.ToolName, a.ToolInput, a.Cwd = reqID.String, tool.String, rawOf(input), cwd.String
	a.SessionID, a.TaskID, a.AssistantContext = session.String, task.String, actx.String
	a.Content, a.Specs, a.LoopID = content.String, rawOf(specs), loopID.String
	if sugg.Valid {
		if err := json.Unmarshal([]byte(sugg.String), &a.PermissionSuggestions); err != nil {
			return a, fmt.Errorf("approval %s: permission_suggestions: %w", a.ID, err)
		}
	}
	if a.CreatedAt, err = time.Parse(timeLayout, created); err != nil {
		return a, fmt.Errorf("approval %s: created_at: %w", a.ID, err)
	}
	if deadline.Valid {
		if a.Deadline, err = time.Parse(timeLayout, deadline.String); err != nil {
			return a, fmt.Errorf("approval %s: deadline: %w", a.ID, err)
		}
	}
	if resolved.Valid {
		r := &api.Resolution{Decision: api.Decision(decision.String), Message: msg.String, UserMessage: umsg.String,
			Suggestion: rawOf(rsugg), By: by.String, RuleID: rule.String, Reason: reason.String,
			BySession: bySession.String, ByPid: int32(byPid.Int64)}
		if idx.Valid {
			i := int(idx.Int64)
			r.SuggestionIndex = &i
		}
		if r.At, err = time.Parse(timeLayout, resolved.String); err != nil {
			return a, fmt.Errorf("approval %s: resolved_at: %w", a.ID, err)
		}
		a.Resolution = r
	}
	return a, nil
}

func (a Approvals) approvals(what, query string, args ...any) ([]api.Approval, error) {
	out := []api.Approval{}
	err := a.s.query(what, query, func(sc scanner) error {
		ap, err := scanApproval(sc)
		out = append(out, ap)
		return err
	}, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Pending returns the approvals not resolved, oldest first: after a
// restart, those the previous daemon left.
func (a Approvals) Pending() ([]api.Approval, error) {
	return a.approvals("list pending approvals", "SELECT "+approvalCols+
		" FROM approvals WHERE state = 'pending' ORDER BY created_at, rowid")
}

// Get returns an approval by its id or, when no approval has that id, by
// its requester's request_id (the newest with it); ok is false when
// neither is recorded.
func (a Approvals) Get(id string) (ap api.Approval, ok bool, err error) {
	for _, q := range []string{
		"SELECT " + approvalCols + " FROM approvals WHERE id = ?",
		"SELECT " + approvalCols + " FROM approvals WHERE request_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1",
	} {
		got, err := a.approvals("read approval "+id, q, id)
		if err != nil {
			return api.Approval{}, false, err
		}
		if len(got) > 0 {
			return got[0], true, nil
		}
	}
	return api.Approval{}, false, nil
}

// ApprovalQuery selects approvals for Approvals.List; empty fields match
// everything.
type ApprovalQuery struct {
	State  string // a state name; "" or "all": every state
	Source string
	Limit  int // the most approvals listed; 0 is no limit
}

// List returns matching approvals, newest first.
func (a Approvals) List(q ApprovalQuery) ([]api.Approval, error) {
	var where []string
	var args []any
	if q.State != "" && q.State != "all" {
		if !api.ValidApprovalState(q.State) {
			return nil, fmt.Errorf("list approvals: unknown state %q", q.State)
		}
		where, args = append(where, "state = ?"), append(args, q.State)
	}
	if q.Source != "" {
		where, args = append(where, "source = ?"), append(args, q.Source)
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("list approvals: negative limit %d", q.Limit)
	}
	query, args := listQuery("SELECT "+approvalCols+" FROM approvals", where, "created_at DESC, rowid DESC", q.Limit, args)
	return a.approvals("list approvals", query, args...)
}

// Rules returns the recorded rules, oldest first.
func (a Approvals) Rules() ([]api.ApprovalRule, error) {
	out := []api.ApprovalRule{}
	err := a.s.query("list approval rules", "SELECT "+ruleCols+" FROM approval_rules ORDER BY created_at, rowid",
		func(sc scanner) error {
			var (
				r                                                api.ApprovalRule
				field, pattern, cwd, session, content, msg, sugg sql.NullString
				from                                             sql.NullString
				created                                          string
			)
			if err := sc.Scan(&r.ID, &r.Origin, &r.Tool, &field, &pattern, &cwd, &session, &content, &r.Decision, &msg,
				&sugg, &from, &created); err != nil {
				return err
			}
			r.InputField, r.InputPattern, r.Cwd, r.SessionID = field.String, pattern.String, cwd.String, session.String
			r.Content, r.Message, r.Suggestion, r.FromApproval = content.String, msg.String, rawOf(sugg), from.String
			var err error
			if r.CreatedAt, err = time.Parse(timeLayout, created); err != nil {
				return fmt.Errorf("rule %s: created_at: %w", r.ID, err)
			}
			out = append(out, r)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Prune deletes finished approvals: all but the keep most recently
// resolved (keep <= 0: no bound on the count), and those resolved before
// before (zero: no bound on age). Pending approvals are never pruned, nor
// rules. It deletes in small transactions, as Jobs.Prune does, and returns
// how many it deleted.
func (a Approvals) Prune(ctx context.Context, keep int, before time.Time) (int, error) {
	return a.s.prune(ctx, &approvalsPrune, keep, before)
}

// approvalsPrune prunes the approvals resolved (resolved_at set), by
// resolved_at then rowid.
var approvalsPrune = pruneQueries{
	noun: "approvals",
	last: `SELECT resolved_at, rowid FROM approvals WHERE resolved_at IS NOT NULL
			ORDER BY resolved_at DESC, rowid DESC LIMIT 1 OFFSET ?`,
	beforeLast: `DELETE FROM approvals WHERE rowid IN (SELECT rowid FROM approvals
			WHERE resolved_at IS NOT NULL AND (resolved_at < ? OR resolved_at = ? AND rowid < ?) LIMIT ?)`,
	before: `DELETE FROM approvals WHERE rowid IN (SELECT rowid FROM approvals
			WHERE resolved_at IS NOT NULL AND resolved_at < ? LIMIT ?)`,
}
