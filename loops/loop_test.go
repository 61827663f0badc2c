package loops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/loops/gitwt"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

func testConfig() Config {
	c := DefaultConfig()
	c.AutoMerge = true
	c.Code.ValidationCommand = "make check"
	return c
}

// A failed validation's output is the next prompt's feedback; the loop
// completes at the iteration that passes, committed and merged.
func TestIterationFeedback(t *testing.T) {
	var n atomic.Int32
	jobs := &fakeJobs{result: func(spec api.JobSpec, _ <-chan struct{}) JobResult {
		if spec.Argv[2] != "make check" || spec.Lane != "no-net" || spec.TimeoutMs != 300000 {
			t.Errorf("validation job: %+v", spec)
		}
		if n.Add(1) == 1 {
			return JobResult{State: api.StateFailed, ExitCode: exit(2), Duration: 1500 * time.Millisecond, Tail: []byte("FAIL: widget_test.go:12")}
		}
		return JobResult{State: api.StateSucceeded, ExitCode: exit(0)}
	}}
	h := newHarness(t, testConfig(), &fakeAgents{work: completes}, jobs)
	id := h.create(api.LoopCode, "make the widget")
	r := h.waitStatus(id, api.LoopComplete)
	if r.Iteration != 2 || !strings.Contains(r.Progress, "## Iteration 1 Failed\n"+
		"The validation command failed: exit 2, after 1.5s.\nCommand: make check\nOutput:\nFAIL: widget_test.go:12\n") {
		t.Fatalf("record: %+v", r)
	}
	ps := h.agents.prompts()
	if len(ps) != 2 || strings.Contains(ps[0], "Previous Iteration Feedback") ||
		!strings.Contains(ps[1], "## Previous Iteration Feedback") || !strings.Contains(ps[1], "FAIL: widget_test.go:12") {
		t.Fatalf("prompts: %q", ps)
	}
	its, _ := h.store.Iterations(id)
	if len(its) != 2 || its[0].Passed || its[0].Status != "failed" || !its[1].Passed || its[1].Commit == "" {
		t.Fatalf("iterations: %+v", its)
	}
	if h.agents.specs[1].Loop == nil || h.agents.specs[1].Loop.Iteration != 2 || h.agents.specs[1].Loop.ID != id {
		t.Fatalf("task loop: %+v", h.agents.specs[1].Loop)
	}
	h.git.mu.Lock()
	merges := h.git.merges
	h.git.mu.Unlock()
	if len(merges) != 1 || merges[0] != "loop/"+id+">main" {
		t.Fatalf("merges: %v", merges)
	}
	// Merged: its branch is deleted once its worktree is gone.
	h.waitFor("the merged branch deleted", func() bool { return slices.Equal(h.git.deletedBranches(), []string{"loop/" + id}) })
	if r := h.rec(id); r.MergedInto != "main" {
		t.Fatalf("merged_into: %q", r.MergedInto)
	}
}

// keep_branches keeps a merged loop's branch; an unmerged one is always
// kept.
func TestBranchesKept(t *testing.T) {
	cfg := testConfig()
	cfg.KeepBranches = true
	h := newHarness(t, cfg, &fakeAgents{work: completes}, &fakeJobs{result: func(api.JobSpec, <-chan struct{}) JobResult {
		return JobResult{State: api.StateSucceeded, ExitCode: exit(0)}
	}})
	id := h.create(api.LoopCode, "x")
	h.waitStatus(id, api.LoopComplete)
	h.waitFor("the worktree removed", func() bool {
		h.git.mu.Lock()
		defer h.git.mu.Unlock()
		return len(h.git.removed) == 1
	})
	cfg = testConfig()
	cfg.Code.MaxIterations = 1
	h2 := newHarness(t, cfg, &fakeAgents{work: completes}, &fakeJobs{result: func(api.JobSpec, <-chan struct{}) JobResult {
		return JobResult{State: api.StateFailed, ExitCode: exit(1)}
	}})
	id2 := h2.create(api.LoopCode, "y")
	if r := h2.waitStatus(id2, api.LoopFailed); r.MergedInto != "" {
		t.Fatalf("a failed loop merged into %q", r.MergedInto)
	}
	h2.waitFor("the worktree removed", func() bool {
		h2.git.mu.Lock()
		defer h2.git.mu.Unlock()
		return len(h2.git.removed) == 1
	})
	if d := append(h.git.deletedBranches(), h2.git.deletedBranches()...); len(d) != 0 {
		t.Fatalf("deleted: %v", d)
	}
}

func TestMaxIterationsFails(t *testing.T) {
	cfg := testConfig()
	cfg.Code.MaxIterations = 3
	jobs := &fakeJobs{result: func(api.JobSpec, <-chan struct{}) JobResult {
		return JobResult{State: api.StateFailed, ExitCode: exit(1), Tail: []byte("no")}
	}}
	h := newHarness(t, cfg, &fakeAgents{work: completes}, jobs)
	id := h.create(api.LoopCode, "x")
	r := h.waitStatus(id, api.LoopFailed)
	if r.Error != api.LoopErrMaxIterations || r.Iteration != 3 || strings.Count(r.Progress, "Output:\nno\n") != 3 {
		t.Fatalf("record: %+v", r)
	}
}

// At most max_running loops run an iteration at once, oldest first.
func TestSchedulerMaxRunning(t *testing.T) {
	cfg := testConfig()
	cfg.MaxRunning = 1
	release := make(chan struct{})
	var running, most atomic.Int32
	agents := &fakeAgents{work: func(api.TaskSpec, <-chan struct{}) api.TaskState {
		if n := running.Add(1); n > most.Load() {
			most.Store(n)
		}
		<-release
		running.Add(-1)
		return api.TaskCompleted
	}}
	h := newHarness(t, cfg, agents, &fakeJobs{result: passes})
	a := h.create(api.LoopCode, "a")
	time.Sleep(2 * time.Millisecond) // distinct created_at
	b := h.create(api.LoopCode, "b")
	h.waitStatus(a, api.LoopRunning)
	if st := h.rec(b).Status; st != api.LoopPending {
		t.Fatalf("b is %s while a runs", st)
	}
	close(release)
	h.waitStatus(a, api.LoopComplete)
	h.waitStatus(b, api.LoopComplete)
	if most.Load() != 1 {
		t.Fatalf("%d ran at once", most.Load())
	}
}

