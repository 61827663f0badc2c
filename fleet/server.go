package fleet

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// clusterName is the NATS cluster name of the embedded servers.
const clusterName = "orchestrd"

// handshakeTimeout is the seconds the embedded server gives a client's or
// a route's TLS handshake and a route's login (nats-server's default is
// 2): a node on a loaded machine (a build, a test suite beside it) took
// longer, and its connection was closed after the handshake.
const handshakeTimeout = 10

// startEmbedded starts this node's NATS server: clients must be nodes
// the fleet's key certified (nodeAuth), each with its own permissions;
// routes require the fleet's route password; JetStream stores under
// <home>/cluster/. It returns once the server takes connections.
func startEmbedded(c Config, home string, id *identity, log zerolog.Logger) (*server.Server, error) {
	host, port, err := splitHostPort(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("[cluster] listen: %w", err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	o := &server.Options{
		ServerName: c.Name,
		Host:       host,
		Port:       port,
		// A nonce for the nodes' nkeys to sign.
		CustomClientAuthentication: nodeAuth{fleet: id.fleet},
		AlwaysEnableNonce:          true,
		NoSigs:                     true,
		NoLog:                      false,
		JetStream:                  true,
		JetStreamMaxMemory:         64 << 20,
		StoreDir:                   filepath.Join(home, "cluster"),
		// No HTTP monitoring, no system account of its own.
		DisableJetStreamBanner: true,
	}
	if c.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLSCert, KeyFile: c.TLSKey, CaFile: c.TLSCA, Verify: c.TLSCA != ""})
		if err != nil {
			return nil, fmt.Errorf("[cluster] tls_cert: %w", err)
		}
		o.TLSConfig, o.TLS, o.TLSTimeout = tc, true, handshakeTimeout
	}
	if len(c.Routes) > 0 {
		// Routes make the JetStream cluster; without them the server
		// runs alone.
		chost, cport, err := splitHostPort(c.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("[cluster] cluster_listen: %w", err)
		}
		if cport == 0 {
			cport = server.RANDOM_PORT
		}
		o.Cluster = server.ClusterOpts{Name: clusterName, Host: chost, Port: cport,
			Username: routeUser, Password: id.route, AuthTimeout: handshakeTimeout}
		if o.TLSConfig != nil {
			tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLSCert, KeyFile: c.TLSKey, CaFile: c.TLSCA, Verify: c.TLSCA != ""})
			if err != nil {
				return nil, fmt.Errorf("[cluster] tls_cert: %w", err)
			}
			// A route is a client of the server it dials as well as a
			// server: it verifies that one's certificate against the same
			// CA (nats-server's own cluster tls block does the same; left
			// out, every route failed: certificate signed by unknown
			// authority, found by TestTLS), and every route shows one.
			tc.RootCAs = tc.ClientCAs
			tc.ClientAuth = tls.RequireAndVerifyClientCert
			o.Cluster.TLSConfig, o.Cluster.TLSTimeout = tc, handshakeTimeout
		}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("[cluster] routes: %q: %w", redactURL(r), err)
			}
			u.Scheme = "nats-route"
			// A solicited route authenticates with its URL's user.
			u.User = url.UserPassword(routeUser, id.route)
			o.Routes = append(o.Routes, u)
		}
	}
	s, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("configuring the embedded NATS server: %w", err)
	}
	s.SetLoggerV2(newNATSLogger(log), false, false, false)
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("starting the embedded NATS server on %s: not ready after 10s (is the port in use? see the log)", c.Listen)
	}
	return s, nil
}

// natsLogger is nats-server's logging in the daemon's zerolog logger
// (never stdout), at warn and above: its notices are its routine
// (connections, elections, JetStream's banner). A route it cannot reach
// (a node lost or stopped) is tried again every second by each of the
// route's connections, each try an error: those are said once per route,
// then at most every routeErrorEvery, the next line saying how many were
// not (routeErrors).
type natsLogger struct {
	log    zerolog.Logger
	routes *routeErrors
}

