package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// A job whose working directory is inside the daemon's home (hidden from
// jobs: an empty mode-000 tmpfs covers it) is refused naming the directory
// and why, not run into exec's "permission denied" that blames the command
// (the home itself) or a "does not exist" (a directory in it).
func TestCwdInsideTheHomeIsHiddenFromJobs(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	sub := filepath.Join(d.home, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{d.home, sub, d.home + "/./sub/"} {
		id := d.submit(api.JobSpec{Lane: "net", Argv: []string{"pwd"}, Cwd: dir})
		rec := d.wait(id)
		if rec.State != api.StateError || !strings.Contains(rec.Error, "is hidden from jobs") ||
			!strings.Contains(rec.Error, "daemon's home") || strings.Contains(rec.Error, "pwd") {
			t.Errorf("a job in %s ended %s (exit %v): %q, want error: the directory is hidden from jobs", dir, rec.State, rec.ExitCode, rec.Error)
		}
		if rec.ExitCode != nil {
			t.Errorf("a job in %s that never ran has exit code %d", dir, *rec.ExitCode)
		}
	}
	_, errOut, code := runCLI(t, "run", "--home", d.home, "--cwd", sub, "--", "pwd")
	if code == 0 || code == 126 || !strings.Contains(errOut, "hidden from jobs") {
		t.Fatalf("run --cwd %s: exit %d, stderr %q", sub, code, errOut)
	}
	// A directory beside the home (its name a prefix of the home's) runs.
	beside := d.home + "-beside"
	if err := os.Mkdir(beside, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(beside) })
	if out, errOut, code := runCLI(t, "run", "--home", d.home, "--cwd", beside, "--", "pwd"); code != 0 || out != beside+"\n" {
		t.Fatalf("run --cwd %s: exit %d, %q, stderr %q", beside, code, out, errOut)
	}
}
