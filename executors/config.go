package executors

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/executors/agent"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor"
)

// This file holds the executors' own tables of the config file
// ([executors.NAME] and [executors.NAME.restart]), their defaults and their
// validation. The file itself is the daemon's (daemon/config.go).

// Network modes of a pool's executor processes (as lanes').
const (
	NetworkNone = "none"
	NetworkHost = "host"
)

// Transports: how the daemon and an executor are connected.
const (
	TransportSocket = "socket" // the executor listens on --socket PATH (Agor's way)
	TransportFD     = "fd"     // a socketpair; the executor's end is its descriptor 3
)

// MCPServer is one [[executors.NAME.mcp_servers]] entry, handed to the
// executor by get_execution_context.
type MCPServer struct {
	Name    string            `toml:"name" json:"name"`
	Command string            `toml:"command" json:"command"`
	Args    []string          `toml:"args" json:"args"`
	Env     map[string]string `toml:"env" json:"env,omitempty"`
}

// ModelConfig is [executors.NAME.model_config].
type ModelConfig struct {
	Model          string `toml:"model" json:"model"`
	ThinkingTokens int    `toml:"thinking_tokens" json:"thinking_tokens,omitempty"`
}

// PoolConfig is one [executors.NAME] table: a pool of executor processes
// that all run the same command.
type PoolConfig struct {
	// Agent is the kind of executor: "command" (the default) runs Command
	// as the executor's whole argv; a built-in agent kind ("claude-code",
	// "codex", "gemini") runs `orchestrd executor --agent KIND` around
	// Command, which is then the agent's binary and its extra arguments
	// (default: the kind's binary on PATH, agent.DefaultBinary).
	Agent string `toml:"agent"`
	// StateDir is where a built-in agent keeps its sessions and settings
	// (its --state-dir): default <home>/agents/<pool>, made 0700; a pool
	// may name another (such as the user's ~/.claude). Shown read-write to
	// a sandboxed executor, kept across executor and daemon restarts.
	StateDir string `toml:"state_dir"`
	// Command is the executor's argv. "--socket PATH" is appended unless an
	// argument holds "{socket}", which is replaced by PATH.
	Command []string          `toml:"command"`
	Env     map[string]string `toml:"env"`
	// InheritEnv names the variables of the daemon's environment (a name,
	// or a prefix ending in "*") the executors get beside the base ones
	// (proc.BaseEnvKeys); nothing else of it reaches them.
	InheritEnv []string `toml:"inherit_env"`
	// Secrets lists the secrets (of secrets.toml, by a name get_api_key
	// takes: "anthropic", "GITHUB_TOKEN") the pool's tasks may receive;
	// none by default.
	Secrets []string `toml:"secrets"`
	// Transport is how the daemon reaches the executor: "socket" (the
	// default, as Agor's executors expect: the executor listens on a
	// path in a directory of its own) or "fd" (a socketpair: the
	// executor gets its end as descriptor 3, "--fd 3" appended unless an
	// argument holds "{fd}").
	Transport string `toml:"transport"`
	Cwd       string `toml:"cwd"`
	// WriteCheckout lets a loop's agent write its repository's main
	// checkout too (its worktree only, by default). The repository's
	// shared git directory stays read-only to it whatever this says.
	WriteCheckout bool `toml:"write_checkout"`
	// Instances are kept warm (started before any task); MaxInstances
	// bounds the processes running at once.
	Instances    int    `toml:"instances"`
	MaxInstances int    `toml:"max_instances"`
	Network      string `toml:"network"`
	// QueueLimit bounds the tasks waiting for an executor.
	QueueLimit int `toml:"queue_limit"`
	// IdleTimeout: an idle executor beyond Instances gets shutdown
	// {reason: "idle_timeout"} after it.
	IdleTimeout api.Duration `toml:"idle_timeout"`
	// StartupTimeout bounds spawn-to-connected; past it the process is
	// killed.
	StartupTimeout api.Duration `toml:"startup_timeout"`
	// PermissionTimeout: an unanswered request_permission is denied after
	// it.
	PermissionTimeout api.Duration `toml:"permission_timeout"`
	// ShutdownTimeout is shutdown's timeout_ms; the group is killed after
	// it.
	ShutdownTimeout api.Duration `toml:"shutdown_timeout"`
	// TaskTimeout is the timeout_ms of a task that gives none; StopGrace
	// is the time from stop_task to cancel_task, and from cancel_task to
	// the kill, for a task past its timeout or stopped.
	TaskTimeout api.Duration `toml:"task_timeout"`
	StopGrace   api.Duration `toml:"stop_grace"`
	// HighWater and LowWater bound the notifications read from one
	// executor and not yet committed: pause_notifications above HighWater,
	// resume_notifications below LowWater.
	HighWater int `toml:"high_water"`
	LowWater  int `toml:"low_water"`
	// MaxPendingBytes also closes the read gate: the event data read from
	// one executor and not yet committed, whatever its count (a line may
	// be 8 MiB).
	MaxPendingBytes int `toml:"max_pending_bytes"`
	// get_execution_context's pool-wide parts.
	MCPServers   []MCPServer              `toml:"mcp_servers"`
	ContextFiles []string                 `toml:"context_files"`
	ModelConfig  *ModelConfig             `toml:"model_config"`
	Restart      supervisor.RestartConfig `toml:"restart"`
}

