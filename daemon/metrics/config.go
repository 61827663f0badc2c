package metrics

import (
	"fmt"
	"net"
	"net/netip"
)

// Config is the [metrics] table. GET /metrics is always served on the HTTP
// API's listener, behind its Bearer key; Listen adds a listener of its own
// without a key, for a Prometheus on the same machine.
type Config struct {
	// Listen, when set, serves GET /metrics without authentication on this
	// address, which must be loopback (127.0.0.0/8, ::1 or localhost): a
	// page anyone who can reach it may read. Default "": off.
	Listen string `toml:"listen"`
}

// DefaultConfig is the embedded [metrics] table: no listener of its own.
func DefaultConfig() Config { return Config{} }

// Validate checks c, the table named key ("metrics"): a listen address
// must be HOST:PORT with a loopback host.
func Validate(key string, c Config) []error {
	if c.Listen == "" {
		return nil
	}
	if err := CheckLoopback(c.Listen); err != nil {
		return []error{fmt.Errorf("%s.listen %v", key, err)}
	}
	return nil
}

// CheckLoopback refuses an address that is not HOST:PORT with a loopback
// host: an IP of 127.0.0.0/8, ::1, or "localhost". An empty host (every
// interface), 0.0.0.0, another address or another name (which could
// resolve anywhere) is refused.
func CheckLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be HOST:PORT on loopback (127.0.0.1:9464), got %q", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return fmt.Errorf("must be HOST:PORT on loopback (127.0.0.1:9464): bad port in %q", addr)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() || ip.Zone() != "" {
		return fmt.Errorf("must be a loopback address (127.0.0.1, ::1 or localhost): %q is served without a key", addr)
	}
	return nil
}
