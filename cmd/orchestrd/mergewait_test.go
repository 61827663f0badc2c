package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// A root's merge into a base checked out with uncommitted changes: the
// loop waits (merge_waiting, naming the file), the user's edit is
// untouched byte for byte, a restart keeps it waiting, loop merge while
// still dirty says so, and once the user stashed loop merge merges and
// the loop completes.
func TestLoopMergeWaitsForDirtyCheckout(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := loopAgent(t, prompts, `echo "the loop's work" > work.txt`, "auto_merge = true\n")
	home := shortTemp(t)
	d := startDaemonAt(t, home, cfg)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append(args, "--home", home)...)
	}
	// The user's uncommitted edit, with bytes no editor would normalise.
	edit := []byte("hello\r\nthe user's \x00edit, not committed\n\xff")
	readme := filepath.Join(repo, "README")
	if err := os.WriteFile(readme, edit, 0o644); err != nil {
		t.Fatal(err)
	}
	mainBefore := git(t, repo, "rev-parse", "main")
	id := d.createLoop(api.LoopCode, repo, "write work.txt")
	d.waitStage(id, api.StageMergeWaiting, 60*time.Second)
	got := d.loop(id)
	w := got.Loop.MergeWait
	if got.Loop.Status != api.LoopRunning || w == nil || len(w.Files) != 1 || w.Files[0] != "README" || w.Total != 1 ||
		w.Into != "main" || w.Checkout != repo || got.Loop.MergedInto != "" {
		t.Fatalf("waiting: %+v %+v", got.Loop, w)
	}
	d.waitEvent("loop.merge_waiting", func(e map[string]any) bool {
		return e["id"] == id && e["into"] == "main" && e["files"] == float64(1)
	})
	untouched := func(when string) {
		t.Helper()
		if b, err := os.ReadFile(readme); err != nil || !bytes.Equal(b, edit) {
			t.Fatalf("%s: the user's README is %q (%v), want their edit %q", when, b, err, edit)
		}
		if _, err := os.Lstat(filepath.Join(repo, "work.txt")); !os.IsNotExist(err) {
			t.Fatalf("%s: the loop's work.txt is in the user's checkout (%v)", when, err)
		}
		if h := git(t, repo, "rev-parse", "main"); h != mainBefore {
			t.Fatalf("%s: main moved to %s", when, h)
		}
	}
	untouched("waiting")
	// The CLI says why and what to do.
	out, _, code := cli("loop", "show", id)
	if code != 0 || !strings.Contains(out, "merge_waiting: checkout has uncommitted changes in README") ||
		!strings.Contains(out, "orchestrd loop merge "+id) {
		t.Fatalf("loop show: exit %d\n%s", code, out)
	}
	out, _, code = cli("loops")
	if code != 0 || !strings.Contains(out, "[code] "+id+" - running (1/100) [merge_waiting: checkout has uncommitted changes in README: commit or stash them, then orchestrd loop merge "+id+"]") {
		t.Fatalf("loops: exit %d\n%s", code, out)
	}
	// start and resume point at loop merge.
	if _, e, code := cli("loop", "start", id); code == 0 || !strings.Contains(e, "orchestrd loop merge "+id) || strings.Contains(e, "loop.") {
		t.Fatalf("loop start of a loop waiting to merge: exit %d %s", code, e)
	}
	// The paths are the user's: in the record, never in the event log.
	for _, e := range d.events() {
		if k, _ := e["kind"].(string); k == "loop.merge_waiting" {
			if _, ok := e["paths"]; ok {
				t.Fatalf("paths in the event: %v", e)
			}
		}
	}

	// A restart keeps it waiting.
	d.stop()
	d2 := startDaemonAt(t, home, cfg)
	d2.waitEvent("loop.recovered", func(e map[string]any) bool { return e["id"] == id })
	if got := d2.loop(id); got.Loop.Stage != api.StageMergeWaiting || got.Loop.Status != api.LoopRunning {
		t.Fatalf("after a restart: %+v", got.Loop)
	}
	untouched("after a restart")

	// loop merge while still dirty: not merged, says why, exit 1 (a
	// unique start of the id will do).
	out, e, code := cli("loop", "merge", id[:len(id)-2])
	if code != 1 || !strings.Contains(out, "merge_waiting: checkout has uncommitted changes in README") {
		t.Fatalf("loop merge while dirty: exit %d\n%s%s", code, out, e)
	}
	untouched("loop merge while dirty")

	// The user stashes; loop merge merges; the loop completes.
	git(t, repo, "stash", "-q")
	out, e, code = cli("loop", "merge", id)
	if code != 0 || !strings.Contains(out, "[code] "+id+" - complete") {
		t.Fatalf("loop merge once clean: exit %d\n%s%s", code, out, e)
	}
	got = d2.waitLoop(id, api.LoopComplete, 30*time.Second)
	if got.Loop.MergedInto != "main" || got.Loop.MergeWait != nil || got.Loop.Stage != "" {
		t.Fatalf("merged: %+v", got.Loop)
	}
	if out := git(t, repo, "show", "main:work.txt"); out != "the loop's work" {
		t.Fatalf("main's work.txt: %q", out)
	}
	d2.waitEvent("loop.merged", func(e map[string]any) bool { return e["id"] == id && e["into"] == "main" })
	// The user's edit comes back as it was.
	git(t, repo, "stash", "pop", "-q")
	if b, err := os.ReadFile(readme); err != nil || !bytes.Equal(b, edit) {
		t.Fatalf("the user's README after stash pop: %q (%v)", b, err)
	}
	// loop merge of a merged loop says what it is.
	if _, e, code := cli("loop", "merge", id); code == 0 || !strings.Contains(e, "merged into main already") {
		t.Fatalf("loop merge of a merged loop: exit %d %s", code, e)
	}
}

