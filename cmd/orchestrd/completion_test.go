package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// completionScript writes `orchestrd completion SHELL` to a file, checked
// by the shell's own syntax check.
func completionScript(t *testing.T, shell string, check ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, "completion", shell)
	if code != 0 || errOut != "" || out == "" {
		t.Fatalf("completion %s: exit %d, stderr %q", shell, code, errOut)
	}
	path := filepath.Join(t.TempDir(), "orchestrd."+shell)
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(check[0], append(check[1:], path)...).CombinedOutput(); err != nil {
		t.Fatalf("%v %s: %v\n%s", check, path, err, b)
	}
	return path
}

// shellRun runs a shell script with a deadline and returns its stdout;
// orchestrd on its PATH is the binary under test.
func shellRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary)+string(filepath.ListSeparator)+os.Getenv("PATH"))
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s\n%s", name, args, err, out, errb.String())
	}
	return string(out)
}

// bashComplete completes each line as bash does at its end (COMP_WORDS
// split at blanks, COMP_CWORD the last word, "" after a blank), the
// command being the binary under test; one line of candidates each.
// As bash does (COMP_WORDBREAKS), "=" is a word of its own.
const bashDriver = `source "$1"; bin=$2; shift 2
for line in "$@"; do
	read -ra COMP_WORDS <<<"${line//=/ = }"
	[[ $line == *" " ]] && COMP_WORDS+=("")
	COMP_WORDS[0]=$bin
	COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
	COMP_LINE=$line COMP_POINT=${#line}
	_orchestrd
	echo "${COMPREPLY[*]}"
done`

func bashComplete(t *testing.T, script string, lines ...string) []string {
	t.Helper()
	out := shellRun(t, "bash", append([]string{"-c", bashDriver, "bash", script, binary}, lines...)...)
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(lines) {
		t.Fatalf("bash completed %d lines of %d:\n%s", len(got), len(lines), out)
	}
	return got
}

// The bash script completes commands, flags (each command's own, as its
// --help lists them), flag values, subcommands, and job and approval ids
// from the daemon.
func TestCompletionBash(t *testing.T) {
	t.Parallel()
	script := completionScript(t, "bash", "bash", "-n")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "abc"), 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ line, want string }{
		{"orchestrd st", "stop status"},
		{"orchestrd jobs --st", "--state"},
		{"orchestrd jobs --state f", "failed"},
		{"orchestrd jobs --state=f", "failed"},
		{"orchestrd --home /x jo", "jobs job"},
		{"orchestrd approvals rules --", "--help --home --json"},
		{"orchestrd approvals rules ", "rm"},
		{"orchestrd approvals --home /x --source ", "reachout plan control executor"},
		{"orchestrd completion ", "bash fish zsh"},
		{"orchestrd lane ", "token"},
		{"orchestrd help jo", "job jobs"},
		{"orchestrd jobs --limit ", ""},
		{"orchestrd run --cwd " + dir + "/a", dir + "/abc"},
		{"orchestrd events -", "--cluster -f --follow --help --home --job --json --kind --lane -n --node --since --utc"},
	}
	var lines []string
	for _, c := range cases {
		lines = append(lines, c.line)
	}
	for i, got := range bashComplete(t, script, lines...) {
		if got != cases[i].want {
			t.Errorf("%q: completed %q, want %q", cases[i].line, got, cases[i].want)
		}
	}

	// Every command help lists, and each one's flags as its --help lists
	// them: the script is made from the commands themselves.
	names := helpCommands(t)
	lines = []string{"orchestrd "}
	for _, n := range names {
		lines = append(lines, "orchestrd "+n+" -")
	}
	got := bashComplete(t, script, lines...)
	if strings.Join(names, " ") != got[0] {
		t.Errorf("commands completed: %q\nhelp lists: %q", got[0], strings.Join(names, " "))
	}
	for i, n := range names {
		if n == "runner" {
			continue // its flags are lanes/runner's own
		}
		help, _, _ := runCLI(t, n, "--help")
		want := []string{"--help"}
		for _, l := range strings.Split(help, "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, "  -") {
				want = append(want, "-"+f[0])
			}
		}
		for j, w := range want {
			if len(w) == 3 { // --f: a one-letter flag completes as -f
				want[j] = w[1:]
			}
		}
		have := strings.Fields(got[1+i])
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(want, have) {
			t.Errorf("%s: completes flags %v; its --help lists %v", n, have, want)
		}
	}

	// Ids come from the daemon the command line names.
	d := startDaemon(t, "[lanes.hold]\nrunners = 0\n")
	id := d.submit(api.JobSpec{Lane: "hold", Argv: []string{"true"}})
	got = bashComplete(t, script, "orchestrd --home "+d.home+" wait ", "orchestrd cancel --home "+d.home+" ",
		"orchestrd approve --home "+d.home+" ")
	if got[0] != id || got[1] != id || got[2] != "" {
		t.Errorf("ids completed %q; want %s, %s and no approvals", got, id, id)
	}
}

