package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
)

// The agents: executor pools and their instances, tasks; a task's page
// with its messages (text, tool calls, results), the permission it waits
// for (an approval, answered as in the inbox: approval.resolve) and Stop
// (task.stop).
//
// Live: a task's page streams, in signal mode and only for its task (the
// stream filters on its id), its lifecycle, its permissions and its
// task.message events (one per chunk an agent writes; the bus makes them
// whoever listens, and a signal stream only counts them): the page
// reloads at most once a second while the agent writes.

// agentKinds change the agents page: instances coming and going, tasks'
// lifecycle and permissions (not executor.paused/resumed: flow control,
// as often as an agent writes fast).
var agentKinds = []string{"executor.spawned", "executor.connected", "executor.start_failed", "executor.exited",
	"executor.killed", "executor.stopping", "executor.restart_scheduled", "task.queued", "task.started",
	"task.finished", "task.recovered", "task.permission_requested", "task.permission_decided"}

// agentTaskKinds change a task's page.
var agentTaskKinds = []string{"task.started", "task.progress", "task.message", "task.error", "task.finished",
	"task.permission_requested", "task.permission_decided", "approval.resolved", "approval.timed_out", "approval.cancelled"}

const (
	agentTasksPage = 50
	agentTasksMax  = 1000
	// agentMessagesRead is how many of a session's last messages a task's
	// page reads (session.get's limit).
	agentMessagesRead = 2000
	// agentPermsRead is how many of the last executor permission requests
	// a task's page looks through for its own.
	agentPermsRead = 200
)

var agentTaskStates = []string{"queued", "running", "completed", "failed", "cancelled", "timeout"}

func init() {
	register(&page{Name: "agents", Title: "Agents", Pattern: "/ui/agents", Nav: true, Kinds: agentKinds, Data: agentsData})
	register(&page{Name: "task", ByID: true, Title: "Task", Pattern: "/ui/agents/tasks/{id}", Kinds: agentTaskKinds, Data: agentTaskData})
	registerAction(&action{Name: "task.stop", Method: "task.stop", Params: stopParams})
	funcs["agentTerminal"] = func(st api.TaskState) bool { return st.Terminal() }
	funcs["agentTook"] = func(t api.TaskRecord) string { return render.Took(t, time.Now()) }
	funcs["agentDenied"] = render.Denied
	funcs["agentCost"] = render.Cost
	funcs["agentTokens"] = render.Tokens
	funcs["agentError"] = render.TaskError
	funcs["agentTools"] = render.Tools
}

// agentTask is a task in the list: Waiting is how many permission
// requests of it are pending.
type agentTask struct {
	api.TaskRecord
	Waiting int
}

type agentsView struct {
	Pools     []api.PoolStatus
	Tasks     []agentTask
	Truncated bool
	More      string
	Executor  string
	State     string
	Executors []string
	States    []string
	Limit     int
	Waiting   int // pending permission requests of tasks
	Problems  []string
}