// The poll: a loop waiting to merge merges by itself once the user has
// committed their change ([loops] merge_retry).
func TestLoopMergeWaitPolls(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := loopAgent(t, prompts, `echo "the loop's work" > work.txt`, "auto_merge = true\nmerge_retry = \"1s\"\n")
	d := startDaemon(t, cfg)
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("the user's edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := d.createLoop(api.LoopCode, repo, "write work.txt")
	d.waitStage(id, api.StageMergeWaiting, 60*time.Second)
	git(t, repo, "commit", "-q", "-am", "the user's commit")
	got := d.waitLoop(id, api.LoopComplete, 30*time.Second)
	if got.Loop.MergedInto != "main" {
		t.Fatalf("loop: %+v", got.Loop)
	}
	if out := git(t, repo, "log", "-1", "--format=%s", "main^1"); out != "the user's commit" {
		t.Fatalf("main's first parent: %q", out)
	}
	if out := git(t, repo, "show", "main:README"); out != "the user's edit" {
		t.Fatalf("main's README: %q", out)
	}
}

// A root whose merge into its base failed git_failed (here: main's ref
// locked while main is checked out nowhere) is retried by loop merge once
// the cause is gone; start points at loop merge.
func TestLoopFailedMergeRetried(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	gate := filepath.Join(prompts, "go")
	cfg := loopAgent(t, prompts, `echo "the loop's work" > work.txt
while [ ! -e "`+gate+`" ]; do sleep 0.05; done`, "auto_merge = true\n")
	d := startDaemon(t, cfg)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append(args, "--home", d.home)...)
	}
	id := d.createLoop(api.LoopCode, repo, "write work.txt")
	eventually(t, 30*time.Second, "the agent started", func() bool {
		_, err := os.Stat(filepath.Join(prompts, id+"-1.txt"))
		return err == nil
	})
	// main checked out nowhere (the user is on another branch), its ref
	// locked: the merge's compare-and-swap of main fails.
	git(t, repo, "checkout", "-q", "-b", "elsewhere")
	lock := filepath.Join(repo, ".git", "refs", "heads", "main.lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := d.waitLoop(id, api.LoopFailed, 60*time.Second)
	if got.Loop.Error != api.LoopErrGit || !strings.HasPrefix(got.Loop.Message, "its branch could not be merged into main") {
		t.Fatalf("failed: %+v", got.Loop)
	}
	// start and resume name loop merge, not a method.
	for _, sub := range []string{"start", "resume"} {
		if _, e, code := cli("loop", sub, id); code == 0 || !strings.Contains(e, "orchestrd loop merge "+id) || strings.Contains(e, "loop.") {
			t.Fatalf("loop %s of a failed merge: exit %d %s", sub, code, e)
		}
	}
	out, _, _ := cli("loop", "show", id)
	if !strings.Contains(out, "orchestrd loop merge "+id+" tries it again") {
		t.Fatalf("loop show:\n%s", out)
	}
	// Still locked: it fails again, said so.
	if out, e, code := cli("loop", "merge", id); code != 1 || !strings.Contains(out, "failed") {
		t.Fatalf("loop merge while locked: exit %d\n%s%s", code, out, e)
	}
	d.waitEvent("loop.merge_retried", func(e map[string]any) bool { return e["id"] == id && e["from"] == "failed (git_failed)" })
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	out, e, code := cli("loop", "merge", id)
	if code != 0 || !strings.Contains(out, "[code] "+id+" - complete") {
		t.Fatalf("loop merge: exit %d\n%s%s", code, out, e)
	}
	got = d.waitLoop(id, api.LoopComplete, 30*time.Second)
	if got.Loop.MergedInto != "main" || got.Loop.Error != "" {
		t.Fatalf("merged: %+v", got.Loop)
	}
	if out := git(t, repo, "show", "main:work.txt"); out != "the loop's work" {
		t.Fatalf("main's work.txt: %q", out)
	}
	d.waitEvent("loop.branch_deleted", func(e map[string]any) bool { return e["id"] == id })
	// A loop that is not waiting is told what it is.
	if _, e, code := cli("loop", "merge", id); code == 0 || !strings.Contains(e, "merged into main already") {
		t.Fatalf("loop merge of a merged loop: exit %d %s", code, e)
	}
}

