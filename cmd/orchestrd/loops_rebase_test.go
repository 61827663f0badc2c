package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// rebaseTree is treeAgent whose code loops also write shared.txt (their
// id: two siblings' merges conflict there), and that runs resolve
// instead when its worktree's shared.txt holds conflict markers (a
// rebase iteration's); a line "broken" there is taken out (and nothing
// else done).
func rebaseTree(resolve string) string {
	return `if grep -qs broken shared.txt; then grep -v broken shared.txt > shared.new; mv shared.new shared.txt; exit 0; fi
if grep -qs '^<<<<<<<' shared.txt; then
` + resolve + `
exit 0
fi
` + treeAgent + `
if [ "$ORCHESTRD_LOOP_TYPE" = code ]; then echo "$ORCHESTRD_LOOP_ID" > shared.txt; fi`
}

// resolveMarkers keeps both sides: the marker lines dropped.
const resolveMarkers = `grep -v -e '^<<<<<<<' -e '^=======' -e '^>>>>>>>' shared.txt > shared.new; mv shared.new shared.txt`

// rebaseLoops is the [loops] of the rebase tests: the specs' validation
// refuses markers and a line "broken" (and runs again after a rebase).
const rebaseLoops = `auto_merge = true
[loops.spec]
validation_command = "! grep -qs -e '^<<<<<<<' -e broken shared.txt"
`

// runRebaseTree starts a plan of two specs (each a phase, each a code
// loop writing shared.txt) and approves it: the second spec to merge into
// the plan's branch conflicts. It returns the daemon, the repository, the
// plan's id and the conflicting spec's.
func runRebaseTree(t *testing.T, home, prompts, resolve, loopsExtra string) (d *testDaemon, repo, id, spec, cfg string) {
	t.Helper()
	repo = gitRepo(t)
	cfg = loopAgent(t, prompts, rebaseTree(resolve), loopsExtra+rebaseLoops)
	d = startDaemonAt(t, home, cfg)
	id = d.createLoop(api.LoopPlan, repo, "build the widget")
	d.waitStage(id, api.StageApproval, 60*time.Second)
	d.mustCall("plan.approve", map[string]any{"id": id}, nil)
	// The second spec's merge conflicts: it rebases (it failed
	// merge_conflict before rebasing was built; said at once).
	var e map[string]any
	eventually(t, 120*time.Second, "loop.rebase_conflicted", func() bool {
		for _, x := range d.events() {
			if x["kind"] == "loop.ended" && x["error"] == api.LoopErrMergeConflict {
				t.Fatalf("a loop ended merge_conflict without rebasing: %v", x)
			}
			if x["kind"] == "loop.rebase_conflicted" {
				e = x
				return true
			}
		}
		return false
	})
	spec, _ = e["id"].(string)
	if spec != api.ChildLoopID(id, 1) && spec != api.ChildLoopID(id, 2) {
		t.Fatalf("loop.rebase_conflicted: %v", e)
	}
	return d, repo, id, spec, cfg
}

