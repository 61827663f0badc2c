package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// Loops through the real daemon: shell scripts are the agents (behind
// `orchestrd executor`), a real git repository, real validation jobs.

// gitRepo makes a repository on main with one commit.
func gitRepo(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(shortTemp(t), "repo")
	testio.GitRepo(t, repo, "hello\n")
	real, err := filepath.EvalSymlinks(repo)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return testio.Git(t, dir, args...)
}

// loopAgent writes the agent script and returns the config of a daemon
// whose [loops] run it. The script saves each prompt it gets as
// PROMPTS/<loop id>-<iteration>.txt, then runs body in its worktree.
func loopAgent(t *testing.T, prompts, body, loopsExtra string) string {
	t.Helper()
	script := filepath.Join(prompts, "agent.sh")
	text := "#!/bin/sh\ncat > \"" + prompts + "/$ORCHESTRD_LOOP_ID-$ORCHESTRD_LOOP_ITERATION.txt\"\n" + body + "\n"
	if err := daemonrun.WriteExecutable(script, strings.NewReader(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return "[daemon]\nsandbox = false\n\n" + loopsConfig(script, loopsExtra)
}

// loopsConfig is a daemon whose [loops] run script as their agent (sh
// behind orchestrd executor, in the pool "agent") and validate on a lane
// "net" of one runner.
func loopsConfig(script, loopsExtra string) string {
	return fmt.Sprintf(`[lanes.net]
runners = 1
slots = 2
spares = 0

[executors.agent]
command = [%q, "executor", "--", "/bin/sh", %q]

[loops]
executor = "agent"
validation_lane = "net"
%s
`, binary, script, loopsExtra)
}

func (d *testDaemon) createLoop(lt api.LoopType, repo, task string) string {
	d.t.Helper()
	var r api.LoopCreatePlanResult
	method := "loop.create"
	params := map[string]any{"loop_type": lt, "description": task, "repo": repo}
	if lt == api.LoopPlan {
		method = "loop.create_plan"
		delete(params, "loop_type")
	}
	d.mustCall(method, params, &r)
	if r.ID == "" || r.LoopID != r.ID || r.Status != "created" {
		d.t.Fatalf("%s: %+v", method, r)
	}
	return r.ID
}

// approvePlan approves plan loop id (plan.approve), which spawns its two
// specs.
func (d *testDaemon) approvePlan(id string) {
	d.t.Helper()
	d.approvePlanSpecs(id, 2)
}

// approvePlanSpecs is approvePlan of a plan of specs specs.
func (d *testDaemon) approvePlanSpecs(id string, specs int) {
	d.t.Helper()
	var ap struct {
		SpecsSpawned int  `json:"specs_spawned"`
		Approved     bool `json:"approved"`
	}
	d.mustCall("plan.approve", map[string]any{"id": id}, &ap)
	if ap.SpecsSpawned != specs || !ap.Approved {
		d.t.Fatalf("plan.approve: %+v", ap)
	}
}

// hangFirstIteration is the config of a code loop (auto-merged) whose
// iteration 1 writes work.txt and hangs, its pid in prompts/agent.pid;
// later ones finish, and validation passes from iteration 2 on.
func hangFirstIteration(t *testing.T, prompts string) string {
	return loopAgent(t, prompts, `echo "it $ORCHESTRD_LOOP_ITERATION" >> work.txt
if [ "$ORCHESTRD_LOOP_ITERATION" = 1 ]; then echo $$ > "`+prompts+`/agent.pid"; exec sleep 300; fi`, `auto_merge = true
[loops.code]
validation_command = "grep -q 'it 2' work.txt"
`)
}

// noThirdIteration fails t if loop id's agent got a third prompt.
func noThirdIteration(t *testing.T, prompts, id string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(prompts, id+"-3.txt")); err == nil {
		t.Fatal("a third iteration ran")
	}
}

// unmergedKept checks what stays of ended loop id that was not merged:
// its worktree goes, its branch stays, and `orchestrd loop show` says
// each of says.
func (d *testDaemon) unmergedKept(repo, id, worktree string, says ...string) {
	d.t.Helper()
	waitNoPath(d.t, "worktree removed", worktree)
	if out := git(d.t, repo, "branch", "--list", "loop/"+id); out == "" {
		d.t.Fatal("the unmerged branch was deleted")
	}
	out, err := exec.Command(binary, "loop", "show", "--home", d.home, id).CombinedOutput()
	for _, s := range says {
		if err != nil || !strings.Contains(string(out), s) {
			d.t.Fatalf("orchestrd loop show: %v\n%s", err, out)
		}
	}
}

// mainHoldsTree checks that main has the work of each of a plan tree's
// code loops and every artifact of its two specs and two phases.
func mainHoldsTree(t *testing.T, repo string, code []api.LoopRecord) {
	t.Helper()
	files := git(t, repo, "ls-tree", "-r", "--name-only", "main")
	for _, c := range code {
		if !strings.Contains(files, "code-"+c.ID+".txt") {
			t.Fatalf("main lacks %s's work:\n%s", c.ID, files)
		}
	}
	// A spec (and a phase) a code loop: the trees here have one phase a spec.
	if strings.Count(files, ".loopr/specs/") != len(code) || strings.Count(files, ".loopr/phases/") != len(code) {
		t.Fatalf("main's artifacts:\n%s", files)
	}
}

// waitNoPath waits until nothing is at path (what names it).
func waitNoPath(t *testing.T, what, path string) {
	t.Helper()
	eventually(t, 10*time.Second, what, func() bool {
		_, err := os.Lstat(path)
		return os.IsNotExist(err)
	})
}

func (d *testDaemon) loop(id string) api.LoopGetResult {
	d.t.Helper()
	var r api.LoopGetResult
	d.mustCall("loop.get", map[string]any{"id": id}, &r)
	return r
}

// waitStage waits until loop id is at stage st (api.Stage*).
func (d *testDaemon) waitStage(id, st string, within time.Duration) {
	d.t.Helper()
	eventuallyOr(d.t, within, "loop "+id+" at stage "+st, func() bool {
		var r api.LoopGetResult
		return d.call("loop.get", map[string]any{"id": id}, &r) == nil && r.Loop.Stage == st
	}, func() string { return tail(d.stderr.String(), 3000) })
}

// waitLoop waits until loop id's status is st.
func (d *testDaemon) waitLoop(id string, st api.LoopStatus, within time.Duration) api.LoopGetResult {
	d.t.Helper()
	var r api.LoopGetResult
	eventuallyOr(d.t, within, "loop "+id+" "+string(st), func() bool {
		r = api.LoopGetResult{}
		if err := d.call("loop.get", map[string]any{"id": id}, &r); err != nil {
			return false
		}
		return r.Loop.Status == st
	}, func() string { return fmt.Sprintf("%+v\n%s", r, tail(d.stderr.String(), 3000)) })
	return r
}

// A code loop whose validation fails once passes at iteration 2; the
// second prompt carries the failure's output; the work is committed and
// merged into main.
func TestLoopCodeFeedback(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	// Each iteration adds a line; validation wants two.
	cfg := loopAgent(t, prompts, `echo "line $ORCHESTRD_LOOP_ITERATION" >> work.txt`, `auto_merge = true
[loops.code]
validation_command = "n=$(wc -l < work.txt); [ $n -ge 2 ] || { echo \"need two lines, have $n: MARK-FEEDBACK\"; exit 3; }"
max_iterations = 5
`)
	d := startDaemon(t, cfg)
	id := d.createLoop(api.LoopCode, repo, "add two lines to work.txt")
	got := d.waitLoop(id, api.LoopComplete, 60*time.Second)
	if got.Loop.Iteration != 2 || len(got.Iterations) != 2 {
		t.Fatalf("loop: %+v", got)
	}
	it1, it2 := got.Iterations[0], got.Iterations[1]
	if it1.Passed || it1.Status != "failed" || !strings.Contains(it1.Feedback, "MARK-FEEDBACK") || it1.JobID == "" || it1.TaskID == "" {
		t.Fatalf("iteration 1: %+v", it1)
	}
	if !it2.Passed || it2.Status != "passed" || it2.Commit == "" {
		t.Fatalf("iteration 2: %+v", it2)
	}
	if !strings.Contains(got.Loop.Progress, "\nOutput:\nneed two lines, have 1: MARK-FEEDBACK") {
		t.Fatalf("progress: %q", got.Loop.Progress)
	}
	// The agent's prompts: the second carries the first's failure.
	p1, err := os.ReadFile(filepath.Join(prompts, id+"-1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := os.ReadFile(filepath.Join(prompts, id+"-2.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(p1), "Previous Iteration Feedback") || !strings.Contains(string(p1), "add two lines") {
		t.Fatalf("first prompt:\n%s", p1)
	}
	if !strings.Contains(string(p2), "## Previous Iteration Feedback") || !strings.Contains(string(p2), "MARK-FEEDBACK") {
		t.Fatalf("second prompt:\n%s", p2)
	}
	// Committed on the loop's branch and merged into main (auto_merge).
	if msg := git(t, repo, "log", "-1", "--format=%s", "main^2"); msg != "loop "+id+": iteration 2" {
		t.Fatalf("the loop branch's last commit: %q", msg)
	}
	if out := git(t, repo, "show", "main:work.txt"); out != "line 1\nline 2" {
		t.Fatalf("main's work.txt: %q", out)
	}
	// The worktree of an ended loop is gone, then its merged branch.
	waitNoPath(t, "worktree removed", got.Loop.Worktree)
	d.waitEvent("loop.branch_deleted", func(e map[string]any) bool { return e["id"] == id && e["into"] == "main" })
	// The events: the iteration results, the merge, the end.
	d.waitEvent("loop.iteration", func(e map[string]any) bool { return e["id"] == id && e["passed"] == false })
	d.waitEvent("loop.validation_failed", func(e map[string]any) bool { return e["id"] == id && e["reason"] == "exit_code" })
	d.waitEvent("loop.merged", func(e map[string]any) bool { return e["id"] == id && e["into"] == "main" })
	d.waitEvent("loop.updated", func(e map[string]any) bool { return e["id"] == id && e["status"] == "complete" })
	for _, e := range d.events() {
		if k, _ := e["kind"].(string); strings.HasPrefix(k, "loop.") {
			if b := fmt.Sprint(e); strings.Contains(b, "MARK-FEEDBACK") {
				t.Fatalf("agent output in a supervisor event: %v", e)
			}
		}
	}
	// The CLI shows it.
	out, err := exec.Command(binary, "loop", "show", "--home", d.home, id).CombinedOutput()
	if err != nil || !strings.Contains(string(out), id) || !strings.Contains(string(out), "MARK-FEEDBACK") {
		t.Fatalf("orchestrd loop show: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "loops", "--home", d.home).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "[code] "+id+" - complete (2/5)") {
		t.Fatalf("orchestrd loops: %v\n%s", err, out)
	}
	// delete: the branch goes, then 1001.
	d.mustCall("loop.delete", map[string]any{"id": id}, nil)
	if out := git(t, repo, "branch", "--list", "loop/"+id); out != "" {
		t.Fatalf("branch after loop.delete: %q", out)
	}
	if err := d.call("loop.get", map[string]any{"id": id}, nil); remoteCode(err) != api.CodeNotFound {
		t.Fatalf("loop.get of a deleted loop: %v", err)
	}
}

// A validation that prints nothing and exits 3 is not an empty feedback:
// the next prompt and the iteration's stored feedback (loop show) name
// the command, its exit code, its duration and "(no output)".
func TestLoopSilentValidationFeedback(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := loopAgent(t, prompts, `echo x >> work.txt`, `[loops.code]
validation_command = "test -s nothing-here.txt || exit 3"
max_iterations = 2
`)
	d := startDaemon(t, cfg)
	id := d.createLoop(api.LoopCode, repo, "a silent failure")
	got := d.waitLoop(id, api.LoopFailed, 60*time.Second)
	if len(got.Iterations) != 2 {
		t.Fatalf("loop: %+v", got)
	}
	p2, err := os.ReadFile(filepath.Join(prompts, id+"-2.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fb := range []string{string(p2), got.Iterations[0].Feedback} {
		_, body, ok := strings.Cut(fb, "## Iteration 1 Failed\n")
		if !ok || !strings.Contains(body, "The validation command failed: exit 3, after ") ||
			!strings.Contains(body, "Command: test -s nothing-here.txt || exit 3\n") || !strings.Contains(body, "Output: (no output)\n") {
			t.Fatalf("the feedback of a silent validation:\n%s", fb)
		}
	}
	out, err := exec.Command(binary, "loop", "show", "--home", d.home, id).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exit 3, after") || !strings.Contains(string(out), "(no output)") {
		t.Fatalf("orchestrd loop show: %v\n%s", err, out)
	}
}

// A loop whose validation never passes fails at max_iterations.
func TestLoopMaxIterations(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := loopAgent(t, prompts, `echo x >> work.txt`, `[loops.code]
validation_command = "echo never; exit 1"
max_iterations = 2
`)
	d := startDaemon(t, cfg)
	id := d.createLoop(api.LoopCode, repo, "never good enough")
	got := d.waitLoop(id, api.LoopFailed, 60*time.Second)
	if got.Loop.Error != api.LoopErrMaxIterations || got.Loop.Iteration != 2 || len(got.Iterations) != 2 {
		t.Fatalf("loop: %+v", got)
	}
	if want := "no iteration passed in 2 iterations; the last: its validation command failed (orchestrd loop show " + id; !strings.HasPrefix(got.Loop.Message, want) {
		t.Fatalf("why: %q, want %q...", got.Loop.Message, want)
	}
	var m api.Metrics
	d.mustCall("metrics.get", nil, &m)
	if m.RunningLoops != 0 || m.LoopsByStatus[api.LoopFailed] != 1 || m.LoopsByStatus[api.LoopComplete] != 0 {
		t.Fatalf("metrics: %+v", m.LoopMetrics)
	}
	// 1002 naming the status.
	err := d.call("loop.pause", map[string]any{"id": id}, nil)
	if remoteCode(err) != api.CodeInvalidState || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("loop.pause of a failed loop: %v", err)
	}
	for _, m := range []string{"loop.get", "loop.start", "loop.pause", "loop.resume", "loop.cancel", "loop.delete"} {
		if err := d.call(m, map[string]any{"id": "nope"}, nil); remoteCode(err) != api.CodeNotFound {
			t.Fatalf("%s of no loop: %v", m, err)
		}
	}
}

// cancel stops the agent's process and the validation job at once.
func TestLoopCancel(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	// The agent sleeps until killed, its pid in a file.
	cfg := loopAgent(t, prompts, `echo $$ > "`+prompts+`/agent.pid"; exec sleep 300`, "")
	d := startDaemon(t, cfg)
	id := d.createLoop(api.LoopCode, repo, "sleep")
	pid := readPid(t, filepath.Join(prompts, "agent.pid"))
	d.waitLoop(id, api.LoopRunning, 20*time.Second)
	d.mustCall("loop.cancel", map[string]any{"id": id}, nil)
	got := d.waitLoop(id, api.LoopFailed, 10*time.Second)
	if got.Loop.Error != api.LoopErrCancelled {
		t.Fatalf("loop: %+v", got.Loop)
	}
	eventually(t, 10*time.Second, "the agent's process gone", func() bool { return !alive(pid) })
	if err := d.call("loop.cancel", map[string]any{"id": id}, nil); remoteCode(err) != api.CodeInvalidState {
		t.Fatalf("a second loop.cancel: %v", err)
	}
}

// A daemon killed with -9 mid-iteration: at the next start the loop goes
// on with the next iteration number, the interrupted one is never run
// again.
func TestLoopKilledDaemon(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := hangFirstIteration(t, prompts) // the daemon is killed then
	home := shortTemp(t)
	d := startDaemonAt(t, home, cfg)
	id := d.createLoop(api.LoopCode, repo, "survive")
	// The agent, held while it runs (its script, or the sleep it became).
	agent := holdPid(readPid(t, filepath.Join(prompts, "agent.pid")), func(p int) bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		return err == nil && (bytes.Contains(b, []byte("agent.sh")) || string(b) == "sleep\x00300\x00")
	})
	defer agent.release()
	if err := syscall.Kill(d.proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	agent.signal(syscall.SIGKILL) // its executor died with the daemon; the agent may linger
	d2 := startDaemonAt(t, home, cfg)
	got := d2.waitLoop(id, api.LoopComplete, 60*time.Second)
	if got.Loop.Iteration != 2 || len(got.Iterations) != 2 {
		t.Fatalf("loop: %+v", got)
	}
	if it := got.Iterations[0]; it.Status != "interrupted" || it.Passed || it.Commit == "" {
		t.Fatalf("the interrupted iteration: %+v", it)
	}
	noThirdIteration(t, prompts, id)
	// The WIP: recovery commit holds what iteration 1 wrote.
	if log := git(t, repo, "log", "--format=%s", "main"); !strings.Contains(log, "WIP: recovery") {
		t.Fatalf("the merged loop branch's log:\n%s", log)
	}
	d2.waitEvent("loop.recovered", func(e map[string]any) bool { return e["id"] == id && e["interrupted"] == true })
	// The interrupted task ended daemon_lost, and was not run again.
	var tr struct{ Task api.TaskRecord }
	d2.mustCall("task.get", map[string]any{"id": got.Iterations[0].TaskID}, &tr)
	if tr.Task.State != api.TaskFailed || tr.Task.Error == nil || tr.Task.Error.Code != api.TaskErrDaemonLost {
		t.Fatalf("the interrupted task: %+v", tr.Task)
	}
}

// treeAgent writes what each loop type is asked for.
const treeAgent = `case "$ORCHESTRD_LOOP_TYPE" in
plan) mkdir -p "$(dirname "$ORCHESTRD_LOOP_ARTIFACT")"
  printf '# Plan\n\n## Specs to Create\n- spec-alpha: the first part\n- spec-beta: the second part\n' > "$ORCHESTRD_LOOP_ARTIFACT" ;;
spec) mkdir -p "$(dirname "$ORCHESTRD_LOOP_ARTIFACT")"
  printf '# Spec\n\n## Phases\n1. **Build** - build it\n' > "$ORCHESTRD_LOOP_ARTIFACT" ;;
phase) mkdir -p "$(dirname "$ORCHESTRD_LOOP_ARTIFACT")"
  printf '# Phase\nWrite the code.\n' > "$ORCHESTRD_LOOP_ARTIFACT" ;;
code) echo "$ORCHESTRD_LOOP_ID" > "code-$ORCHESTRD_LOOP_ID.txt" ;;
esac`

// A plan with two specs runs to a merged tree: plan.get_preview and
// plan.approve take the plan loop's id (as Loopr's client sends it); each
// spec spawns a phase, each phase a code loop; once the tree is complete
// its root merges into main after a second approval.
func TestLoopPlanTree(t *testing.T) {
	underRace(t)
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	d := startDaemon(t, loopAgent(t, prompts, treeAgent, ""))
	id := d.createLoop(api.LoopPlan, repo, "build the widget")
	d.waitStage(id, api.StageApproval, 60*time.Second)
	var pv struct {
		ID      string   `json:"id"`
		Content string   `json:"content"`
		Specs   []string `json:"specs"`
		Status  string   `json:"status"`
	}
	d.mustCall("plan.get_preview", map[string]any{"id": id}, &pv)
	if !strings.Contains(pv.Content, "## Specs to Create") || strings.Join(pv.Specs, ",") != "spec-alpha,spec-beta" || pv.Status != "pending" {
		t.Fatalf("plan.get_preview: %+v", pv)
	}
	d.approvePlan(id)
	// The whole tree completes, then the root waits for its merge.
	d.waitStage(id, api.StageMerge, 120*time.Second)
	var list api.LoopListResult
	d.mustCall("loop.list", map[string]any{"parent_id": id}, &list)
	if len(list.Loops) != 2 || list.Loops[0].ID != api.ChildLoopID(id, 1) || list.Loops[0].Status != api.LoopComplete {
		t.Fatalf("the plan's children: %+v", list.Loops)
	}
	d.mustCall("loop.list", map[string]any{"loop_type": "code"}, &list)
	if len(list.Loops) != 2 {
		t.Fatalf("code loops: %+v", list.Loops)
	}
	d.mustCall("plan.approve", map[string]any{"id": id}, nil)
	got := d.waitLoop(id, api.LoopComplete, 30*time.Second)
	if len(got.Loop.OutputArtifacts) != 1 || !strings.HasPrefix(got.Loop.OutputArtifacts[0], ".loopr/plans/001-") {
		t.Fatalf("the plan's artifacts: %+v", got.Loop)
	}
	mainHoldsTree(t, repo, list.Loops)
	d.waitEvent("loop.artifact", func(e map[string]any) bool { return e["id"] == id })
	d.waitEvent("loop.children_spawned", func(e map[string]any) bool { return e["id"] == id })
}

// runTree runs treeAgent's plan (auto_merge) to its merge into main: its
// daemon, repository and root's id.
func runTree(t *testing.T, loopsExtra string) (*testDaemon, string, string) {
	t.Helper()
	repo := gitRepo(t)
	prompts := shortTemp(t)
	d := startDaemon(t, loopAgent(t, prompts, treeAgent, "auto_merge = true\n"+loopsExtra))
	id := d.createLoop(api.LoopPlan, repo, "build the widget")
	d.waitStage(id, api.StageApproval, 60*time.Second)
	d.mustCall("plan.approve", map[string]any{"id": id}, nil)
	d.waitLoop(id, api.LoopComplete, 120*time.Second)
	d.waitEvent("loop.merged", func(e map[string]any) bool { return e["id"] == id && e["into"] == "main" })
	return d, repo, id
}

// No leftovers: once a tree merged, every loop/* branch is gone (each
// deleted once its work was merged, loop.branch_deleted); keep_branches
// keeps them; commit_artifacts = false merges the code without .loopr/,
// the artifacts kept in the merged branch's history.
func TestLoopLeftovers(t *testing.T) {
	t.Parallel()
	t.Run("deleted", func(t *testing.T) {
		t.Parallel() // its own daemon, home and repository
		d, repo, id := runTree(t, "")
		eventuallyOr(t, 30*time.Second, "no loop/* branch", func() bool {
			return git(t, repo, "branch", "--list", "loop/*") == ""
		}, func() string { return git(t, repo, "branch", "--list", "loop/*") })
		d.waitEvent("loop.branch_deleted", func(e map[string]any) bool {
			return e["id"] == id && e["branch"] == "loop/"+id && e["into"] == "main"
		})
		d.waitEvent("loop.branch_deleted", func(e map[string]any) bool {
			return e["id"] == api.ChildLoopID(id, 1) && e["into"] == "loop/"+id
		})
		files := git(t, repo, "ls-tree", "-r", "--name-only", "main")
		if strings.Count(files, "code-") != 2 || strings.Count(files, ".loopr/plans/") != 1 || strings.Count(files, ".loopr/specs/") != 2 {
			t.Fatalf("main:\n%s", files)
		}
		out, err := exec.Command(binary, "loop", "show", "--home", d.home, id).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "merged into main") {
			t.Fatalf("orchestrd loop show: %v\n%s", err, out)
		}
	})
	t.Run("keep_branches", func(t *testing.T) {
		t.Parallel()
		d, repo, id := runTree(t, "keep_branches = true\n")
		// Every loop of the tree: the plan, 2 specs, 2 phases, 2 code loops.
		var list api.LoopListResult
		d.mustCall("loop.list", nil, &list)
		if len(list.Loops) != 7 {
			t.Fatalf("loops: %+v", list.Loops)
		}
		eventually(t, 10*time.Second, "worktrees removed", func() bool {
			_, err := os.Lstat(filepath.Join(repo, ".loopr", "worktrees", id))
			return os.IsNotExist(err)
		})
		for _, l := range list.Loops {
			if out := git(t, repo, "branch", "--list", l.Branch); out == "" {
				t.Fatalf("%s's branch %s is gone", l.ID, l.Branch)
			}
		}
		for _, e := range d.events() {
			if e["kind"] == "loop.branch_deleted" {
				t.Fatalf("keep_branches: %v", e)
			}
		}
	})
	t.Run("commit_artifacts_false", func(t *testing.T) {
		t.Parallel()
		d, repo, id := runTree(t, "commit_artifacts = false\n")
		files := git(t, repo, "ls-tree", "-r", "--name-only", "main")
		if strings.Count(files, "code-") != 2 || strings.Contains(files, ".loopr") {
			t.Fatalf("main:\n%s", files)
		}
		d.waitEvent("loop.artifacts_dropped", func(e map[string]any) bool {
			return e["id"] == id && e["into"] == "main" && e["files"] == float64(5)
		})
		// The artifacts stay in the merged branch's history: the commit
		// before the one that dropped them.
		if msg := git(t, repo, "log", "-1", "--format=%s", "main^2"); !strings.Contains(msg, ".loopr/ artifacts left out of main") {
			t.Fatalf("main^2: %q", msg)
		}
		if kept := git(t, repo, "ls-tree", "-r", "--name-only", "main^2^"); strings.Count(kept, ".loopr/") != 5 {
			t.Fatalf("main^2^:\n%s", kept)
		}
		eventuallyOr(t, 30*time.Second, "no loop/* branch", func() bool {
			return git(t, repo, "branch", "--list", "loop/*") == ""
		}, func() string { return git(t, repo, "branch", "--list", "loop/*") })
	})
}

// plan.iterate runs the plan again with the feedback; plan.reject ends it
// failed.
func TestLoopPlanIterateReject(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	d := startDaemon(t, loopAgent(t, prompts, treeAgent, ""))
	id := d.createLoop(api.LoopPlan, repo, "plan it")
	waitStage := func(iteration uint32) {
		eventuallyOr(t, 60*time.Second, "the plan's approval", func() bool {
			var r api.LoopGetResult
			return d.call("loop.get", map[string]any{"id": id}, &r) == nil && r.Loop.Stage == api.StageApproval &&
				r.Loop.Iteration == iteration
		}, func() string { return tail(d.stderr.String(), 3000) })
	}
	waitStage(1)
	d.mustCall("plan.iterate", map[string]any{"id": id, "feedback": "ADD-A-SPEC-FOR-TESTS"}, nil)
	waitStage(2)
	p2, err := os.ReadFile(filepath.Join(prompts, id+"-2.txt"))
	if err != nil || !strings.Contains(string(p2), "ADD-A-SPEC-FOR-TESTS") {
		t.Fatalf("the second plan prompt: %v\n%s", err, p2)
	}
	var rj map[string]any
	d.mustCall("plan.reject", map[string]any{"id": id, "reason": "no"}, &rj)
	if rj["rejected"] != true {
		t.Fatalf("plan.reject: %v", rj)
	}
	got := d.waitLoop(id, api.LoopFailed, 20*time.Second)
	if got.Loop.Error != api.LoopErrPlanRejected {
		t.Fatalf("rejected plan: %+v", got.Loop)
	}
}

// A branch that conflicts with its base ends the loop failed
// merge_conflict, the branch kept.
func TestLoopMergeConflict(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	gate := filepath.Join(prompts, "go")
	cfg := loopAgent(t, prompts, `echo agent > README
while [ ! -e "`+gate+`" ]; do sleep 0.05; done`, "auto_merge = true\n")
	d := startDaemon(t, cfg)
	id := d.createLoop(api.LoopCode, repo, "rewrite the readme")
	eventually(t, 30*time.Second, "the agent started", func() bool {
		_, err := os.Stat(filepath.Join(prompts, id+"-1.txt"))
		return err == nil
	})
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "commit", "-q", "-am", "main's readme")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := d.waitLoop(id, api.LoopFailed, 60*time.Second)
	if got.Loop.Error != api.LoopErrMergeConflict || !strings.Contains(got.Loop.Message, "loop/"+id) {
		t.Fatalf("loop: %+v", got.Loop)
	}
	if out := git(t, repo, "show", "loop/"+id+":README"); out != "agent" {
		t.Fatalf("the kept branch's README: %q", out)
	}
	if out := git(t, repo, "show", "main:README"); out != "main" {
		t.Fatalf("main's README: %q", out)
	}
	d.waitEvent("loop.merge_conflicted", func(e map[string]any) bool { return e["id"] == id })
	// Not merged: the branch stays, and loop show says it holds the work.
	d.unmergedKept(repo, id, got.Loop.Worktree, "loop/"+id+" (from main), not merged: it holds the loop's work")
}

