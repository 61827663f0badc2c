package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// runCLIWith runs the binary in dir (the test's cwd if "") with stdin
// (/dev/null if nil).
func runCLIWith(t *testing.T, dir string, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir, cmd.Stdin = dir, stdin
	o, e, code := runOut(t, cmd)
	return string(o), string(e), code
}

// startDaemonCmd starts bin with args as a daemon on home and waits until
// its lanes are ready; it is stopped and checked like startDaemon's.
func startDaemonCmd(t *testing.T, home, bin string, args ...string) *testDaemon {
	t.Helper()
	return startDaemonCmdIn(t, "", home, bin, args...)
}

// startDaemonCmdIn is startDaemonCmd with the daemon's working directory.
func startDaemonCmdIn(t *testing.T, dir, home, bin string, args ...string) *testDaemon {
	t.Helper()
	d := newTestDaemon(t, home)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stderr, cmd.Stdout = d.stderr, d.stderr
	d.launch(cmd)
	return d
}

// A working directory that does not exist is named as such, not reported
// as the command missing.
func TestRunNamesMissingWorkingDirectory(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	_, errOut, code := runCLI(t, "run", "--home", d.home, "--lane", "net", "--cwd", "/nonexistent", "--", "true")
	if code != 1 || !strings.Contains(errOut, `working directory "/nonexistent" does not exist`) || strings.Contains(errOut, "fork/exec") {
		t.Fatalf("exit %d, stderr %q; want exit 1 saying the directory does not exist", code, errOut)
	}
}

// --cwd reaches the runner as given, only made absolute: "up/.." with up a
// symlink climbs from the link's target, as the kernel walks it, and not
// back to where the text says; inside a worktree that is an escape.
func TestRunSendsCwdUncleaned(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	base := testio.UpLinkTree(t, shortTemp(t))
	out, errOut, code := runCLIWith(t, base, nil, "run", "--home", d.home, "--lane", "net", "--cwd", "wt/sub/up/../outside", "--", "sh", "-c", "pwd -P")
	if code != 0 || strings.TrimSpace(out) != base+"/x/outside" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want it run in %s", code, out, errOut, base+"/x/outside")
	}
	_, errOut, code = runCLIWith(t, base, nil, "run", "--home", d.home, "--lane", "net", "--worktree", "wt", "--cwd", "wt/sub/up/../outside", "--", "true")
	if code != 1 || !strings.Contains(errOut, "outside worktree_dir") {
		t.Fatalf("exit %d, stderr %q; want the escape refused", code, errOut)
	}
}

// --timeout takes a number of seconds as well as a Go duration, and a bad
// value says what is expected.
func TestRunTimeoutTakesSeconds(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	for _, v := range []string{"5", "2.5", "30s"} {
		out, errOut, code := runCLI(t, "run", "--home", d.home, "--lane", "net", "--timeout", v, "--", "echo", "ok")
		if code != 0 || out != "ok\n" {
			t.Errorf("--timeout %s: exit %d, stdout %q, stderr %q", v, code, out, errOut)
		}
	}
	if _, errOut, code := runCLI(t, "run", "--home", d.home, "--lane", "net", "--timeout", "0.2", "--", "sleep", "30"); code != exitTimeout || !strings.Contains(errOut, "timed out") {
		t.Errorf("--timeout 0.2: exit %d, stderr %q; want 124", code, errOut)
	}
	for _, v := range []string{"5x", "soon", "-1", "NaN"} {
		_, errOut, code := runCLI(t, "run", "--home", d.home, "--timeout", v, "--", "true")
		if code != exitUsage || !strings.Contains(errOut, "-timeout") || !(strings.Contains(errOut, "want seconds (30, 1.5) or a duration") || strings.Contains(errOut, "negative")) {
			t.Errorf("--timeout %s: exit %d, stderr %q; want 2 saying what is expected", v, code, errOut)
		}
	}
}

