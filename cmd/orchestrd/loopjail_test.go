package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
)

// jailConfig is a daemon with the sandbox on (the default) whose loops
// run script as their agent, validate on a sandboxed lane and merge at
// once.
func jailConfig(script, loopsExtra string) string {
	return loopsConfig(script, "auto_merge = true\n"+loopsExtra)
}

// userGitStatus runs git status in repo as its user would (their own
// config) and fails t if that ran what an agent or a job left (it would
// make mark).
func userGitStatus(t *testing.T, repo, home, mark string) {
	t.Helper()
	cmd := exec.Command("git", "-C", repo, "status", "--porcelain")
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git status: %v\n%s", err, out)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the user's git status ran what was left in the repository")
	}
}

// skipWithoutSandbox skips where this user cannot make the sandbox (not
// root, and the kernel refuses unprivileged user namespaces).
func skipWithoutSandbox(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if err := exec.Command("unshare", "-Urmp", "--fork", "true").Run(); err != nil {
		t.Skipf("no sandbox for an ordinary user here (unshare -Urmp: %v)", err)
	}
}

// procsWith lists the processes whose command line holds token.
func procsWith(token string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(token)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// An agent cannot make the daemon's git run its code (issue 37, item 1):
// its sandbox makes the repository's git directory (and its main
// checkout) read-only, and every process it started is gone before its
// task's end is told, so a racer it leaves behind swapping .git/config
// under the daemon's commits and merges never runs. For at least 10 s
// of code loops (3 or more), each committing and merging, the racer's clean filter
// never runs, no racer is alive when a loop completes, the agent's
// writes to the git directory fail, and the repository left to the user
// runs nothing on their next git status.
func TestLoopAgentCannotReachGit(t *testing.T) {
	skipWithoutSandbox(t)
	t.Parallel()
	repo := gitRepo(t)
	dir := shortTemp(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(dir, "PWNED")
	token := fmt.Sprintf("racer-%d", time.Now().UnixNano())
	pwn := filepath.Join(dir, "pwn.sh")
	if err := daemonrun.WriteExecutable(pwn, strings.NewReader("#!/bin/sh\necho \"$0 $*\" >> "+mark+"\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitDir := filepath.Join(repo, ".git")
	orig, err := os.ReadFile(filepath.Join(gitDir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	evil := string(orig) + "[filter \"race\"]\n\tclean = " + pwn + "\n\tsmudge = " + pwn + "\n\trequired = true\n" +
		"[core]\n\tfsmonitor = " + pwn + "\n\thooksPath = " + dir + "/hooks\n"
	for name, text := range map[string]string{"cfg-evil": evil, "cfg-plain": string(orig)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The racer: swaps the config for ever; its command line holds token.
	racer := filepath.Join(dir, token+".sh")
	if err := os.WriteFile(racer, []byte("while :; do cp "+dir+"/cfg-evil "+gitDir+"/config 2>/dev/null; cp "+dir+"/cfg-plain "+gitDir+"/config 2>/dev/null; done\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "agent.log")
	agent := filepath.Join(dir, "agent.sh")
	body := `cat > /dev/null
echo "it $ORCHESTRD_LOOP_ITERATION" >> "work-$ORCHESTRD_LOOP_ID.txt"
printf '* filter=race\n' > .gitattributes
w() { if eval "$2" 2>/dev/null; then echo "WROTE $1" >> ` + log + `; else echo "refused $1" >> ` + log + `; fi; }
w config "cp ` + dir + `/cfg-evil ` + gitDir + `/config"
w hook "printf '#!/bin/sh\\ntouch ` + mark + `\\n' > ` + gitDir + `/hooks/post-index-change && chmod +x ` + gitDir + `/hooks/post-index-change"
w attributes "echo '* filter=race' > ` + gitDir + `/info/attributes"
w checkout "echo x > ` + repo + `/agent-was-here"
w git-config "git config core.fsmonitor ` + pwn + `"
setsid sh ` + racer + ` </dev/null >/dev/null 2>&1 &
`
	if err := daemonrun.WriteExecutable(agent, strings.NewReader("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, jailConfig(agent, "[loops.code]\nvalidation_command = \"cat work-*.txt\"\n"))
	start := time.Now()
	n := 0
	// Rounds for 10 s, at least 3: each races the config swapped under
	// git (the racer runs through the whole loop).
	for n < 3 || time.Since(start) < 10*time.Second {
		n++
		id := d.createLoop(api.LoopCode, repo, fmt.Sprintf("round %d", n))
		got := d.waitLoop(id, api.LoopComplete, 2*time.Minute)
		if got.Loop.Iteration != 1 {
			t.Fatalf("loop %d: %+v", n, got.Loop)
		}
		if left := procsWith(token); len(left) > 0 {
			t.Fatalf("loop %d complete, and what its agent started still runs: %v", n, left)
		}
		d.waitEvent("loop.merged", func(e map[string]any) bool { return e["id"] == id && e["into"] == "main" })
	}
	if b, err := os.ReadFile(mark); err == nil {
		t.Fatalf("the agent's filter or hook ran in %d loops:\n%s", n, b)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "WROTE") || strings.Count(string(b), "refused") != 5*n {
		t.Fatalf("the agent's writes to the repository, over %d loops:\n%s", n, b)
	}
	if now, _ := os.ReadFile(filepath.Join(gitDir, "config")); !bytes.Equal(now, orig) {
		t.Fatalf(".git/config after the loops:\n%s", now)
	}
	// Merged: each loop's file is on main, and the user's next git status
	// runs nothing of the agent's.
	if out := git(t, repo, "ls-files"); strings.Count(out, "work-") != n {
		t.Fatalf("main after %d loops: %s", n, out)
	}
	userGitStatus(t, repo, dir, mark)
	t.Logf("%d code loops in %s", n, time.Since(start).Round(time.Second))
}

// A validation job runs the agent's code outside the agent's sandbox and
// can write the git directory: what it changed there (a hook, the config)
// is found after the iteration, put back, and the loop fails
// git_tampered with an event naming what changed; nothing is committed or
// merged, and the user's next git status runs nothing of it.
func TestLoopValidationTamperedGit(t *testing.T) {
	skipWithoutSandbox(t)
	t.Parallel()
	repo := gitRepo(t)
	dir := shortTemp(t)
	mark := filepath.Join(dir, "PWNED")
	gitDir := filepath.Join(repo, ".git")
	orig, err := os.ReadFile(filepath.Join(gitDir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(dir, "agent.sh")
	if err := daemonrun.WriteExecutable(agent, strings.NewReader("#!/bin/sh\ncat >/dev/null\necho x >> work.txt\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	val := `printf '#!/bin/sh\\ntouch ` + mark + `\\n' > ` + gitDir + `/hooks/post-index-change; chmod +x ` + gitDir + `/hooks/post-index-change; git config core.fsmonitor 'touch ` + mark + `'`
	d := startDaemon(t, jailConfig(agent, "[loops.code]\nvalidation_command = \""+strings.ReplaceAll(val, `"`, `\"`)+"\"\n"))
	id := d.createLoop(api.LoopCode, repo, "tamper")
	got := d.waitLoop(id, api.LoopFailed, 2*time.Minute)
	if got.Loop.Error != api.LoopErrGitTampered || !strings.Contains(got.Loop.Message, "validation command changed the repository's git directory") {
		t.Fatalf("loop: %+v", got.Loop)
	}
	ev := d.waitEvent("loop.git_tampered", func(e map[string]any) bool { return e["id"] == id })
	if fmt.Sprint(ev["paths"]) != "[config hooks/post-index-change]" || ev["after"] != "validation" || ev["restored"] != true {
		t.Fatalf("loop.git_tampered: %v", ev)
	}
	if now, _ := os.ReadFile(filepath.Join(gitDir, "config")); !bytes.Equal(now, orig) {
		t.Fatalf(".git/config after the loop:\n%s", now)
	}
	if _, err := os.Lstat(filepath.Join(gitDir, "hooks", "post-index-change")); err == nil {
		t.Fatal("the validation job's hook is still there")
	}
	if out := git(t, repo, "branch", "--list", "--format=%(refname:short)"); out != "main\nloop/"+id && out != "loop/"+id+"\nmain" {
		t.Fatalf("branches: %q", out)
	}
	if out := git(t, repo, "log", "--format=%s", "loop/"+id); strings.Contains(out, "iteration") {
		t.Fatalf("committed after the tampering: %q", out)
	}
	userGitStatus(t, repo, dir, mark)
}

// An executor that exits before it connects says why: its last stderr
// lines are in executor.exited and the daemon's log, and the task a crash
// loop fails carries its last line (issue 37, item 3: a daemon run as a
// user saw only "crash-looping").
func TestExecutorStartFailureSaysWhy(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, `[daemon]
sandbox = false

[executors.broken]
command = ["/bin/sh", "-c", "echo 'starting up' >&2; printf 'no model configured: MARK-WHY \\033]0;title\\007\\n' >&2; exit 3"]
[executors.broken.restart]
max_r = 2
max_t = "1m"
`)
	id, _ := d.execute(api.TaskSpec{Executor: "broken", Prompt: "hi"})
	rec := d.waitTask(id)
	if rec.State != api.TaskFailed || rec.Error == nil || rec.Error.Code != api.TaskErrStartFailed ||
		!strings.Contains(rec.Error.Message, "its last executor said: no model configured: MARK-WHY ?]0;title?") {
		t.Fatalf("task: %+v %+v", rec, rec.Error)
	}
	ev := d.waitEvent("executor.exited", func(e map[string]any) bool { return e["pool"] == "broken" })
	if fmt.Sprint(ev["stderr"]) != "[starting up no model configured: MARK-WHY ?]0;title?]" || ev["code"] != float64(3) {
		t.Fatalf("executor.exited: %v", ev)
	}
	eventually(t, 10*time.Second, "the log line", func() bool {
		return strings.Contains(d.stderr.String(), "an executor exited before it connected") && strings.Contains(d.stderr.String(), "MARK-WHY")
	})
}

// A loop whose agent's executor cannot start fails its iterations with
// the executor's own words, and then the loop: the task does not wait for
// an executor of its own that is gone.
func TestLoopAgentExecutorFailsToStart(t *testing.T) {
	skipWithoutSandbox(t)
	t.Parallel()
	repo := gitRepo(t)
	d := startDaemon(t, `[lanes.net]
runners = 1
slots = 1
spares = 0

[executors.agent]
command = ["/bin/sh", "-c", "echo 'no agent here: MARK-START' >&2; exit 3"]

[loops]
executor = "agent"
validation_lane = "net"
[loops.code]
max_iterations = 2
`)
	id := d.createLoop(api.LoopCode, repo, "never runs")
	got := d.waitLoop(id, api.LoopFailed, time.Minute)
	if got.Loop.Error != api.LoopErrMaxIterations || len(got.Iterations) != 2 {
		t.Fatalf("loop: %+v", got.Loop)
	}
	tid := got.Iterations[0].TaskID
	var r struct {
		Task api.TaskRecord `json:"task"`
	}
	d.mustCall("task.get", map[string]any{"id": tid}, &r)
	if r.Task.Error == nil || r.Task.Error.Code != api.TaskErrStartFailed || !strings.Contains(r.Task.Error.Message, "MARK-START") {
		t.Fatalf("task: %+v %+v", r.Task, r.Task.Error)
	}
}
