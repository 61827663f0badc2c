package loops

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/loops/gitwt"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

func (g *fakeGit) mergeCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.merges)
}

func (g *fakeGit) setDirty(into string, d *gitwt.DirtyError) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d == nil {
		delete(g.dirty, into)
		return
	}
	g.dirty[into] = d
}

func (g *fakeGit) failMerge(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mergeErr = err
}

func (h *harness) count(kind string) int {
	n := 0
	for _, r := range h.seen.Records() {
		if r.Event.Kind() == kind {
			n++
		}
	}
	return n
}

// A root whose base is checked out dirty waits (merge_waiting), tries
// again on its poll (told once while nothing changes, again when the
// files do), is paused and resumed, and merges on loop.merge once clean;
// loop.merge answers with the record after its try.
func TestMergeWaits(t *testing.T) {
	cfg := testConfig()
	cfg.MergeRetry = api.Duration{Duration: 10 * time.Millisecond}
	h := newHarness(t, cfg, &fakeAgents{work: completes}, &fakeJobs{result: passes})
	h.git.setDirty("main", &gitwt.DirtyError{WorkTree: h.repo, Paths: []string{"README"}, Total: 1})
	id := h.create(api.LoopCode, "x")
	h.waitFor("merge_waiting", func() bool { return h.rec(id).Stage == api.StageMergeWaiting })
	r := h.rec(id)
	if r.Status != api.LoopRunning || r.MergeWait == nil || r.MergeWait.Words() != "checkout has uncommitted changes in README" ||
		r.MergeWait.Into != "main" || r.MergeWait.Checkout != h.repo {
		t.Fatalf("waiting: %+v %+v", r, r.MergeWait)
	}
	// The poll tries again; the same files are not told again.
	n := h.git.mergeCount()
	h.waitFor("three more tries", func() bool { return h.git.mergeCount() >= n+3 })
	if c := h.count("loop.merge_waiting"); c != 1 {
		t.Fatalf("%d loop.merge_waiting for one wait", c)
	}
	// Other files: told again, the record says them.
	h.git.setDirty("main", &gitwt.DirtyError{WorkTree: h.repo, Paths: []string{"a", "b"}, Total: 12})
	h.waitFor("the new files", func() bool { return h.count("loop.merge_waiting") == 2 })
	h.waitFor("the new files recorded", func() bool {
		w := h.rec(id).MergeWait
		return w != nil && w.Words() == "checkout has uncommitted changes in a, b and 10 more files"
	})
	// Paused: loop.merge points at resume.
	if _, err := h.control("pause", id); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, api.LoopPaused)
	if _, err := h.control("merge", id); err == nil || !strings.Contains(err.Error(), "orchestrd loop resume "+id) {
		t.Fatalf("loop.merge of a paused loop: %v", err)
	}
	// Resumed, still dirty: loop.merge answers the record still waiting.
	if _, err := h.control("resume", id); err != nil {
		t.Fatal(err)
	}
	v, err := h.control("merge", id)
	if rec, ok := v.(api.LoopRecord); err != nil || !ok || rec.Stage != api.StageMergeWaiting || rec.MergedInto != "" {
		t.Fatalf("loop.merge while dirty: %+v %v", v, err)
	}
	// Clean: merged, complete, the wait cleared.
	h.git.setDirty("main", nil)
	v, err = h.control("merge", id)
	if rec, ok := v.(api.LoopRecord); err != nil || !ok || rec.Status != api.LoopComplete || rec.MergedInto != "main" || rec.MergeWait != nil {
		t.Fatalf("loop.merge once clean: %+v %v", v, err)
	}
	if !slices.ContainsFunc(h.seen.Records(), func(r *eventlog.Record) bool {
		e, ok := r.Event.(LoopMerged)
		return ok && e.ID == id && e.Into == "main"
	}) {
		t.Fatal("no loop.merged")
	}
	// Now complete: loop.merge says what it is, in the CLI's words.
	_, err = h.control("merge", id)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidState || !strings.Contains(err.Error(), "merged into main already") ||
		strings.Contains(err.Error(), "loop.merge") {
		t.Fatalf("loop.merge of a merged loop: %v", err)
	}
}

