package loops

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Config is the [loops] table. The file itself (key-by-key decoding) is
// the daemon's (daemon/config.go); the defaults and the validation are
// here.
type Config struct {
	// Executor is the pool that runs iterations ("" : the executors'
	// default pool); [loops.TYPE] executor overrides it.
	Executor string `toml:"executor"`
	// ChatExecutor is the pool chat runs on: only kept here, the chat
	// domain reads it.
	ChatExecutor string `toml:"chat_executor"`
	// ValidationLane is the lane validation jobs run on.
	ValidationLane string `toml:"validation_lane"`
	// MaxRunning bounds the loops running an iteration at once.
	MaxRunning int `toml:"max_running"`
	// AutoMerge merges a complete tree's root branch into its base at once,
	// without asking a person.
	AutoMerge bool `toml:"auto_merge"`
	// KeepBranches keeps a loop's branch once its work is merged into its
	// parent's branch or its base (deleted by default). A branch whose
	// work was not merged is always kept.
	KeepBranches bool `toml:"keep_branches"`
	// CommitArtifacts: a tree's .loopr/ artifacts (its plan, specs and
	// phases) reach the base branch with the merge (true by default).
	// false: the root's branch drops them in a last commit before it
	// merges; they stay in that branch's history.
	CommitArtifacts bool `toml:"commit_artifacts"`
	// MaxRebaseIterations bounds the iterations a child whose merge into
	// its parent's branch conflicts gets to resolve the conflict (and to
	// pass its validation again), status rebasing; past it the child
	// fails merge_conflict, its branch kept. 0: it fails at the first
	// conflict.
	MaxRebaseIterations int `toml:"max_rebase_iterations"`
	// UsageLimitPause is how long a loop whose agent hit a usage limit
	// stays paused before it resumes by itself.
	UsageLimitPause api.Duration `toml:"usage_limit_pause"`
	// MergeRetry is how often a root waiting to merge into its base
	// (merge_waiting: the base's checkout has uncommitted changes) tries
	// again by itself.
	MergeRetry api.Duration `toml:"merge_retry"`
	// MaxCostUSD is a root loop's budget when loop.create names none: it
	// fails budget_exceeded once what its agents' tasks cost (its
	// children's too) passes it. 0 is no limit.
	MaxCostUSD float64 `toml:"max_cost_usd"`
	// Prompts maps a loop type to a template file replacing the built-in
	// one.
	Prompts map[string]string `toml:"prompts"`
	// Repo is loop.create_plan's repository when it names none.
	Repo string `toml:"repo"`
	// PermissionMode is the iterations' tasks' permission_mode: loops run
	// unattended, so bypassPermissions by default (the pool's sandbox is
	// what bounds the agent); "default" asks a person for every tool.
	PermissionMode string `toml:"permission_mode"`

	Plan  TypeConfig `toml:"plan"`
	Spec  TypeConfig `toml:"spec"`
	Phase TypeConfig `toml:"phase"`
	Code  TypeConfig `toml:"code"`
}

// TypeConfig is a [loops.TYPE] table: what differs by loop type.
type TypeConfig struct {
	Executor          string       `toml:"executor"` // "" is [loops] executor
	ValidationCommand string       `toml:"validation_command"`
	ValidationTimeout api.Duration `toml:"validation_timeout"`
	ValidationLane    string       `toml:"validation_lane"` // "" is [loops] validation_lane
	MaxIterations     uint32       `toml:"max_iterations"`
}

// DefaultConfig is [loops] with nothing set.
func DefaultConfig() Config {
	t := func(max uint32) TypeConfig {
		return TypeConfig{ValidationTimeout: api.Duration{Duration: 300 * time.Second}, MaxIterations: max}
	}
	return Config{ValidationLane: "no-net", MaxRunning: 4, PermissionMode: api.ModeBypass, CommitArtifacts: true, MaxRebaseIterations: 3, UsageLimitPause: api.Duration{Duration: 15 * time.Minute},
		MergeRetry: api.Duration{Duration: 30 * time.Second},
		Plan:       t(10), Spec: t(10), Phase: t(10), Code: t(100)}
}