// The state table: every method in every status, allowed or 1002.
func TestStateTable(t *testing.T) {
	want := map[string][]api.LoopStatus{
		"start":  {api.LoopPending, api.LoopPaused},
		"pause":  {api.LoopPending, api.LoopRunning, api.LoopRebasing},
		"resume": {api.LoopPaused},
		"cancel": {api.LoopPending, api.LoopRunning, api.LoopPaused, api.LoopRebasing},
		"delete": {api.LoopPending, api.LoopPaused, api.LoopComplete, api.LoopFailed, api.LoopInvalidated},
	}
	for op, ok := range want {
		for _, st := range api.LoopStatuses {
			err := allowed(op, "l-1", st)
			yes := false
			for _, s := range ok {
				yes = yes || s == st
			}
			var ae *api.Error
			switch {
			case yes && err != nil:
				t.Errorf("%s on %s: %v, want allowed", op, st, err)
			case !yes && (!errors.As(err, &ae) || ae.Code != api.CodeInvalidState || !strings.Contains(err.Error(), string(st))):
				t.Errorf("%s on %s: %v, want 1002 naming the status", op, st, err)
			case !yes && (strings.Contains(err.Error(), "loop."+op) || !strings.Contains(err.Error(), "orchestrd loop ")):
				t.Errorf("%s on %s: %q names a method, want the CLI's commands", op, st, err)
			}
		}
	}
}

// pause lets the running iteration finish (its result kept) and starts no
// new one; resume goes on; cancel stops the task and the job at once.
func TestPauseResumeCancel(t *testing.T) {
	step := make(chan struct{})
	agents := &fakeAgents{work: func(_ api.TaskSpec, stop <-chan struct{}) api.TaskState {
		select {
		case <-step:
			return api.TaskCompleted
		case <-stop:
			return api.TaskCancelled
		}
	}}
	jobs := &fakeJobs{result: func(_ api.JobSpec, cancel <-chan struct{}) JobResult {
		return JobResult{State: api.StateFailed, ExitCode: exit(1), Tail: []byte("again")}
	}}
	h := newHarness(t, testConfig(), agents, jobs)
	id := h.create(api.LoopCode, "x")
	h.waitStatus(id, api.LoopRunning)
	h.waitFor("the task", func() bool { return h.rec(id).TaskID != "" })
	if _, err := h.control("pause", id); err != nil {
		t.Fatal(err)
	}
	if _, err := h.control("resume", id); err == nil || !strings.Contains(err.Error(), "running") {
		t.Fatalf("resume of a running loop: %v", err)
	}
	step <- struct{}{} // iteration 1 ends; its validation fails
	r := h.waitStatus(id, api.LoopPaused)
	if r.Iteration != 1 || !strings.Contains(r.Progress, "again") {
		t.Fatalf("paused: %+v", r)
	}
	its, _ := h.store.Iterations(id)
	if len(its) != 1 || its[0].Status != "failed" {
		t.Fatalf("the iteration's result was not kept: %+v", its)
	}
	if _, err := h.control("delete", api.ChildLoopID(id, 9)); err == nil {
		t.Fatal("delete of no loop")
	}
	if _, err := h.control("resume", id); err != nil {
		t.Fatal(err)
	}
	h.waitFor("iteration 2", func() bool { r := h.rec(id); return r.Iteration == 2 && r.TaskID != "" })
	if _, err := h.control("delete", id); err == nil || !strings.Contains(err.Error(), "running") {
		t.Fatalf("delete of a running loop: %v", err)
	}
	task := h.rec(id).TaskID
	if _, err := h.control("cancel", id); err != nil {
		t.Fatal(err)
	}
	r = h.waitStatus(id, api.LoopFailed)
	if r.Error != api.LoopErrCancelled {
		t.Fatalf("cancelled: %+v", r)
	}
	h.agents.mu.Lock()
	stopped := h.agents.stopped
	h.agents.mu.Unlock()
	if len(stopped) != 1 || stopped[0] != task {
		t.Fatalf("stopped tasks: %v, want %s", stopped, task)
	}
	if _, err := h.control("delete", id); err != nil {
		t.Fatal(err)
	}
	if len(h.store.loops) != 0 {
		t.Fatalf("records after delete: %v", h.store.loops)
	}
}

const planDoc = `# Plan
## Specs to Create
- spec-alpha: the first
- spec-beta: the second
## Notes
- spec-gamma: not a spec, not in the section
`

const specDoc = `# Spec
## Phases
1. **Build** - it
2. **Test** - it
`

// treeWork is an agent's work for a whole tree: each plan, spec and phase
// task writes its artifact (planDoc, specDoc, a phase of one step). A task
// its loop stopped (the tree failed) may find its worktree removed under
// it: that is no error of the test's.
func treeWork(t *testing.T) func(api.TaskSpec, <-chan struct{}) api.TaskState {
	return func(spec api.TaskSpec, stop <-chan struct{}) api.TaskState {
		var err error
		switch spec.Loop.LoopType {
		case api.LoopPlan:
			err = writeArtifact(spec, planDoc)
		case api.LoopSpec:
			err = writeArtifact(spec, specDoc)
		case api.LoopPhase:
			err = writeArtifact(spec, "# Phase\nDo it.\n")
		}
		if err != nil {
			select {
			case <-stop:
				return api.TaskCancelled
			default:
				t.Error(err)
			}
		}
		return api.TaskCompleted
	}
}