// newNATSLogger is log for nats-server, at warn and above.
func newNATSLogger(log zerolog.Logger) natsLogger {
	l := log.With().Str("component", "nats").Logger()
	if l.GetLevel() < zerolog.WarnLevel {
		l = l.Level(zerolog.WarnLevel)
	}
	return natsLogger{log: l, routes: &routeErrors{every: routeErrorEvery, now: time.Now, seen: map[string]*routeSeen{}}}
}

func (l natsLogger) Noticef(format string, v ...any) { l.log.Info().Msg(clean(format, v)) }
func (l natsLogger) Warnf(format string, v ...any)   { l.log.Warn().Msg(clean(format, v)) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.log.Error().Msg(clean(format, v)) }
func (l natsLogger) Debugf(format string, v ...any)  { l.log.Debug().Msg(clean(format, v)) }
func (l natsLogger) Tracef(format string, v ...any)  { l.log.Trace().Msg(clean(format, v)) }

func (l natsLogger) Errorf(format string, v ...any) {
	if !strings.HasPrefix(format, routeConnectError) {
		l.log.Error().Msg(clean(format, v))
		return
	}
	route := routeOf(v)
	suppressed, since, ok := l.routes.allow(route)
	if !ok {
		return
	}
	msg := clean(format, v)
	if suppressed > 0 {
		msg += fmt.Sprintf(" (%d more like it for this route in the last %s not logged; said at most every %s)",
			suppressed, since.Round(time.Second), l.routes.every)
	}
	l.log.Error().Str("route", route).Int("suppressed", suppressed).Msg(msg)
}

// routeConnectError begins nats-server's message for a failed try to
// connect to a route ("Error trying to connect to route (attempt %v): %v").
const routeConnectError = "Error trying to connect to route"

// routeErrorEvery: a route's connect errors are said at most this often,
// but for the first of a new outage: one after routeQuietGap without an
// error of that route (the route was up; nats-server tries a route that
// is down every second) is said at once.
const (
	routeErrorEvery = time.Minute
	routeQuietGap   = 5 * time.Second
)

// routeErrors counts, per route, the connect errors not said.
type routeErrors struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	seen  map[string]*routeSeen
}

type routeSeen struct {
	said       time.Time // when an error of the route was last said
	last       time.Time // when its last error came, said or not
	suppressed int       // errors since said, not said
}

// allow says whether an error of route is said now, and if so how many
// were not since the last one said, and how long ago that was.
func (r *routeErrors) allow(route string) (suppressed int, since time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	s := r.seen[route]
	if s == nil {
		if len(r.seen) >= maxRoutesSeen { // bounded: the oldest is forgotten
			var oldest string
			for k, v := range r.seen {
				if oldest == "" || v.last.Before(r.seen[oldest].last) {
					oldest = k
				}
			}
			delete(r.seen, oldest)
		}
		r.seen[route] = &routeSeen{said: now, last: now}
		return 0, 0, true
	}
	quiet := now.Sub(s.last) >= routeQuietGap
	s.last = now
	if !quiet && now.Sub(s.said) < r.every {
		s.suppressed++
		return 0, 0, false
	}
	suppressed, since = s.suppressed, now.Sub(s.said)
	s.said, s.suppressed = now, 0
	return suppressed, since, true
}

// maxRoutesSeen bounds the routes routeErrors remembers.
const maxRoutesSeen = 256

// routeOf is the address a route's connect error names (its dial's
// address), else the error's text.
func routeOf(v []any) string {
	for _, a := range v {
		if err, ok := a.(error); ok {
			var op *net.OpError
			if errors.As(err, &op) && op.Addr != nil {
				return op.Addr.String()
			}
			return err.Error()
		}
	}
	return "?"
}

func clean(format string, v []any) string { return strings.TrimSpace(fmt.Sprintf(format, v...)) }