// Two sibling specs whose code writes one file: the second's merge into
// the plan's branch conflicts, it goes rebasing, its rebase iteration's
// agent gets the file and its conflict-marked region, resolves it, the
// spec's validation runs again, and both siblings' work lands in the
// plan's branch and then in main.
func TestLoopRebaseResolved(t *testing.T) {
	underRace(t)
	t.Parallel() // its own daemon, home and repository
	prompts := shortTemp(t)
	d, repo, id, spec, _ := runRebaseTree(t, shortTemp(t), prompts, resolveMarkers, "")
	got := d.waitLoop(id, api.LoopComplete, 120*time.Second)
	d.waitEvent("loop.merged", func(e map[string]any) bool { return e["id"] == id && e["into"] == "main" })
	s := d.loop(spec)
	if s.Loop.Status != api.LoopComplete || s.Loop.MergedInto != "loop/"+id || s.Loop.RebaseOnto != "loop/"+id || s.Loop.RebaseIterations != 1 {
		t.Fatalf("the rebased spec: %+v", s.Loop)
	}
	last := s.Iterations[len(s.Iterations)-1]
	if !last.Rebase || !last.Passed || last.Iteration != s.Loop.Iteration {
		t.Fatalf("the rebase iteration: %+v", last)
	}
	// Its prompt: the file, its conflict-marked region, what to do.
	p, err := os.ReadFile(filepath.Join(prompts, spec+"-"+strconv.Itoa(int(last.Iteration))+".txt"))
	if err != nil || !bytes.Contains(p, []byte("## shared.txt\n\n```\n<<<<<<< ")) || !bytes.Contains(p, []byte("\n=======\n")) ||
		!bytes.Contains(p, []byte("Keep both sides' intent")) || !bytes.Contains(p, []byte("Do not run git")) {
		t.Fatalf("the rebase prompt: %v\n%s", err, p)
	}
	// Both code loops' lines in main's shared.txt, no marker.
	shared := git(t, repo, "show", "main:shared.txt")
	for _, k := range []int{1, 2} {
		code := api.ChildLoopID(api.ChildLoopID(api.ChildLoopID(id, k), 1), 1)
		if !strings.Contains(shared, code) {
			t.Fatalf("main's shared.txt lacks %s's line:\n%s", code, shared)
		}
	}
	if strings.Contains(shared, "<<<<<<<") || strings.Count(shared, "\n") != 1 {
		t.Fatalf("main's shared.txt:\n%s", shared)
	}
	d.waitEvent("loop.rebase_started", func(e map[string]any) bool {
		return e["id"] == spec && e["onto"] == "loop/"+id && len(e["head"].(string)) == 40
	})
	d.waitEvent("loop.rebase_conflicted", func(e map[string]any) bool {
		return e["id"] == spec && e["files"] == float64(1) && e["iteration"] == float64(last.Iteration)
	})
	d.waitEvent("loop.rebased", func(e map[string]any) bool {
		return e["id"] == spec && e["iteration"] == float64(last.Iteration)
	})
	// Validation ran again, in the rebase iteration.
	d.waitEvent("loop.validation_passed", func(e map[string]any) bool {
		return e["id"] == spec && e["iteration"] == float64(last.Iteration)
	})
	// Events carry counts, never the agent's file names or content.
	for _, e := range d.events() {
		if k, _ := e["kind"].(string); strings.HasPrefix(k, "loop.") && k != "loop.created" && k != "loop.updated" {
			if b, _ := json.Marshal(e); bytes.Contains(b, []byte("shared.txt")) {
				t.Fatalf("an event names the conflicting file: %s", b)
			}
		}
	}
	if len(got.Loop.OutputArtifacts) != 1 {
		t.Fatalf("the plan: %+v", got.Loop)
	}
}

// An agent that does not resolve the markers: each rebase iteration is
// refused (its feedback names the file), and past max_rebase_iterations
// the spec fails merge_conflict naming the file and the command to look,
// its branch kept; its plan fails child_failed.
func TestLoopRebaseGivesUp(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	prompts := shortTemp(t)
	d, repo, id, spec, _ := runRebaseTree(t, shortTemp(t), prompts, "echo tried >> notes.txt", "max_rebase_iterations = 2\n")
	got := d.waitLoop(spec, api.LoopFailed, 120*time.Second)
	if got.Loop.Error != api.LoopErrMergeConflict || got.Loop.RebaseIterations != 2 ||
		!strings.Contains(got.Loop.Message, "shared.txt") || !strings.Contains(got.Loop.Message, "orchestrd loop show "+spec) ||
		!strings.Contains(got.Loop.Message, "max_rebase_iterations = 2") {
		t.Fatalf("the spec: %+v", got.Loop)
	}
	var rebases []api.LoopIteration
	for _, it := range got.Iterations {
		if it.Rebase {
			rebases = append(rebases, it)
		}
	}
	if len(rebases) != 2 || rebases[0].Passed || !strings.Contains(rebases[0].Feedback, "Conflict markers") ||
		!strings.Contains(rebases[0].Feedback, "shared.txt") {
		t.Fatalf("the rebase iterations: %+v", rebases)
	}
	// The second one's prompt carries the first's feedback.
	p, err := os.ReadFile(filepath.Join(prompts, spec+"-"+strconv.Itoa(int(rebases[1].Iteration))+".txt"))
	if err != nil || !bytes.Contains(p, []byte("## The last rebase iteration")) || !bytes.Contains(p, []byte("Conflict markers")) {
		t.Fatalf("the second rebase prompt: %v\n%s", err, p)
	}
	if root := d.waitLoop(id, api.LoopFailed, 30*time.Second); root.Loop.Error != api.LoopErrChildFailed {
		t.Fatalf("the plan: %+v", root.Loop)
	}
	d.waitEvent("loop.rebase_conflicted", func(e map[string]any) bool { return e["id"] == spec && e["iteration"] == float64(0) })
	d.unmergedKept(repo, spec, got.Loop.Worktree, "stopped rebasing onto loop/"+id+": 2 rebase iterations", "failed (merge_conflict)")
}

