package daemon

import (
	"encoding"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/clanker"
	"github.com/orchestrd/orchestrd/daemon/httpapi"
	"github.com/orchestrd/orchestrd/daemon/metrics"
	"github.com/orchestrd/orchestrd/daemon/ui"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/fleet"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/loops"
	"github.com/orchestrd/orchestrd/wire"
)

// The config file: one TOML table per part of the daemon. The daemon owns
// the file (reading it, the [daemon] table, decoding key by key so every
// bad key is named); each domain owns its table's type, defaults and
// validation (lanes/config.go for [lanes.NAME]). A new domain adds a field
// to Config, an entry to sections and a call in Validate.

// DaemonConfig is the [daemon] table.
type DaemonConfig struct {
	ShutdownTimeout    api.Duration `toml:"shutdown_timeout"`
	MaxFrameBytes      uint32       `toml:"max_frame_bytes"`
	MaxLineBytes       int          `toml:"max_line_bytes"`
	SubscriberQueue    int          `toml:"subscriber_queue"`
	SubscriberOverflow string       `toml:"subscriber_overflow"` // drop_oldest | disconnect
	FinishedJobs       int          `toml:"finished_jobs"`       // the most records the cache of finished jobs holds
	EventLogMaxBytes   int64        `toml:"event_log_max_bytes"`
	EventLogFiles      int          `toml:"event_log_files"`
	// Sandbox hides the daemon's home from jobs in a mount namespace of
	// each runner (see runnerSysProcAttr). Off only where namespaces cannot
	// be made (e.g. a container without CAP_SYS_ADMIN): jobs can then reach
	// the daemon's sockets.
	Sandbox bool `toml:"sandbox"`
	// FinishedOutputBytes bounds the cache of recently finished jobs'
	// records in memory, their output included; older ones (and every one,
	// with 0) are read from the state store, which holds them all. Until
	// issue 25 it bounded the output all finished jobs kept in memory.
	FinishedOutputBytes int64 `toml:"finished_output_bytes"`
	// UsageSampleInterval is how often the process tree of each running
	// job is sampled for what it costs (CPU, peak RSS, I/O, threads: the
	// record's usage); 0 samples nothing.
	UsageSampleInterval api.Duration `toml:"usage_sample_interval"`
}

// StateConfig is the [state] table: the durable store <home>/state.db.
type StateConfig struct {
	// Durability is what a commit survives: "process" (kill -9 of the
	// daemon) or "power" (power loss too; an fsync per group commit).
	Durability string `toml:"durability"`
	// RetainJobs bounds the finished jobs kept in the store (the most
	// recently finished); 0 keeps any number.
	RetainJobs int `toml:"retain_jobs"`
	// RetainFor bounds how long a finished job is kept; 0 keeps them
	// whatever their age.
	RetainFor api.Duration `toml:"retain_for"`
}

// Config is the whole config file.
type Config struct {
	Daemon DaemonConfig                `toml:"daemon"`
	State  StateConfig                 `toml:"state"`
	Lanes  map[string]lanes.LaneConfig `toml:"lanes"`
	// Approvals is the [approvals] table (approvals/config.go).
	Approvals approvals.Config `toml:"approvals"`
	// Executors are the [executors.NAME] pools (executors/config.go);
	// none unless the file names them.
	Executors map[string]executors.PoolConfig `toml:"executors"`
	// Clanker is the [clanker] table (clanker/config.go): the repos whose
	// dashboard orchestrd is; none unless the file names them.
	Clanker clanker.Config `toml:"clanker"`
	// HTTP is the [http] table (daemon/httpapi/config.go): Loopsy's API.
	HTTP httpapi.Config `toml:"http"`
	// Metrics is the [metrics] table (daemon/metrics/config.go): GET
	// /metrics on a loopback listener of its own, without a key.
	Metrics metrics.Config `toml:"metrics"`
	// UI is the [ui] table (daemon/ui/config.go): the dashboard.
	UI ui.Config `toml:"ui"`
	// Loops is the [loops] table (loops/config.go).
	Loops    loops.Config `toml:"loops"`
	loopsSet bool         // the file has a [loops] table: its lanes and pools are checked
	// Cluster is the [cluster] table (fleet/config.go): off by default.
	Cluster fleet.Config `toml:"cluster"`

	// set are the keys the file set, by full name (http.listen): a
	// front-end the file turns on is told from one on by default (Set).
	set map[string]bool
}

