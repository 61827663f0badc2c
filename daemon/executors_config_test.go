package daemon

import (
	"strings"
	"testing"
)

func TestExecutorsConfig(t *testing.T) {
	cfg, err := ParseConfig("test.toml", []byte(`
[executors.claude]
command = ["orchestrd", "executor", "--", "claude", "-p"]
env = { FOO = "bar" }
instances = 1
idle_timeout = "1m"
[executors.claude.restart]
max_r = 3
[[executors.claude.mcp_servers]]
name = "fs"
command = "mcp-fs"
args = ["--root", "/"]
[executors.claude.model_config]
model = "opus"
`))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Executors["claude"]
	if len(p.Command) != 5 || p.Env["FOO"] != "bar" || p.Instances != 1 || p.MaxInstances != 4 ||
		p.IdleTimeout.String() != "1m0s" || p.Restart.MaxR != 3 || len(p.MCPServers) != 1 ||
		p.MCPServers[0].Args[1] != "/" || p.ModelConfig == nil || p.ModelConfig.Model != "opus" ||
		p.HighWater != 100 || p.LowWater != 50 || p.PermissionTimeout.String() != "30s" {
		t.Fatalf("decoded pool: %+v", p)
	}
	if len(DefaultConfig().Executors) != 0 {
		t.Fatal("the embedded config has executor pools")
	}
	_, err = ParseConfig("test.toml", []byte(`
[executors.bad]
command = []
bogus = 1
low_water = 200
`))
	if err == nil {
		t.Fatal("a bad executors table was accepted")
	}
	for _, want := range []string{"unknown key executors.bad.bogus", "executors.bad.command must name",
		"executors.bad.low_water must be"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// agent = KIND: a built-in kind needs no command; an unknown kind is a
// config error naming the key and the kinds.
func TestExecutorsAgentConfig(t *testing.T) {
	cfg, err := ParseConfig("test.toml", []byte(`
[executors.claude]
agent = "claude-code"
state_dir = "/var/lib/claude-state"
[executors.plain]
command = ["my-executor"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Executors["claude"]; p.Agent != "claude-code" || p.StateDir != "/var/lib/claude-state" || len(p.Command) != 0 {
		t.Fatalf("claude pool: %+v", p)
	}
	if p := cfg.Executors["plain"]; p.Agent != "command" {
		t.Fatalf("a pool without agent is %q, want command", p.Agent)
	}
	_, err = ParseConfig("test.toml", []byte(`
[executors.x]
agent = "cursor"
`))
	want := `executors.x.agent must be one of "command", "claude-code", "codex", "gemini", got "cursor"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}
