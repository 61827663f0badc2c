package lanes

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/orchestrd/orchestrd/supervisor"
	"github.com/orchestrd/orchestrd/wire"
)

// Duration is a time.Duration written in TOML as a Go duration string
// ("500ms", "5s").
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration like \"500ms\" or \"5s\": %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Network modes of a lane's runners.
const (
	NetworkNone = "none" // own network namespace: no interfaces but a down loopback
	NetworkHost = "host"
)

// RestartConfig is the [lanes.NAME.restart] table.
type RestartConfig struct {
	Stable    Duration `toml:"stable"`
	BaseDelay Duration `toml:"base_delay"`
	MaxDelay  Duration `toml:"max_delay"`
	MaxR      int      `toml:"max_r"`
	MaxT      Duration `toml:"max_t"`
}

// Policy converts the table to a supervisor.Policy.
func (r RestartConfig) Policy() supervisor.Policy {
	return supervisor.Policy{Stable: r.Stable.Duration, BaseDelay: r.BaseDelay.Duration,
		MaxDelay: r.MaxDelay.Duration, MaxR: r.MaxR, MaxT: r.MaxT.Duration}
}

// LaneConfig is one [lanes.NAME] table.
type LaneConfig struct {
	Runners              int           `toml:"runners"`
	Spares               int           `toml:"spares"` // started, handshaken, idle runners; see spares.go
	Slots                int           `toml:"slots"`
	Network              string        `toml:"network"`
	QueueLimit           int           `toml:"queue_limit"`
	TimeoutMs            uint64        `toml:"timeout_ms"`       // default for jobs that give none; 0 = no limit
	MaxOutputBytes       uint64        `toml:"max_output_bytes"` // default and ceiling for jobs
	MaxRunnerMemoryBytes uint64        `toml:"max_runner_memory_bytes"`
	HeartbeatTimeout     Duration      `toml:"heartbeat_timeout"`
	Nice                 int           `toml:"nice"` // CPU priority of the runners and their jobs
	Restart              RestartConfig `toml:"restart"`
}

// DaemonConfig is the [daemon] table.
type DaemonConfig struct {
	ShutdownTimeout    Duration `toml:"shutdown_timeout"`
	MaxFrameBytes      uint32   `toml:"max_frame_bytes"`
	MaxLineBytes       int      `toml:"max_line_bytes"`
	SubscriberQueue    int      `toml:"subscriber_queue"`
	SubscriberOverflow string   `toml:"subscriber_overflow"` // drop_oldest | disconnect
	FinishedJobs       int      `toml:"finished_jobs"`       // finished jobs kept queryable
	EventLogMaxBytes   int64    `toml:"event_log_max_bytes"`
	EventLogFiles      int      `toml:"event_log_files"`
	// FinishedOutputBytes bounds the output all finished jobs keep in
	// memory together; past it the oldest finished jobs lose theirs.
	FinishedOutputBytes int64 `toml:"finished_output_bytes"`
}

// Config is the whole config file.
type Config struct {
	Daemon DaemonConfig          `toml:"daemon"`
	Lanes  map[string]LaneConfig `toml:"lanes"`
}

func defaultLane(runners, slots int, network string, nice int) LaneConfig {
	p := supervisor.DefaultPolicy()
	return LaneConfig{
		Runners: runners, Slots: slots, Spares: 1, Network: network, QueueLimit: 10000,
		MaxOutputBytes: 1 << 20, HeartbeatTimeout: Duration{5 * time.Second}, Nice: nice,
		Restart: RestartConfig{Stable: Duration{p.Stable}, BaseDelay: Duration{p.BaseDelay},
			MaxDelay: Duration{p.MaxDelay}, MaxR: p.MaxR, MaxT: Duration{p.MaxT}},
	}
}

// DefaultLanes are the lanes of a daemon with no config.
func DefaultLanes() map[string]LaneConfig {
	return map[string]LaneConfig{
		"no-net": defaultLane(2, 4, NetworkNone, 0),
		"net":    defaultLane(1, 4, NetworkHost, 0),
		"heavy":  defaultLane(1, 1, NetworkHost, 10),
	}
}

// DefaultConfig is the embedded configuration.
func DefaultConfig() Config {
	return Config{
		Daemon: DaemonConfig{
			ShutdownTimeout: Duration{5 * time.Second}, MaxFrameBytes: wire.DefaultMaxFrame,
			MaxLineBytes: wire.DefaultMaxLine, SubscriberQueue: 1024, SubscriberOverflow: "drop_oldest",
			FinishedJobs: 10000, EventLogMaxBytes: 16 << 20, EventLogFiles: 3,
			FinishedOutputBytes: 64 << 20,
		},
		Lanes: DefaultLanes(),
	}
}

