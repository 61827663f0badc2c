package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
)

// The loops: their tree, as `orchestrd loops` draws it (loop.list), and a
// loop's page (loop.get): its record, its iterations, the plan (or merge)
// awaiting a person (plan.get_preview) with Approve, Reject and Iterate
// (plan.approve, plan.reject, plan.iterate by the approval's id: what is
// answered is what the page showed), and Pause, Resume, Cancel (loop.pause,
// loop.resume, loop.cancel).

// loopKinds change what the loop pages show. Every change of a loop's
// record and of its running iteration is committed and then told as
// loop.updated (loop.created for a new one: a plan's children once it is
// approved), so the other loop.* kinds (loop.iteration, loop.paused, ...)
// would only reload the page a second time; loop.children_spawned,
// loop.approval_asked and loop.ended are kept so the moments a person waits
// for reload at once. loop.deleted takes loops out of the tree. The plan.*
// kinds change the preview's approval, which is the approvals domain's.
var loopKinds = []string{"loop.created", "loop.updated", "loop.deleted", "loop.children_spawned", "loop.approval_asked",
	"loop.ended", "plan.awaiting_approval", "plan.approved", "plan.rejected", "plan.iterated"}

// loopsListMax bounds the loops a page reads (loop.list, a page of
// loopsListPage at a time); the page says when there were more.
const (
	loopsListPage = 1000
	loopsListMax  = 10000
)

// Bounds of what the loop page shows of what agents and validations wrote
// (each says how much it left out), and of what its forms take.
const (
	loopPromptShown   = 16 << 10
	loopFeedbackShown = 12 << 10
	loopProgressShown = 16 << 10
	loopTaskShown     = 4 << 10
	loopPlanShown     = 64 << 10
	maxPlanFeedback   = 8 << 10 // the loop keeps a review's last 8 KiB (loops.MaxFeedback): more is refused, not cut
	maxPlanReason     = 2 << 10
)

func init() {
	register(&page{Name: "loops", Title: "Loops", Pattern: "/ui/loops", Nav: true, Kinds: loopKinds, Data: loopsData})
	register(&page{Name: "loop", Title: "Loop", Pattern: "/ui/loops/{id}", Kinds: loopKinds, Data: loopData})
	for _, op := range []string{"pause", "resume", "cancel", "merge"} {
		registerAction(&action{Name: "loop." + op, Method: "loop." + op, Params: loopIDParams})
	}
	registerAction(&action{Name: "loop.plan_approve", Method: "plan.approve", Params: loopIDParams})
	registerAction(&action{Name: "loop.plan_reject", Method: "plan.reject", Params: planRejectParams})
	registerAction(&action{Name: "loop.plan_iterate", Method: "plan.iterate", Params: planIterateParams})

	funcs["loopNote"] = loopNote
	funcs["loopTime"] = func(ms int64) time.Time {
		if ms <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(ms)
	}
	funcs["loopTook"] = func(start, end int64) string {
		if start <= 0 || end <= 0 || end < start {
			return "-"
		}
		return render.Duration(time.Duration(end-start) * time.Millisecond)
	}
	// loopTail is the last n bytes of s (from a character's start), for
	// a loop's progress, whose newest part is at its end.
	funcs["loopTail"] = func(n int, s string) string {
		if len(s) <= n {
			return s
		}
		i := len(s) - n
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		return "…" + s[i:]
	}
	funcs["loopStatuses"] = func() []api.LoopStatus { return api.LoopStatuses }
	funcs["loopTypes"] = func() []api.LoopType { return api.LoopTypes }
}

// loopIDParams is {id} of a loop or an approval, as loop.pause, resume,
// cancel and plan.approve take it.
func loopIDParams(f url.Values) (any, error) {
	id, err := formID(f, "id")
	if err != nil {
		return nil, err
	}
	return map[string]any{"id": id}, nil
}