// A plan runs to a merged tree: approval spawns one spec per listed spec,
// each spec a phase per phase, each phase a code loop; children merge
// into their parents, the root into its base.
func TestPlanTree(t *testing.T) {
	h := newHarness(t, testConfig(), &fakeAgents{work: treeWork(t)}, &fakeJobs{result: passes})
	id := h.create(api.LoopPlan, "build a thing")
	a := h.waitAsk(0, "the plan's approval")
	if a.kind != api.KindPlan || a.content != planDoc || strings.Join(a.specs, ",") != "spec-alpha,spec-beta" || a.loopID != id {
		t.Fatalf("ask: %+v", a)
	}
	if ap, ok := h.m.PlanApproval(id); !ok || ap != "a-1" {
		t.Fatalf("PlanApproval: %q %v", ap, ok)
	}
	a.answer(GateAnswer{Approved: true})
	r := h.waitStatus(id, api.LoopComplete)
	if r.Children != 2 {
		t.Fatalf("root: %+v", r)
	}
	all, _ := h.store.Loops()
	// 1 plan, 2 specs, 4 phases, 4 code loops.
	counts := map[api.LoopType]int{}
	for _, l := range all {
		counts[l.LoopType]++
		if l.Status != api.LoopComplete {
			t.Errorf("%s is %s", l.ID, l.Status)
		}
	}
	if counts[api.LoopSpec] != 2 || counts[api.LoopPhase] != 4 || counts[api.LoopCode] != 4 {
		t.Fatalf("loops by type: %v", counts)
	}
	spec := h.rec(api.ChildLoopID(id, 1))
	if spec.ParentID == nil || *spec.ParentID != id || spec.InputArtifact == nil || *spec.InputArtifact != artifactPath(h.rec(id)) {
		t.Fatalf("spec: %+v", spec)
	}
	h.git.mu.Lock()
	merges := h.git.merges
	h.git.mu.Unlock()
	if len(merges) != 11 || merges[len(merges)-1] != "loop/"+id+">main" {
		t.Fatalf("merges: %v", merges)
	}
}

// A failed child lets its siblings finish; the parent fails naming it. A
// conflicting merge makes the child rebase (here onto a head it still
// conflicts with: it fails merge_conflict after one round, naming the
// command to look); with max_rebase_iterations = 0 it fails at once.
func TestChildConflictFailsParent(t *testing.T) {
	for _, max := range []int{3, 0} {
		t.Run(fmt.Sprint("max_rebase_iterations=", max), func(t *testing.T) {
			childConflictFailsParent(t, max)
		})
	}
}

func childConflictFailsParent(t *testing.T, maxRebase int) {
	agents := &fakeAgents{work: func(spec api.TaskSpec, _ <-chan struct{}) api.TaskState {
		if spec.Loop.LoopType == api.LoopSpec {
			if err := writeArtifact(spec, specDoc); err != nil {
				t.Error(err)
			}
		}
		if spec.Loop.LoopType == api.LoopPhase {
			if err := writeArtifact(spec, "p"); err != nil {
				t.Error(err)
			}
		}
		return api.TaskCompleted
	}}
	cfg := testConfig()
	cfg.MaxRebaseIterations = maxRebase
	h := newHarness(t, cfg, agents, &fakeJobs{result: passes})
	// A spec root: its first phase's code loop conflicts.
	root := "1-root"
	phase1 := api.ChildLoopID(root, 1)
	h.git.conflict["loop/"+api.ChildLoopID(phase1, 1)] = true
	h.createSpecRoot(root)
	got := h.waitStatus(root, api.LoopFailed)
	if got.Error != api.LoopErrChildFailed || !strings.Contains(got.Message, phase1) {
		t.Fatalf("root: %+v", got)
	}
	c := h.rec(api.ChildLoopID(phase1, 1))
	if c.Error != api.LoopErrMergeConflict || !strings.Contains(c.Message, "loop/") {
		t.Fatalf("the conflicting code loop: %+v", c)
	}
	h.git.mu.Lock()
	rebases := h.git.rebases
	h.git.mu.Unlock()
	if maxRebase > 0 && (c.RebaseOnto != "loop/"+phase1 || rebases != 2 || !strings.Contains(c.Message, "orchestrd loop show "+c.ID)) ||
		maxRebase == 0 && (c.RebaseOnto != "" || rebases != 0) {
		t.Fatalf("the conflicting code loop (%d rebases): %+v", rebases, c)
	}
	if p2 := h.rec(api.ChildLoopID(root, 2)); p2.Status != api.LoopComplete {
		t.Fatalf("the sibling: %+v", p2)
	}
}

