package modelfake

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An agent CLI installed at another version than the pin is refused with
// the command that installs the pinned one; the pinned one is taken.
func TestCLIIsThePinnedVersion(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ORCHESTRD_AGENT_CLIS", dir)
	bin := filepath.Join(dir, "node_modules", "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl", "bin", "codex")
	meta := filepath.Join(dir, "node_modules", "@openai", "codex", "package.json")
	for _, p := range []string{bin, meta} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	want := pinned("@openai/codex")
	for _, c := range []struct{ version, err string }{
		{"0.0.1", "codex 0.0.1 is installed in " + dir + ", the tests pin " + want[strings.LastIndex(want, "@")+1:] + " (npm install --prefix " + dir + " " + want + ")"},
		{want[strings.LastIndex(want, "@")+1:], ""},
	} {
		if err := os.WriteFile(meta, []byte(`{"name":"@openai/codex","version":"`+c.version+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		argv, err := CLI("codex")
		if err != nil {
			if err.Error() != c.err {
				t.Fatalf("version %s: %q, want %q", c.version, err, c.err)
			}
		} else if c.err != "" || len(argv) != 1 || argv[0] != bin {
			t.Fatalf("version %s: %v, want the error %q", c.version, argv, c.err)
		}
	}
	if _, err := CLI("vim"); err == nil || !strings.Contains(err.Error(), `no pinned CLI for agent kind "vim"`) {
		t.Fatalf("an unknown kind: %v", err)
	}
}