func planRejectParams(f url.Values) (any, error) {
	id, err := formID(f, "id")
	if err != nil {
		return nil, err
	}
	reason, err := formText(f, "reason", maxPlanReason)
	if err != nil {
		return nil, err
	}
	p := map[string]any{"id": id}
	if r := strings.TrimSpace(reason); r != "" {
		if !utf8.ValidString(r) {
			return nil, fmt.Errorf("reason: not UTF-8 text")
		}
		p["reason"] = r
	}
	return p, nil
}

func planIterateParams(f url.Values) (any, error) {
	id, err := formID(f, "id")
	if err != nil {
		return nil, err
	}
	fb, err := formText(f, "feedback", maxPlanFeedback)
	if err != nil {
		return nil, err
	}
	fb = strings.TrimSpace(fb)
	switch {
	case fb == "":
		return nil, fmt.Errorf("feedback: say what the planner should change (it is empty)")
	case !utf8.ValidString(fb):
		return nil, fmt.Errorf("feedback: not UTF-8 text")
	}
	return map[string]any{"id": id, "feedback": fb}, nil
}

// loopNode is a loop in the tree with its children (in id order, as the
// CLI draws them).
type loopNode struct {
	api.LoopRecord
	Kids []*loopNode
}

// loopTree makes the tree of loops: roots (and loops whose parent is not
// among them) in the order given, each loop's children under it.
func loopTree(loops []api.LoopRecord) []*loopNode {
	byID := make(map[string]*loopNode, len(loops))
	for _, l := range loops {
		byID[l.ID] = &loopNode{LoopRecord: l}
	}
	var roots []*loopNode
	for _, l := range loops {
		n := byID[l.ID]
		if l.ParentID != nil && byID[*l.ParentID] != nil && *l.ParentID != l.ID {
			p := byID[*l.ParentID]
			p.Kids = append(p.Kids, n)
		} else {
			roots = append(roots, n)
		}
	}
	for _, n := range byID {
		sort.Slice(n.Kids, func(i, j int) bool { return n.Kids[i].ID < n.Kids[j].ID })
	}
	return roots
}

// listLoops reads the loops p selects, a page at a time, up to
// loopsListMax; cut says there were more.
func listLoops(ctx context.Context, s *Server, p api.LoopListParams) (loops []api.LoopRecord, cut bool, err error) {
	p.Limit = loopsListPage
	for {
		var res api.LoopListResult
		if err := s.call(ctx, "loop.list", p, &res); err != nil {
			return loops, false, err
		}
		loops = append(loops, res.Loops...)
		if res.NextCursor == "" {
			return loops, false, nil
		}
		if len(loops) >= loopsListMax {
			return loops, true, nil
		}
		p.Cursor = res.NextCursor
	}
}

// loopNote is what the tree says of a loop after "[type] id - status
// (iteration/max)", as the CLI's: why it failed, what it waits for.
func loopNote(l api.LoopRecord) string {
	var notes []string
	if l.Error != "" && (l.Status == api.LoopFailed || l.Status == api.LoopInvalidated) {
		notes = append(notes, l.Error)
	}
	if l.Status == api.LoopRunning {
		switch {
		case l.Stage == api.StageApproval && l.ApprovalID != "":
			notes = append(notes, "plan awaiting approval")
		case l.Stage == api.StageMerge && l.ApprovalID != "":
			notes = append(notes, "merge into "+l.Base+" awaiting approval")
		case l.Stage == api.StageChildren:
			notes = append(notes, "waiting for its children")
		case l.Stage == api.StageMergeWaiting && l.MergeWait != nil:
			notes = append(notes, "merge_waiting: "+l.MergeWait.Words()+": commit or stash them, then merge")
		}
	}
	if l.Status == api.LoopRebasing {
		notes = append(notes, "rebasing onto "+l.RebaseOnto+": "+api.Count(int(l.RebaseIterations), "rebase iteration"))
	}
	if l.Paused && !l.Status.Terminal() && l.Status != api.LoopPaused {
		notes = append(notes, "pausing after this iteration")
	}
	return strings.Join(notes, "; ")
}

// loopsView is the loops page: the tree of loop.list, filtered as
// `orchestrd loops --status --type`.
type loopsView struct {
	Roots  []*loopNode
	Count  int
	Status string
	Type   string
	Cut    bool
}

