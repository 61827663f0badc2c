package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The overview, the jobs, a job and the event log.

// jobKinds are a job's lifecycle (not its output).
var jobKinds = []string{"job.queued", "job.dispatched", "job.finished", "job.cancel_requested", "job.orphaned",
	"job.requeued", "job.rejected", "job.recovered"}

func init() {
	register(&page{Name: "overview", Title: "Overview", Pattern: "/ui/{$}", Nav: true,
		Kinds: append(append([]string{"lane.*", "runner.*", "actor.*", "approval.requested", "approval.resolved",
			"loop.created", "loop.ended", "task.queued", "task.finished"}, jobKinds...), errorKinds...),
		Data: overviewData})
	register(&page{Name: "jobs", Title: "Jobs", Pattern: "/ui/jobs", Nav: true, Kinds: jobKinds, Data: jobsData})
	register(&page{Name: "job", Title: "Job", Pattern: "/ui/jobs/{id}", ByID: true,
		Kinds: append([]string{"job.stream_opened", "job.stream_closed"}, jobKinds...), Data: jobData})
	register(&page{Name: "events", Title: "Events", Pattern: "/ui/events", Nav: true, Data: eventsData,
		StreamKinds: eventsKinds, StreamJob: func(r *http.Request) string { return r.URL.Query().Get("job") }})
	registerAction(&action{Name: "job.cancel", Method: "job.cancel", Params: stopParams})
}

type overview struct {
	Lanes     []api.LaneStatus
	Tree      []actors.TreeNode
	Metrics   api.Metrics
	Pending   int
	Running   int
	Queued    int
	TasksLive int
	Loops     int
	Errors    []errorLine
	Problems  []string // what could not be read
	// Node: this machine's figures (status); nil if it could not read them.
	Node *api.NodeFigures
}

func overviewData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	var o overview
	var lanes struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
	if err := s.call(ctx, "lane.list", nil, &lanes); err != nil {
		return nil, err
	}
	o.Lanes = lanes.Lanes
	for _, l := range o.Lanes {
		o.Running += l.Running
		o.Queued += l.Queued
	}
	var tree struct {
		Tree []actors.TreeNode `json:"tree"`
	}
	if err := s.call(ctx, "tree.get", nil, &tree); err != nil {
		o.Problems = append(o.Problems, "the actor tree: "+err.Error())
	}
	o.Tree = tree.Tree
	var st api.Status
	if err := s.call(ctx, "status", nil, &st); err != nil {
		o.Problems = append(o.Problems, "status: "+err.Error())
	} else if st.Node == nil && st.NodeError != "" {
		o.Problems = append(o.Problems, "the node's figures: "+st.NodeError)
	}
	o.Node = st.Node
	if err := s.call(ctx, "metrics.get", nil, &o.Metrics); err != nil {
		o.Problems = append(o.Problems, "metrics: "+err.Error())
	}
	var appr struct {
		Approvals []map[string]any `json:"approvals"`
	}
	if err := s.call(ctx, "approval.list", map[string]any{"state": "pending"}, &appr); err != nil {
		o.Problems = append(o.Problems, "approvals: "+err.Error())
	}
	o.Pending = len(appr.Approvals)
	for _, st := range []string{"queued", "running"} {
		var tasks struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err := s.call(ctx, "task.list", map[string]any{"state": st, "limit": 1000}, &tasks); err != nil {
			o.Problems = append(o.Problems, "tasks: "+err.Error())
			break
		}
		o.TasksLive += len(tasks.Tasks)
	}
	o.Loops = o.Metrics.LoopMetrics.RunningLoops
	o.Errors = s.errs.list()
	return o, nil
}

// jobsView is the jobs page: a page of job.list with its filter.
type jobsView struct {
	Jobs      []api.JobRecord
	Lane      string
	State     string
	Since     string
	Lanes     []string
	States    []string
	Next      string // the next page's URL, "" when this is the last
	Limit     int
	Cursor    string
	Truncated bool
	Fleet     bool // in a fleet: other nodes change what it lists (fleet.js)
}

const jobsPageSize = 50

func jobsData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := jobsView{Lane: q.Get("lane"), State: q.Get("state"), Since: q.Get("since"), Cursor: q.Get("cursor"), Limit: jobsPageSize,
		States: []string{"queued", "dispatched", "running", "succeeded", "failed", "timeout", "cancelled", "error"}}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 && n <= 500 {
		v.Limit = n
	}
	var lanes struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
	if err := s.call(ctx, "lane.list", nil, &lanes); err == nil {
		for _, l := range lanes.Lanes {
			v.Lanes = append(v.Lanes, l.Name)
		}
	}
	f := api.Filter{Lane: v.Lane, State: v.State, Since: v.Since, Limit: v.Limit, Cursor: v.Cursor}
	var res struct {
		Jobs       []api.JobRecord `json:"jobs"`
		NextCursor string          `json:"next_cursor"`
	}
	if err := s.call(ctx, "job.list", f, &res); err != nil {
		return v, err
	}
	v.Jobs = res.Jobs
	v.Fleet = s.inFleet(ctx)
	if res.NextCursor != "" {
		nq := url.Values{}
		for _, k := range []string{"lane", "state", "since"} {
			if q.Get(k) != "" {
				nq.Set(k, q.Get(k))
			}
		}
		nq.Set("cursor", res.NextCursor)
		if v.Limit != jobsPageSize {
			nq.Set("limit", strconv.Itoa(v.Limit))
		}
		v.Next = "/ui/jobs?" + nq.Encode()
	}
	return v, nil
}