// pause lets the running iteration finish (its result kept) and starts no
// new one; resume goes on.
func TestLoopPauseResume(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	gate := filepath.Join(prompts, "go")
	cfg := loopAgent(t, prompts, `echo x >> work.txt
while [ ! -e "`+gate+`" ]; do sleep 0.05; done`, `auto_merge = true
[loops.code]
validation_command = "[ $(wc -l < work.txt) -ge 2 ] || { echo one line; exit 1; }"
`)
	d := startDaemon(t, cfg)
	id := d.createLoop(api.LoopCode, repo, "two lines")
	eventually(t, 30*time.Second, "the agent started", func() bool {
		_, err := os.Stat(filepath.Join(prompts, id+"-1.txt"))
		return err == nil
	})
	var pr struct{ Loop api.LoopRecord }
	d.mustCall("loop.pause", map[string]any{"id": id}, &pr)
	if !pr.Loop.Paused || pr.Loop.Status != api.LoopRunning {
		t.Fatalf("loop.pause: %+v", pr.Loop)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := d.waitLoop(id, api.LoopPaused, 30*time.Second)
	if got.Loop.Iteration != 1 || len(got.Iterations) != 1 || got.Iterations[0].Status != "failed" ||
		!strings.Contains(got.Iterations[0].Feedback, "one line") {
		t.Fatalf("paused: %+v", got)
	}
	d.waitEvent("loop.paused", func(e map[string]any) bool { return e["id"] == id })
	if _, err := os.Stat(filepath.Join(prompts, id+"-2.txt")); err == nil {
		t.Fatal("a paused loop started an iteration")
	}
	if err := d.call("loop.pause", map[string]any{"id": id}, nil); remoteCode(err) != api.CodeInvalidState {
		t.Fatalf("loop.pause of a paused loop: %v", err)
	}
	d.mustCall("loop.resume", map[string]any{"id": id}, nil)
	got = d.waitLoop(id, api.LoopComplete, 60*time.Second)
	if got.Loop.Iteration != 2 {
		t.Fatalf("resumed: %+v", got.Loop)
	}
}

// A daemon killed with -9 while an iteration's validation job runs: the
// job ends daemon_lost, the loop goes on with iteration 2, the agent's
// task of iteration 1 is not run again.
func TestLoopKilledDuringValidation(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	mark := filepath.Join(prompts, "validating")
	cfg := loopAgent(t, prompts, `echo "it $ORCHESTRD_LOOP_ITERATION" >> work.txt`, `auto_merge = true
[loops.code]
validation_command = "if ! grep -q 'it 2' work.txt; then touch `+mark+`; sleep 300; fi"
`)
	home := shortTemp(t)
	d := startDaemonAt(t, home, cfg)
	id := d.createLoop(api.LoopCode, repo, "survive validation")
	eventually(t, 30*time.Second, "the validation job running", func() bool {
		_, err := os.Stat(mark)
		return err == nil
	})
	// The job may run before the iteration's record of it is committed:
	// wait for the record (the job sleeps meanwhile).
	var before api.LoopGetResult
	eventually(t, 30*time.Second, "the iteration's validation job recorded", func() bool {
		before = api.LoopGetResult{}
		d.mustCall("loop.get", map[string]any{"id": id}, &before)
		return len(before.Iterations) == 1 && before.Iterations[0].JobID != ""
	})
	if err := syscall.Kill(d.proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	d2 := startDaemonAt(t, home, cfg)
	got := d2.waitLoop(id, api.LoopComplete, 60*time.Second)
	if got.Loop.Iteration != 2 || len(got.Iterations) != 2 || got.Iterations[0].Status != "interrupted" {
		t.Fatalf("loop: %+v", got)
	}
	if jr := d2.job(before.Iterations[0].JobID); !jr.State.Terminal() || jr.State == api.StateSucceeded {
		t.Fatalf("the interrupted validation job: %+v", jr)
	}
	// One prompt per iteration: nothing ran twice.
	for n := 1; n <= 3; n++ {
		_, err := os.Stat(filepath.Join(prompts, fmt.Sprintf("%s-%d.txt", id, n)))
		if (err == nil) != (n <= 2) {
			t.Fatalf("prompt of iteration %d: %v", n, err)
		}
	}
	if out := git(t, repo, "show", "main:work.txt"); out != "it 1\nit 2" {
		t.Fatalf("main's work.txt: %q", out)
	}
}

// cancel while the validation job runs cancels the job at once.
func TestLoopCancelDuringValidation(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	mark := filepath.Join(prompts, "validating")
	cfg := loopAgent(t, prompts, `echo x >> work.txt`, `[loops.code]
validation_command = "touch `+mark+`; sleep 300"
`)
	d := startDaemon(t, cfg)
	id := d.createLoop(api.LoopCode, repo, "validate for ever")
	var job string
	eventually(t, 30*time.Second, "the validation job running", func() bool {
		var r api.LoopGetResult
		if d.call("loop.get", map[string]any{"id": id}, &r) != nil {
			return false
		}
		job = r.Loop.JobID
		_, err := os.Stat(mark)
		return err == nil && job != ""
	})
	d.mustCall("loop.cancel", map[string]any{"id": id}, nil)
	eventually(t, 10*time.Second, "the validation job cancelled", func() bool {
		var jr struct{ Job api.JobRecord }
		return d.call("job.get", map[string]any{"id": job}, &jr) == nil && jr.Job.State == api.StateCancelled
	})
	got := d.waitLoop(id, api.LoopFailed, 10*time.Second)
	if got.Loop.Error != api.LoopErrCancelled || got.Loop.JobID != "" {
		t.Fatalf("loop: %+v", got.Loop)
	}
	d.waitEvent("loop.cancelled", func(e map[string]any) bool { return e["id"] == id && e["job_id"] == job })
}

// A plan that waits for its approval when the daemon is killed waits for
// the same approval after the restart: plan.approve (by the loop's id)
// then spawns its specs.
func TestLoopPlanApprovalSurvivesRestart(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := loopAgent(t, prompts, treeAgent, "auto_merge = true\n")
	home := shortTemp(t)
	d := startDaemonAt(t, home, cfg)
	id := d.createLoop(api.LoopPlan, repo, "survive the wait")
	var before api.LoopGetResult
	eventuallyOr(t, 60*time.Second, "the plan's approval", func() bool {
		return d.call("loop.get", map[string]any{"id": id}, &before) == nil && before.Loop.Stage == api.StageApproval
	}, func() string { return tail(d.stderr.String(), 3000) })
	if err := syscall.Kill(d.proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	d2 := startDaemonAt(t, home, cfg)
	d2.waitEvent("loop.recovered", func(e map[string]any) bool { return e["id"] == id })
	d2.approvePlan(id)
	got := d2.waitLoop(id, api.LoopComplete, 120*time.Second)
	if got.Loop.Iteration != 1 || got.Loop.ApprovalID != "" {
		t.Fatalf("the plan: %+v", got.Loop)
	}
	var list api.LoopListResult
	d2.mustCall("loop.list", map[string]any{"loop_type": "code", "status": "complete"}, &list)
	if len(list.Loops) != 2 {
		t.Fatalf("code loops: %+v", list.Loops)
	}
	// The approval asked before the kill is the one that was answered.
	var a struct{ Approval api.Approval }
	d2.mustCall("approval.get", map[string]any{"id": before.Loop.ApprovalID}, &a)
	if a.Approval.State != api.ApprovalAllowed {
		t.Fatalf("the approval: %+v", a.Approval)
	}
}

// A daemon stopped (SIGTERM) mid-iteration: its agent is stopped with it,
// and at the next start the loop goes on with iteration 2.
func TestLoopDaemonRestart(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := hangFirstIteration(t, prompts)
	home := shortTemp(t)
	d := startDaemonAt(t, home, cfg)
	id := d.createLoop(api.LoopCode, repo, "survive a restart")
	pid := readPid(t, filepath.Join(prompts, "agent.pid"))
	d.stop()
	eventually(t, 10*time.Second, "the agent stopped with the daemon", func() bool { return !alive(pid) })
	d2 := startDaemonAt(t, home, cfg)
	got := d2.waitLoop(id, api.LoopComplete, 60*time.Second)
	if got.Loop.Iteration != 2 || len(got.Iterations) != 2 || got.Iterations[0].Status != "interrupted" {
		t.Fatalf("loop: %+v", got)
	}
	noThirdIteration(t, prompts, id)
}