func agentsData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := agentsView{Executor: strings.TrimSpace(q.Get("executor")), State: q.Get("state"), States: agentTaskStates, Limit: agentTasksPage}
	if v.State != "" && !agentValidTaskState(v.State) {
		return v, api.Errorf(api.CodeInvalidParams, "state: not a task state: %q", clipForm(v.State))
	}
	if v.Executor != "" && !validID(v.Executor) {
		return v, api.Errorf(api.CodeInvalidParams, "executor: not a pool name: %q", clipForm(v.Executor))
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > agentTasksMax {
			return v, api.Errorf(api.CodeInvalidParams, "limit: want 1 to %d, got %q", agentTasksMax, clipForm(l))
		}
		v.Limit = n
	}
	var pools struct {
		Pools []api.PoolStatus `json:"pools"`
	}
	if err := s.call(ctx, "executor.list", nil, &pools); err != nil {
		v.Problems = append(v.Problems, "the executor pools: "+err.Error())
	}
	v.Pools = pools.Pools
	for _, p := range v.Pools {
		v.Executors = append(v.Executors, p.Name)
	}
	tp := map[string]any{"limit": v.Limit}
	if v.Executor != "" {
		tp["executor"] = v.Executor
	}
	if v.State != "" {
		tp["state"] = v.State
	}
	var tasks struct {
		Tasks     []api.TaskRecord `json:"tasks"`
		Truncated bool             `json:"truncated"`
	}
	if err := s.call(ctx, "task.list", tp, &tasks); err != nil {
		return v, err
	}
	waiting := map[string]int{}
	var pending apprList
	if err := s.call(ctx, "approval.list", map[string]any{"state": "pending"}, &pending); err != nil {
		v.Problems = append(v.Problems, "the pending permission requests: "+err.Error())
	}
	for _, a := range pending.Approvals {
		if a.TaskID != "" {
			waiting[a.TaskID]++
			v.Waiting++
		}
	}
	for _, t := range tasks.Tasks {
		v.Tasks = append(v.Tasks, agentTask{TaskRecord: t, Waiting: waiting[t.ID]})
	}
	if tasks.Truncated && v.Limit < agentTasksMax {
		v.Truncated = true
		nq := url.Values{}
		if v.Executor != "" {
			nq.Set("executor", v.Executor)
		}
		if v.State != "" {
			nq.Set("state", v.State)
		}
		nq.Set("limit", strconv.Itoa(min(v.Limit*4, agentTasksMax)))
		v.More = "/ui/agents?" + nq.Encode() + "#tasks-h"
	}
	return v, nil
}

func agentValidTaskState(s string) bool {
	for _, st := range agentTaskStates {
		if s == st {
			return true
		}
	}
	return false
}

// agentTaskView is a task's page.
type agentTaskView struct {
	Task     api.TaskRecord
	Items    []agentTaskItem
	Shown    int  // messages of the task read
	Partial  bool // it has more than were read (the session's last agentMessagesRead)
	Asking   []apprItem
	Asked    []apprItem // its permission requests that are over (of the last agentPermsRead)
	Problems []string
}

// agentTaskItem is what a person reads of one or more messages (as
// api.DecodeAgentMessage reads them): Kind text (an agent's words,
// consecutive pieces joined), thinking (the same, shown dim and
// collapsed), tool (a call: Label the tool, Text what it does), result
// (what a tool gave back: Label the tool), error (a tool that failed, or
// the agent refused itself: Label the tool; or an error the agent
// reported), denied (a tool use refused that did not run: Label the tool,
// Text what it would have done, Reason what the agent was told), usage,
// final (the run's result: Text its words, Label "error" when it failed),
// raw (N consecutive lines of the agent's own that carry no message:
// Label the agent, Text the lines), or other (Label the event type, Text
// its data).
type agentTaskItem struct {
	Kind   string
	Label  string
	Text   string
	Reason string
	Seq    int64
	At     time.Time
	// Input is a tool call's or a denial's input, as the agent's values.
	Input *toolView
	N     int // raw: how many lines

}

func agentTaskData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	var res struct {
		Task api.TaskRecord `json:"task"`
	}
	id, err := s.getByPath(ctx, r, "a task", "task.get", &res)
	if err != nil {
		return nil, err
	}
	v := agentTaskView{Task: res.Task}
	cells := toolDiffPageCells
	if v.Task.SessionID != "" {
		var sess struct {
			Messages []api.SessionMessage `json:"messages"`
		}
		if err := s.call(ctx, "session.get", map[string]any{"id": v.Task.SessionID, "limit": agentMessagesRead}, &sess); err != nil {
			v.Problems = append(v.Problems, "the messages: "+err.Error())
		}
		var ms []api.SessionMessage
		for _, m := range sess.Messages {
			if m.TaskID == id {
				ms = append(ms, m)
			}
		}
		v.Shown = len(ms)
		v.Partial = int64(len(ms)) < v.Task.MessageCount
		v.Items = agentTaskItems(ms, &cells)
	}
	var pending apprList
	if err := s.call(ctx, "approval.list", map[string]any{"state": "pending"}, &pending); err != nil {
		v.Problems = append(v.Problems, "the permission requests: "+err.Error())
	}
	for _, a := range pending.Approvals {
		if a.TaskID == id {
			v.Asking = append(v.Asking, newApprItem(a, &cells))
		}
	}
	var asked apprList
	if err := s.call(ctx, "approval.list", map[string]any{"state": "all", "source": api.SourceExecutor, "limit": agentPermsRead}, &asked); err != nil {
		v.Problems = append(v.Problems, "the permission history: "+err.Error())
	}
	for _, a := range asked.Approvals {
		if a.TaskID == id && a.State != api.ApprovalPending {
			v.Asked = append(v.Asked, newApprItem(a, &cells))
		}
	}
	return v, nil
}

