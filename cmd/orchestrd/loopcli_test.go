package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// The loop commands through the real daemon and a shell-script agent: a
// code loop made, drawn, shown, refused a pause once complete, removed; a
// plan shown and rejected; the errors a person meets.
func TestLoopCLI(t *testing.T) {
	t.Parallel() // its own daemon, home and repository
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := loopAgent(t, prompts, `case "$ORCHESTRD_LOOP_TYPE" in
plan) mkdir -p "$(dirname "$ORCHESTRD_LOOP_ARTIFACT")"
  printf '# Plan\n\n## Specs to Create\n- spec-alpha: the first part\n- spec-beta: the second part\n' > "$ORCHESTRD_LOOP_ARTIFACT" ;;
*) echo "line $ORCHESTRD_LOOP_ITERATION" >> work.txt ;;
esac`, `auto_merge = true
[loops.code]
validation_command = "[ $(wc -l < work.txt) -ge 2 ] || { echo need two lines; exit 1; }"
max_iterations = 5
`)
	d := startDaemon(t, cfg)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append(args, "--home", d.home)...)
	}

	// loops --watch draws the tree again as a loop comes and ends.
	watch := runCmd(t, "loops", "--watch", "--home", d.home)
	wout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var werr strings.Builder
	watch.Stderr = &werr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	lines := lineChan(wout)
	waitFor := func(want string) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("loops --watch ended before %q: %s", want, werr.String())
				}
				if strings.Contains(l, want) {
					return
				}
			case <-deadline:
				t.Fatalf("loops --watch: no %q", want)
			}
		}
	}
	waitFor("no loops")

	out, errOut, code := cli("loop", "code", "--repo", repo, "add", "two", "lines")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("loop code: exit %d, %q %q", code, out, errOut)
	}
	d.waitLoop(id, api.LoopComplete, 60*time.Second)
	waitFor("[code] " + id + " - complete (2/5)")
	if err := watch.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if code := exitCode(t, watch.Wait()); code != 0 {
		t.Fatalf("loops --watch after Ctrl-C: exit %d, %s", code, werr.String())
	}

	out, errOut, code = cli("loops")
	if code != 0 || out != "[code] "+id+" - complete (2/5)\n" {
		t.Fatalf("loops: exit %d, %q %q", code, out, errOut)
	}
	out, _, code = cli("loops", "--json")
	var list struct {
		Loops []api.LoopRecord `json:"loops"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Loops) != 1 || list.Loops[0].ID != id {
		t.Fatalf("loops --json: exit %d, %s", code, out)
	}
	out, errOut, code = cli("loop", "show", id)
	flat := strings.Join(strings.Fields(out), " ") // the columns' width aside
	for _, want := range []string{"status complete", "iteration 2 of at most 5", "(removed)", "iterations: 1 failed", "need two lines", " 2 passed"} {
		if code != 0 || !strings.Contains(flat, want) {
			t.Fatalf("loop show: exit %d, no %q in:\n%s%s", code, want, out, errOut)
		}
	}
	// A complete loop cannot be paused: the daemon says why, exit 1.
	if _, errOut, code = cli("loop", "pause", id); code != 1 || !strings.Contains(errOut, "complete") {
		t.Fatalf("loop pause of a complete loop: exit %d, %q", code, errOut)
	}
	if _, errOut, code = cli("loop", "show", "1-0000000000000000"); code != 1 || !strings.Contains(errOut, "1-0000000000000000") {
		t.Fatalf("loop show of no loop: exit %d, %q", code, errOut)
	}
	if _, errOut, code = cli("loop", "pasue", id); code != 2 || !strings.Contains(errOut, `did you mean "pause"`) {
		t.Fatalf("loop pasue: exit %d, %q", code, errOut)
	}
	if _, errOut, code = cli("loops", "--status", "done"); code != 2 || !strings.Contains(errOut, "complete") {
		t.Fatalf("loops --status done: exit %d, %q", code, errOut)
	}

	// A plan: shown at the gate, then rejected.
	out, errOut, code = cli("loop", "plan", "--repo", repo, "split", "it")
	plan := strings.TrimSpace(out)
	if code != 0 || plan == "" {
		t.Fatalf("loop plan: exit %d, %q %q", code, out, errOut)
	}
	eventually(t, 60*time.Second, "the plan at its gate", func() bool {
		out, _, code = cli("plan", "show", plan)
		return code == 0
	})
	if !strings.Contains(out, "## Specs to Create") || !strings.Contains(out, "specs to create (2): spec-alpha, spec-beta") {
		t.Fatalf("plan show:\n%s", out)
	}
	if out, errOut, code = cli("plan", "reject", "--reason", "not now", plan); code != 0 || out != "rejected\n" {
		t.Fatalf("plan reject: exit %d, %q %q", code, out, errOut)
	}
	got := d.waitLoop(plan, api.LoopFailed, 30*time.Second)
	if got.Loop.Error != api.LoopErrPlanRejected {
		t.Fatalf("rejected plan: %+v", got.Loop)
	}
	out, _, _ = cli("loops")
	if !strings.Contains(out, "[plan] "+plan+" - failed (1/10) [plan_rejected]\n") {
		t.Fatalf("loops after the rejection:\n%s", out)
	}

	// Removed: gone from the tree.
	if out, errOut, code = cli("loop", "rm", id); code != 0 {
		t.Fatalf("loop rm: exit %d, %q %q", code, out, errOut)
	}
	out, _, _ = cli("loops", "--type", "code")
	if out != "no loops\n" {
		t.Fatalf("loops --type code after rm: %q", out)
	}
}
