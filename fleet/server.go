package fleet

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// clusterName is the NATS cluster name of the embedded servers.
const clusterName = "orchestrd"

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
		o.TLSConfig, o.TLS, o.TLSTimeout = tc, true, 2
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
			Username: routeUser, Password: id.route, AuthTimeout: 2}
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
			o.Cluster.TLSConfig, o.Cluster.TLSTimeout = tc, 2
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
	s.SetLoggerV2(natsLogger{log: log.With().Str("component", "nats").Logger()}, false, false, false)
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("starting the embedded NATS server on %s: not ready after 10s (is the port in use? see the log)", c.Listen)
	}
	return s, nil
}

// natsLogger is nats-server's logging in zerolog (never stdout).
type natsLogger struct{ log zerolog.Logger }

func (l natsLogger) Noticef(format string, v ...any) { l.log.Info().Msg(clean(format, v)) }
func (l natsLogger) Warnf(format string, v ...any)   { l.log.Warn().Msg(clean(format, v)) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.log.Error().Msg(clean(format, v)) }
func (l natsLogger) Errorf(format string, v ...any)  { l.log.Error().Msg(clean(format, v)) }
func (l natsLogger) Debugf(format string, v ...any)  { l.log.Debug().Msg(clean(format, v)) }
func (l natsLogger) Tracef(format string, v ...any)  { l.log.Trace().Msg(clean(format, v)) }

func clean(format string, v []any) string { return strings.TrimSpace(fmt.Sprintf(format, v...)) }