// The zsh script passes zsh -n and completes in a real zsh (through a
// pseudo-terminal: zsh/zpty), each line ending where the completion left
// it.
func TestCompletionZsh(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Skip("zsh not installed")
	}
	script := completionScript(t, "zsh", "zsh", "-n")
	d := startDaemon(t, "[lanes.hold]\nrunners = 0\n")
	id := d.submit(api.JobSpec{Lane: "hold", Argv: []string{"true"}})
	// Each line is typed, completed with a tab and entered; orchestrd is
	// a function that prints the words it got.
	const driver = `zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PS1='> '; autoload -Uz compinit; compinit -u -D; source $1; orchestrd() { print -r -- \"LI\"\"NE:\$*:END\" }; print RE\"\"ADY"
zpty -r z out '*READY*'
shift
for line in "$@"; do
	zpty -n -w z "$line"$'\t\n'
	zpty -r z out '*LINE:*:END*'
	print -r -- "${${out##*LINE:}%%:END*}"
done
zpty -d z`
	cases := []struct{ line, want string }{
		{"orchestrd sta", "status"},
		{"orchestrd jobs --st", "jobs --state"},
		{"orchestrd jobs --state fai", "jobs --state failed"},
		{"orchestrd approvals ru", "approvals rules"},
		{"orchestrd approvals rules ", "approvals rules rm"},
		{"orchestrd completion fi", "completion fish"},
		{"orchestrd --home /tmp wai", "--home /tmp wait"},
		{"orchestrd help jobs --ho", "help jobs --home"},
		{"orchestrd --home " + d.home + " wait ", "--home " + d.home + " wait " + id},
	}
	args := []string{"-f", "-c", driver, "zsh", script}
	for _, c := range cases {
		args = append(args, c.line)
	}
	got := strings.Split(strings.TrimSuffix(shellRun(t, "zsh", args...), "\n"), "\n")
	for i, c := range cases {
		if i >= len(got) || strings.TrimSpace(got[i]) != c.want {
			t.Errorf("%q: completed to %q, want %q (all: %q)", c.line, got, c.want, got)
			break
		}
	}
}

// The fish script passes fish --no-execute and completes in fish
// (complete -C).
func TestCompletionFish(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("fish"); err != nil {
		t.Skip("fish not installed")
	}
	script := completionScript(t, "fish", "fish", "--no-execute")
	d := startDaemon(t, "[lanes.hold]\nrunners = 0\n")
	id := d.submit(api.JobSpec{Lane: "hold", Argv: []string{"true"}})
	for _, c := range []struct {
		line string
		want []string
	}{
		{"orchestrd st", []string{"status", "stop"}},
		{"orchestrd jobs --st", []string{"--state"}},
		{"orchestrd jobs --state f", []string{"failed"}},
		{"orchestrd --home /tmp jo", []string{"job", "jobs"}},
		{"orchestrd approvals ", []string{"rules", "telegram"}},
		{"orchestrd approvals rules ", []string{"rm"}},
		{"orchestrd approvals rules --", []string{"--help", "--home", "--json"}},
		{"orchestrd completion ", []string{"bash", "fish", "zsh"}},
		{"orchestrd --home " + d.home + " job ", []string{id}},
	} {
		out := shellRun(t, "fish", "-c", "source $argv[1]; complete -C $argv[2]", script, c.line)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if w, _, _ := strings.Cut(l, "\t"); w != "" {
				got = append(got, w)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: completed %q, want %q", c.line, got, c.want)
		}
	}
}

// completion wants one shell it knows.
func TestCompletionWantsAShell(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		_, errOut, code := runCLI(t, args...)
		if code != exitUsage || errOut != "orchestrd completion: want one shell: bash, zsh or fish (orchestrd completion --help)\n" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