// agentTextMax bounds the text kept of one item (the page clips it again).
const agentTextMax = 256 << 10

// agentTaskItems turns a task's messages into what a person reads
// (api.DecodeAgentMessage reads each); a message it does not know is
// shown as its type and data.
// Its tool inputs' diffs take from cells, the page's (toolDiffPageCells).
func agentTaskItems(ms []api.SessionMessage, cells *int) []agentTaskItem {
	var out []agentTaskItem
	add := func(m api.SessionMessage, it agentTaskItem) {
		if (it.Kind == "text" || it.Kind == "thinking" || it.Kind == "raw") && len(out) > 0 && out[len(out)-1].Kind == it.Kind &&
			out[len(out)-1].Label == it.Label {
			last := &out[len(out)-1]
			if it.Kind == "raw" {
				last.N++
				it.Text = "\n" + it.Text
			}
			if len(last.Text) < agentTextMax {
				last.Text += it.Text
			}
			return
		}
		if it.Kind == "raw" {
			it.N = 1
		}
		if len(it.Text) > agentTextMax {
			it.Text = it.Text[:agentTextMax]
		}
		it.Seq, it.At = m.Sequence, m.ReceivedAt
		out = append(out, it)
	}
	var tools api.ToolNames
	for _, m := range ms {
		parts, known := api.DecodeAgentMessage(m.EventType, m.EventData)
		if !known {
			var b bytes.Buffer
			if json.Compact(&b, m.EventData) != nil {
				b.Reset()
				b.Write(m.EventData)
			}
			add(m, agentTaskItem{Kind: "other", Label: m.EventType, Text: b.String()})
			continue
		}
		for _, p := range parts {
			tools.Part(&p)
			text := p.Text
			if p.Block && text != "" && !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			switch p.Kind {
			case api.MsgText:
				add(m, agentTaskItem{Kind: "text", Text: text})
			case api.MsgThinking:
				add(m, agentTaskItem{Kind: "thinking", Text: text})
			case api.PartUser:
				add(m, agentTaskItem{Kind: "other", Label: "user", Text: text})
			case api.MsgToolCall:
				add(m, agentTaskItem{Kind: "tool", Label: p.Tool, Text: render.ToolSummary(p.Tool, p.Input), Input: agentToolInput(p, cells)})
			case api.MsgToolResult:
				kind := "result"
				if p.IsError && !p.AfterDenial { // after a denial: what the model read of it
					kind = "error"
				}
				add(m, agentTaskItem{Kind: kind, Label: p.Tool, Text: text})
			case api.MsgPermissionDenied:
				add(m, agentTaskItem{Kind: "denied", Label: p.Tool, Text: render.ToolSummary(p.Tool, p.Input), Reason: p.Text,
					Input: agentToolInput(p, cells)})
			case api.PartError:
				add(m, agentTaskItem{Kind: "error", Text: text})
			case api.MsgUsage:
				add(m, agentTaskItem{Kind: "usage", Text: render.Usage(p.Usage)})
			case api.MsgResult:
				it := agentTaskItem{Kind: "final", Text: render.PartResult(p)}
				if p.IsError {
					it.Label = "error"
				}
				add(m, it)
			case api.MsgAgentLine:
				// The agent's own lines that carry no message (Claude
				// Code's stream events): folded, consecutive ones as one.
				add(m, agentTaskItem{Kind: "raw", Label: p.Tool, Text: text})
			}
		}
	}
	return out
}

// agentToolInput is a call's input as the conversation shows it: the
// values, without the JSON (the approval's page has it); its diffs take
// from cells, the page's.
func agentToolInput(p api.AgentPart, cells *int) *toolView {
	v := newToolViewIn(p.Tool, p.Input, cells)
	return &v
}