// A child whose merge conflicts goes rebasing; its rebase iterations
// (their prompts the conflicts) are not counted in max_iterations: one
// whose agent leaves markers fails with feedback naming the files, the
// next one resolves, and the child merges.
func TestRebaseIterations(t *testing.T) {
	var prompts []string
	var mu sync.Mutex
	agents := &fakeAgents{work: specRootWork(t, func(spec api.TaskSpec) {
		if spec.Loop.ID == api.ChildLoopID(api.ChildLoopID("1-root", 1), 1) {
			mu.Lock()
			prompts = append(prompts, spec.Prompt)
			mu.Unlock()
		}
	})}
	cfg := testConfig()
	cfg.Code.MaxIterations = 1
	h := newHarness(t, cfg, agents, &fakeJobs{result: passes})
	root := "1-root"
	phase1 := api.ChildLoopID(root, 1)
	code := api.ChildLoopID(phase1, 1)
	h.git.mu.Lock()
	h.git.conflict["loop/"+code] = true
	h.git.rebaseConflicts = []gitwt.Conflict{{Path: "a.go", Hunks: "<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> x\n"}, {Path: "bin.dat"}}
	h.git.unresolved = [][]string{{"a.go"}, nil}
	h.git.mu.Unlock()
	h.createSpecRoot(root)
	h.waitStatus(root, api.LoopComplete)
	c := h.rec(code)
	if c.Status != api.LoopComplete || c.Iteration != 3 || c.RebaseIterations != 2 || c.RebaseOnto != "loop/"+phase1 || c.MergedInto != "loop/"+phase1 {
		t.Fatalf("the rebased code loop: %+v", c)
	}
	its, err := h.store.Iterations(code)
	if err != nil || len(its) != 3 || its[0].Rebase || !its[1].Rebase || its[1].Passed || !its[2].Rebase || !its[2].Passed {
		t.Fatalf("its iterations: %v %+v", err, its)
	}
	if !strings.Contains(its[1].Feedback, "Conflict markers") || !strings.Contains(its[1].Feedback, "a.go") {
		t.Fatalf("the refused resolution's feedback: %q", its[1].Feedback)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(prompts) != 3 || !strings.Contains(prompts[1], "## a.go\n\n```\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> x\n```") ||
		!strings.Contains(prompts[1], "## bin.dat\n\n(no conflict markers") || !strings.Contains(prompts[1], "rebase iteration 1 of at most 3") ||
		!strings.Contains(prompts[2], "## The last rebase iteration") || !strings.Contains(prompts[2], "rebase iteration 2 of at most 3") {
		t.Fatalf("the %d rebase prompts:\n%s", len(prompts), strings.Join(prompts, "\n-----\n"))
	}
	h.waitFor("loop.rebased", func() bool {
		return slices.ContainsFunc(h.seen.Records(), func(r *eventlog.Record) bool {
			ev, ok := r.Event.(LoopRebased)
			return ok && ev.ID == code && ev.Commit == "resolved" && ev.Iteration == 3
		})
	})
}

// specRootWork is an agent's work under a spec root: spec and phase tasks
// write their artifacts (specDoc, a phase "p"), code tasks do code.
func specRootWork(t *testing.T, code func(api.TaskSpec)) func(api.TaskSpec, <-chan struct{}) api.TaskState {
	return func(spec api.TaskSpec, _ <-chan struct{}) api.TaskState {
		switch spec.Loop.LoopType {
		case api.LoopSpec:
			if err := writeArtifact(spec, specDoc); err != nil {
				t.Error(err)
			}
		case api.LoopPhase:
			if err := writeArtifact(spec, "p"); err != nil {
				t.Error(err)
			}
		case api.LoopCode:
			code(spec)
		}
		return api.TaskCompleted
	}
}

// A rebasing child paused while its rebase iteration runs: the iteration
// finishes (its markers refused), the loop pauses with its rebase kept;
// resumed, it goes on rebasing (a rebase iteration, never a plain one)
// and merges.
func TestRebasePauseResume(t *testing.T) {
	code := api.ChildLoopID(api.ChildLoopID("1-root", 1), 1)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	agents := &fakeAgents{work: specRootWork(t, func(spec api.TaskSpec) {
		if spec.Loop.ID == code && strings.HasPrefix(spec.Prompt, "# Rebase of") {
			once.Do(func() {
				close(started)
				<-release
			})
		}
	})}
	h := newHarness(t, testConfig(), agents, &fakeJobs{result: passes})
	h.git.mu.Lock()
	h.git.conflict["loop/"+code] = true
	h.git.rebaseConflicts = []gitwt.Conflict{{Path: "a.go", Hunks: "<<<<<<< HEAD\n=======\n>>>>>>> x\n"}}
	h.git.unresolved = [][]string{{"a.go"}, nil}
	h.git.mu.Unlock()
	h.createSpecRoot("1-root")
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no rebase iteration started")
	}
	if got := h.waitStatus(code, api.LoopRebasing); got.RebaseIterations != 1 {
		t.Fatalf("rebasing: %+v", got)
	}
	if _, err := h.control("pause", code); err != nil {
		t.Fatal(err)
	}
	close(release)
	if p := h.waitStatus(code, api.LoopPaused); p.RebaseOnto == "" || p.Iteration != 2 {
		t.Fatalf("paused: %+v", p)
	}
	if _, err := h.control("resume", code); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("1-root", api.LoopComplete)
	its, err := h.store.Iterations(code)
	if err != nil || len(its) != 3 || its[0].Rebase || !its[1].Rebase || its[1].Passed || !its[2].Rebase || !its[2].Passed {
		t.Fatalf("its iterations: %v %+v", err, its)
	}
}

// plan.reject ends the plan failed; plan.iterate runs it again with the
// feedback.
func TestPlanRejectIterate(t *testing.T) {
	agents := &fakeAgents{work: func(spec api.TaskSpec, _ <-chan struct{}) api.TaskState {
		if err := writeArtifact(spec, planDoc); err != nil {
			t.Error(err)
		}
		return api.TaskCompleted
	}}
	h := newHarness(t, testConfig(), agents, &fakeJobs{result: passes})
	id := h.create(api.LoopPlan, "p")
	h.waitAsk(0, "ask 1").answer(GateAnswer{Iterate: true, Feedback: "MORE-TESTS"})
	a := h.waitAsk(1, "ask 2")
	ps := h.agents.prompts()
	if len(ps) != 2 || !strings.Contains(ps[1], "MORE-TESTS") || h.rec(id).Iteration != 2 {
		t.Fatalf("prompts after iterate: %q", ps)
	}
	a.answer(GateAnswer{Reason: "denied: no"})
	r := h.waitStatus(id, api.LoopFailed)
	if r.Error != api.LoopErrPlanRejected {
		t.Fatalf("rejected: %+v", r)
	}
}

// A plan artifact that does not parse is feedback like a failed command.
func TestArtifactCheckFeedback(t *testing.T) {
	var n atomic.Int32
	agents := &fakeAgents{work: func(spec api.TaskSpec, _ <-chan struct{}) api.TaskState {
		doc := "# no specs\n"
		if n.Add(1) > 1 {
			doc = planDoc
		}
		if err := writeArtifact(spec, doc); err != nil {
			t.Error(err)
		}
		return api.TaskCompleted
	}}
	h := newHarness(t, testConfig(), agents, &fakeJobs{result: passes})
	id := h.create(api.LoopPlan, "p")
	h.waitAsk(0, "the ask")
	r := h.rec(id)
	if r.Iteration != 2 || !strings.Contains(r.Progress, "Specs to Create") {
		t.Fatalf("record: %+v", r)
	}
}

// A task that hit a usage limit pauses its loop, which resumes by itself
// after usage_limit_pause; the interrupted iteration is not retried under
// its number.
func TestUsageLimitPause(t *testing.T) {
	cfg := testConfig()
	cfg.UsageLimitPause.Duration = 50 * time.Millisecond
	var n atomic.Int32
	agents := &fakeAgents{work: func(api.TaskSpec, <-chan struct{}) api.TaskState {
		if n.Add(1) == 1 {
			return api.TaskFailed
		}
		return api.TaskCompleted
	}, failCode: func(api.TaskSpec) string { return "usage_limit_exceeded" }}
	h := newHarness(t, cfg, agents, &fakeJobs{result: passes})
	id := h.create(api.LoopCode, "x")
	r := h.waitStatus(id, api.LoopComplete)
	if r.Iteration != 2 {
		t.Fatalf("record: %+v", r)
	}
	var paused, resumed bool
	for len(h.ev) > 0 {
		e := <-h.ev
		if p, ok := e.Event.(LoopPaused); ok && p.Reason == "usage_limit" {
			paused = true
		}
		if p, ok := e.Event.(LoopResumed); ok && p.Reason == "usage_limit_passed" {
			resumed = true
		}
	}
	if !paused || !resumed {
		t.Fatalf("paused %v, resumed %v", paused, resumed)
	}
}

