package httpapi

import (
	"fmt"
	"net"
	"regexp"
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
	// ExecLane is the lane /execute runs its commands on.
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
}

// DefaultConfig is the embedded [http] table.
func DefaultConfig() Config {
	return Config{Enabled: true, Listen: "127.0.0.1:19532", ExecLane: "net",
		Denylist:      []string{"rm", "rmdir", "format", "mkfs", "dd", "shutdown", "reboot"},
		MaxConcurrent: 10, DefaultTimeout: api.Duration{Duration: 300 * time.Second}, MaxOutputBytes: 8 << 20}
}

var hexKey = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks c, the table named key ("http"). That exec_lane is a
// lane is checked when the API starts (a config whose lanes have no "net"
// lane must not fail for an API it does not use).
func Validate(key string, c Config) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("%s.listen must be HOST:PORT, got %q", key, c.Listen)
	}
	if (c.Cert == "") != (c.Key == "") {
		bad("%s.cert and %s.key go together (both PEM files, or neither)", key, key)
	}
	for name, k := range c.AllowedKeys {
		if !hexKey.MatchString(k) {
			bad("%s.allowed_keys.%s must be 64 lowercase hex characters", key, name)
		}
	}
	if c.ExecLane == "" {
		bad("%s.exec_lane must name a lane", key)
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
	return errs
}