// DefaultPool is the table every [executors.NAME] starts from: the
// config file sets only what it changes.
func DefaultPool() PoolConfig {
	return PoolConfig{
		Agent: agent.KindCommand, MaxInstances: 4, Network: NetworkHost, QueueLimit: 1000, Transport: TransportSocket,
		IdleTimeout:       api.Duration{Duration: 5 * time.Minute},
		StartupTimeout:    api.Duration{Duration: 10 * time.Second},
		PermissionTimeout: api.Duration{Duration: 30 * time.Second},
		ShutdownTimeout:   api.Duration{Duration: 5 * time.Second},
		TaskTimeout:       api.Duration{Duration: 30 * time.Minute},
		StopGrace:         api.Duration{Duration: 5 * time.Second},
		HighWater:         100, LowWater: 50, MaxPendingBytes: 64 << 20,
		Restart: supervisor.DefaultRestartConfig(),
	}
}

// Validate checks every [executors.NAME] table; key is "executors". Each
// error names the key that is wrong.
func Validate(key string, pools map[string]PoolConfig) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		errs = append(errs, pools[name].validate(key+"."+name)...)
	}
	return errs
}

func (p PoolConfig) validate(key string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s", key, fmt.Sprintf(format, args...)))
	}
	switch {
	case !slices.Contains(Kinds, p.Agent):
		bad("agent must be one of %s, got %q", quoteAll(Kinds), p.Agent)
	case p.Agent == agent.KindCommand:
		if len(p.Command) == 0 || strings.TrimSpace(p.Command[0]) == "" {
			bad("command must name the executor's program, as an array: command = [\"orchestrd\", \"executor\", \"--\", \"my-agent\"] (or agent = \"claude-code\", \"codex\" or \"gemini\")")
		}
		if p.StateDir != "" {
			bad("state_dir is a built-in agent kind's (agent = \"claude-code\", \"codex\" or \"gemini\"); a command pool passes its own")
		}
	default:
		if len(p.Command) > 0 && strings.TrimSpace(p.Command[0]) == "" {
			bad("command's first element must name the %s binary (or leave command out: %q on PATH)", p.Agent, agent.DefaultBinary(p.Agent))
		}
		if p.StateDir != "" && !filepath.IsAbs(expandHome(p.StateDir)) {
			bad("state_dir must be an absolute path (or start with ~/), got %q", p.StateDir)
		}
	}
	if p.MaxInstances < 1 || p.MaxInstances > 256 {
		bad("max_instances must be between 1 and 256, got %d", p.MaxInstances)
	}
	if p.Instances < 0 || p.Instances > p.MaxInstances {
		bad("instances must be between 0 and max_instances (%d), got %d", p.MaxInstances, p.Instances)
	}
	for _, err := range proc.CheckEnvConfig(p.Env, p.InheritEnv) {
		bad("%v", err)
	}
	for _, s := range p.Secrets {
		if s == "" {
			bad("secrets: an empty name")
		}
	}
	if p.Transport != TransportSocket && p.Transport != TransportFD {
		bad("transport must be \"socket\" or \"fd\", got %q", p.Transport)
	}
	if p.Network != NetworkNone && p.Network != NetworkHost {
		bad("network must be \"none\" or \"host\", got %q", p.Network)
	}
	if p.QueueLimit < 0 {
		bad("queue_limit must be >= 0, got %d", p.QueueLimit)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"idle_timeout", p.IdleTimeout.Duration, time.Second},
		{"startup_timeout", p.StartupTimeout.Duration, 100 * time.Millisecond},
		{"permission_timeout", p.PermissionTimeout.Duration, 100 * time.Millisecond},
		{"shutdown_timeout", p.ShutdownTimeout.Duration, 10 * time.Millisecond},
		{"task_timeout", p.TaskTimeout.Duration, 100 * time.Millisecond},
		{"stop_grace", p.StopGrace.Duration, 10 * time.Millisecond},
	} {
		if d.v < d.min {
			bad("%s must be >= %s, got %s", d.name, d.min, d.v)
		}
	}
	if p.HighWater < 2 || p.HighWater > 1<<20 {
		bad("high_water must be between 2 and %d, got %d", 1<<20, p.HighWater)
	}
	if p.MaxPendingBytes < 1<<10 || p.MaxPendingBytes > 1<<30 {
		bad("max_pending_bytes must be between %d and %d, got %d", 1<<10, 1<<30, p.MaxPendingBytes)
	}
	if p.LowWater < 0 || p.LowWater >= p.HighWater {
		bad("low_water must be >= 0 and below high_water (%d), got %d", p.HighWater, p.LowWater)
	}
	for i, s := range p.MCPServers {
		if s.Name == "" || s.Command == "" {
			bad("mcp_servers[%d] needs a name and a command", i)
		}
	}
	if err := p.Restart.Policy().Validate(); err != nil {
		for _, e := range flatten(err) {
			errs = append(errs, fmt.Errorf("%s.%w", key, e))
		}
	}
	return errs
}

// Kinds are the agent kinds a pool may name (agent = KIND): "command"
// and the built-in agents executors/agent speaks.
var Kinds = []string{agent.KindCommand, agent.KindClaude, agent.KindCodex, agent.KindGemini}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// expandHome turns a leading ~/ into the daemon user's home directory.
func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, strings.TrimPrefix(p, "~"))
		}
	}
	return p
}

// flatten splits joined errors into one error per problem.
func flatten(err error) []error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
