package fleet

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Config is the [cluster] table of the daemon's config file.
type Config struct {
	Enabled bool `toml:"enabled"` // off by default: one machine, nothing changes
	// Name is this node's name in the fleet; default the hostname (its
	// characters outside [A-Za-z0-9._-] made '-').
	Name string `toml:"name"`
	// Listen is the embedded server's client port, host:port; default
	// 127.0.0.1:4222. Port 0: any free port.
	Listen string `toml:"listen"`
	// ClusterListen is the embedded server's route port, host:port;
	// default 127.0.0.1:6222. Used only with routes.
	ClusterListen string `toml:"cluster_listen"`
	// Routes are the other nodes' route ports (nats-route://host:port;
	// this node's own may be listed too, so every node can share one
	// list). Without routes the embedded server runs alone.
	Routes []string `toml:"routes"`
	// URL is an external NATS cluster (comma-separated URLs): no embedded
	// server. Not with listen, cluster_listen or routes.
	URL string `toml:"url"`
	// Credentials is this node's credentials file; default
	// <home>/cluster.creds (made by `orchestrd cluster init` for the
	// first node, `orchestrd cluster add-node NAME` for the others): its
	// name, its nkey and the fleet's certificate of it.
	Credentials string `toml:"credentials"`
	TLSCert     string `toml:"tls_cert"`
	TLSKey      string `toml:"tls_key"`
	TLSCA       string `toml:"tls_ca"`
	// Heartbeat: a node is lost after this long without a heartbeat;
	// default 5s. Heartbeats go every Heartbeat/5.
	Heartbeat api.Duration `toml:"heartbeat"`
	// StartTimeout bounds the daemon's start of the fleet (connecting,
	// the streams and buckets, the first heartbeat); default 1m (under
	// systemd's 90 s start timeout).
	StartTimeout api.Duration `toml:"start_timeout"`
	// Replicas of the fleet's streams and buckets; default
	// min(3, 1 + the routes that are not this node) embedded, 1 external.
	Replicas int `toml:"replicas"`
}

// Defaults.
const (
	DefaultListen        = "127.0.0.1:4222"
	DefaultClusterListen = "127.0.0.1:6222"
	DefaultHeartbeat     = 5 * time.Second
	DefaultStartTimeout  = time.Minute
	minStartTimeout      = time.Second
	maxStartTimeout      = 30 * time.Minute
	CredentialsFile      = "cluster.creds"
	minHeartbeat         = 100 * time.Millisecond
	maxHeartbeat         = 10 * time.Minute
	maxReplicas          = 5
	maxNameLen           = 64
)

// DefaultConfig is the [cluster] table before the config file: off.
func DefaultConfig() Config {
	return Config{Heartbeat: api.Duration{Duration: DefaultHeartbeat}}
}

