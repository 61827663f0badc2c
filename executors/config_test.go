package executors

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A pool's agent key: "command" runs its command as the executor; a
// built-in kind runs this binary's executor around the agent's command;
// an unknown kind is refused naming the key and the kinds.
func TestAgentArgv(t *testing.T) {
	p := DefaultPool()
	p.Command = []string{"my-exec", "--x"}
	if got := agentArgv(p, "/bin/orchestrd", "", true); !slices.Equal(got, []string{"my-exec", "--x"}) {
		t.Fatalf("command pool: %q", got)
	}
	p.Agent = "claude-code"
	p.ModelConfig = &ModelConfig{Model: "opus"}
	want := []string{"/bin/orchestrd", "executor", "--agent", "claude-code", "--state-dir", "/s", "--model", "opus", "--sandboxed", "--", "my-exec", "--x"}
	if got := agentArgv(p, "/bin/orchestrd", "/s", true); !slices.Equal(got, want) {
		t.Fatalf("claude-code pool: %q", got)
	}
	p.Command, p.ModelConfig, p.Agent = nil, nil, "gemini"
	want = []string{"/bin/orchestrd", "executor", "--agent", "gemini", "--state-dir", "/s", "--", "gemini"}
	if got := agentArgv(p, "/bin/orchestrd", "/s", false); !slices.Equal(got, want) {
		t.Fatalf("gemini pool without a command: %q", got)
	}
}

func TestAgentValidation(t *testing.T) {
	pool := func(f func(*PoolConfig)) map[string]PoolConfig {
		p := DefaultPool()
		f(&p)
		return map[string]PoolConfig{"p": p}
	}
	for _, c := range []struct {
		name string
		f    func(*PoolConfig)
		want string // "" is valid
	}{
		{"command", func(p *PoolConfig) { p.Command = []string{"x"} }, ""},
		{"claude without command", func(p *PoolConfig) { p.Agent = "claude-code" }, ""},
		{"codex with state_dir", func(p *PoolConfig) { p.Agent = "codex"; p.StateDir = "~/.codex" }, ""},
		{"unknown kind", func(p *PoolConfig) { p.Agent = "cursor" },
			`executors.p.agent must be one of "command", "claude-code", "codex", "gemini", got "cursor"`},
		{"command without command", func(p *PoolConfig) {}, "executors.p.command must name"},
		{"state_dir on a command pool", func(p *PoolConfig) { p.Command = []string{"x"}; p.StateDir = "/s" },
			"executors.p.state_dir is a built-in agent kind's"},
		{"relative state_dir", func(p *PoolConfig) { p.Agent = "gemini"; p.StateDir = "state" },
			"executors.p.state_dir must be an absolute path"},
	} {
		errs := Validate("executors", pool(c.f))
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		got := strings.Join(msgs, "; ")
		if (c.want == "") != (len(errs) == 0) || !strings.Contains(got, c.want) {
			t.Errorf("%s: errors %q, want %q", c.name, got, c.want)
		}
	}
}

// A built-in agent pool's state directory: HOME/agents/POOL made 0700
// (its mode forced), or the directory the pool names; a link in the
// home's agents path is refused, not followed.
func TestStateDirs(t *testing.T) {
	home := t.TempDir()
	named := filepath.Join(t.TempDir(), "claude-state")
	pools := map[string]PoolConfig{
		"cc":  {Agent: "claude-code"},
		"gm":  {Agent: "gemini", StateDir: named},
		"cmd": {Agent: "command", Command: []string{"x"}},
	}
	if err := os.MkdirAll(filepath.Join(home, "agents", "cc"), 0o755); err != nil {
		t.Fatal(err)
	}
	dirs, err := prepareStateDirs(home, pools)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 2 || dirs["cc"] != filepath.Join(home, "agents", "cc") || dirs["gm"] != named {
		t.Fatalf("state dirs: %v", dirs)
	}
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v", d, fi, err)
		}
	}
	// A link where the agents directory is: refused.
	home2 := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(home2, "agents")); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareStateDirs(home2, map[string]PoolConfig{"cc": {Agent: "claude-code"}}); err == nil {
		t.Fatal("a link in the home's agents path was followed")
	}
}
