package httpapi

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Config is the [http] table: Loopsy's HTTP API.
type Config struct {
	// Enabled serves the API (default on, at loopback).
	Enabled bool `toml:"enabled"`
	// Listen is the address; default 127.0.0.1:19532, so remote execution
	// is off the network until a person opts in ("0.0.0.0:19532").
	Listen string `toml:"listen"`
	// Cert and Key (PEM files) serve HTTPS.
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
	// AllowedKeys are the peers' keys, by name (the name is what the audit
	// log says, never the key).
	AllowedKeys map[string]string `toml:"allowed_keys"`
	// ExecLane is the lane /execute runs its commands on. Set by the
	// config file, it must be a lane; left to its default ("net") where
	// there is no such lane, /execute is off (ExecOff).
	ExecLane string `toml:"exec_lane"`
	// Denylist: commands refused by their base name.
	Denylist []string `toml:"denylist"`
	// MaxConcurrent bounds the executions running at once.
	MaxConcurrent int `toml:"max_concurrent"`
	// DefaultTimeout is an execution's timeout when the request gives none.
	DefaultTimeout api.Duration `toml:"default_timeout"`
	// MaxOutputBytes bounds what /execute keeps of each of stdout and
	// stderr for its answer (the stream carries every byte).
	MaxOutputBytes int `toml:"max_output_bytes"`
	// Context bounds the shared context ([http.context]).
	Context ContextConfig `toml:"context"`
	// Transfer says where files may be pushed and pulled ([http.transfer]).
	Transfer TransferConfig `toml:"transfer"`
	// RateLimits are requests per minute per key and category
	// ([http.rate_limits]).
	RateLimits RateLimits `toml:"rate_limits"`
	// Discovery announces this node and finds peers by mDNS
	// (_loopsy._tcp). Unset: on only when Listen is beyond loopback.
	Discovery *bool `toml:"discovery"`
	// Peers: their health checks and discovery ([http.peers]).
	Peers PeersConfig `toml:"peers"`
	// Audit is the request log <home>/audit.jsonl ([http.audit]).
	Audit AuditConfig `toml:"audit"`
}

// ContextConfig is [http.context].
type ContextConfig struct {
	MaxValueBytes int `toml:"max_value_bytes"` // 5002 past it
	MaxEntries    int `toml:"max_entries"`     // 5003 past it
	// PruneInterval is how often expired entries are removed from the
	// store (readers never see them once expired).
	PruneInterval api.Duration `toml:"prune_interval"`
}

// TransferConfig is [http.transfer]. Nothing is allowed until configured;
// ~/.ssh and ~/.gnupg are always denied.
type TransferConfig struct {
	AllowedPaths []string `toml:"allowed_paths"`
	DeniedPaths  []string `toml:"denied_paths"`
	MaxFileSize  int64    `toml:"max_file_size"` // 4003 past it
}

// RateLimits is [http.rate_limits]: requests per minute per key; 0 turns a
// category's limit off.
type RateLimits struct {
	Exec     int `toml:"exec"`
	Transfer int `toml:"transfer"`
	Context  int `toml:"context"`
}

// PeersConfig is [http.peers].
type PeersConfig struct {
	// HealthInterval is how often each known peer's /health is asked;
	// HealthFailures failures in a row mark it offline.
	HealthInterval api.Duration `toml:"health_interval"`
	HealthFailures int          `toml:"health_failures"`
	// Manual peers, ADDRESS[:PORT] each, are added at start when not
	// known (as Loopsy's discovery.manualPeers).
	Manual []string `toml:"manual"`
	// DiscoveryInterval is how often mDNS is browsed for peers.
	DiscoveryInterval api.Duration `toml:"discovery_interval"`
}

// AuditConfig is [http.audit]: audit.jsonl is rotated like the event log.
type AuditConfig struct {
	MaxBytes int64 `toml:"max_bytes"` // rotate past it
	Keep     int   `toml:"keep"`      // rotated files kept
}

// DefaultConfig is the embedded [http] table.
func DefaultConfig() Config {
	return Config{Enabled: true, Listen: "127.0.0.1:19532", ExecLane: "net",
		Denylist:      []string{"rm", "rmdir", "format", "mkfs", "dd", "shutdown", "reboot"},
		MaxConcurrent: 10, DefaultTimeout: api.Duration{Duration: 300 * time.Second}, MaxOutputBytes: 8 << 20,
		Context:    ContextConfig{MaxValueBytes: 1 << 20, MaxEntries: 1000, PruneInterval: api.Duration{Duration: 10 * time.Second}},
		Transfer:   TransferConfig{AllowedPaths: []string{}, DeniedPaths: []string{}, MaxFileSize: 1 << 30},
		RateLimits: RateLimits{Exec: 30, Transfer: 10, Context: 60},
		Peers: PeersConfig{HealthInterval: api.Duration{Duration: 15 * time.Second}, HealthFailures: 3,
			DiscoveryInterval: api.Duration{Duration: 30 * time.Second}},
		Audit: AuditConfig{MaxBytes: 64 << 20, Keep: 5},
	}
}

var hexKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })

// Validate checks c, the table named key ("http"), against the daemon's
// lanes. An exec_lane the file sets must be one of them; the default one
// need not be (a config whose lanes have no "net" lane must not fail for
// an API it does not use: /execute is then off, ExecOff).
func Validate(key string, c Config, lanes []string, execLaneSet bool) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("%s.listen must be HOST:PORT, got %q", key, c.Listen)
	}
	if (c.Cert == "") != (c.Key == "") {
		bad("%s.cert and %s.key go together (both PEM files, or neither)", key, key)
	}
	for name, k := range c.AllowedKeys {
		if !hexKey().MatchString(k) {
			bad("%s.allowed_keys.%s must be 64 lowercase hex characters", key, name)
		}
	}
	switch {
	case c.ExecLane == "":
		bad("%s.exec_lane must name a lane", key)
	case execLaneSet && !slices.Contains(lanes, c.ExecLane):
		bad("%s.exec_lane %q is not a lane (the lanes: %s)", key, c.ExecLane, strings.Join(lanes, ", "))
	}
	if c.MaxConcurrent < 1 {
		bad("%s.max_concurrent must be >= 1, got %d", key, c.MaxConcurrent)
	}
	if c.DefaultTimeout.Duration <= 0 {
		bad("%s.default_timeout must be > 0, got %s", key, c.DefaultTimeout)
	}
	if c.MaxOutputBytes < 1 {
		bad("%s.max_output_bytes must be >= 1, got %d", key, c.MaxOutputBytes)
	}
	if c.Context.MaxValueBytes < 1 || c.Context.MaxValueBytes > 64<<20 {
		bad("%s.context.max_value_bytes must be between 1 and 64 MiB, got %d", key, c.Context.MaxValueBytes)
	}
	if c.Context.MaxEntries < 1 {
		bad("%s.context.max_entries must be >= 1, got %d", key, c.Context.MaxEntries)
	}
	if c.Context.PruneInterval.Duration < 10*time.Millisecond {
		bad("%s.context.prune_interval must be at least 10ms, got %s", key, c.Context.PruneInterval)
	}
	for i, p := range c.Transfer.AllowedPaths {
		if !filepath.IsAbs(expandHome(p)) {
			bad("%s.transfer.allowed_paths[%d] must be an absolute path (or start with ~/), got %q", key, i+1, p)
		}
	}
	for i, p := range c.Transfer.DeniedPaths {
		if !filepath.IsAbs(expandHome(p)) {
			bad("%s.transfer.denied_paths[%d] must be an absolute path (or start with ~/), got %q", key, i+1, p)
		}
	}
	if c.Transfer.MaxFileSize < 1 {
		bad("%s.transfer.max_file_size must be >= 1, got %d", key, c.Transfer.MaxFileSize)
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"exec", c.RateLimits.Exec}, {"transfer", c.RateLimits.Transfer}, {"context", c.RateLimits.Context}} {
		if l.n < 0 {
			bad("%s.rate_limits.%s must be >= 0 (0: no limit), got %d", key, l.name, l.n)
		}
	}
	if c.Peers.HealthInterval.Duration < 10*time.Millisecond {
		bad("%s.peers.health_interval must be at least 10ms, got %s", key, c.Peers.HealthInterval)
	}
	if c.Peers.HealthFailures < 1 {
		bad("%s.peers.health_failures must be >= 1, got %d", key, c.Peers.HealthFailures)
	}
	if c.Peers.DiscoveryInterval.Duration < 100*time.Millisecond {
		bad("%s.peers.discovery_interval must be at least 100ms, got %s", key, c.Peers.DiscoveryInterval)
	}
	for i, m := range c.Peers.Manual {
		if _, _, err := SplitPeerAddr(m); err != nil {
			bad("%s.peers.manual[%d]: %v", key, i+1, err)
		}
	}
	if c.Audit.MaxBytes < 4096 {
		bad("%s.audit.max_bytes must be at least 4096, got %d", key, c.Audit.MaxBytes)
	}
	if c.Audit.Keep < 1 {
		bad("%s.audit.keep must be >= 1, got %d", key, c.Audit.Keep)
	}
	return errs
}

// ExecOff says why /execute is off with these lanes ("" when it is on):
// exec_lane, left to its default, names none of them.
func ExecOff(c Config, lanes []string) string {
	if slices.Contains(lanes, c.ExecLane) {
		return ""
	}
	return fmt.Sprintf("[http] exec_lane is %q, and there is no such lane (the lanes: %s): set [http] exec_lane to one of them to turn /execute on",
		c.ExecLane, strings.Join(lanes, ", "))
}

// expandHome turns a leading ~/ into the user's home directory.
func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, p[1:])
		}
	}
	return p
}

// SplitPeerAddr reads ADDRESS[:PORT], the port 19532 when not given.
func SplitPeerAddr(s string) (string, int, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") && s != "" && !strings.ContainsAny(s, "/ \t") {
			return strings.Trim(s, "[]"), 19532, nil
		}
		return "", 0, fmt.Errorf("want ADDRESS[:PORT], got %q", s)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("want ADDRESS[:PORT] with a port 1-65535, got %q", s)
	}
	return host, port, nil
}

// DiscoveryOn says whether [http] discovery is on: as configured, else on
// only when the API listens beyond loopback (a loopback API cannot be
// reached by the peers it would find).
func DiscoveryOn(c Config) bool {
	if c.Discovery != nil {
		return *c.Discovery
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host != "localhost" && (ip == nil || !ip.IsLoopback())
}