// A loop paused for a usage limit keeps its resume time across a restart:
// one whose time passed while the daemon was down resumes at once, one
// whose time is to come stays paused until then, and one a person paused
// stays paused.
func TestUsageLimitPauseSurvivesRestart(t *testing.T) {
	var due, later, held api.LoopRecord
	seed := func(h *harness) {
		mk := func(id string, resumeAt time.Time) api.LoopRecord {
			r := h.m.newRoot(api.LoopCode, id, h.repo, "main", makeContext("t", ""), time.Now())
			r.Status, r.Iteration = api.LoopPaused, 1
			if !resumeAt.IsZero() {
				r.ResumeAt = resumeAt.UnixMilli()
			}
			if err := os.MkdirAll(r.Worktree, 0o755); err != nil {
				t.Fatal(err)
			}
			_ = h.store.SaveLoop(r, func(error) {})
			return r
		}
		due = mk("1-due", time.Now().Add(-time.Minute))
		later = mk("2-later", time.Now().Add(time.Hour))
		held = mk("3-held", time.Time{})
	}
	h := newHarness(t, testConfig(), &fakeAgents{work: completes}, &fakeJobs{result: passes}, seed)
	if r := h.waitStatus(due.ID, api.LoopComplete); r.Iteration != 2 || r.ResumeAt != 0 {
		t.Fatalf("the loop whose pause ended: %+v", r)
	}
	if r := h.rec(later.ID); r.Status != api.LoopPaused || r.ResumeAt != later.ResumeAt {
		t.Fatalf("the loop whose pause goes on: %+v", r)
	}
	if r := h.rec(held.ID); r.Status != api.LoopPaused {
		t.Fatalf("the loop a person paused: %+v", r)
	}
	if _, err := h.control("resume", later.ID); err != nil {
		t.Fatal(err)
	}
	if r := h.waitStatus(later.ID, api.LoopComplete); r.ResumeAt != 0 {
		t.Fatalf("resumed by hand: %+v", r)
	}
}

// cancel takes every live descendant; delete removes them all.
func TestCancelCascadesDeleteRemovesTree(t *testing.T) {
	agents := &fakeAgents{work: func(spec api.TaskSpec, stop <-chan struct{}) api.TaskState {
		switch spec.Loop.LoopType {
		case api.LoopPlan:
			if err := writeArtifact(spec, planDoc); err != nil {
				t.Error(err)
			}
		case api.LoopSpec:
			<-stop // the specs run until cancelled
			return api.TaskCancelled
		}
		return api.TaskCompleted
	}}
	h := newHarness(t, testConfig(), agents, &fakeJobs{result: passes})
	id := h.create(api.LoopPlan, "p")
	h.waitAsk(0, "the ask").answer(GateAnswer{Approved: true})
	s1, s2 := api.ChildLoopID(id, 1), api.ChildLoopID(id, 2)
	h.waitFor("both specs' tasks", func() bool { return h.rec(s1).TaskID != "" && h.rec(s2).TaskID != "" })
	if _, err := h.control("delete", id); err == nil {
		t.Fatal("delete of a tree with running loops")
	}
	if _, err := h.control("cancel", id); err != nil {
		t.Fatal(err)
	}
	for _, x := range []string{id, s1, s2} {
		if r := h.waitStatus(x, api.LoopFailed); r.Error != api.LoopErrCancelled {
			t.Fatalf("%s: %+v", x, r)
		}
	}
	h.agents.mu.Lock()
	stopped := len(h.agents.stopped)
	h.agents.mu.Unlock()
	if stopped != 2 {
		t.Fatalf("%d tasks stopped, want the two specs'", stopped)
	}
	if _, err := h.control("delete", id); err != nil {
		t.Fatal(err)
	}
	if all, _ := h.store.Loops(); len(all) != 0 {
		t.Fatalf("left after delete: %+v", all)
	}
	if _, err := h.control("get", id); err == nil {
		t.Fatal("a deleted loop is still known")
	}
}