// --home before the command works for every command, serve included.
func TestGlobalHomeBeforeCommand(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(fastConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonCmd(t, home, binary, "--home", home, "serve", "--log-format", "json")
	out, errOut, code := runCLI(t, "--home", home, "run", "--lane", "net", "--", "echo", "hi")
	if code != 0 || out != "hi\n" {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "--home", home, "jobs", "--json")
	var list struct{ Jobs []api.JobRecord }
	if code != 0 || jsonUnmarshal([]byte(out), &list) != nil || len(list.Jobs) != 1 {
		t.Fatalf("jobs: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	jobs := list.Jobs
	if out, errOut, code = runCLI(t, "--home", home, "status"); code != 0 || !strings.Contains(out, "net-0") {
		t.Fatalf("status: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code = runCLI(t, "--home", home, "cancel", jobs[0].ID); code != 1 || !strings.Contains(errOut, "already finished") {
		t.Fatalf("cancel: exit %d, stderr %q; want the daemon's answer", code, errOut)
	}
	if out, errOut, code = runCLI(t, "--home="+home, "events", "--kind", "daemon.started"); code != 0 || !strings.Contains(out, "daemon.started") {
		t.Fatalf("events: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code = runCLI(t, "--home", home, "runner", "--lane", "net", "--socket", "x"); code != exitUsage || !strings.Contains(errOut, "--home") {
		t.Fatalf("runner: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, "--bogus", "jobs"); code != exitUsage || !strings.Contains(errOut, "-bogus") {
		t.Fatalf("unknown global flag: exit %d, stderr %q", code, errOut)
	}
	d.lanes()
}

// A bad --state is a usage error that lists the states.
func TestJobsBadStateListsStates(t *testing.T) {
	t.Parallel()
	_, errOut, code := runCLI(t, "jobs", "--home", shortTemp(t), "--state", "bogus")
	if code != exitUsage || !strings.Contains(errOut, `unknown state "bogus"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, s := range allStates {
		if !strings.Contains(errOut, string(s)) {
			t.Errorf("stderr %q does not list %q", errOut, s)
		}
	}
}

// run forwards its stdin to the job byte for byte unless it is a terminal
// or --no-stdin is given, any size (streamed); a job that does not read
// its input is not held up by it.
func TestRunForwardsStdin(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	out, errOut, code := runCLIWith(t, "", strings.NewReader("hi\n"), "run", "--home", d.home, "--lane", "net", "--", "cat")
	if code != 0 || out != "hi\n" {
		t.Fatalf("echo hi | run -- cat: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	data := make([]byte, 300<<10)
	rand.Read(data)
	sum := sha256.Sum256(data)
	out, errOut, code = runCLIWith(t, "", bytes.NewReader(data), "run", "--home", d.home, "--lane", "net", "--", "sha256sum")
	if code != 0 || !strings.HasPrefix(out, hex.EncodeToString(sum[:])+" ") {
		t.Fatalf("binary stdin: exit %d, stdout %q, stderr %q; want sha256 %x", code, out, errOut, sum)
	}
	out, errOut, code = runCLIWith(t, "", strings.NewReader("hi\n"), "run", "--home", d.home, "--lane", "net", "--no-stdin", "--", "wc", "-c")
	if code != 0 || strings.TrimSpace(out) != "0" {
		t.Fatalf("--no-stdin: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runCLIWith(t, "", bytes.NewReader(bytes.Repeat([]byte("y\n"), 250<<10)), "run", "--home", d.home, "--lane", "net", "--", "head", "-c", "4")
	if code != 0 || out != "y\ny\n" {
		t.Fatalf("a job that stops reading: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// More than job.submit takes inline: streamed.
	out, errOut, code = runCLIWith(t, "", bytes.NewReader(make([]byte, api.MaxStdinBytes+1)), "run", "--home", d.home, "--lane", "net", "--", "wc", "-c")
	if code != 0 || strings.TrimSpace(out) != strconv.Itoa(api.MaxStdinBytes+1) {
		t.Fatalf("stdin over job.submit's inline cap: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// Every command's --help has one format: "usage: orchestrd ..." and, when
// it has flags, an "options:" section, on stdout, exit 0. Every command
// help lists is checked.
func TestHelpHasOneFormat(t *testing.T) {
	t.Parallel()
	all := [][]string{{"--help"}, {"-h"}, {"help"}, {"help", "run"}, {"approvals", "rules", "--help"}}
	for _, name := range helpCommands(t) {
		all = append(all, []string{name, "--help"})
	}
	for _, args := range all {
		out, errOut, code := runCLI(t, args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: orchestrd") ||
			strings.Contains(out, "options:") && !strings.Contains(out, "\n\noptions:\n  -") {
			t.Errorf("%v: exit %d, stderr %q, stdout:\n%s", args, code, errOut, out)
		}
	}
	// A usage error is one line on stderr, and where the help is.
	_, errOut, code := runCLI(t, "serve", "--bogus")
	if code != exitUsage || errOut != "orchestrd serve: unknown flag --bogus (orchestrd serve --help)\n" {
		t.Errorf("serve --bogus: exit %d, stderr %q", code, errOut)
	}
}

// A job waiting on a lane whose runner cannot start is explained once on
// stderr: queued, and why.
func TestRunSaysWhyItsJobIsQueued(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	// The daemon runs in a directory of its own, so that removing it makes
	// every respawn of a runner fail: a runner cannot start in a working
	// directory that is gone.
	cwd := shortTemp(t)
	cfg := `
[lanes.stuck]
runners = 1
slots = 1
spares = 0
network = "host"
[lanes.stuck.restart]
stable = "10s"
base_delay = "10ms"
max_delay = "100ms"
max_r = 2
max_t = "60s"
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonCmdIn(t, cwd, home, binary, "serve", "--home", home, "--log-format", "json")
	pid := d.lane("stuck").Runners[0].Pid
	if err := os.Remove(cwd); err != nil {
		t.Fatal(err)
	}
	killChild(d.proc.Pid(), pid)
	// Three failed starts of a runner: on a loaded machine each can take
	// seconds.
	d.waitEventWithin(90*time.Second, "lane.degraded", func(e map[string]any) bool { return e["lane"] == "stuck" })

	cmd := exec.Command(binary, "run", "--home", home, "--lane", "stuck", "--", "true")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := lineChan(stderr)
	var all []string
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("run exited without saying why its job waits: %q", all)
			}
			all = append(all, l)
			if strings.Contains(l, "is queued") {
				break wait
			}
		case <-deadline:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no queued notice on stderr within 20s: %q", all)
		}
	}
	last := all[len(all)-1]
	if !strings.Contains(last, "lane stuck is degraded") || !strings.Contains(last, "position 1 of 1") {
		t.Errorf("notice %q; want the position and the lane degraded", last)
	}
	// Ctrl-C cancels the queued job; the notice was said once.
	cmd.Process.Signal(syscall.SIGINT)
	for l := range lines {
		all = append(all, l)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitCancelled {
		t.Errorf("run after SIGINT: %v, want exit %d", err, exitCancelled)
	}
	n := 0
	for _, l := range all {
		if strings.Contains(l, "is queued") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the notice was printed %d times: %q", n, all)
	}
}