// A daemon killed -9 while a rebase iteration's agent runs: at the next
// start the loop is still rebasing, the merge in progress (its markers)
// is taken up as it is (loop.rebase_started continued), a new rebase
// iteration resolves it, and the tree completes.
func TestLoopRebaseKilledDaemon(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	prompts := shortTemp(t)
	home := shortTemp(t)
	hung := filepath.Join(prompts, "hung")
	resolve := `if [ ! -e "` + hung + `" ]; then touch "` + hung + `"; echo $$ > "` + prompts + `/agent.pid"; exec sleep 300; fi
` + resolveMarkers
	d, repo, id, spec, cfg := runRebaseTree(t, home, prompts, resolve, "")
	agent := holdPid(readPid(t, filepath.Join(prompts, "agent.pid")), func(p int) bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		return err == nil && (bytes.Contains(b, []byte("agent.sh")) || string(b) == "sleep\x00300\x00")
	})
	defer agent.release()
	d.waitLoop(spec, api.LoopRebasing, 20*time.Second)
	// The tree shows it rebasing, with its rebase iterations.
	out, err := exec.Command(binary, "loops", "--home", d.home).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "[spec] "+spec+" - rebasing (") ||
		!strings.Contains(string(out), "[rebasing onto loop/"+id+": 1 rebase iteration]") {
		t.Fatalf("orchestrd loops: %v\n%s", err, out)
	}
	d.kill9()
	agent.signal(syscall.SIGKILL)
	d2 := startDaemonAt(t, home, cfg)
	d2.waitLoop(id, api.LoopComplete, 120*time.Second)
	s := d2.loop(spec)
	if s.Loop.Status != api.LoopComplete || s.Loop.RebaseIterations != 2 || s.Loop.MergedInto != "loop/"+id {
		t.Fatalf("the spec: %+v", s.Loop)
	}
	var states []string
	for _, it := range s.Iterations {
		if it.Rebase {
			states = append(states, it.Status)
		}
	}
	if strings.Join(states, ",") != "interrupted,passed" {
		t.Fatalf("the rebase iterations: %v", states)
	}
	d2.waitEvent("loop.rebase_started", func(e map[string]any) bool { return e["id"] == spec && e["continued"] == true })
	shared := git(t, repo, "show", "main:shared.txt")
	if strings.Contains(shared, "<<<<<<<") || strings.Count(shared, "\n") != 1 {
		t.Fatalf("main's shared.txt:\n%s", shared)
	}
}

// A resolution that breaks the validation: the rebase iteration fails, the
// next round's validation (the branch already onto the parent's head)
// fails again, and a rebase iteration of its own gets that failure and
// fixes it; then the merge.
func TestLoopRebaseValidationFails(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	prompts := shortTemp(t)
	d, repo, id, spec, _ := runRebaseTree(t, shortTemp(t), prompts, resolveMarkers+"\necho broken >> shared.txt", "")
	d.waitLoop(id, api.LoopComplete, 120*time.Second)
	s := d.loop(spec)
	if s.Loop.Status != api.LoopComplete || s.Loop.RebaseIterations != 2 || s.Loop.MergedInto != "loop/"+id {
		t.Fatalf("the spec: %+v", s.Loop)
	}
	var rebases []api.LoopIteration
	for _, it := range s.Iterations {
		if it.Rebase {
			rebases = append(rebases, it)
		}
	}
	if len(rebases) != 2 || rebases[0].Passed || !rebases[1].Passed || !strings.Contains(rebases[0].Feedback, "The validation command failed") {
		t.Fatalf("the rebase iterations: %+v", rebases)
	}
	p, err := os.ReadFile(filepath.Join(prompts, spec+"-"+strconv.Itoa(int(rebases[1].Iteration))+".txt"))
	if err != nil || !bytes.Contains(p, []byte("the loop's validation fails now")) || !bytes.Contains(p, []byte("## Validation Failed After Rebasing Onto loop/"+id)) {
		t.Fatalf("the fixing iteration's prompt: %v\n%s", err, p)
	}
	d.waitEvent("loop.validation_failed", func(e map[string]any) bool { return e["id"] == spec && e["reason"] == "after_rebase" })
	if shared := git(t, repo, "show", "main:shared.txt"); strings.Contains(shared, "broken") || strings.Count(shared, "\n") != 1 {
		t.Fatalf("main's shared.txt:\n%s", shared)
	}
}
