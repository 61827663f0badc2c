package lanes

import (
	"encoding"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
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
	// ExternalRunners lets bring-your-own runners join the lane (with the
	// lane's join token). Unset: true only for a lane with runners = 0.
	ExternalRunners *bool `toml:"external_runners"`
}

// AcceptsExternal reports whether bring-your-own runners may join.
func (l LaneConfig) AcceptsExternal() bool {
	if l.ExternalRunners != nil {
		return *l.ExternalRunners
	}
	return l.Runners == 0
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
	// Sandbox hides the daemon's home from jobs in a mount namespace of
	// each runner (see runnerSysProcAttr). Off only where namespaces cannot
	// be made (e.g. a container without CAP_SYS_ADMIN): jobs can then reach
	// the daemon's sockets.
	Sandbox bool `toml:"sandbox"`
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
			FinishedJobs: 10000, EventLogMaxBytes: 16 << 20, EventLogFiles: 3, Sandbox: true,
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
// errors naming the key, every one of them (see ParseConfig).
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	return ParseConfig(path, b)
}

// ParseConfig is LoadConfig on bytes; name is used in messages. Every
// problem is reported, not only the first: the error joins one single-line
// error per problem, each naming its full key (lanes.x.slots).
func ParseConfig(name string, b []byte) (Config, error) {
	cfg := DefaultConfig()
	var top map[string]toml.Primitive
	md, err := toml.Decode(string(b), &top)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %s", name, tomlMessage(err))
	}
	var errs []error
	for _, k := range sortedKeys(top) {
		switch k {
		case "daemon":
			errs = append(errs, decodeTable(&md, top[k], reflect.ValueOf(&cfg.Daemon).Elem(), k)...)
		case "lanes":
			var lanes map[string]toml.Primitive
			if !isTable(&md, top[k]) {
				errs = append(errs, errors.New("lanes must be a table of [lanes.NAME] tables"))
				continue
			}
			if err := md.PrimitiveDecode(top[k], &lanes); err != nil {
				errs = append(errs, fmt.Errorf("lanes: %s", tomlMessage(err)))
				continue
			}
			if len(lanes) == 0 {
				continue
			}
			defs := DefaultLanes()
			cfg.Lanes = map[string]LaneConfig{}
			for _, n := range sortedKeys(lanes) {
				lc, ok := defs[n]
				if !ok {
					lc = defs["net"]
				}
				errs = append(errs, decodeTable(&md, lanes[n], reflect.ValueOf(&lc).Elem(), "lanes."+n)...)
				cfg.Lanes[n] = lc
			}
		default:
			errs = append(errs, fmt.Errorf("unknown key %s", k))
		}
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, splitErrors(err)...)
	}
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = fmt.Errorf("%s: %w", name, e)
		}
		return Config{}, errors.Join(errs...)
	}
	return cfg, nil
}

// decodeTable decodes a TOML table into the struct dst key by key, so that
// every bad key is reported (each with its full name under key) and the
// good ones still take effect. Keys without a field are unknown; negative
// numbers are refused for unsigned fields (the TOML decoder would wrap them
// around).
func decodeTable(md *toml.MetaData, prim toml.Primitive, dst reflect.Value, key string) []error {
	var fields map[string]toml.Primitive
	if !isTable(md, prim) {
		return []error{fmt.Errorf("%s must be a table ([%s])", key, key)}
	}
	if err := md.PrimitiveDecode(prim, &fields); err != nil {
		return []error{fmt.Errorf("%s: %s", key, tomlMessage(err))}
	}
	var errs []error
	for _, k := range sortedKeys(fields) {
		full := key + "." + k
		f, ok := fieldByTag(dst, k)
		if !ok {
			errs = append(errs, fmt.Errorf("unknown key %s", full))
			continue
		}
		if f.Kind() == reflect.Struct && !f.Addr().Type().Implements(textUnmarshaler) {
			errs = append(errs, decodeTable(md, fields[k], f, full)...)
			continue
		}
		switch f.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			var v any
			if md.PrimitiveDecode(fields[k], &v) == nil {
				if n, ok := v.(int64); ok && n < 0 {
					errs = append(errs, fmt.Errorf("%s must be >= 0, got %d", full, n))
					continue
				}
			}
		}
		v := reflect.New(f.Type())
		if err := md.PrimitiveDecode(fields[k], v.Interface()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s", full, tomlMessage(err)))
			continue
		}
		f.Set(v.Elem())
	}
	return errs
}

var textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()

// fieldByTag finds the field of the struct v whose toml tag is name.
func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if tag == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// tomlMessage is the TOML decoder's message without its "toml: " prefix
// and its "(last key ...)" (the caller names the key), with the line.
func tomlMessage(err error) string {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s (line %d)", pe.Message, pe.Position.Line)
	}
	msg := strings.TrimPrefix(err.Error(), "toml: ")
	if m := tomlLineKey.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s (line %s)", m[2], m[1])
	}
	return msg
}

// tomlLineKey matches the decoder's value errors: line N (last key "k"): msg.
var tomlLineKey = regexp.MustCompile(`^line (\d+) \(last key "(?:[^"\\]|\\.)*"\): (.*)$`)

// isTable reports whether prim holds a TOML table (the decoder quietly
// decodes a number into a map as an empty one).
func isTable(md *toml.MetaData, prim toml.Primitive) bool {
	var v any
	if md.PrimitiveDecode(prim, &v) != nil {
		return false
	}
	_, ok := v.(map[string]any)
	return ok
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// splitErrors flattens joined errors into one error per problem.
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, splitErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// Validate checks every value. The error joins one error per bad value,
// each naming its full key.
func (c Config) Validate() error {
	d := c.Daemon
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.ShutdownTimeout.Duration <= 0 {
		bad("daemon.shutdown_timeout must be > 0")
	}
	if d.MaxFrameBytes < 1024 {
		bad("daemon.max_frame_bytes must be >= 1024")
	}
	if d.MaxLineBytes < 1024 {
		bad("daemon.max_line_bytes must be >= 1024")
	}
	if d.SubscriberQueue < 16 {
		bad("daemon.subscriber_queue must be >= 16")
	}
	if d.SubscriberOverflow != "drop_oldest" && d.SubscriberOverflow != "disconnect" {
		bad("daemon.subscriber_overflow must be \"drop_oldest\" or \"disconnect\", got %q", d.SubscriberOverflow)
	}
	if d.FinishedJobs < 1 {
		bad("daemon.finished_jobs must be >= 1")
	}
	if d.EventLogMaxBytes < 4096 {
		bad("daemon.event_log_max_bytes must be >= 4096")
	}
	if d.EventLogFiles < 1 {
		bad("daemon.event_log_files must be >= 1")
	}
	if d.FinishedOutputBytes < 0 {
		bad("daemon.finished_output_bytes must be >= 0 (0 keeps no output of finished jobs), got %d", d.FinishedOutputBytes)
	}
	if len(c.Lanes) == 0 {
		bad("lanes: at least one lane is needed")
	}
	for _, n := range sortedKeys(c.Lanes) {
		if n == "" || strings.ContainsAny(n, "/ \t\n") || len(n) > 64 {
			bad("lanes.%q: a lane name must be 1-64 characters without '/' or spaces", n)
		}
		errs = append(errs, c.Lanes[n].validate("lanes."+n)...)
	}
	return errors.Join(errs...)
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
	if l.MaxOutputBytes == 0 {
		bad("max_output_bytes must be > 0")
	}
	if l.HeartbeatTimeout.Duration < 100*time.Millisecond {
		bad("heartbeat_timeout must be >= 100ms, got %s", l.HeartbeatTimeout.Duration)
	}
	if l.Nice < -20 || l.Nice > 19 {
		bad("nice must be between -20 and 19, got %d", l.Nice)
	}
	if err := l.Restart.Policy().Validate(); err != nil {
		for _, e := range splitErrors(err) {
			errs = append(errs, fmt.Errorf("%s.%w", key, e))
		}
	}
	return errs
}
