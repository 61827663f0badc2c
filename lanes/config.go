package lanes

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor"
	"github.com/orchestrd/orchestrd/wire"
)

// This file holds the lanes' own tables of the config file ([lanes.NAME]
// and [lanes.NAME.restart]), their defaults and their validation. The file
// itself (reading, the [daemon] table, key-by-key decoding) is the daemon's
// (daemon/config.go); what lanes needs of the [daemon] table arrives as
// plain Options fields.

// Network modes of a lane's runners.
const (
	NetworkNone = "none" // own network namespace: no interfaces but a down loopback
	NetworkHost = "host"
)

// RestartConfig is the [lanes.NAME.restart] table (the keys every domain
// that restarts processes shares).
type RestartConfig = supervisor.RestartConfig

// LaneConfig is one [lanes.NAME] table.
type LaneConfig struct {
	Runners              int    `toml:"runners"`
	Spares               int    `toml:"spares"` // started, handshaken, idle runners; see spares.go
	Slots                int    `toml:"slots"`
	Network              string `toml:"network"`
	QueueLimit           int    `toml:"queue_limit"`
	TimeoutMs            uint64 `toml:"timeout_ms"`       // default for jobs that give none; 0 = no limit
	MaxOutputBytes       uint64 `toml:"max_output_bytes"` // default and ceiling for jobs
	MaxRunnerMemoryBytes uint64 `toml:"max_runner_memory_bytes"`
	// MaxMemoryBytes and MaxCPUSeconds bound each job's process tree
	// (resident memory; user and system CPU time), measured by the daemon
	// with each heartbeat of its runner; a job over either is stopped
	// (memory_exceeded, cpu_exceeded). 0: no limit.
	MaxMemoryBytes uint64  `toml:"max_memory_bytes"`
	MaxCPUSeconds  float64 `toml:"max_cpu_seconds"`
	// MinFreeMemory holds the lane's jobs back (queued; in a fleet, not
	// taken) while the node's available memory is below it (minfree.go).
	// 0: never.
	MinFreeMemory    uint64        `toml:"min_free_memory"`
	HeartbeatTimeout api.Duration  `toml:"heartbeat_timeout"`
	KillGrace        api.Duration  `toml:"kill_grace"` // SIGTERM to SIGKILL of a cancelled or timed-out job that gives no kill_grace_ms; 0 = SIGKILL at once
	Nice             int           `toml:"nice"`       // CPU priority of the runners and their jobs
	Restart          RestartConfig `toml:"restart"`
	// ExternalRunners lets bring-your-own runners join the lane (with the
	// lane's join token). Unset: true only for a lane with runners = 0.
	ExternalRunners *bool `toml:"external_runners"`
	// Env is given to every job of the lane, over the base environment
	// and under the job's own env.
	Env map[string]string `toml:"env"`
	// InheritEnv names the variables of the daemon's environment (a name,
	// or a prefix ending in "*") that the lane's jobs get beside the base
	// ones (proc.BaseEnvKeys); nothing else of it reaches them.
	InheritEnv []string `toml:"inherit_env"`
	// Shared makes the lane a cluster lane (with [cluster] on): its jobs
	// go through the fleet's work queue and any node that defines the
	// lane may run them.
	Shared bool `toml:"shared"`
}

// AcceptsExternal reports whether bring-your-own runners may join.
func (l LaneConfig) AcceptsExternal() bool {
	if l.ExternalRunners != nil {
		return *l.ExternalRunners
	}
	return l.Runners == 0
}

func defaultLane(runners, slots int, network string, nice int) LaneConfig {
	return LaneConfig{
		Runners: runners, Slots: slots, Spares: 1, Network: network, QueueLimit: 10000,
		MaxOutputBytes: 1 << 20, HeartbeatTimeout: api.Duration{Duration: 5 * time.Second}, Nice: nice,
		KillGrace: api.Duration{Duration: wire.DefaultKillGraceMs * time.Millisecond},
		Restart:   supervisor.DefaultRestartConfig(),
	}
}