// Set reports whether the config file set key, by its full name
// ("http.listen", "approvals.reachout.enabled"), rather than leaving it
// to its default.
func (c Config) Set(key string) bool { return c.set[key] }

// DefaultConfig is the embedded configuration.
func DefaultConfig() Config {
	return Config{
		Daemon: DaemonConfig{
			ShutdownTimeout: api.Duration{Duration: 5 * time.Second}, MaxFrameBytes: wire.DefaultMaxFrame,
			MaxLineBytes: wire.DefaultMaxLine, SubscriberQueue: 1024, SubscriberOverflow: "drop_oldest",
			FinishedJobs: 10000, EventLogMaxBytes: 16 << 20, EventLogFiles: 3, Sandbox: true,
			FinishedOutputBytes: 4 << 20, UsageSampleInterval: api.Duration{Duration: 5 * time.Second},
		},
		State: StateConfig{Durability: "process", RetainJobs: 10000,
			RetainFor: api.Duration{Duration: 168 * time.Hour}},
		Lanes:     lanes.DefaultLanes(),
		Approvals: approvals.DefaultConfig(),
		HTTP:      httpapi.DefaultConfig(),
		Metrics:   metrics.DefaultConfig(),
		UI:        ui.DefaultConfig(),
		Loops:     loops.DefaultConfig(),
		Cluster:   fleet.DefaultConfig(),
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
		decode, ok := sections[k]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown key %s", k))
			continue
		}
		errs = append(errs, decode(&cfg, &md, top[k], k)...)
	}
	// The keys set, before validate: a value the file sets is checked
	// where its default is not ([http] exec_lane).
	cfg.set = map[string]bool{}
	for _, k := range md.Keys() {
		cfg.set[strings.Join(k, ".")] = true
	}
	errs = append(errs, cfg.validate()...)
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = fmt.Errorf("%s: %w", name, e)
		}
		return Config{}, errors.Join(errs...)
	}
	return cfg, nil
}

// sections are the top-level tables of the file, each with how it is
// decoded into Config (key is the table's name, for messages).
var sections = map[string]func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error{
	"daemon": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		return decodeTable(md, prim, reflect.ValueOf(&cfg.Daemon).Elem(), key)
	},
	"state": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		return decodeTable(md, prim, reflect.ValueOf(&cfg.State).Elem(), key)
	},
	"lanes": decodeLanes,
	"executors": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		pools, errs := decodeNamed(md, prim, key, func(string) executors.PoolConfig { return executors.DefaultPool() })
		if pools != nil {
			cfg.Executors = pools
		}
		return errs
	},
	"approvals": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		return decodeTable(md, prim, reflect.ValueOf(&cfg.Approvals).Elem(), key)
	},
	"clanker": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		return decodeTable(md, prim, reflect.ValueOf(&cfg.Clanker).Elem(), key)
	},
	"loops": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		cfg.loopsSet = true
		return decodeTable(md, prim, reflect.ValueOf(&cfg.Loops).Elem(), key)
	},
	"http": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		return decodeTable(md, prim, reflect.ValueOf(&cfg.HTTP).Elem(), key)
	},
	"metrics": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		return decodeTable(md, prim, reflect.ValueOf(&cfg.Metrics).Elem(), key)
	},
	"ui": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		return decodeTable(md, prim, reflect.ValueOf(&cfg.UI).Elem(), key)
	},
	"cluster": func(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
		return decodeTable(md, prim, reflect.ValueOf(&cfg.Cluster).Elem(), key)
	},
}

// decodeLanes decodes the [lanes.NAME] tables. If the file names any lane,
// the lanes are exactly those it names, each starting from
// lanes.DefaultFor(NAME).
func decodeLanes(cfg *Config, md *toml.MetaData, prim toml.Primitive, key string) []error {
	ls, errs := decodeNamed(md, prim, key, lanes.DefaultFor)
	if len(ls) > 0 {
		cfg.Lanes = ls
	}
	return errs
}

