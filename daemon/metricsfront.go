package daemon

import (
	"context"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/metrics"
)

// The daemon's Prometheus metrics (daemon/metrics): made before the state
// store (its commits are observed) and subscribed to the bus once it is
// open; the domains' accessors attached once they run. GET /metrics is
// mounted on the HTTP API behind its key; [metrics] listen adds a
// loopback listener of its own without one, a front-end like the others
// (frontend.list, the ready line), off unless the config file sets it.

// newMetrics makes the registry for the config's lanes and pools.
func newMetrics(cfg Config, version, home string) *metrics.Metrics {
	return metrics.New(metrics.Options{Lanes: sortedKeys(cfg.Lanes), Pools: sortedKeys(cfg.Executors), Version: version,
		Home: home})
}

// metricsFront is [metrics] listen: bound before anything starts (the
// config file turned it on, so an address in use stops the daemon with a
// FrontEndError, exit 2), served once the domains are attached.
type metricsFront struct {
	ln  net.Listener // bound, not yet served
	srv *metrics.Server
	fe  api.FrontEnd
}

// bindMetrics binds [metrics] listen when the config file sets it.
func bindMetrics(cfg Config) (*metricsFront, error) {
	f := &metricsFront{fe: api.FrontEnd{Name: "metrics", Off: "[metrics] listen is not set"}}
	if cfg.Metrics.Listen == "" {
		return f, nil
	}
	ln, err := metrics.Listen(cfg.Metrics.Listen)
	if err != nil {
		f.fe = api.FrontEnd{Name: "metrics", Off: offReason(cfg.Metrics.Listen, err), Failed: true}
		return f, &FrontEndError{What: "the metrics listener ([metrics] listen) cannot listen on " + cfg.Metrics.Listen, Err: err}
	}
	f.ln = ln
	f.fe = api.FrontEnd{Name: "metrics", Address: ln.Addr().String()}
	return f, nil
}

// start serves what m has on the bound address.
func (f *metricsFront) start(m *metrics.Metrics, log zerolog.Logger) {
	if f.ln == nil {
		return
	}
	f.srv = metrics.Serve(f.ln, m.Handler(), log)
	f.ln = nil
}

// close stops the listener (served or only bound); a no-op when off.
func (f *metricsFront) close(log zerolog.Logger) {
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	if f.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.srv.Close(ctx); err != nil {
		log.Error().Err(err).Msg("closing the metrics listener")
	}
	f.srv = nil
}