// DefaultLanes are the lanes of a daemon with no config. api.DefaultLane
// is one of them.
func DefaultLanes() map[string]LaneConfig {
	return map[string]LaneConfig{
		api.DefaultLane: defaultLane(2, 4, NetworkNone, 0),
		"net":           defaultLane(1, 4, NetworkHost, 0),
		"heavy":         defaultLane(1, 1, NetworkHost, 10),
	}
}

// DefaultFor is the starting point of a [lanes.NAME] table in a config
// file: the default lane of that name, or the net lane's defaults.
func DefaultFor(name string) LaneConfig {
	defs := DefaultLanes()
	if lc, ok := defs[name]; ok {
		return lc
	}
	return defs["net"]
}

// ValidateLanes checks the lanes table; key is its name in the file
// ("lanes"). It returns one error per bad value, each naming its full key.
func ValidateLanes(key string, ls map[string]LaneConfig) []error {
	var errs []error
	if len(ls) == 0 {
		errs = append(errs, fmt.Errorf("%s: at least one lane is needed", key))
	}
	for _, n := range slices.Sorted(maps.Keys(ls)) {
		if n == "" || strings.ContainsAny(n, "/ \t\n") || len(n) > 64 {
			errs = append(errs, fmt.Errorf("%s.%q: a lane name must be 1-64 characters without '/' or spaces", key, n))
		} else if ls[n].Shared && !clusterName(n) {
			errs = append(errs, fmt.Errorf("%s.%q: a shared lane's name must be letters, digits, '-' and '_' only (it names the lane's queue in the fleet)", key, n))
		}
		errs = append(errs, ls[n].validate(key+"."+n)...)
	}
	return errs
}

func (l LaneConfig) validate(key string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s", key, fmt.Sprintf(format, args...)))
	}
	if l.Runners < 0 || l.Runners > 256 {
		bad("runners must be between 0 and 256, got %d", l.Runners)
	}
	if l.Spares < 0 || l.Spares > 16 {
		bad("spares must be between 0 and 16, got %d", l.Spares)
	}
	if l.Slots < 1 || l.Slots > 4096 {
		bad("slots must be between 1 and 4096, got %d", l.Slots)
	}
	if l.Network != NetworkNone && l.Network != NetworkHost {
		bad("network must be \"none\" or \"host\", got %q", l.Network)
	}
	if l.QueueLimit < 0 {
		bad("queue_limit must be >= 0, got %d", l.QueueLimit)
	}
	if c := l.MaxCPUSeconds; !(c >= 0) || math.IsInf(c, 0) {
		bad("max_cpu_seconds must be a number >= 0, got %v", c)
	}
	if l.MaxOutputBytes == 0 {
		bad("max_output_bytes must be > 0")
	}
	if l.HeartbeatTimeout.Duration < 100*time.Millisecond {
		bad("heartbeat_timeout must be >= 100ms, got %s", l.HeartbeatTimeout.Duration)
	}
	if g := l.KillGrace.Duration; g < 0 || g > api.MaxKillGraceMs*time.Millisecond || g%time.Millisecond != 0 {
		bad("kill_grace must be between 0s and %s, in whole milliseconds, got %s", api.MaxKillGraceMs*time.Millisecond, g)
	}
	if l.Nice < -20 || l.Nice > 19 {
		bad("nice must be between -20 and 19, got %d", l.Nice)
	}
	for _, err := range proc.CheckEnvConfig(l.Env, l.InheritEnv) {
		bad("%v", err)
	}
	if err := l.Restart.Policy().Validate(); err != nil {
		for _, e := range flatten(err) {
			errs = append(errs, fmt.Errorf("%s.%w", key, e))
		}
	}
	return errs
}

// flatten splits joined errors into one error per problem.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// clusterName: n can name a NATS stream and a subject token.
func clusterName(n string) bool {
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return n != ""
}
