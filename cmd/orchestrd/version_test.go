package main

import (
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// version (and --version) print one line: the version, the commit the
// binary was built from (as its build stamp says), the Go version and the
// platform.
func TestVersionSaysCommitAndGo(t *testing.T) {
	t.Parallel()
	out, errOut, code := runCLI(t, "version")
	if code != 0 || errOut != "" || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "orchestrd "+version+", commit ") ||
		!strings.HasSuffix(out, ", "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n") {
		t.Fatalf("version: exit %d, stderr %q, stdout %q", code, errOut, out)
	}
	// The commit is the binary's VCS stamp (none under -buildvcs=false,
	// or in a git worktree, where go build does not stamp).
	stamp, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "commit unknown,"
	for _, l := range strings.Split(string(stamp), "\n") {
		if rev, ok := strings.CutPrefix(strings.TrimSpace(l), "build\tvcs.revision="); ok {
			want = "commit " + rev[:12]
		}
	}
	if !strings.Contains(out, want) {
		t.Errorf("version %q; want %q (go version -m:\n%s)", out, want, stamp)
	}
	if flag, _, _ := runCLI(t, "--version"); flag != out {
		t.Errorf("--version %q, version %q", flag, out)
	}

	for _, tc := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "ae818ae1b2c3d4e5f6"}, {Key: "vcs.modified", Value: "false"}}, "ae818ae1b2c3"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "ae818ae1b2c3d4e5f6"}, {Key: "vcs.modified", Value: "true"}}, "ae818ae1b2c3 (modified)"},
		{nil, "unknown"},
	} {
		if got := buildCommit(&debug.BuildInfo{Settings: tc.settings}); got != tc.want {
			t.Errorf("buildCommit(%v) = %q, want %q", tc.settings, got, tc.want)
		}
	}
}