func loopsData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := loopsView{Status: q.Get("status"), Type: q.Get("type")}
	if v.Status != "" && !api.LoopStatus(v.Status).Valid() {
		return v, api.Errorf(api.CodeInvalidParams, "status: %q is not a loop status", clipForm(v.Status))
	}
	if v.Type != "" && !api.LoopType(v.Type).Valid() {
		return v, api.Errorf(api.CodeInvalidParams, "type: %q is not a loop type", clipForm(v.Type))
	}
	loops, cut, err := listLoops(ctx, s, api.LoopListParams{Status: api.LoopStatus(v.Status), LoopType: api.LoopType(v.Type)})
	if err != nil {
		return v, err
	}
	v.Roots = loopTree(loops)
	v.Count, v.Cut = len(loops), cut
	return v, nil
}

// loopSubtree reads the loops under l, a level at a time: loop.list by
// parent_id of each loop that spawned children (at most loopsListMax
// loops in all; cut says there were more).
func loopSubtree(ctx context.Context, s *Server, l api.LoopRecord) (kids []*loopNode, cut bool, err error) {
	root := &loopNode{LoopRecord: l}
	level := []*loopNode{root}
	seen := map[string]bool{l.ID: true}
	n := 0
	for len(level) > 0 {
		var next []*loopNode
		for _, p := range level {
			if p.Children == 0 && p != root {
				continue
			}
			if n >= loopsListMax {
				return root.Kids, true, nil
			}
			cs, more, err := listLoops(ctx, s, api.LoopListParams{ParentID: p.ID})
			if err != nil {
				return root.Kids, false, err
			}
			cut = cut || more
			for _, c := range cs {
				if seen[c.ID] {
					continue
				}
				seen[c.ID] = true
				node := &loopNode{LoopRecord: c}
				p.Kids = append(p.Kids, node)
				next = append(next, node)
				n++
			}
			sort.Slice(p.Kids, func(i, j int) bool { return p.Kids[i].ID < p.Kids[j].ID })
		}
		level = next
	}
	return root.Kids, cut, nil
}

// planPreview is plan.get_preview's answer: a plan awaiting approval
// (or a root's merge, an approval of kind merge, without specs).
type planPreview struct {
	ID      string   `json:"id"`
	Content string   `json:"content"`
	Specs   []string `json:"specs"`
	Status  string   `json:"status"`
}

// loopView is a loop's page.
type loopView struct {
	Loop       api.LoopRecord
	Iterations []api.LoopIteration
	Task       string // what the loop was asked (its context's task)
	Kids       []*loopNode
	Preview    *planPreview // the approval the loop waits for, while it is pending
	Merge      bool         // the preview is a merge's, not a plan's
	Cut        bool         // the loops under it were read in part
	Problems   []string     // what could not be read
}

func loopData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	var g api.LoopGetResult
	_, err := s.getByPath(ctx, r, "a loop", "loop.get", &g)
	if err != nil {
		return nil, err
	}
	v := loopView{Loop: g.Loop, Iterations: g.Iterations}
	var c struct {
		Task string `json:"task"`
	}
	if len(g.Loop.Context) > 0 && json.Unmarshal(g.Loop.Context, &c) == nil {
		v.Task = c.Task
	}
	l := g.Loop
	if l.Status == api.LoopRunning && (l.Stage == api.StageApproval || l.Stage == api.StageMerge) && l.ApprovalID != "" {
		var pv planPreview
		if err := s.call(ctx, "plan.get_preview", map[string]any{"id": l.ApprovalID}, &pv); err != nil {
			v.Problems = append(v.Problems, "the plan awaiting approval: "+err.Error())
		} else if pv.Status == string(api.ApprovalPending) {
			v.Preview, v.Merge = &pv, l.Stage == api.StageMerge
		}
	}
	// The loops under it, a level at a time (loop.list by parent_id, of
	// the loops that spawned some): not every loop of the daemon.
	v.Kids, v.Cut, err = loopSubtree(ctx, s, l)
	if err != nil {
		v.Problems = append(v.Problems, "the loops under it: "+err.Error())
	}
	return v, nil
}
