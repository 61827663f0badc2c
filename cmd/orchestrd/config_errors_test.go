package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// serve with a config holding several mistakes prints each on its own
// line with its full key, and exits 2 without starting.
func TestServePrintsEveryConfigError(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	p := filepath.Join(home, "bad.toml")
	cfg := "[lanes.x]\nmax_runner_memory_bytes = -1\nslots = 0\n[lanes.x.restart]\nstable = \"0s\"\nbase_delay = \"0s\"\n"
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "serve", "--home", home, "--config", p).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"lanes.x.max_runner_memory_bytes must be >= 0, got -1", "lanes.x.slots must be", "lanes.x.restart.stable must be", "lanes.x.restart.base_delay must be"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, "orchestrd serve: "+p+": "+w) {
				found = true
			}
		}
		if !found {
			t.Errorf("no line %q in\n%s", "orchestrd serve: "+p+": "+w, out)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "daemon.sock")); err == nil {
		t.Error("the daemon started")
	}
}