// Loopr's wire: plan.awaiting_approval and plan.approved name the plan's
// loop (the id Loopr's client knows, and sends back to plan.approve), the
// approval beside it; a root's merge asks an approval of kind merge, which
// is not announced as a plan, and plan.approve with the root's id still
// merges it.
func TestLooprPlanEventsNameTheLoop(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	d := startDaemon(t, loopAgent(t, prompts, treeAgent, ""))
	c := dialLoopr(t, d.sock())
	if r := c.request("initialize", map[string]any{"version": "0.1.1"}); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	if r := c.request("subscribe", map[string]any{}); r.Error != nil {
		t.Fatalf("subscribe: %+v", r.Error)
	}
	var seen []looprEvent
	until := func(what string, f func(e looprEvent) bool) looprEvent {
		t.Helper()
		deadline := time.Now().Add(120 * time.Second)
		for time.Now().Before(deadline) {
			e := c.event(time.Until(deadline))
			seen = append(seen, e)
			if f(e) {
				return e
			}
		}
		t.Fatalf("no %s on Loopr's connection", what)
		return looprEvent{}
	}
	type planData struct {
		ID           string   `json:"id"`
		ApprovalID   string   `json:"approval_id"`
		Content      *string  `json:"content"`
		Specs        []string `json:"specs"`
		SpecsSpawned *int     `json:"specs_spawned"`
	}
	decode := func(e looprEvent) planData {
		var p planData
		if err := json.Unmarshal(e.Data, &p); err != nil {
			t.Fatalf("%s data %s: %v", e.Event, e.Data, err)
		}
		return p
	}

	plan := d.createLoop(api.LoopPlan, repo, "build the widget")
	code := d.createLoop(api.LoopCode, repo, "write the code")

	// The plan: awaiting, with the plan loop's id.
	e := until("plan.awaiting_approval", func(e looprEvent) bool { return e.Event == "plan.awaiting_approval" })
	p := decode(e)
	// The loop records the approval's id once its request is answered,
	// which may be a moment after the event went out.
	var rec api.LoopRecord
	eventually(t, 20*time.Second, "the plan loop's approval id", func() bool {
		rec = d.loop(plan).Loop
		return rec.ApprovalID != ""
	})
	if p.ID != plan || p.ApprovalID == "" || p.ApprovalID != rec.ApprovalID || p.Content == nil ||
		!strings.Contains(*p.Content, "## Specs to Create") || strings.Join(p.Specs, ",") != "spec-alpha,spec-beta" {
		t.Fatalf("plan.awaiting_approval %s, want id %s (approval %s)", e.Data, plan, rec.ApprovalID)
	}
	// Loopr's client approves by the id it was given.
	if r := c.request("plan.approve", map[string]any{"id": p.ID}); r.Error != nil {
		t.Fatalf("plan.approve %s: %+v", p.ID, r.Error)
	}
	e = until("plan.approved", func(e looprEvent) bool { return e.Event == "plan.approved" })
	if p := decode(e); p.ID != plan || p.ApprovalID != rec.ApprovalID || p.SpecsSpawned == nil || *p.SpecsSpawned != 2 {
		t.Fatalf("plan.approved %s, want id %s", e.Data, plan)
	}
	// The plan's tree is not what this test follows further.
	if r := c.request("loop.cancel", map[string]any{"id": plan}); r.Error != nil {
		t.Fatalf("loop.cancel: %+v", r.Error)
	}

	// The code loop's merge: an approval of kind merge, of the loop.
	d.waitStage(code, api.StageMerge, 60*time.Second)
	rec = d.loop(code).Loop
	var a struct{ Approval api.Approval }
	d.mustCall("approval.get", map[string]any{"id": rec.ApprovalID}, &a)
	if a.Approval.Kind != api.KindMerge || a.Approval.LoopID != code || !strings.HasPrefix(a.Approval.Content, "Merge loop "+code) {
		t.Fatalf("the merge's approval: %+v", a.Approval)
	}
	out, _, ex := runCLI(t, "approvals", "--home", d.home)
	if ex != 0 || !strings.Contains(out, rec.ApprovalID) || !strings.Contains(out, "merge") || !strings.Contains(out, "Merge loop "+code) {
		t.Fatalf("orchestrd approvals: exit %d\n%s", ex, out)
	}
	// Not a plan: plan.iterate refuses it; plan.approve with the loop's
	// id merges it.
	if r := c.request("plan.iterate", map[string]any{"id": code, "feedback": "again"}); r.Error == nil || r.Error.Code != api.CodeInvalidState {
		t.Fatalf("plan.iterate of a merge: %s %+v", r.Result, r.Error)
	}
	if r := c.request("plan.approve", map[string]any{"id": code}); r.Error != nil {
		t.Fatalf("plan.approve of the merge: %+v", r.Error)
	}
	until("the code loop complete", func(e looprEvent) bool {
		var l api.LoopRecord
		return e.Event == "loop.updated" && json.Unmarshal(e.Data, &l) == nil && l.ID == code && l.Status == api.LoopComplete
	})
	if got := d.loop(code).Loop; got.MergedInto != "main" {
		t.Fatalf("merged: %+v", got)
	}
	// Loopr's client heard of one plan, never of the merge.
	n := 0
	for _, e := range seen {
		if !strings.HasPrefix(e.Event, "plan.") {
			continue
		}
		p := decode(e)
		if p.ID == code || p.ApprovalID == a.Approval.ID || p.Content != nil && strings.Contains(*p.Content, "Merge loop") {
			t.Fatalf("the merge announced as a plan: %s %s", e.Event, e.Data)
		}
		if p.ID != plan {
			t.Fatalf("%s %s names no loop", e.Event, e.Data)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d plan events, want awaiting and approved", n)
	}
}