// For returns the settings of loop type lt with the [loops] defaults
// filled in.
func (c Config) For(lt api.LoopType) TypeConfig {
	var t TypeConfig
	switch lt {
	case api.LoopPlan:
		t = c.Plan
	case api.LoopSpec:
		t = c.Spec
	case api.LoopPhase:
		t = c.Phase
	default:
		t = c.Code
	}
	if t.Executor == "" {
		t.Executor = c.Executor
	}
	if t.ValidationLane == "" {
		t.ValidationLane = c.ValidationLane
	}
	return t
}

// maxIterationsCap bounds max_iterations (a loop's iterations are kept).
const maxIterationsCap = 10000

// Validate checks the table; key is its name in the file ("loops"). lanes
// and pools are the configured lanes and executor pools (nil: not
// checked). It returns one error per bad value, each naming its full key.
func (c Config) Validate(key string, lanes, pools []string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s", key, fmt.Sprintf(format, args...)))
	}
	if c.MaxRunning < 1 || c.MaxRunning > 1024 {
		bad("max_running must be between 1 and 1024, got %d", c.MaxRunning)
	}
	if c.MaxCostUSD < 0 || c.MaxCostUSD > 1e6 || math.IsNaN(c.MaxCostUSD) {
		bad("max_cost_usd must be between 0 (no limit) and 1000000, got %v", c.MaxCostUSD)
	}
	if c.MaxRebaseIterations < 0 || c.MaxRebaseIterations > 100 {
		bad("max_rebase_iterations must be between 0 (a conflict fails the loop) and 100, got %d", c.MaxRebaseIterations)
	}
	if d := c.UsageLimitPause.Duration; d < time.Second || d > 24*time.Hour {
		bad("usage_limit_pause must be between 1s and 24h, got %s", d)
	}
	if d := c.MergeRetry.Duration; d < time.Second || d > time.Hour {
		bad("merge_retry must be between 1s and 1h, got %s", d)
	}
	checkLane := func(k, l string) {
		if lanes != nil && !slices.Contains(lanes, l) {
			bad("%s: no lane %q (have %s)", k, l, strings.Join(lanes, ", "))
		}
	}
	checkPool := func(k, p string) {
		if p != "" && pools != nil && !slices.Contains(pools, p) {
			bad("%s: no executor pool %q (have %s)", k, p, strings.Join(pools, ", "))
		}
	}
	switch c.PermissionMode {
	case api.ModeDefault, api.ModeAcceptEdits, api.ModeBypass, api.ModePlan:
	default:
		bad("permission_mode must be default, acceptEdits, bypassPermissions or plan, got %q", c.PermissionMode)
	}
	checkLane("validation_lane", c.ValidationLane)
	checkPool("executor", c.Executor)
	checkPool("chat_executor", c.ChatExecutor)
	if c.Repo != "" && !filepath.IsAbs(c.Repo) {
		bad("repo must be an absolute path, got %q", c.Repo)
	}
	for k, f := range c.Prompts {
		if !api.LoopType(k).Valid() {
			bad("prompts: %q is not a loop type (plan, spec, phase, code)", k)
		}
		if !filepath.IsAbs(f) {
			bad("prompts.%s must be an absolute path, got %q", k, f)
		}
	}
	for _, lt := range api.LoopTypes {
		t := c.For(lt)
		p := string(lt) + "."
		if t.MaxIterations < 1 || t.MaxIterations > maxIterationsCap {
			bad("%smax_iterations must be between 1 and %d, got %d", p, maxIterationsCap, t.MaxIterations)
		}
		if d := t.ValidationTimeout.Duration; d < time.Second || d > 24*time.Hour {
			bad("%svalidation_timeout must be between 1s and 24h, got %s", p, d)
		}
		if len(t.ValidationCommand) > 64<<10 || strings.ContainsRune(t.ValidationCommand, 0) {
			bad("%svalidation_command must be at most 64 KiB without NUL bytes", p)
		}
		if t.ValidationLane != c.ValidationLane {
			checkLane(p+"validation_lane", t.ValidationLane)
		}
		if t.Executor != c.Executor {
			checkPool(p+"executor", t.Executor)
		}
	}
	return errs
}
