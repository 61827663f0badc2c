package loops

import (
	"cmp"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Register adds the loop.* methods to mux. plan.* are the approvals
// domain's (they take a plan loop's id through PlanApproval).
func (m *Manager) Register(mux api.Mux) {
	mux.Handle("loop.list", m.listMethod)
	mux.Handle("loop.get", m.getMethod)
	mux.Handle("loop.create_plan", m.createPlanMethod)
	mux.Handle("loop.create", m.createMethod)
	for _, op := range []string{"start", "pause", "resume", "cancel", "delete", "merge"} {
		mux.Handle("loop."+op, func(call api.Call) { m.controlMethod(call, op) })
	}
}

type idParams struct {
	ID string `json:"id"`
}

// maxDescription bounds a plan's description.
const maxDescription = 64 << 10

func (m *Manager) listMethod(call api.Call) {
	var p api.LoopListParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if p.Status != "" && !p.Status.Valid() {
		call.Fail(api.Errorf(api.CodeInvalidParams, "loop.list: status %q is not one of pending, running, paused, rebasing, complete, failed, invalidated", p.Status))
		return
	}
	if p.LoopType != "" && !p.LoopType.Valid() {
		call.Fail(api.Errorf(api.CodeInvalidParams, "loop.list: loop_type %q is not plan, spec, phase or code", p.LoopType))
		return
	}
	if p.Limit < 0 {
		call.Fail(api.Errorf(api.CodeInvalidParams, "loop.list: limit must be >= 0"))
		return
	}
	after := -1
	if p.Cursor != "" {
		n, err := strconv.Atoi(p.Cursor)
		if err != nil || n < 0 {
			call.Fail(api.Errorf(api.CodeInvalidParams, "loop.list: cursor %q is not one loop.list gave", p.Cursor))
			return
		}
		after = n
	}
	m.sys.Send(m.sup, snapshot{reply: func(all []api.LoopRecord) { m.list(call, p, after, all) }})
}

func (m *Manager) list(call api.Call, p api.LoopListParams, after int, all []api.LoopRecord) {
	// Oldest first (siblings are recorded as their actors start: by
	// created_at, then id).
	slices.SortStableFunc(all, func(a, b api.LoopRecord) int {
		if c := cmp.Compare(a.CreatedAt, b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	res := api.LoopListResult{Loops: []api.LoopRecord{}}
	for i, r := range all {
		if i <= after {
			continue
		}
		if p.Status != "" && r.Status != p.Status || p.LoopType != "" && r.LoopType != p.LoopType ||
			p.ParentID != "" && (r.ParentID == nil || *r.ParentID != p.ParentID) {
			continue
		}
		if p.Limit > 0 && len(res.Loops) == p.Limit {
			res.NextCursor = strconv.Itoa(i - 1)
			break
		}
		res.Loops = append(res.Loops, r)
	}
	call.Respond(res)
}

// get answers loop id's record as the supervisor knows it.
func (m *Manager) get(id string, reply func(api.LoopRecord, error)) {
	m.sys.Send(m.sup, snapshot{reply: func(all []api.LoopRecord) {
		for _, r := range all {
			if r.ID == id {
				reply(r, nil)
				return
			}
		}
		reply(api.LoopRecord{}, api.Errorf(api.CodeNotFound, "no loop %q", id))
	}})
}

func (m *Manager) getMethod(call api.Call) {
	var p idParams
	if !api.DecodeID(call, &p, &p.ID) {
		return
	}
	m.get(p.ID, func(r api.LoopRecord, err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		// Off the supervisor's goroutine: a read of the store.
		go func() {
			its, err := m.opts.Store.Iterations(p.ID)
			if err != nil {
				call.Fail(api.Errorf(api.CodeStoreUnavailable, "reading the iterations of loop %s: %v", p.ID, err))
				return
			}
			call.Respond(api.LoopGetResult{Loop: r, Iterations: its})
		}()
	})
}

func (m *Manager) createPlanMethod(call api.Call) {
	var p api.LoopCreatePlanParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	m.create(call, api.LoopPlan, p)
}

// loop.create {loop_type, description, repo?, base?} is orchestrd's: a
// root loop of any type (a code loop with a task, say).
func (m *Manager) createMethod(call api.Call) {
	var p api.LoopCreateParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if !p.LoopType.Valid() {
		call.Fail(api.Errorf(api.CodeInvalidParams, "loop.create: loop_type %q is not plan, spec, phase or code", p.LoopType))
		return
	}
	m.create(call, p.LoopType, api.LoopCreatePlanParams{Description: p.Description, Repo: p.Repo, Base: p.Base, MaxCostUSD: p.MaxCostUSD})
}

func (m *Manager) create(call api.Call, lt api.LoopType, p api.LoopCreatePlanParams) {
	switch {
	case strings.TrimSpace(p.Description) == "":
		call.Fail(api.Errorf(api.CodeInvalidParams, "%s: description is empty", call.Method()))
		return
	case len(p.Description) > maxDescription:
		call.Fail(api.Errorf(api.CodeInvalidParams, "%s: description is %d bytes, over %d", call.Method(), len(p.Description), maxDescription))
		return
	}
	if p.MaxCostUSD < 0 || p.MaxCostUSD > 1e6 || math.IsNaN(p.MaxCostUSD) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "%s: max_cost_usd must be between 0 ([loops] max_cost_usd) and 1000000, got %v", call.Method(), p.MaxCostUSD))
		return
	}
	repo := p.Repo
	if repo == "" {
		repo = m.cfg.Repo
	}
	if repo == "" {
		call.Fail(api.Errorf(api.CodeInvalidParams, "no repository for the loop: give one (orchestrd loop plan|code --repo DIR, or run it inside a git repository) or set [loops] repo"))
		return
	}
	if !filepath.IsAbs(repo) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "%s: repo must be an absolute path, got %q", call.Method(), repo))
		return
	}
	if p.Base != "" && (strings.HasPrefix(p.Base, "-") || strings.ContainsAny(p.Base, " \t\n\x00~^:?*[\\")) {
		call.Fail(api.Errorf(api.CodeInvalidParams, "%s: base %q is not a branch name", call.Method(), p.Base))
		return
	}
	m.mu.Lock()
	stopping := m.stopping
	m.mu.Unlock()
	if stopping {
		call.Fail(api.Errorf(api.CodeShuttingDown, "the daemon is stopping: no new loops"))
		return
	}
	go func() {
		if st, err := os.Stat(filepath.Join(repo, ".git")); err != nil || st == nil {
			call.Fail(api.Errorf(api.CodeInvalidParams, "%s: %s is not a git repository", call.Method(), repo))
			return
		}
		// The repository's real path: its worktrees are beneath it.
		real, err := filepath.EvalSymlinks(repo)
		if err != nil {
			call.Fail(api.Errorf(api.CodeInvalidParams, "%s: %v", call.Method(), err))
			return
		}
		repo = real
		base := p.Base
		if base == "" {
			b, err := m.opts.Git.CurrentBranch(repo)
			if err != nil {
				call.Fail(api.Errorf(api.CodeInvalidParams, "%s: finding the current branch of %s: %v", call.Method(), repo, err))
				return
			}
			base = b
		}
		now := time.Now()
		id := newRootID(now)
		r := m.newRoot(lt, id, repo, base, makeContext(p.Description, artifactFor(lt, id, p.Description)), now)
		if p.MaxCostUSD > 0 {
			r.MaxCostUSD = p.MaxCostUSD
		}
		m.sys.Send(m.sup, createLoop{rec: r, reply: func(rec api.LoopRecord, err error) {
			if err != nil {
				call.Fail(err)
				return
			}
			call.Respond(api.LoopCreatePlanResult{LoopID: rec.ID, ID: rec.ID, Status: "created"})
		}})
	}()
}

