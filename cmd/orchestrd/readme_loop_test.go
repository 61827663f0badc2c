package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// readmeLoopsHeading is the README section whose example
// TestREADMELoopExample runs.
const readmeLoopsHeading = "### Your first loop"

// readmeSection is README's section under heading, up to the next heading
// of its level or above; it fails t when there is none.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no heading %q: TestREADMELoopExample runs that section's example; update the test if it moved", heading)
	}
	s = s[i+len(heading)+2:]
	level := strings.IndexByte(heading, ' ') // 3 for "### "
	for _, l := range strings.Split(s, "\n") {
		if n := len(l) - len(strings.TrimLeft(l, "#")); n > 0 && n <= level && strings.HasPrefix(l[n:], " ") {
			return s[:strings.Index(s, "\n"+l+"\n")+1]
		}
	}
	return s
}

// indentedBlocks are the Markdown code blocks indented four spaces in
// text, without that indent (a blank line inside one is kept).
func indentedBlocks(text string) []string {
	var blocks []string
	var cur []string
	flush := func() {
		for len(cur) > 0 && cur[len(cur)-1] == "" {
			cur = cur[:len(cur)-1]
		}
		if len(cur) > 0 {
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		}
		cur = nil
	}
	prevBlank := true
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "    ") && (cur != nil || prevBlank):
			cur = append(cur, l[4:])
		case strings.TrimSpace(l) == "" && cur != nil:
			cur = append(cur, "")
		default:
			flush()
		}
		prevBlank = strings.TrimSpace(l) == ""
	}
	flush()
	return blocks
}