// A merge that git refused (not a dirty checkout) fails git_failed; start
// points at loop.merge, which tries again and merges.
func TestFailedMergeRetried(t *testing.T) {
	h := newHarness(t, testConfig(), &fakeAgents{work: completes}, &fakeJobs{result: passes})
	h.git.failMerge(errors.New("git update-ref: cannot lock ref"))
	id := h.create(api.LoopCode, "x")
	r := h.waitStatus(id, api.LoopFailed)
	if r.Error != api.LoopErrGit || !r.MergeRetryable() {
		t.Fatalf("failed: %+v", r)
	}
	_, err := h.control("start", id)
	if err == nil || !strings.Contains(err.Error(), "orchestrd loop merge "+id) || strings.Contains(err.Error(), "loop.") {
		t.Fatalf("start of a failed merge: %v", err)
	}
	h.git.failMerge(nil)
	v, err := h.control("merge", id)
	if rec, ok := v.(api.LoopRecord); err != nil || !ok || rec.Status != api.LoopComplete || rec.MergedInto != "main" || rec.Error != "" {
		t.Fatalf("loop.merge: %+v %v", v, err)
	}
	if !slices.ContainsFunc(h.seen.Records(), func(r *eventlog.Record) bool { e, ok := r.Event.(LoopMergeRetried); return ok && e.ID == id }) {
		t.Fatal("no loop.merge_retried")
	}
}

// loop.merge on a loop that is not waiting says what it is and the
// command that applies, never a method.
func TestMergeNotApplicable(t *testing.T) {
	pid := "1-00ff"
	for _, c := range []struct {
		r    api.LoopRecord
		want string
	}{
		{api.LoopRecord{ID: "c", ParentID: &pid, Status: api.LoopRunning}, "its parent merges it"},
		{api.LoopRecord{ID: "r", Status: api.LoopRunning, Stage: api.StageIterating, Base: "main"}, "it merges into main once it is complete"},
		{api.LoopRecord{ID: "r", Status: api.LoopRunning, Stage: api.StageMerge, Base: "main"}, "orchestrd plan approve r"},
		{api.LoopRecord{ID: "r", Status: api.LoopPaused, Stage: api.StageMergeWaiting}, "orchestrd loop resume r goes on (and tries its merge again)"},
		{api.LoopRecord{ID: "r", Status: api.LoopFailed, Error: api.LoopErrMaxIterations}, "orchestrd loop show r says how"},
		{api.LoopRecord{ID: "r", Status: api.LoopComplete, Branch: "loop/r"}, "git merge loop/r"},
		{api.LoopRecord{ID: "r", Status: api.LoopComplete, MergedInto: "main"}, "merged into main already"},
	} {
		err := mergeNotApplicable(c.r)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeInvalidState || !strings.Contains(err.Error(), c.want) ||
			strings.Contains(err.Error(), "loop.merge") {
			t.Errorf("%+v: %v, want %q", c.r, err, c.want)
		}
	}
}

// After a restart: a root left waiting to merge (here one loop.merge made
// live again, whose worktree is long gone) tries again and merges, not
// failed worktree_gone; a root a daemon before merges waited failed
// git_failed for a dirty checkout is merged by loop.merge.
func TestRecoverMergeWaiting(t *testing.T) {
	var waiting, old api.LoopRecord
	seed := func(h *harness) {
		waiting = h.m.newRoot(api.LoopCode, "1-waiting", h.repo, "main", makeContext("t", ""), time.Now())
		waiting.Status, waiting.Stage, waiting.Iteration = api.LoopRunning, api.StageMergeWaiting, 1
		waiting.MergeWait = &api.MergeWait{Into: "main", Checkout: h.repo, Files: []string{"README"}, Total: 1, Since: 1}
		old = h.m.newRoot(api.LoopCode, "2-old", h.repo, "main", makeContext("t", ""), time.Now())
		old.Status, old.Error, old.Iteration = api.LoopFailed, api.LoopErrGit, 1
		old.Message = "its branch could not be merged into main: merging loop/2-old into main: " + h.repo + " has uncommitted changes (1 entries)"
		for _, r := range []api.LoopRecord{waiting, old} {
			_ = h.store.SaveLoop(r, func(error) {})
		}
	}
	h := newHarness(t, testConfig(), &fakeAgents{work: completes}, &fakeJobs{result: passes}, seed)
	r := h.waitStatus(waiting.ID, api.LoopComplete)
	if r.MergedInto != "main" || r.MergeWait != nil || r.Error != "" {
		t.Fatalf("recovered waiting: %+v", r)
	}
	v, err := h.control("merge", old.ID)
	if rec, ok := v.(api.LoopRecord); err != nil || !ok || rec.Status != api.LoopComplete || rec.MergedInto != "main" {
		t.Fatalf("loop.merge of an old git_failed merge: %+v %v", v, err)
	}
	if p := h.agents.prompts(); len(p) != 0 {
		t.Fatalf("%d iterations ran", len(p))
	}
}