// decodeNamed decodes the [key.NAME] tables, each into what def(NAME)
// gives and with decodeTable's checks. The map is nil when prim is no
// table of tables; its errors are then the only one.
func decodeNamed[T any](md *toml.MetaData, prim toml.Primitive, key string, def func(name string) T) (map[string]T, []error) {
	var ps map[string]toml.Primitive
	if !isTable(md, prim) {
		return nil, []error{fmt.Errorf("%s must be a table of [%s.NAME] tables", key, key)}
	}
	if err := md.PrimitiveDecode(prim, &ps); err != nil {
		return nil, []error{fmt.Errorf("%s: %s", key, tomlMessage(err))}
	}
	var errs []error
	m := make(map[string]T, len(ps))
	for _, n := range sortedKeys(ps) {
		v := def(n)
		errs = append(errs, decodeTable(md, ps[n], reflect.ValueOf(&v).Elem(), key+"."+n)...)
		m[n] = v
	}
	return m, errs
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
		// An optional table (*T) and an array of tables ([[key]], []T)
		// are decoded key by key too: approvals.rules[N].input.field.
		if f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct &&
			!f.Type().Implements(textUnmarshaler) {
			v := reflect.New(f.Type().Elem())
			errs = append(errs, decodeTable(md, fields[k], v.Elem(), full)...)
			f.Set(v)
			continue
		}
		if f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct {
			var items []toml.Primitive
			if err := md.PrimitiveDecode(fields[k], &items); err != nil {
				errs = append(errs, fmt.Errorf("%s must be an array of tables ([[%s]])", full, full))
				continue
			}
			v := reflect.MakeSlice(f.Type(), len(items), len(items))
			for i := range items {
				// Counted from 1, as approvals names its rules (config-1).
				errs = append(errs, decodeTable(md, items[i], v.Index(i), fmt.Sprintf("%s[%d]", full, i+1))...)
			}
			f.Set(v)
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
	if m := tomlLineKey().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s (line %s)", m[2], m[1])
	}
	return msg
}

// tomlLineKey matches the decoder's value errors: line N (last key "k"): msg.
var tomlLineKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^line (\d+) \(last key "(?:[^"\\]|\\.)*"\): (.*)$`) })

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

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// Validate checks every value: every error of the config is found here,
// before the daemon starts anything (NATS, sockets, runners). The error
// joins one error per bad value, each naming its full key.
func (c Config) Validate() error { return errors.Join(c.validate()...) }

func (c Config) validate() []error {
	d := c.Daemon
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.ShutdownTimeout.Duration <= 0 {
		bad("daemon.shutdown_timeout must be > 0")
	}
	if i := d.UsageSampleInterval.Duration; i < 0 || i > 0 && i < 10*time.Millisecond {
		bad("daemon.usage_sample_interval must be 0 (off) or >= 10ms, got %s", i)
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
		bad("daemon.finished_output_bytes must be >= 0 (0 caches no finished job: they are read from the state store), got %d", d.FinishedOutputBytes)
	}
	st := c.State
	if st.Durability != "process" && st.Durability != "power" {
		bad("state.durability must be \"process\" or \"power\", got %q", st.Durability)
	}
	if st.RetainJobs < 0 {
		bad("state.retain_jobs must be >= 0 (0 keeps any number), got %d", st.RetainJobs)
	}
	if st.RetainFor.Duration < 0 {
		bad("state.retain_for must be >= 0 (0 keeps jobs whatever their age), got %s", st.RetainFor)
	}
	errs = append(errs, lanes.ValidateLanes("lanes", c.Lanes)...)
	errs = append(errs, approvals.Validate("approvals", c.Approvals)...)
	errs = append(errs, executors.Validate("executors", c.Executors)...)
	errs = append(errs, clanker.Validate("clanker", c.Clanker)...)
	errs = append(errs, httpapi.Validate("http", c.HTTP, sortedKeys(c.Lanes), c.Set("http.exec_lane"))...)
	errs = append(errs, metrics.Validate("metrics", c.Metrics)...)
	errs = append(errs, ui.Validate("ui", c.UI)...)
	if err := c.Cluster.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !c.Cluster.Enabled {
		for _, n := range sortedKeys(c.Lanes) {
			if c.Lanes[n].Shared {
				bad("lanes.%s.shared: a shared lane needs the fleet ([cluster] enabled = true)", n)
			}
		}
	}
	// The lanes and pools [loops] names are checked when the file has a
	// [loops] table: a daemon that runs no loops is not refused for
	// lacking the default validation lane.
	var laneNames, poolNames []string
	if c.loopsSet {
		laneNames, poolNames = sortedKeys(c.Lanes), append([]string{}, sortedKeys(c.Executors)...)
	}
	errs = append(errs, c.Loops.Validate("loops", laneNames, poolNames)...)
	return errs
}