// Recover: a loop left mid-iteration has its work committed as WIP, its
// iteration marked interrupted, and goes on with the next number; a loop
// whose worktree is gone fails worktree_gone.
func TestRecover(t *testing.T) {
	var alive, gone api.LoopRecord
	seed := func(h *harness) {
		mk := func(id string) api.LoopRecord {
			r := h.m.newRoot(api.LoopCode, id, h.repo, "main", makeContext("t", ""), time.Now())
			r.Status, r.Stage, r.Iteration, r.TaskID, r.JobID = api.LoopRunning, api.StageIterating, 3, "t-old", "j-old"
			return r
		}
		alive, gone = mk("1-alive"), mk("2-gone")
		if err := os.MkdirAll(alive.Worktree, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, r := range []api.LoopRecord{alive, gone} {
			_ = h.store.SaveLoop(r, func(error) {})
			_ = h.store.SaveIteration(api.LoopIteration{LoopID: r.ID, Iteration: 3, Status: "running", TaskID: "t-old"}, func(error) {})
		}
	}
	h := newHarness(t, testConfig(), &fakeAgents{work: completes}, &fakeJobs{result: passes}, seed)
	r := h.waitStatus(alive.ID, api.LoopComplete)
	if r.Iteration != 4 {
		t.Fatalf("recovered: %+v", r)
	}
	its, _ := h.store.Iterations(alive.ID)
	if len(its) != 2 || its[0].Iteration != 3 || its[0].Status != "interrupted" || its[0].Commit != "wip" ||
		its[1].Iteration != 4 || !its[1].Passed {
		t.Fatalf("iterations: %+v", its)
	}
	if g := h.waitStatus(gone.ID, api.LoopFailed); g.Error != api.LoopErrWorktreeGone {
		t.Fatalf("worktree gone: %+v", g)
	}
	h.jobs.mu.Lock()
	cancelled := h.jobs.cancelled
	h.jobs.mu.Unlock()
	if len(cancelled) < 1 || cancelled[0] != "j-old" {
		t.Fatalf("the old validation jobs cancelled: %v", cancelled)
	}
	if ps := h.agents.prompts(); len(ps) != 1 {
		t.Fatalf("%d tasks ran, want one (iteration 4)", len(ps))
	}
}

// A loop whose actor panics is failed (actor_failed), committed, not left
// running for ever nor run again; the other loops go on.
func TestLoopActorPanicFailsTheLoop(t *testing.T) {
	jobs := &fakeJobs{result: func(api.JobSpec, <-chan struct{}) JobResult {
		return JobResult{State: api.StateSucceeded, ExitCode: exit(0)}
	}}
	h := newHarness(t, testConfig(), &fakeAgents{work: completes, panics: true}, jobs)
	id := h.create(api.LoopCode, "make the widget")
	r := h.waitStatus(id, api.LoopFailed)
	if r.Error != api.LoopErrActorFailed || r.TaskID != "" {
		t.Fatalf("record: %+v", r)
	}
	h.waitFor("the failed loop in the store", func() bool {
		recs, _ := h.store.Loops()
		for _, s := range recs {
			if s.ID == id {
				return s.Status == api.LoopFailed && s.Error == api.LoopErrActorFailed
			}
		}
		return false
	})
	// A loop created after it runs (its slot was given back).
	if h.panics.Load() != 1 {
		t.Fatalf("%d panics, want 1", h.panics.Load())
	}
	h.agents.mu.Lock()
	h.agents.panics = false
	h.agents.mu.Unlock()
	id2 := h.create(api.LoopCode, "another")
	h.waitStatus(id2, api.LoopComplete)
}

// CountsByType counts the loops by type and status (every type and
// status there, zeros too), as Counts does by status.
func TestCountsByType(t *testing.T) {
	cfg := testConfig()
	cfg.Code.MaxIterations = 1
	jobs := &fakeJobs{result: func(spec api.JobSpec, _ <-chan struct{}) JobResult {
		return JobResult{State: api.StateFailed, ExitCode: exit(1), Tail: []byte("no")}
	}}
	h := newHarness(t, cfg, &fakeAgents{work: completes}, jobs)
	a, b := h.create(api.LoopCode, "a"), h.create(api.LoopCode, "b")
	h.waitStatus(a, api.LoopFailed)
	h.waitStatus(b, api.LoopFailed)
	h.waitFor("the supervisor's recount", func() bool { return h.m.CountsByType()[api.LoopCode][api.LoopFailed] == 2 })
	byType := h.m.CountsByType()
	byStatus, _ := h.m.Counts()
	if len(byType) != len(api.LoopTypes) {
		t.Fatalf("types %v, want every one of %v", byType, api.LoopTypes)
	}
	for _, lt := range api.LoopTypes {
		if len(byType[lt]) != len(api.LoopStatuses) {
			t.Fatalf("%s: statuses %v, want every one", lt, byType[lt])
		}
		for st, n := range byType[lt] {
			if lt != api.LoopCode && n != 0 || lt == api.LoopCode && n != byStatus[st] {
				t.Fatalf("%s %s: %d (by status: %v)", lt, st, n, byStatus)
			}
		}
	}
}

// A validation job that changed the git directory fails the loop
// git_tampered before anything is committed; the task carries the
// confinement of its worktree.
func TestGitTamperedFails(t *testing.T) {
	var h *harness
	jobs := &fakeJobs{result: func(api.JobSpec, <-chan struct{}) JobResult {
		h.git.mu.Lock()
		h.git.tampered = []string{"config", "hooks/post-index-change"}
		h.git.mu.Unlock()
		return JobResult{State: api.StateSucceeded, ExitCode: exit(0)}
	}}
	h = newHarness(t, testConfig(), &fakeAgents{work: completes}, jobs)
	id := h.create(api.LoopCode, "x")
	r := h.waitStatus(id, api.LoopFailed)
	if r.Error != api.LoopErrGitTampered || !strings.Contains(r.Message, "validation command changed the repository's git directory (2 paths") {
		t.Fatalf("record: %+v", r)
	}
	h.git.mu.Lock()
	commits, merges := h.git.commits, len(h.git.merges)
	h.git.mu.Unlock()
	if commits != 0 || merges != 0 {
		t.Fatalf("%d commits and %d merges after the tampering", commits, merges)
	}
	if c := h.agents.specs[0].Confine; c == nil || c.Repo != r.Repo || c.Worktree != r.Worktree {
		t.Fatalf("the task's confinement: %+v", c)
	}
	ok := slices.ContainsFunc(h.seen.Records(), func(r *eventlog.Record) bool {
		ev, ok := r.Event.(LoopGitTampered)
		return ok && ev.After == "validation" && slices.Equal(ev.Paths, []string{"config", "hooks/post-index-change"}) && ev.Restored
	})
	if !ok {
		t.Fatal("no loop.git_tampered naming the paths")
	}
}

// A task that completed with tool uses denied is named in the feedback
// when its validation fails: how many, and which tools.
func TestDeniedToolsInFeedback(t *testing.T) {
	var n atomic.Int32
	agents := &fakeAgents{work: completes, finish: func(_ api.TaskSpec, tr *api.TaskRecord) {
		if n.Add(1) == 1 {
			tr.Denied = 2
		}
	}}
	var v atomic.Int32
	jobs := &fakeJobs{result: func(api.JobSpec, <-chan struct{}) JobResult {
		if v.Add(1) == 1 {
			return JobResult{State: api.StateFailed, ExitCode: exit(1), Tail: []byte("no file")}
		}
		return JobResult{State: api.StateSucceeded, ExitCode: exit(0)}
	}}
	h := newHarness(t, testConfig(), agents, jobs)
	id := h.create(api.LoopCode, "x")
	r := h.waitStatus(id, api.LoopComplete)
	want := "2 tool uses of the agent were denied (Bash)"
	if !strings.Contains(r.Progress, want) {
		t.Fatalf("progress does not name the denials:\n%s", r.Progress)
	}
	if ps := h.agents.prompts(); len(ps) != 2 || !strings.Contains(ps[1], want) {
		t.Fatalf("the second prompt does not name the denials: %q", ps)
	}
	its, _ := h.store.Iterations(id)
	if len(its) != 2 || its[0].Denied != 2 || its[1].Denied != 0 {
		t.Fatalf("iterations: %+v", its)
	}
}

// A usage limit with the agent's retry_at pauses the loop until then,
// not for usage_limit_pause; the pause says until when.
func TestUsageLimitRetryAt(t *testing.T) {
	cfg := testConfig()
	cfg.UsageLimitPause.Duration = time.Hour
	var n atomic.Int32
	agents := &fakeAgents{work: func(api.TaskSpec, <-chan struct{}) api.TaskState {
		if n.Add(1) == 1 {
			return api.TaskFailed
		}
		return api.TaskCompleted
	}, failCode: func(api.TaskSpec) string { return api.TaskErrUsageLimit },
		finish: func(_ api.TaskSpec, tr *api.TaskRecord) {
			if tr.Error != nil {
				at := time.Now().Add(100 * time.Millisecond)
				tr.Error.RetryAt = &at
			}
		}}
	h := newHarness(t, cfg, agents, &fakeJobs{result: passes})
	id := h.create(api.LoopCode, "x")
	h.waitStatus(id, api.LoopComplete)
	var pause *LoopPaused
	for len(h.ev) > 0 {
		e := <-h.ev
		if p, ok := e.Event.(LoopPaused); ok && p.Reason == "usage_limit" {
			pause = &p
		}
	}
	if pause == nil || !pause.RetryAt || pause.Until == nil || time.Until(*pause.Until) > time.Minute {
		t.Fatalf("loop.paused: %+v", pause)
	}
}

func TestUsageWait(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, c := range []struct {
		retry *time.Time
		wait  time.Duration
		given bool
	}{
		{nil, 15 * time.Minute, false},
		{at(-time.Minute), 15 * time.Minute, false},
		{at(time.Minute), time.Minute, true},
		{at(72 * time.Hour), 24 * time.Hour, true},
	} {
		w, g := usageWait(c.retry, 15*time.Minute, now)
		if w != c.wait || g != c.given {
			t.Errorf("usageWait(%v) = %s, %v; want %s, %v", c.retry, w, g, c.wait, c.given)
		}
	}
}

// An agent whose key is refused ends the loop auth_failed at once: every
// iteration would be refused the same.
func TestAuthFailedEndsLoop(t *testing.T) {
	agents := &fakeAgents{work: func(api.TaskSpec, <-chan struct{}) api.TaskState { return api.TaskFailed },
		failCode: func(api.TaskSpec) string { return api.TaskErrAuthFailed }}
	h := newHarness(t, testConfig(), agents, &fakeJobs{result: passes})
	id := h.create(api.LoopCode, "x")
	r := h.waitStatus(id, api.LoopFailed)
	if r.Error != api.LoopErrAuthFailed || r.Iteration != 1 || !strings.Contains(r.Message, "refused its key") {
		t.Fatalf("record: %+v", r)
	}
}

// A loop's cost is summed over its iterations; past max_cost_usd it fails
// budget_exceeded, with an event.
func TestBudgetExceeded(t *testing.T) {
	cfg := testConfig()
	cfg.MaxCostUSD = 1
	agents := &fakeAgents{work: completes, finish: func(_ api.TaskSpec, tr *api.TaskRecord) {
		tr.TokenUsage = &api.TokenUsage{InputTokens: 100, OutputTokens: 10, CostUSD: 0.4}
	}}
	jobs := &fakeJobs{result: func(api.JobSpec, <-chan struct{}) JobResult {
		return JobResult{State: api.StateFailed, ExitCode: exit(1), Tail: []byte("no")}
	}}
	h := newHarness(t, cfg, agents, jobs)
	id := h.create(api.LoopCode, "x")
	r := h.waitStatus(id, api.LoopFailed)
	if r.Error != api.LoopErrBudgetExceeded || r.Iteration != 3 || r.TokenUsage == nil ||
		r.TokenUsage.InputTokens != 300 || r.TokenUsage.CostUSD < 1.19 || r.TokenUsage.CostUSD > 1.21 || r.MaxCostUSD != 1 {
		t.Fatalf("record: %+v %+v", r, r.TokenUsage)
	}
	var ev *LoopBudgetExceeded
	for len(h.ev) > 0 {
		e := <-h.ev
		if b, ok := e.Event.(LoopBudgetExceeded); ok {
			ev = &b
		}
	}
	if ev == nil || ev.ID != id || ev.MaxCostUSD != 1 || ev.Iteration != 3 {
		t.Fatalf("loop.budget_exceeded: %+v", ev)
	}
}

// A tree's cost: each loop's token_usage is its own iterations' and its
// children's, so the root's is the whole tree's; past the root's
// max_cost_usd the root and its live descendants fail budget_exceeded.
func TestPlanTreeCost(t *testing.T) {
	work := treeWork(t)
	cost := func(_ api.TaskSpec, tr *api.TaskRecord) {
		tr.TokenUsage = &api.TokenUsage{InputTokens: 10, CostUSD: 0.125}
	}
	for _, budget := range []float64{0, 0.5} {
		cfg := testConfig()
		cfg.MaxCostUSD = budget
		h := newHarness(t, cfg, &fakeAgents{work: work, finish: cost}, &fakeJobs{result: passes})
		id := h.create(api.LoopPlan, "build a thing")
		a := h.waitAsk(0, "the plan's approval")
		a.answer(GateAnswer{Approved: true})
		if budget == 0 {
			r := h.waitStatus(id, api.LoopComplete)
			// 1 plan, 2 specs, 4 phases, 4 code loops: 11 iterations.
			if r.TokenUsage == nil || r.TokenUsage.CostUSD != 11*0.125 || r.TokenUsage.InputTokens != 110 ||
				r.OwnUsage == nil || r.OwnUsage.CostUSD != 0.125 {
				t.Fatalf("root's usage: %+v own %+v", r.TokenUsage, r.OwnUsage)
			}
			if s := h.rec(api.ChildLoopID(id, 1)); s.TokenUsage == nil || s.TokenUsage.CostUSD != 5*0.125 {
				t.Fatalf("a spec's usage (itself, 2 phases, 2 code loops): %+v", s.TokenUsage)
			}
			continue
		}
		r := h.waitStatus(id, api.LoopFailed)
		if r.Error != api.LoopErrBudgetExceeded || r.TokenUsage.CostUSD <= budget {
			t.Fatalf("root: %+v %+v", r, r.TokenUsage)
		}
		h.waitFor("every loop of the tree ended", func() bool {
			all, _ := h.store.Loops()
			for _, l := range all {
				if !l.Status.Terminal() {
					return false
				}
			}
			return true
		})
	}
}

// A daemon stopped between a loop's merge and its branch's deletion
// deletes it at the next start; an unmerged ended loop's branch stays. One
// stopped between a loop's end and its worktree's removal (waiting for the
// loop's task to end) removes the worktree at the next start.
func TestRecoverDeletesMergedBranch(t *testing.T) {
	var left string
	seed := func(h *harness) {
		for _, id := range []string{"1-merged", "2-failed", "3-left"} {
			r := h.m.newRoot(api.LoopCode, id, h.repo, "main", makeContext("t", ""), time.Now())
			r.Status = api.LoopFailed
			switch id {
			case "1-merged":
				r.Status, r.MergedInto = api.LoopComplete, "main"
			case "3-left":
				left = r.Worktree
				if err := os.MkdirAll(left, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			_ = h.store.SaveLoop(r, func(error) {})
		}
	}
	h := newHarness(t, testConfig(), &fakeAgents{work: completes}, &fakeJobs{result: passes}, seed)
	h.waitFor("the merged branch deleted", func() bool { return len(h.git.deletedBranches()) > 0 })
	if d := h.git.deletedBranches(); !slices.Equal(d, []string{"loop/1-merged"}) {
		t.Fatalf("deleted: %v", d)
	}
	h.waitFor("the worktree left removed", func() bool {
		_, err := os.Lstat(left)
		return errors.Is(err, fs.ErrNotExist)
	})
	h.git.mu.Lock()
	defer h.git.mu.Unlock()
	if !slices.Equal(h.git.removed, []string{left}) {
		t.Fatalf("removed worktrees: %v, want %s", h.git.removed, left)
	}
}

// A cancelled loop's worktree is removed once the task or validation job
// it had under way has ended, not while its agent or job may still be
// writing in it (a cancel stops them at once, and they take a moment to
// die). Before, it was removed as the loop ended.
func TestCancelRemovesWorktreeOnceItsWorkEnded(t *testing.T) {
	for _, stage := range []string{"task", "job"} {
		t.Run(stage, func(t *testing.T) {
			stopped, release := make(chan struct{}), make(chan struct{})
			var alive atomic.Bool // the stopped task or job has not ended yet
			dying := func(stop <-chan struct{}) {
				<-stop
				alive.Store(true)
				close(stopped)
				<-release
				alive.Store(false)
			}
			agents := &fakeAgents{work: func(_ api.TaskSpec, stop <-chan struct{}) api.TaskState {
				if stage == "task" {
					dying(stop)
					return api.TaskCancelled
				}
				return api.TaskCompleted
			}}
			jobs := &fakeJobs{result: func(_ api.JobSpec, cancel <-chan struct{}) JobResult {
				dying(cancel)
				return JobResult{State: api.StateCancelled}
			}}
			h := newHarness(t, testConfig(), agents, jobs)
			removed := make(chan bool, 1) // whether its work was alive then
			h.git.onRemove = func(string) { removed <- alive.Load() }
			id := h.create(api.LoopCode, "x")
			held := func() string {
				if stage == "task" {
					return h.rec(id).TaskID
				}
				return h.rec(id).JobID
			}
			h.waitFor("the loop's "+stage, func() bool { return held() != "" })
			work := held()
			if _, err := h.control("cancel", id); err != nil {
				t.Fatal(err)
			}
			<-stopped
			h.waitStatus(id, api.LoopFailed)
			// The loop has ended: its worktree goes now (before: at once)
			// or once its work ends (the manager waits for it: a second
			// Wait, after the loop's own).
			waits := func() int {
				if stage == "task" {
					agents.mu.Lock()
					defer agents.mu.Unlock()
					return agents.waits[work]
				}
				jobs.mu.Lock()
				defer jobs.mu.Unlock()
				return jobs.waits[work]
			}
			want := 2
			if stage == "job" {
				want = 1 // the loop hears of its job's end through Run
			}
			var early bool
			h.waitFor("the worktree's removal, or a wait for the "+stage+" to end", func() bool {
				select {
				case early = <-removed:
					if !early {
						t.Fatal("removed with nothing alive: the test's work ended before its release")
					}
					return true
				default:
					return waits() >= want
				}
			})
			if early {
				t.Fatalf("the worktree was removed while the cancelled loop's %s was still running", stage)
			}
			close(release)
			select {
			case alive := <-removed:
				if alive {
					t.Fatalf("the worktree was removed while the cancelled loop's %s was still running", stage)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the worktree was not removed once the cancelled loop's %s ended", stage)
			}
		})
	}
}

// Shutdown waits for the git work of an ended loop under way (its
// worktree's removal): no git of the daemon's runs on in a repository
// after the loops' domain has stopped (the old one returned at once and
// left it running, past the daemon's stop).
func TestShutdownWaitsForWorktreeRemoval(t *testing.T) {
	h := newHarness(t, testConfig(), &fakeAgents{work: completes}, &fakeJobs{result: passes})
	removing, release := make(chan string, 1), make(chan struct{})
	h.git.onRemove = func(dir string) {
		removing <- dir
		<-release
	}
	id := h.create(api.LoopCode, "x")
	h.waitStatus(id, api.LoopComplete)
	var dir string
	select {
	case dir = <-removing:
	case <-time.After(10 * time.Second):
		t.Fatal("the ended loop's worktree was not being removed")
	}
	returned := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		returned <- h.m.Shutdown(ctx)
	}()
	// Shutdown is waiting for that work (its goroutine waits in the
	// WaitGroup), or it returned: then it left the removal running.
	h.waitFor("Shutdown to wait for the worktree's removal", func() bool {
		select {
		case err := <-returned:
			close(release)
			t.Fatalf("Shutdown returned (%v) while the ended loop's worktree was being removed", err)
		default:
		}
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "(*Manager).Shutdown.func") && strings.Contains(g, "(*WaitGroup).Wait") {
				return true
			}
		}
		return false
	})
	close(release)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return once the worktree was removed")
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after Shutdown the worktree %s is still there (%v)", dir, err)
	}
}
