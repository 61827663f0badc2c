package uitest

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// planAgent is the loops' agent (behind `orchestrd executor`): what each
// loop type is asked for, as a real agent would write it. A plan asks for
// two specs; a spec's agent works until it is stopped, so that the spec
// loops are still running when their plan is cancelled (an agent that
// finished at once let them complete first on a loaded machine, and
// there was nothing left to cancel: a CI run failed so).
const planAgent = `#!/bin/sh
cat > /dev/null
case "$ORCHESTRD_LOOP_TYPE" in
plan) mkdir -p "$(dirname "$ORCHESTRD_LOOP_ARTIFACT")"
  printf '# Plan\n\n## Specs to Create\n- spec-alpha: the first part\n- spec-beta: the second part\n' > "$ORCHESTRD_LOOP_ARTIFACT" ;;
spec) exec sleep 600 ;;
esac
`

// gitRepo is a new repository on main with one commit.
func gitRepo(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(testio.ShortTemp(t, "oduirepo"), "repo")
	testio.GitRepo(t, repo, "hello\n")
	real, err := filepath.EvalSymlinks(repo)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// planLoopConfig is the config of a daemon whose loops' agent is
// planAgent, and a repository for its loops.
func planLoopConfig(t *testing.T) (cfg config, repo string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo = gitRepo(t)
	agent := filepath.Join(testio.ShortTemp(t, "oduiagent"), "agent.sh")
	if err := daemonrun.WriteExecutable(agent, strings.NewReader(planAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	return config{daemon: "sandbox = false\n", extra: fmt.Sprintf(`
[executors.agent]
command = [%q, "executor", "--", "/bin/sh", %q]
[loops]
executor = "agent"
validation_lane = "net"
`, binary, agent)}, repo
}

// A plan loop's page: the plan its agent wrote shows, without a reload,
// with the specs approving it creates; Approve makes its children (the
// two spec loops) appear under it; Cancel, confirmed, ends it and every
// loop under it (failed: cancelled).
func TestLoopPlanApproved(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	cfg, repo := planLoopConfig(t)
	d := startDaemon(t, cfg)
	tb := newTab(t, d)
	asked := tb.acceptDialogs()
	tb.signIn()

	out, errOut, code := d.cli("loop", "plan", "--repo", repo, "build the widget")
	if code != 0 {
		t.Fatalf("orchestrd loop plan: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if i := strings.LastIndexByte(id, ' '); i >= 0 {
		id = id[i+1:]
	}
	tb.open("/ui/loops/" + id)
	tb.waitJS("the loop's page", `document.body.dataset.page === "loop" && document.body.dataset.stream === "open"`)
	eval[chromedp.Void](tb, `window.notReloaded = true`)
	tb.waitJS("the plan awaiting approval", `!!document.getElementById("plan-approve") && document.querySelector("pre[aria-label='The plan']").textContent.includes("## Specs to Create")`)
	if !eval[bool](tb, `window.notReloaded === true`) {
		t.Fatal("the loop's page was reloaded to show its plan")
	}
	if specs := eval[string](tb, `document.querySelector("ul.specs").innerText`); !strings.Contains(specs, "spec-alpha") || !strings.Contains(specs, "spec-beta") {
		t.Fatalf("the plan's specs on its page: %q", specs)
	}
	if !eval[bool](tb, `!!document.getElementById("children-none")`) {
		t.Fatal("a plan has loops under it before it is approved")
	}
	tb.shot("plan-awaiting-approval")

	tb.click(chromedp.CSS("#plan-approve"))
	tb.waitText("#live", "Plan approved.")
	kids := []string{api.ChildLoopID(id, 1), api.ChildLoopID(id, 2)}
	tb.waitJS("the plan's children", `document.getElementById("plan-approve") === null && `+
		`!!document.getElementById(`+jsID("loop-"+kids[0])+`) && !!document.getElementById(`+jsID("loop-"+kids[1])+`)`)
	if kid := eval[string](tb, `document.getElementById(`+jsID("loop-"+kids[0])+`).querySelector("a").textContent`); kid != "[spec] "+kids[0] {
		t.Fatalf("the first child reads %q", kid)
	}
	tb.shot("plan-approved")
	var list struct{ Loops []api.LoopRecord }
	out, errOut, code = d.cli("loops", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("orchestrd loops --json: exit %d: %s%s", code, errOut, out)
	}
	spawned := 0
	for _, l := range list.Loops {
		if l.ParentID != nil && *l.ParentID == id && l.LoopType == api.LoopSpec {
			spawned++
		}
	}
	if spawned != 2 {
		t.Fatalf("orchestrd loops lists %d spec loops under %s, want 2:\n%s", spawned, id, out)
	}

	tb.click(chromedp.CSS(`button[aria-label="Cancel loop ` + id + ` and every loop under it"]`))
	// A cancelled loop ends failed, cancelled (as Loopr's do).
	tb.waitText("h1 .state", "failed")
	tb.waitText("main", "cancelled")
	if a := asked(); len(a) != 1 || !strings.HasPrefix(a[0], "Cancel loop "+id+" and every loop under it?") {
		t.Fatalf("Cancel asked %q", a)
	}
	for _, k := range kids {
		tb.waitJS(k+" cancelled with it", `(() => { const e = document.getElementById(`+jsID("loop-"+k)+`); return e.querySelector(".state").textContent === "failed" && e.querySelector(".note").textContent.includes("cancelled"); })()`)
	}
	tb.shot("plan-cancelled")
}