// theBlock is the one block of blocks whose first line matches first; it
// fails t unless there is exactly one.
func theBlock(t *testing.T, blocks []string, first, what string) string {
	t.Helper()
	re := regexp.MustCompile(first)
	var found []string
	for _, b := range blocks {
		line, _, _ := strings.Cut(b, "\n")
		if re.MatchString(line) {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("README's %q section has %d code blocks starting %q (%s), want 1: TestREADMELoopExample runs it; update the test if it moved",
			readmeLoopsHeading, len(found), first, what)
	}
	return found[0]
}

// README's loop example runs as written: its agent script (the same as
// examples/loop-agent.sh) and its config (with /home/me a fresh home),
// a real daemon, a fresh git repository ~/src/app, and its walk-through's
// commands run by sh: the plan validates, its approval spawns the specs,
// their phases and code loops validate, and once the merge is approved
// the code loops' files are in main, as the walk-through's last line says.
func TestREADMELoopExample(t *testing.T) {
	skipWithoutSandbox(t) // the README's config keeps the default sandbox
	// Its daemon is not race-built: TestLoopPlanTree runs the same tree
	// (plan, 2 specs, their phases and code loops, the merge's approval)
	// on a race-built daemon; here what is checked is the README's text.
	t.Parallel() // its own daemon, home and repository

	blocks := indentedBlocks(readmeSection(t, readmeLoopsHeading))
	script := theBlock(t, blocks, `^#!/bin/sh$`, "the agent script")
	config := theBlock(t, blocks, `^\[executors\.agent\]$`, "the config")
	walk := theBlock(t, blocks, `^orchestrd loop plan `, "the walk-through")
	example, err := os.ReadFile("../../examples/loop-agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	if string(example) != script {
		t.Fatalf("examples/loop-agent.sh is not README's agent script:\n--- examples/loop-agent.sh\n%s--- README\n%s", example, script)
	}

	// /home/me is a fresh home: the script, the repository, the daemon's
	// home (~/.orchestrd) and orchestrd on its PATH.
	me := shortTemp(t)
	if n := strings.Count(config, "/home/me/"); n != 2 {
		t.Fatalf("README's loop config names /home/me/ %d times, want 2 (the script and the repository):\n%s", n, config)
	}
	config = strings.ReplaceAll(config, "/home/me/", me+"/")
	if err := os.WriteFile(filepath.Join(me, "agent.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(me, "src", "app")
	testio.GitRepo(t, repo, "an app\n")
	bin := filepath.Join(me, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binaryFor(t), filepath.Join(bin, "orchestrd")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORCHESTRD_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+me, "PATH="+bin+":"+os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1")
	home := filepath.Join(me, ".orchestrd")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, home)
	cmd := daemonrun.Serve(binaryFor(t), home)
	cmd.Env = append(env, "XDG_RUNTIME_DIR="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "xdg-config"))
	cmd.Stdout, cmd.Stderr = d.stderr, d.stderr
	d.launch(cmd)

	// Each line of the walk-through, by sh as the user would, ID the
	// plan's id; what the test waits for before, and checks after.
	id := ""
	sh := func(line string) string {
		t.Helper()
		c := exec.Command("/bin/sh", "-c", strings.ReplaceAll(line, "ID", id))
		var o, e bytes.Buffer
		c.Dir, c.Env, c.Stdout, c.Stderr = me, env, &o, &e
		if err := c.Run(); err != nil {
			t.Fatalf("README's %q: %v\n%s%s\nthe daemon:\n%s", line, err, o.String(), e.String(), tail(d.stderr.String(), 3000))
		}
		return o.String()
	}
	// wait waits until the plan is at stage st, failing at once with the
	// loop's error and last feedback when a loop of the tree failed.
	wait := func(st string, within time.Duration) {
		t.Helper()
		var failed *api.LoopRecord
		eventuallyOr(t, within, "loop "+id+" at stage "+st, func() bool {
			var list api.LoopListResult
			if d.call("loop.list", nil, &list) != nil {
				return false
			}
			for _, l := range list.Loops {
				if l.Status == api.LoopFailed {
					failed = &l
					return true
				}
				if l.ID == id && l.Stage == st {
					return true
				}
			}
			return false
		}, func() string { return tail(d.stderr.String(), 3000) })
		if failed != nil {
			g := d.loop(failed.ID)
			fb := ""
			if n := len(g.Iterations); n > 0 {
				fb = g.Iterations[n-1].Feedback
			}
			t.Fatalf("README's loop example: the %s loop %s failed %s (%s); its last feedback:\n%s", failed.LoopType, failed.ID, failed.Error, failed.Message, fb)
		}
	}
	steps := []struct {
		command string
		run     func(line, comment string)
	}{
		{`^orchestrd loop plan --repo ~/src/app "[^"]+"$`, func(line, _ string) {
			id = strings.TrimSpace(sh(line))
			if !regexp.MustCompile(`^\d+-[0-9a-f]{16}$`).MatchString(id) {
				t.Fatalf("loop plan printed %q, not a loop id", id)
			}
		}},
		{`^orchestrd loops --watch$`, func(string, string) {}}, // live until Ctrl-C: not run
		{`^orchestrd plan show ID && orchestrd plan approve ID$`, func(line, _ string) {
			wait(api.StageApproval, 120*time.Second)
			if out := sh(line); !strings.Contains(out, "## Specs to Create") || !strings.Contains(out, "spec-hello") {
				t.Fatalf("README's %q printed:\n%s", line, out)
			}
		}},
		{`^orchestrd loops$`, func(line, comment string) {
			wait(api.StageMerge, 240*time.Second)
			want := regexp.MustCompile(`\[merge into main awaiting approval: [^]]+\]`).FindString(comment)
			if out := sh(line); want == "" || !strings.Contains(out, strings.ReplaceAll(want, "ID", id)) {
				t.Fatalf("README's %q says %q; it printed:\n%s", line, comment, out)
			}
		}},
		{`^orchestrd plan approve ID$`, func(line, _ string) {
			sh(line)
			d.waitLoop(id, api.LoopComplete, 60*time.Second)
			d.waitEvent("loop.merged", func(e map[string]any) bool { return e["id"] == id && e["into"] == "main" })
		}},
		{`^git -C ~/src/app show main:greetings/hello\.txt$`, func(line, comment string) {
			if out, want := sh(line), strings.ReplaceAll(comment, "ID", id)+"\n"; out != want {
				t.Fatalf("README's %q printed %q; its comment says %q", line, out, want)
			}
		}},
	}
	lines := strings.Split(strings.TrimSpace(walk), "\n")
	if len(lines) != len(steps) {
		t.Fatalf("README's loop walk-through has %d lines, the test knows %d: update TestREADMELoopExample with it:\n%s", len(lines), len(steps), walk)
	}
	for i, l := range lines {
		command, comment, _ := strings.Cut(l, "  #")
		command, comment = strings.TrimSpace(command), strings.TrimSpace(comment)
		if !regexp.MustCompile(steps[i].command).MatchString(command) {
			t.Fatalf("README's loop walk-through's line %d is %q, the test expects %s: update TestREADMELoopExample with it", i+1, command, steps[i].command)
		}
		steps[i].run(command, comment)
	}

	// The whole tree completed: the plan, its 2 specs, their phases and
	// code loops; both code loops' work is in main, and the README's
	// validation command passes there.
	var list api.LoopListResult
	d.mustCall("loop.list", nil, &list)
	if len(list.Loops) != 7 {
		t.Fatalf("loops: %+v", list.Loops)
	}
	for _, l := range list.Loops {
		if l.Status != api.LoopComplete {
			t.Fatalf("%s %s is %s: %+v", l.LoopType, l.ID, l.Status, l)
		}
	}
	if got := git(t, repo, "show", "main:greetings/bye.txt"); got != "written by loop "+id+"-002-001-001" {
		t.Fatalf("main:greetings/bye.txt: %q", got)
	}
	validation := regexp.MustCompile(`(?m)^validation_command = "([^"]+)"`).FindStringSubmatch(config)
	if validation == nil {
		t.Fatalf("README's loop config has no [loops.code] validation_command:\n%s", config)
	}
	check := filepath.Join(me, "check")
	git(t, me, "clone", "-q", "--branch", "main", repo, check)
	if out, err := exec.Command("/bin/sh", "-c", "cd "+check+" && "+validation[1]).CombinedOutput(); err != nil {
		t.Fatalf("README's validation command on main: %v\n%s", err, out)
	}
}
