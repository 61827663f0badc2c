package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// The CLI takes a unique start of an id wherever it takes an id (the
// kind's letter may be left out): job, wait, logs, cancel; approve, deny,
// reply; stop, session, tasks --session. None or several matching is said
// in one line, naming a few, exit 1.
func TestIDPrefixes(t *testing.T) {
	t.Parallel()
	agent := `read -r prompt; echo "said $prompt"`
	d := startDaemon(t, fmt.Sprintf(`[lanes.net]
runners = 1
slots = 1
spares = 0
network = "host"
[lanes.hold]
runners = 0
[approvals]
timeout = "10m"
[executors.sh]
command = [%q, "executor", "--", "sh", "-c", %q]
`, binary, agent))
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append([]string{"--home", d.home}, args...)...)
	}
	// j-XXXXXX-N: "XXXXXX-N" is a start of exactly one id, "XXXXXX" of all.
	var jobs []string
	for i := range 3 {
		jobs = append(jobs, d.submit(api.JobSpec{Lane: "net", Command: fmt.Sprintf("echo job%d", i)}))
	}
	for _, j := range jobs {
		d.wait(j)
	}
	held := d.submit(api.JobSpec{Lane: "hold", Argv: []string{"true"}})
	short := func(id, letter string) string { return strings.TrimPrefix(id, letter) }
	common := strings.Split(short(jobs[0], "j-"), "-")[0] // the daemon's part of every job id

	out, errOut, code := cli("job", short(jobs[1], "j-"))
	if code != 0 || !strings.Contains(out, jobs[1]) || !strings.Contains(out, "echo job1") {
		t.Fatalf("job %s: exit %d, %q %q", short(jobs[1], "j-"), code, out, errOut)
	}
	if out, errOut, code = cli("logs", short(jobs[2], "j-")); code != 0 || out != "job2\n" {
		t.Fatalf("logs by a prefix: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("wait", short(jobs[0], "j-")); code != 0 {
		t.Fatalf("wait by a prefix: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("cancel", short(held, "j-")); code != 0 || out != "cancelled "+held+" (was queued)\n" {
		t.Fatalf("cancel by a prefix: exit %d, %q %q", code, out, errOut)
	}
	// Several: each named (five at most), in one line.
	_, errOut, code = cli("job", common)
	if code != 1 || !strings.HasPrefix(errOut, fmt.Sprintf("orchestrd: %q starts 4 job ids: ", common)) ||
		!strings.Contains(errOut, jobs[0]) || !strings.Contains(errOut, held) || !strings.HasSuffix(errOut, "; give more of it\n") {
		t.Fatalf("job of an ambiguous prefix: exit %d, %q", code, errOut)
	}
	if _, errOut, code = cli("job", "zz9"); code != 1 || errOut != "orchestrd: no job has an id that starts with \"zz9\"\n" {
		t.Fatalf("job of no id: exit %d, %q", code, errOut)
	}
	// With a tenth job, XXXXXX-1 starts j-XXXXXX-1 and -10: the one it is
	// whole, but its letter, is meant.
	for range 6 {
		d.submit(api.JobSpec{Lane: "hold", Argv: []string{"true"}})
	}
	if out, errOut, code = cli("job", common+"-1"); code != 0 || !strings.HasPrefix(out, "job ") || !strings.Contains(out, jobs[0]+"\n") {
		t.Fatalf("job %s-1 with ten jobs: exit %d, %q %q", common, code, out, errOut)
	}
	if _, errOut, code = cli("job", "j-"+common); code != 1 || !strings.Contains(errOut, "starts 10 job ids") || !strings.Contains(errOut, " and 5 more; give more of it") {
		t.Fatalf("job of a prefix of ten: exit %d, %q", code, errOut)
	}

	// Approvals: a-XXXXXX-N.
	var as []string
	for i := range 3 {
		as = append(as, d.cliRequest("Read", map[string]any{"file_path": fmt.Sprintf("/etc/f%d", i)}, nil))
	}
	if out, errOut, code = cli("approve", short(as[0], "a-")); code != 0 || !strings.HasPrefix(out, as[0]+" allowed") {
		t.Fatalf("approve by a prefix: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("deny", short(as[1], "a-")); code != 0 || !strings.HasPrefix(out, as[1]+" denied") {
		t.Fatalf("deny by a prefix: exit %d, %q %q", code, out, errOut)
	}
	aCommon := as[2][:len(as[2])-1] // a-XXXXXX-: every approval's
	if _, errOut, code = cli("reply", aCommon, "use", "another"); code != 1 || !strings.Contains(errOut, "starts 3 approval ids") {
		t.Fatalf("reply to an ambiguous prefix: exit %d, %q", code, errOut)
	}
	if out, errOut, code = cli("reply", short(as[2], "a-"), "use", "another"); code != 0 || !strings.HasPrefix(out, as[2]+" replied") {
		t.Fatalf("reply by a prefix: exit %d, %q %q", code, out, errOut)
	}

	// Tasks and sessions: t-XXXXXX-N, s-<16 hex>.
	id, session := d.execute(api.TaskSpec{Executor: "sh", Prompt: "hello", Cwd: shortTemp(t)})
	d.waitTask(id)
	if out, errOut, code = cli("session", session[:6]); code != 0 || !strings.Contains(out, "said hello") {
		t.Fatalf("session by a prefix: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("tasks", "--session", short(session, "s-")[:6]); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("tasks --session by a prefix: exit %d, %q %q", code, out, errOut)
	}
	// Stopping an ended task is refused, about that task: the prefix was read.
	if _, errOut, code = cli("stop", short(id, "t-")); code != 1 || !strings.Contains(errOut, id) || strings.Contains(errOut, "starts with") {
		t.Fatalf("stop by a prefix: exit %d, %q", code, errOut)
	}
	if _, errOut, code = cli("stop", "t-nope"); code != 1 || !strings.Contains(errOut, `no task has an id that starts with "t-nope"`) {
		t.Fatalf("stop of no task: exit %d, %q", code, errOut)
	}
}

// Loops by a unique start of their id: loop show/cancel and plan. loop
// cancel prints the loops it cancelled; what a loop's status refuses is
// said with the commands that apply; plan reject takes its REASON after
// the ID; loop plan outside a repository uses [loops] repo.
func TestLoopCLIPrefixCancelReject(t *testing.T) {
	t.Parallel()
	repo := gitRepo(t)
	prompts := shortTemp(t)
	cfg := loopAgent(t, prompts, `case "$ORCHESTRD_LOOP_TYPE" in
plan) mkdir -p "$(dirname "$ORCHESTRD_LOOP_ARTIFACT")"
  printf '# Plan\n\n## Specs to Create\n- spec-alpha: the first part\n- spec-beta: the second part\n' > "$ORCHESTRD_LOOP_ARTIFACT" ;;
*) sleep 600 ;;
esac`, fmt.Sprintf("repo = %q\nmax_running = 4\n", repo))
	d := startDaemon(t, cfg)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append([]string{"--home", d.home}, args...)...)
	}

	// Outside any repository, no --repo: [loops] repo.
	outside := shortTemp(t)
	out, errOut, code := runCLIWith(t, outside, nil, "loop", "plan", "--home", d.home, "split", "it")
	plan := strings.TrimSpace(out)
	if code != 0 || plan == "" {
		t.Fatalf("loop plan outside a repository: exit %d, %q %q", code, out, errOut)
	}
	if r := d.waitLoop(plan, api.LoopRunning, 30*time.Second); r.Loop.Repo != repo {
		t.Fatalf("loop plan outside a repository: repo %q, want [loops] repo %q", r.Loop.Repo, repo)
	}
	pre := plan[:len(plan)-4] // unique: no other loop yet
	eventually(t, 60*time.Second, "the plan at its gate", func() bool {
		out, _, code = cli("plan", "show", pre)
		return code == 0
	})
	if !strings.Contains(out, "specs to create (2)") {
		t.Fatalf("plan show by a prefix:\n%s", out)
	}
	if out, errOut, code = cli("plan", "approve", pre); code != 0 || out != "approved: 2 spec loops spawned\n" {
		t.Fatalf("plan approve by a prefix: exit %d, %q %q", code, out, errOut)
	}
	kids := []string{api.ChildLoopID(plan, 1), api.ChildLoopID(plan, 2)}
	for _, k := range kids {
		d.waitLoop(k, api.LoopRunning, 60*time.Second)
	}
	// The plan's id starts its children's too: ambiguous but for the whole id.
	if _, errOut, code = cli("loop", "show", pre); code != 1 || !strings.Contains(errOut, "starts 3 loop ids") ||
		!strings.Contains(errOut, kids[0]) || !strings.Contains(errOut, kids[1]) {
		t.Fatalf("loop show of an ambiguous prefix: exit %d, %q", code, errOut)
	}
	if _, errOut, code = cli("loop", "show", "42"); code != 1 || errOut != "orchestrd: no loop has an id that starts with \"42\"\n" {
		t.Fatalf("loop show of no loop: exit %d, %q", code, errOut)
	}

	// cancel says what it cancelled: the loop and its live descendants.
	out, errOut, code = cli("loop", "cancel", plan)
	if code != 0 || !strings.HasPrefix(out, "cancelled 3 loops\n[plan] "+plan+" - failed") {
		t.Fatalf("loop cancel: exit %d, %q %q", code, out, errOut)
	}
	for _, k := range kids {
		if !strings.Contains(out, "\n  [spec] "+k+" - failed") {
			t.Fatalf("loop cancel does not name %s:\n%s", k, out)
		}
	}
	// What a failed loop refuses names commands, not methods.
	_, errOut, code = cli("loop", "start", kids[0])
	if code != 1 || strings.Contains(errOut, "loop.start") ||
		!strings.Contains(errOut, "orchestrd loop start does not apply to a failed loop") || !strings.Contains(errOut, "orchestrd loop rm "+kids[0]) {
		t.Fatalf("loop start of a failed loop: exit %d, %q", code, errOut)
	}

	// plan reject ID REASON, as plan iterate and reply take theirs.
	out, errOut, code = cli("loop", "plan", "--repo", repo, "another")
	second := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("loop plan: exit %d, %q %q", code, out, errOut)
	}
	var gate api.LoopGetResult
	eventually(t, 60*time.Second, "the second plan at its gate", func() bool {
		gate = api.LoopGetResult{}
		return d.call("loop.get", map[string]any{"id": second}, &gate) == nil && gate.Loop.ApprovalID != ""
	})
	if out, errOut, code = cli("plan", "reject", second, "not", "this", "way"); code != 0 || out != "rejected\n" {
		t.Fatalf("plan reject ID REASON: exit %d, %q %q", code, out, errOut)
	}
	if a := d.getApproval(gate.Loop.ApprovalID); a.Resolution == nil || a.Resolution.Message != "not this way" {
		t.Fatalf("plan reject ID REASON: the approval's resolution %+v", a.Resolution)
	}
	if _, errOut, code = cli("plan", "reject", "--reason", "a", second, "b"); code != 2 || !strings.Contains(errOut, "not both") {
		t.Fatalf("plan reject with both reasons: exit %d, %q", code, errOut)
	}
}

func TestIDHasPrefix(t *testing.T) {
	for _, c := range []struct {
		id, p, letter string
		want          bool
	}{
		{"j-3f2a1b-17", "j-3f", "j-", true}, {"j-3f2a1b-17", "3f2a", "j-", true}, {"j-3f2a1b-17", "j-3f2a1b-17", "j-", true},
		{"j-3f2a1b-17", "f2a", "j-", false}, {"j-3f2a1b-17", "-3f", "j-", false}, {"1795926512-ab", "17959", "", true},
		{"1795926512-ab", "ab", "", false}, {"a-89ab-1", "89", "a-", true}, {"a-89ab-1", "j-89", "a-", false},
	} {
		if got := idHasPrefix(c.id, c.p, c.letter); got != c.want {
			t.Errorf("idHasPrefix(%q, %q, %q) = %v, want %v", c.id, c.p, c.letter, got, c.want)
		}
	}
}
