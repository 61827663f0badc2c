package main

import (
	"regexp"
	"strings"
	"testing"
)

// helpCommands are the commands `orchestrd help` lists.
func helpCommands(t *testing.T) []string {
	t.Helper()
	out, errOut, code := runCLI(t, "help")
	_, list, ok := strings.Cut(out, "\ncommands:\n")
	if code != 0 || errOut != "" || !ok {
		t.Fatalf("help: exit %d, stderr %q\n%s", code, errOut, out)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	var names []string
	for _, l := range strings.Split(list, "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(l, "  ") {
			names = append(names, f[0])
		}
	}
	if len(names) < 20 {
		t.Fatalf("help lists %d commands:\n%s", len(names), out)
	}
	return names
}

// An unknown command or a bad flag is one line on stderr saying what is
// wrong, a "did you mean" when something is close, and where the help is;
// exit 2. Never the whole usage.
func TestUsageErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, `orchestrd: unknown command "stauts"; did you mean "status"? (orchestrd help)`},
		{[]string{"aprove", "a-1"}, `orchestrd: unknown command "aprove"; did you mean "approve"? (orchestrd help)`},
		{[]string{"xyzzy"}, `orchestrd: unknown command "xyzzy" (orchestrd help)`},
		{[]string{"--hme", home, "jobs"}, `orchestrd: unknown flag --hme; did you mean --home? (orchestrd help)`},
		{[]string{"jobs", "--stat", "failed"}, `orchestrd jobs: unknown flag --stat; did you mean --state? (orchestrd jobs --help)`},
		{[]string{"jobs", "--home", home, "extra"}, `orchestrd jobs: unexpected argument "extra" (orchestrd jobs --help)`},
		{[]string{"jobs", "--limit", "x"}, `orchestrd jobs: --limit must be a number from 0 to 10000, got "x" (orchestrd jobs --help)`},
		{[]string{"serve", "--bogus"}, `orchestrd serve: unknown flag --bogus (orchestrd serve --help)`},
		{[]string{"events", "--folow"}, `orchestrd events: unknown flag --folow; did you mean --follow? (orchestrd events --help)`},
		{[]string{"approvals", "rules", "--jsn"}, `orchestrd approvals rules: unknown flag --jsn; did you mean --json? (orchestrd approvals rules --help)`},
		{[]string{"cancel"}, `orchestrd cancel: want exactly one job ID (orchestrd cancel --help)`},
	} {
		_, errOut, code := runCLI(t, tc.args...)
		if code != exitUsage || errOut != tc.want+"\n" {
			t.Errorf("%v: exit %d, stderr %q\nwant exit 2, %q", tc.args, code, errOut, tc.want)
		}
	}
	// Every command but runner (the daemon's) answers a bad flag so.
	hint := regexp.MustCompile(`^orchestrd ([a-z-]+): unknown flag --no-such-flag \(orchestrd ([a-z-]+) --help\)\n$`)
	for _, name := range helpCommands(t) {
		if name == "runner" || name == "help" {
			continue
		}
		_, errOut, code := runCLI(t, name, "--no-such-flag")
		m := hint.FindStringSubmatch(errOut)
		if code != exitUsage || m == nil || m[1] != name || m[2] != name {
			t.Errorf("%s --no-such-flag: exit %d, stderr %q", name, code, errOut)
		}
	}
}