// LoadConfig reads a TOML config. A missing file at a default path is the
// caller's business; here it is an error. Keys absent from the file keep
// their defaults; if the file has any [lanes.*] table, the lanes are exactly
// those it names (a table named like a default lane starts from that lane's
// defaults, others from the net lane's). Unknown keys and bad values are
// errors naming the key.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	return ParseConfig(path, b)
}

// ParseConfig is LoadConfig on bytes; name is used in messages.
func ParseConfig(name string, b []byte) (Config, error) {
	cfg := DefaultConfig()
	// Decode lanes into raw primitives first so each lane starts from the
	// right defaults.
	var raw struct {
		Daemon toml.Primitive            `toml:"daemon"`
		Lanes  map[string]toml.Primitive `toml:"lanes"`
	}
	md, err := toml.Decode(string(b), &raw)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	if md.IsDefined("daemon") {
		if err := md.PrimitiveDecode(raw.Daemon, &cfg.Daemon); err != nil {
			return Config{}, fmt.Errorf("%s: [daemon]: %w", name, err)
		}
	}
	if len(raw.Lanes) > 0 {
		defs := DefaultLanes()
		cfg.Lanes = map[string]LaneConfig{}
		for laneName, prim := range raw.Lanes {
			lc, ok := defs[laneName]
			if !ok {
				lc = defs["net"]
			}
			if err := md.PrimitiveDecode(prim, &lc); err != nil {
				return Config{}, fmt.Errorf("%s: [lanes.%s]: %w", name, laneName, err)
			}
			cfg.Lanes[laneName] = lc
		}
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		sort.Strings(keys)
		return Config{}, fmt.Errorf("%s: unknown key %s", name, strings.Join(keys, ", "))
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// Validate checks every value, naming the key of the first bad one.
func (c Config) Validate() error {
	d := c.Daemon
	switch {
	case d.ShutdownTimeout.Duration <= 0:
		return errors.New("daemon.shutdown_timeout must be > 0")
	case d.MaxFrameBytes < 1024:
		return errors.New("daemon.max_frame_bytes must be >= 1024")
	case d.MaxLineBytes < 1024:
		return errors.New("daemon.max_line_bytes must be >= 1024")
	case d.SubscriberQueue < 16:
		return errors.New("daemon.subscriber_queue must be >= 16")
	case d.SubscriberOverflow != "drop_oldest" && d.SubscriberOverflow != "disconnect":
		return fmt.Errorf("daemon.subscriber_overflow must be \"drop_oldest\" or \"disconnect\", got %q", d.SubscriberOverflow)
	case d.FinishedJobs < 1:
		return errors.New("daemon.finished_jobs must be >= 1")
	case d.EventLogMaxBytes < 4096:
		return errors.New("daemon.event_log_max_bytes must be >= 4096")
	case d.EventLogFiles < 1:
		return errors.New("daemon.event_log_files must be >= 1")
	case d.FinishedOutputBytes < 0:
		return fmt.Errorf("daemon.finished_output_bytes must be >= 0 (0 keeps no output of finished jobs), got %d", d.FinishedOutputBytes)
	}
	if len(c.Lanes) == 0 {
		return errors.New("lanes: at least one lane is needed")
	}
	names := make([]string, 0, len(c.Lanes))
	for n := range c.Lanes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := c.Lanes[n].validate("lanes." + n); err != nil {
			return err
		}
		if n == "" || strings.ContainsAny(n, "/ \t\n") || len(n) > 64 {
			return fmt.Errorf("lanes.%q: a lane name must be 1-64 characters without '/' or spaces", n)
		}
	}
	return nil
}

func (l LaneConfig) validate(key string) error {
	switch {
	case l.Runners < 0 || l.Runners > 256:
		return fmt.Errorf("%s.runners must be between 0 and 256, got %d", key, l.Runners)
	case l.Spares < 0 || l.Spares > 16:
		return fmt.Errorf("%s.spares must be between 0 and 16, got %d", key, l.Spares)
	case l.Slots < 1 || l.Slots > 4096:
		return fmt.Errorf("%s.slots must be between 1 and 4096, got %d", key, l.Slots)
	case l.Network != NetworkNone && l.Network != NetworkHost:
		return fmt.Errorf("%s.network must be \"none\" or \"host\", got %q", key, l.Network)
	case l.QueueLimit < 0:
		return fmt.Errorf("%s.queue_limit must be >= 0, got %d", key, l.QueueLimit)
	case l.MaxOutputBytes == 0:
		return fmt.Errorf("%s.max_output_bytes must be > 0", key)
	case l.HeartbeatTimeout.Duration < 100*time.Millisecond:
		return fmt.Errorf("%s.heartbeat_timeout must be >= 100ms, got %s", key, l.HeartbeatTimeout.Duration)
	case l.Nice < -20 || l.Nice > 19:
		return fmt.Errorf("%s.nice must be between -20 and 19, got %d", key, l.Nice)
	}
	if err := l.Restart.Policy().Validate(); err != nil {
		return fmt.Errorf("%s.%w", key, err)
	}
	return nil
}