type jobView struct {
	Job    api.JobRecord
	Live   bool
	Events []eventlog.Line
	Fleet  bool // unfinished, in a fleet: another node may run it (fleet.js)
}

func jobData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	var res struct {
		Job api.JobRecord `json:"job"`
	}
	id, err := s.getByPath(ctx, r, "a job", "job.get", &res)
	if err != nil {
		return nil, err
	}
	v := jobView{Job: res.Job, Live: !res.Job.State.Terminal()}
	v.Fleet = v.Live && s.inFleet(ctx)
	v.Events, _ = s.readEvents(ctx, eventlog.Query{Job: id, Exclude: []string{"conn.*"}, Since: res.Job.CreatedAt.Add(-time.Second)}, 200)
	return v, nil
}

// eventsView is the event log page: the last lines matching the filter;
// the page follows new ones through its stream.
type eventsView struct {
	Lines []eventlog.Line
	Kind  string
	Job   string
	Lane  string
	Limit int
	More  bool // older lines match too
	// Cluster: every node's events (Node: one node's), from the fleet.
	Cluster bool
	Node    string
}

const eventsPageSize = 200

func eventsData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := eventsView{Kind: strings.TrimSpace(q.Get("kind")), Job: strings.TrimSpace(q.Get("job")), Lane: strings.TrimSpace(q.Get("lane")),
		Limit: eventsPageSize}
	eq := eventlog.Query{Lane: v.Lane, Job: v.Job}
	if v.Kind != "" {
		kinds, err := parseKinds(v.Kind)
		if err != nil {
			return v, api.Errorf(api.CodeInvalidParams, "kind: %v", err)
		}
		eq.Kinds = kinds
	} else {
		eq.Exclude = []string{"conn.opened", "conn.closed"}
	}
	if v.Job != "" && !validID(v.Job) {
		return v, api.Errorf(api.CodeInvalidParams, "job: not a job id")
	}
	v.Node = strings.TrimSpace(q.Get("node"))
	v.Cluster = everyNode(r)
	if v.Node != "" && !validNode(v.Node) {
		return v, api.Errorf(api.CodeInvalidParams, "node: not a node's name")
	}
	if v.Cluster {
		lines, more, err := s.fleetEvents(ctx, eq, v.Node, v.Limit)
		slices.Reverse(lines) // newest first, as this node's own
		v.Lines, v.More = lines, more
		return v, err
	}
	lines, more := s.readEvents(ctx, eq, v.Limit)
	slices.Reverse(lines) // newest first
	v.Lines, v.More = lines, more
	return v, nil
}

// readEvents is the last n lines of the event log that q matches, oldest
// first, and whether there were more (read from the log's end back).
func (s *Server) readEvents(ctx context.Context, q eventlog.Query, n int) ([]eventlog.Line, bool) {
	if s.opts.Home == "" {
		return nil, false
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lines, more, err := eventlog.Tail(rctx, filepath.Join(s.opts.Home, "events.ndjson"), q, n)
	if err != nil {
		s.log.Warn().Err(err).Msg("ui: reading the event log")
	}
	return lines, more
}

// eventsKinds is the events page's stream: its filter, or every kind but
// the connections' and the chatty ones the log has not either (job
// output, task messages, chat chunks), as few patterns as can say it.
func eventsKinds(r *http.Request) string {
	if everyNode(r) { // none: read again every 5 s (fleet.js)
		return ""
	}
	if kind := strings.TrimSpace(r.URL.Query().Get("kind")); kind != "" {
		return kind
	}
	left := map[string]bool{"job.output": true, "conn.opened": true, "conn.closed": true, "task.message": true, "chat.chunk": true}
	byNS := map[string][]string{}
	var order []string
	for _, k := range eventlog.Kinds() {
		ns, _, _ := strings.Cut(k, ".")
		if ns == "test" || ns == "reg" {
			continue
		}
		if _, ok := byNS[ns]; !ok {
			order = append(order, ns)
		}
		byNS[ns] = append(byNS[ns], k)
	}
	var ks []string
	for _, ns := range order {
		all := true
		for _, k := range byNS[ns] {
			if left[k] {
				all = false
			}
		}
		if all {
			ks = append(ks, ns+".*")
			continue
		}
		for _, k := range byNS[ns] {
			if !left[k] {
				ks = append(ks, k)
			}
		}
	}
	return strings.Join(ks, ",")
}

func init() {
	funcs["eventRow"] = eventRowOf
	funcs["nodeEventRow"] = nodeEventRowOf
	funcs["terminal"] = func(st api.State) bool { return st.Terminal() }
	funcs["output"] = func(j api.JobRecord) string { return j.Output }
	funcs["itoa"] = strconv.Itoa
	funcs["navHref"] = func(pattern string) string { return strings.TrimSuffix(pattern, "{$}") }
	funcs["sprint"] = fmt.Sprint
}