// newRoot is a root loop's first record.
func (m *Manager) newRoot(lt api.LoopType, id, repo, base string, ctx []byte, now time.Time) api.LoopRecord {
	tc := m.cfg.For(lt)
	return api.LoopRecord{ID: id, LoopType: lt, OutputArtifacts: []string{}, PromptPath: m.cfg.Prompts[string(lt)], ValidationCommand: tc.ValidationCommand,
		MaxIterations: tc.MaxIterations, Worktree: worktreeDir(repo, id), Status: api.LoopPending, Context: ctx,
		CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli(), Repo: repo, Base: base, Branch: "loop/" + id,
		MaxCostUSD: m.cfg.MaxCostUSD}
}

// Create starts a root loop of any type (a code loop straight away, say)
// with task as its context's task; reply gets its first record once it is
// committed. Not on the wire (Loopr's client creates plans): for the CLI
// and tests.
func (m *Manager) Create(lt api.LoopType, task, repo, base string, reply func(api.LoopRecord, error)) {
	if !lt.Valid() || !filepath.IsAbs(repo) || base == "" {
		reply(api.LoopRecord{}, api.Errorf(api.CodeInvalidParams, "loops: a loop needs a type, an absolute repo and a base"))
		return
	}
	now := time.Now()
	id := newRootID(now)
	m.sys.Send(m.sup, createLoop{rec: m.newRoot(lt, id, repo, base, makeContext(task, artifactFor(lt, id, task)), now), reply: reply})
}

func (m *Manager) controlMethod(call api.Call, op string) {
	var p idParams
	if !api.DecodeID(call, &p, &p.ID) {
		return
	}
	m.Control(op, p.ID, func(v any, err error) {
		if err != nil {
			call.Fail(err)
			return
		}
		if rec, ok := v.(api.LoopRecord); ok {
			call.Respond(map[string]any{"loop": rec})
			return
		}
		if v == nil {
			v = map[string]any{}
		}
		call.Respond(v)
	})
}

// Control does loop.start, pause, resume, cancel, delete or merge to loop id;
// reply runs once on any goroutine.
func (m *Manager) Control(op, id string, reply func(any, error)) {
	m.sys.Send(m.sup, control{op: op, id: id, reply: reply})
}
