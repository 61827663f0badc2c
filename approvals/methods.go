package approvals

import (
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Register registers the approval methods with mux: approval.list, get,
// resolve, request, wait, cancel, rules, rule_delete, and the plan gate's
// plan.get_preview, approve, reject, iterate. Those that answer for a
// person (approval.resolve, plan.approve, reject, iterate) are methods
// only a person may call (api.HandlePerson): no process the daemon
// started answers its own question, through any door.
func (m *Manager) Register(mux api.Mux) {
	mux.Handle("approval.list", m.listMethod)
	mux.Handle("approval.get", m.getMethod)
	api.HandlePerson(mux, "approval.resolve", m.resolveMethod)
	mux.Handle("approval.request", m.requestMethod)
	mux.Handle("approval.wait", m.waitMethod)
	mux.Handle("approval.cancel", m.cancelMethod)
	mux.Handle("approval.rules", m.rulesMethod)
	mux.Handle("approval.rule_delete", m.ruleDeleteMethod)
	mux.Handle("plan.get_preview", m.planPreviewMethod)
	api.HandlePerson(mux, "plan.approve", m.planApproveMethod)
	api.HandlePerson(mux, "plan.reject", m.planRejectMethod)
	api.HandlePerson(mux, "plan.iterate", m.planIterateMethod)
}

// DefaultListLimit and MaxListLimit bound approval.list's history (the
// pending ones are listed whole unless a limit is given).
const (
	DefaultListLimit = 100
	MaxListLimit     = 10000
)

// Param and result shapes.
type (
	listParams struct {
		State  string `json:"state,omitempty"`
		Source string `json:"source,omitempty"`
		Limit  int    `json:"limit,omitempty"`
	}
	idParams struct {
		ID string `json:"id"`
	}
	// by, in the params of the methods that end an approval, is what a
	// control client says it is: "cli" (orchestrd's CLI), or nothing.
	approveParams struct {
		ID string `json:"id"`
		By string `json:"by,omitempty"`
	}
	resolveParams struct {
		ID          string `json:"id"`
		Decision    string `json:"decision"`
		Message     string `json:"message,omitempty"`
		UserMessage string `json:"user_message,omitempty"`
		Suggestion  *int   `json:"suggestion,omitempty"`
		By          string `json:"by,omitempty"`
	}
	requestParams struct {
		Kind                  string            `json:"kind"`
		ToolName              string            `json:"tool_name,omitempty"`
		ToolInput             json.RawMessage   `json:"tool_input,omitempty"`
		Cwd                   string            `json:"cwd,omitempty"`
		SessionID             string            `json:"session_id,omitempty"`
		TaskID                string            `json:"task_id,omitempty"`
		Content               string            `json:"content,omitempty"`
		Specs                 json.RawMessage   `json:"specs,omitempty"`
		TimeoutMs             int64             `json:"timeout_ms,omitempty"`
		PermissionSuggestions []json.RawMessage `json:"permission_suggestions,omitempty"`
	}
	waitParams struct {
		ID        string `json:"id"`
		TimeoutMs int64  `json:"timeout_ms,omitempty"`
	}
	cancelParams struct {
		ID     string `json:"id"`
		Reason string `json:"reason,omitempty"`
		By     string `json:"by,omitempty"`
	}
	rejectParams struct {
		ID     string `json:"id"`
		Reason string `json:"reason,omitempty"`
		By     string `json:"by,omitempty"`
	}
	iterateParams struct {
		ID       string `json:"id"`
		Feedback string `json:"feedback"`
		By       string `json:"by,omitempty"`
	}
	approvalsResult struct {
		Approvals []api.Approval `json:"approvals"`
		// Truncated: there are more than the limit let through (never
		// a silent cut).
		Truncated bool `json:"truncated,omitempty"`
	}
	approvalResult struct {
		Approval api.Approval `json:"approval"`
	}
	idResult struct {
		ID string `json:"id"`
	}
	rulesResult struct {
		Rules []api.ApprovalRule `json:"rules"`
	}
	previewResult struct {
		ID      string          `json:"id"`
		Content string          `json:"content"`
		Specs   json.RawMessage `json:"specs"`
		Status  string          `json:"status"`
	}
	approveResult struct {
		SpecsSpawned int  `json:"specs_spawned"`
		Approved     bool `json:"approved"` // Loopr's CLI reads it
	}
	empty struct{}
)

// resolver is the resolution's who for call: the door its front-end
// says it came through (api.OriginOf), a control client's pid, the
// dashboard's session; a control client that says by "cli" is the CLI. A
// client never names another door: any other by is refused, and on the
// dashboard by is not the client's to give.
func resolver(call api.Call, by string) (api.Resolution, bool) {
	o := api.OriginOf(call)
	res := api.Resolution{By: o.By, BySession: o.Session, ByPid: o.Pid}
	switch {
	case by == "" || by == o.By:
	case by == api.ByCLI && o.By == api.ByControl:
		res.By = api.ByCLI
	default:
		call.Fail(badParams(call, "by %q: a client may say only %q (orchestrd's CLI); where a call came from is the daemon's to record (here: %s)", by, api.ByCLI, o.By))
		return res, false
	}
	if res.By == "" {
		res.By = api.ByControl
	}
	return res, true
}

func badParams(call api.Call, format string, args ...any) *api.Error {
	return api.Errorf(api.CodeInvalidParams, "invalid params for "+call.Method()+": "+format, args...)
}

// decode decodes params and checks the id most methods take.
func decode(call api.Call, v any, id *string) bool {
	if err := call.Decode(v); err != nil {
		call.Fail(err)
		return false
	}
	if id != nil && *id == "" {
		call.Fail(badParams(call, "id is required (an approval id, or the requester's request_id)"))
		return false
	}
	return true
}

func (m *Manager) listMethod(call api.Call) {
	var p listParams
	if !decode(call, &p, nil) {
		return
	}
	if p.State != "" && p.State != "all" && !api.ValidApprovalState(p.State) {
		call.Fail(badParams(call, "unknown state %q (want all, pending, allowed, denied, always_allowed, replied, timed_out or cancelled)", p.State))
		return
	}
	if p.Limit < 0 || p.Limit > MaxListLimit {
		call.Fail(badParams(call, "limit must be between 1 and %d (default %d), got %d", MaxListLimit, DefaultListLimit, p.Limit))
		return
	}
	var out []api.Approval
	if p.State == "" || p.State == string(api.ApprovalPending) {
		// The pending ones: all of them unless a limit is given.
		for _, a := range m.PendingApprovals() {
			if p.Source == "" || a.Source == p.Source {
				out = append(out, a)
			}
		}
	} else {
		if p.Limit == 0 {
			p.Limit = DefaultListLimit
		}
		if m.store != nil {
			// One more than the limit: whether there are more.
			q := Query{Source: p.Source, Limit: p.Limit + 1}
			if p.State != "all" {
				q.State = p.State
			}
			as, err := m.store.List(q)
			if err != nil {
				call.Fail(api.Errorf(api.CodeInternal, "reading approvals from the state store: %v", err))
				return
			}
			out = as
		} else {
			out = m.memoryHistory(p.State, p.Source, p.Limit+1)
		}
	}
	res := approvalsResult{Approvals: out}
	if p.Limit > 0 && len(out) > p.Limit {
		res.Approvals, res.Truncated = out[:p.Limit], true
	}
	if res.Approvals == nil {
		res.Approvals = []api.Approval{}
	}
	call.Respond(res)
}

// memoryHistory is approval.list's history without a store: what memory
// holds, newest first.
func (m *Manager) memoryHistory(state, source string, limit int) []api.Approval {
	all := m.PendingApprovals()
	m.mu.Lock()
	for _, a := range m.finished {
		all = append(all, a)
	}
	m.mu.Unlock()
	var out []api.Approval
	for _, a := range all {
		if (state == "all" || string(a.State) == state) && (source == "" || a.Source == source) {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// find is the approval id names, or the call failed (1001 unknown).
func (m *Manager) find(call api.Call, id string) (api.Approval, bool) {
	a, ok, err := m.Get(id)
	if err != nil {
		call.Fail(api.Errorf(api.CodeInternal, "%v", err))
		return a, false
	}
	if !ok {
		call.Fail(api.Errorf(api.CodeNotFound, "approval %s not found", id))
		return a, false
	}
	return a, true
}

func (m *Manager) getMethod(call api.Call) {
	var p idParams
	if !decode(call, &p, &p.ID) {
		return
	}
	if a, ok := m.find(call, p.ID); ok {
		call.Respond(approvalResult{Approval: a})
	}
}

// resolve hands msg to the pending approval id names; reply hears how it
// ended. An approval that is over is 1002 naming its state, an unknown one
// 1001.
func (m *Manager) resolve(call api.Call, id string, msg resolveMsg) {
	if e := m.lookupPending(id); e != nil {
		e.send(msg)
		return
	}
	a, ok := m.find(call, id)
	if !ok {
		return
	}
	if a.State == api.ApprovalPending {
		// Pending in the store, not in this daemon: Recover has not seen it.
		call.Fail(api.Errorf(api.CodeInvalidState, "approval %s is pending but not held by this daemon", a.ID))
		return
	}
	if msg.check != nil {
		if err := msg.check(a); err != nil {
			call.Fail(err)
			return
		}
	}
	call.Fail(alreadyErr(a.ID, a.State))
}

// replyApproval answers a call with the terminal approval.
func replyApproval(call api.Call) func(api.Approval, error) {
	return func(a api.Approval, err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		call.Respond(approvalResult{Approval: a})
	}
}

func (m *Manager) resolveMethod(call api.Call) {
	var p resolveParams
	if !decode(call, &p, &p.ID) {
		return
	}
	d := api.Decision(p.Decision)
	switch d {
	case api.DecisionAllow, api.DecisionDeny, api.DecisionAlwaysAllow:
		if p.UserMessage != "" {
			call.Fail(badParams(call, "user_message goes with decision Reply, not %s", d))
			return
		}
	case api.DecisionReply:
		if p.UserMessage == "" {
			call.Fail(badParams(call, "decision Reply needs user_message (what the agent is told)"))
			return
		}
	case "":
		call.Fail(badParams(call, "decision is required: Allow, Deny, AlwaysAllow or Reply"))
		return
	default:
		call.Fail(badParams(call, "decision %q is not one of Allow, Deny, AlwaysAllow, Reply", p.Decision))
		return
	}
	if p.Suggestion != nil && d != api.DecisionAlwaysAllow {
		call.Fail(badParams(call, "suggestion goes with decision AlwaysAllow, not %s", d))
		return
	}
	res, ok := resolver(call, p.By)
	if !ok {
		return
	}
	res.Decision, res.Message, res.UserMessage = d, p.Message, p.UserMessage
	check := func(a api.Approval) error { return nil }
	if d == api.DecisionReply {
		check = func(a api.Approval) error {
			if a.Kind == api.KindMerge {
				return api.Errorf(api.CodeInvalidState, "approval %s is a loop's merge into its base: there is no one to reply to; allow or deny it (orchestrd approve|deny %s)", a.ID, a.ID)
			}
			return nil
		}
	}
	if d == api.DecisionAlwaysAllow {
		idx := p.Suggestion
		check = func(a api.Approval) error {
			n := len(a.PermissionSuggestions)
			if idx != nil && (*idx < 0 || *idx >= n) {
				if n == 0 {
					return badParams(call, "suggestion %d: approval %s offers no permission suggestions", *idx, a.ID)
				}
				return badParams(call, "suggestion %d is out of range: approval %s offers %d (0 to %d)", *idx, a.ID, n, n-1)
			}
			return nil
		}
		if e := m.lookupPending(p.ID); e != nil {
			a := e.snapshot()
			if err := check(a); err != nil {
				call.Fail(err)
				return
			}
			if idx == nil && len(a.PermissionSuggestions) > 0 {
				idx = new(int)
			}
			if idx != nil {
				i := *idx
				res.SuggestionIndex, res.Suggestion = &i, a.PermissionSuggestions[i]
			}
		}
	}
	m.resolve(call, p.ID, resolveMsg{state: d.State(), res: res, check: check, reply: replyApproval(call)})
}

func (m *Manager) requestMethod(call api.Call) {
	var p requestParams
	if !decode(call, &p, nil) {
		return
	}
	req := Request{Kind: p.Kind, ToolName: p.ToolName, ToolInput: p.ToolInput, Cwd: p.Cwd, SessionID: p.SessionID,
		TaskID: p.TaskID, Content: p.Content, Specs: p.Specs, PermissionSuggestions: p.PermissionSuggestions}
	switch p.Kind {
	case api.KindTool:
		if p.ToolName == "" {
			call.Fail(badParams(call, "kind tool needs tool_name"))
			return
		}
		if len(p.ToolInput) > 0 && p.ToolInput[0] != '{' {
			call.Fail(badParams(call, "tool_input must be a JSON object"))
			return
		}
		req.Source = api.SourceControl
	case api.KindPlan:
		if p.Content == "" {
			call.Fail(badParams(call, "kind plan needs content (the plan)"))
			return
		}
		if len(p.Specs) > 0 && p.Specs[0] != '[' && string(p.Specs) != "null" {
			call.Fail(badParams(call, "specs must be a JSON array"))
			return
		}
		req.Source = api.SourcePlan
	case "":
		call.Fail(badParams(call, "kind is required: tool or plan"))
		return
	default:
		call.Fail(badParams(call, "kind %q is not tool or plan", p.Kind))
		return
	}
	if p.TimeoutMs < 0 {
		call.Fail(badParams(call, "timeout_ms must be > 0 (or absent for [approvals] timeout), got %d", p.TimeoutMs))
		return
	}
	req.Timeout = time.Duration(p.TimeoutMs) * time.Millisecond
	var once sync.Once
	_, err := m.ask(req, nil, func(a api.Approval, err error) {
		once.Do(func() {
			if err != nil {
				call.Fail(&api.Error{Code: api.CodeStoreUnavailable,
					Message: "approval " + a.ID + " could not be recorded in the state store: " + err.Error()})
				return
			}
			call.Respond(idResult{ID: a.ID})
		})
	})
	if err != nil {
		call.Fail(err)
	}
}

// approval.wait answers once the approval is over: at once if it is,
// else when it ends or timeout_ms passes (1002 with the approval as data).
func (m *Manager) waitMethod(call api.Call) {
	var p waitParams
	if !decode(call, &p, &p.ID) {
		return
	}
	if p.TimeoutMs < 0 {
		call.Fail(badParams(call, "timeout_ms must be > 0 (or absent to wait as long as it takes), got %d", p.TimeoutMs))
		return
	}
	e := m.lookupPending(p.ID)
	if e == nil {
		if a, ok := m.find(call, p.ID); ok {
			if a.State.Terminal() {
				call.Respond(approvalResult{Approval: a})
			} else {
				call.Fail(api.Errorf(api.CodeInvalidState, "approval %s is pending but not held by this daemon", a.ID))
			}
		}
		return
	}
	var (
		mu    sync.Mutex
		timer *time.Timer
		over  bool
	)
	finish := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if over {
			return false
		}
		over = true
		if timer != nil {
			timer.Stop()
		}
		return true
	}
	stop := e.addWaiter(func(a api.Approval) {
		if finish() {
			call.Respond(approvalResult{Approval: a})
		}
	})
	if p.TimeoutMs > 0 {
		mu.Lock()
		if !over {
			timer = time.AfterFunc(time.Duration(p.TimeoutMs)*time.Millisecond, func() {
				if !finish() {
					return
				}
				stop()
				a := e.snapshot()
				err := api.Errorf(api.CodeInvalidState, "approval %s is still %s after %d ms", a.ID, a.State, p.TimeoutMs)
				err.Data = approvalResult{Approval: a}
				call.Fail(err)
			})
		}
		mu.Unlock()
	}
	call.OnClose(func() {
		if finish() {
			stop()
		}
	})
}

func (m *Manager) cancelMethod(call api.Call) {
	var p cancelParams
	if !decode(call, &p, &p.ID) {
		return
	}
	res, ok := resolver(call, p.By)
	if !ok {
		return
	}
	res.Reason = p.Reason
	if res.Reason == "" {
		res.Reason = api.CancelRequested
	}
	m.resolve(call, p.ID, resolveMsg{state: api.ApprovalCancelled, res: res, reply: replyApproval(call)})
}

func (m *Manager) rulesMethod(call api.Call) {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return
	}
	call.Respond(rulesResult{Rules: m.Rules()})
}

func (m *Manager) ruleDeleteMethod(call api.Call) {
	var p idParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if p.ID == "" {
		call.Fail(badParams(call, "id is required (a rule id from approval.rules)"))
		return
	}
	m.DeleteRule(p.ID, func(err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		call.Respond(empty{})
	})
}

// planCheck refuses plan.* on an approval that is not a plan; a loop's
// merge (kind merge) is taken too when merges says so (plan.approve,
// plan.reject, plan.get_preview: what Loopr's client and the CLI send a
// root loop's id with), never by plan.iterate (a merge has no plan to
// iterate).
func planCheck(call api.Call, merges bool) func(api.Approval) error {
	return func(a api.Approval) error {
		switch {
		case a.Kind == api.KindPlan, a.Kind == api.KindMerge && merges:
			return nil
		case a.Kind == api.KindMerge:
			return api.Errorf(api.CodeInvalidState, "approval %s is a loop's merge, not a plan: approve or reject it (orchestrd plan approve|reject)", a.ID)
		}
		return api.Errorf(api.CodeInvalidState, "approval %s is not a plan (kind %s): %s takes plan approvals only", a.ID, a.Kind, call.Method())
	}
}

func (m *Manager) planPreviewMethod(call api.Call) {
	var p idParams
	if !decode(call, &p, &p.ID) {
		return
	}
	p.ID = m.planAlias(p.ID)
	a, ok := m.find(call, p.ID)
	if !ok {
		return
	}
	if err := planCheck(call, true)(a); err != nil {
		call.Fail(err)
		return
	}
	call.Respond(previewResult{ID: a.ID, Content: a.Content, Specs: specsOrEmpty(a.Specs), Status: string(a.State)})
}

func (m *Manager) planApproveMethod(call api.Call) {
	var p approveParams
	if !decode(call, &p, &p.ID) {
		return
	}
	res, ok := resolver(call, p.By)
	if !ok {
		return
	}
	res.Decision = api.DecisionAllow
	p.ID = m.planAlias(p.ID)
	m.resolve(call, p.ID, resolveMsg{state: api.ApprovalAllowed, res: res, check: planCheck(call, true),
		reply: func(a api.Approval, err error) {
			if err != nil {
				call.Fail(err)
				return
			}
			call.Respond(approveResult{SpecsSpawned: specsCount(a.Specs), Approved: true})
		}})
}

func (m *Manager) planRejectMethod(call api.Call) {
	var p rejectParams
	if !decode(call, &p, &p.ID) {
		return
	}
	res, ok := resolver(call, p.By)
	if !ok {
		return
	}
	res.Decision, res.Message = api.DecisionDeny, p.Reason
	p.ID = m.planAlias(p.ID)
	m.resolve(call, p.ID, resolveMsg{state: api.ApprovalDenied, res: res, check: planCheck(call, true),
		reply: func(_ api.Approval, err error) {
			if err != nil {
				call.Fail(err)
				return
			}
			call.Respond(map[string]bool{"rejected": true}) // Loopr's answer
		}})
}

func (m *Manager) planIterateMethod(call api.Call) {
	var p iterateParams
	if !decode(call, &p, &p.ID) {
		return
	}
	p.ID = m.planAlias(p.ID)
	if p.Feedback == "" {
		call.Fail(badParams(call, "feedback is required (what the planner is told to change)"))
		return
	}
	res, ok := resolver(call, p.By)
	if !ok {
		return
	}
	res.Decision, res.UserMessage = api.DecisionReply, p.Feedback
	m.resolve(call, p.ID, resolveMsg{state: api.ApprovalReplied, res: res, check: planCheck(call, false),
		reply: emptyReply(call)})
}

// planAlias is the approval a plan loop's id names (Loopr's client sends
// the loop's id to plan.*), else id as it is.
func (m *Manager) planAlias(id string) string {
	if f := m.planID.Load(); f != nil {
		if a, ok := (*f)(id); ok {
			return a
		}
	}
	return id
}

// SetPlanID lets plan.* take a plan loop's id: f maps it to the approval
// its plan waits for (the daemon wires the loops domain's).
func (m *Manager) SetPlanID(f func(loopID string) (approvalID string, ok bool)) { m.planID.Store(&f) }

func emptyReply(call api.Call) func(api.Approval, error) {
	return func(_ api.Approval, err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		call.Respond(empty{})
	}
}