// Validate checks the table, naming the bad key. A table that is off is
// not checked.
func (c *Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("[cluster] %s: %s", key, fmt.Sprintf(format, args...))
	}
	if c.Name != "" && !validName(c.Name) {
		return bad("name", "%q: want 1 to %d of [A-Za-z0-9._-], not starting or ending with '.'", c.Name, maxNameLen)
	}
	tls := c.TLSCert != "" || c.TLSKey != ""
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return bad("tls_cert", "tls_cert and tls_key go together")
	}
	if c.URL != "" {
		switch {
		case c.Listen != "":
			return bad("url", "an external NATS: not with listen (the embedded server's)")
		case c.ClusterListen != "":
			return bad("url", "an external NATS: not with cluster_listen (the embedded server's)")
		case len(c.Routes) > 0:
			return bad("url", "an external NATS: not with routes (the embedded server's)")
		}
		for _, s := range strings.Split(c.URL, ",") {
			u, err := url.Parse(strings.TrimSpace(s))
			if err != nil || u.Host == "" {
				return bad("url", "%q is not a URL like nats://host:4222", redactURL(s))
			}
			if u.Scheme != "nats" && u.Scheme != "tls" {
				return bad("url", "%q: scheme must be nats or tls", redactURL(s))
			}
			if !loopback(u.Hostname()) && u.Scheme != "tls" && c.TLSCA == "" {
				return bad("url", "%q is not loopback: TLS is required beyond it (a tls:// URL or tls_ca)", redactURL(s))
			}
		}
	}
	for _, kv := range [][2]string{{"listen", c.Listen}, {"cluster_listen", c.ClusterListen}} {
		if kv[1] == "" {
			continue
		}
		host, _, err := splitHostPort(kv[1])
		if err != nil {
			return bad(kv[0], "%v", err)
		}
		if !loopback(host) && !tls {
			return bad(kv[0], "%q is not loopback: TLS (tls_cert, tls_key) is required beyond it", kv[1])
		}
	}
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" || (u.Scheme != "nats-route" && u.Scheme != "nats") {
			return bad("routes", "%q is not a route like nats-route://host:6222", redactURL(r))
		}
		if u.User != nil {
			return bad("routes", "%q: no credentials in a route (they come from the credentials file)", redactURL(r))
		}
		if _, _, err := splitHostPort(u.Host); err != nil {
			return bad("routes", "%q: %v", redactURL(r), err)
		}
		if !loopback(u.Hostname()) && !tls {
			return bad("routes", "%q is not loopback: TLS (tls_cert, tls_key) is required beyond it", r)
		}
	}
	if d := c.Heartbeat.Duration; d != 0 && (d < minHeartbeat || d > maxHeartbeat) {
		return bad("heartbeat", "%v: want %v to %v", d, minHeartbeat, maxHeartbeat)
	}
	if d := c.StartTimeout.Duration; d != 0 && (d < minStartTimeout || d > maxStartTimeout) {
		return bad("start_timeout", "%v: want %v to %v", d, minStartTimeout, maxStartTimeout)
	}
	if c.Replicas < 0 || c.Replicas > maxReplicas {
		return bad("replicas", "%d: want 1 to %d (0: the default)", c.Replicas, maxReplicas)
	}
	return nil
}

// withDefaults fills what the table left empty.
func (c Config) withDefaults(home string) Config {
	if c.Name == "" {
		h, _ := os.Hostname()
		c.Name = sanitizeName(h)
	}
	if c.Credentials == "" {
		c.Credentials = filepath.Join(home, CredentialsFile)
	}
	if c.Heartbeat.Duration == 0 {
		c.Heartbeat.Duration = DefaultHeartbeat
	}
	if c.StartTimeout.Duration == 0 {
		c.StartTimeout.Duration = DefaultStartTimeout
	}
	if c.URL == "" {
		if c.Listen == "" {
			c.Listen = DefaultListen
		}
		if c.ClusterListen == "" {
			c.ClusterListen = DefaultClusterListen
		}
	}
	if c.Replicas == 0 {
		c.Replicas = 1
		if c.URL == "" {
			c.Replicas = min(3, 1+len(c.otherRoutes()))
		}
	}
	return c
}

// otherRoutes are the routes that are not this node's own route port.
func (c Config) otherRoutes() []string {
	var out []string
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err == nil && u.Host == c.ClusterListen {
			continue
		}
		out = append(out, r)
	}
	return out
}

func validName(s string) bool {
	if s == "" || len(s) > maxNameLen || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for _, r := range s {
		if !nameChar(r) {
			return false
		}
	}
	return true
}

func nameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

// sanitizeName makes a hostname a node name.
func sanitizeName(h string) string {
	b := []rune(h)
	for i, r := range b {
		if !nameChar(r) {
			b[i] = '-'
		}
	}
	s := strings.Trim(strings.ReplaceAll(string(b), "..", "-"), ".")
	if len(s) > maxNameLen {
		s = s[:maxNameLen]
	}
	if !validName(s) {
		return "node"
	}
	return s
}

// validToken: a lane name that can be a NATS subject token and a stream
// name's part.
func validToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port: %w", hp, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be 0 to 65535", hp)
	}
	return host, port, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// redactURL drops a URL's user information (a password) for messages.
func redactURL(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		if i := strings.LastIndex(s, "@"); i >= 0 {
			return "[redacted]@" + s[i+1:]
		}
		return s
	}
	if u.User != nil {
		u.User = url.User("[redacted]")
	}
	return u.String()
}
