package daemon

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control"
	"github.com/orchestrd/orchestrd/daemon/httpapi"
	"github.com/orchestrd/orchestrd/daemon/ui"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// httpFront is Loopsy's HTTP API as a front-end: its key read and its
// address bound before the lanes start (bindHTTP), so that a port in use
// is known before anything runs; served once the lanes take jobs (start).
type httpFront struct {
	cfg httpapi.Config
	// explicit is the key of the config file that turned it on ("[http]
	// listen"); "" when it is on by default.
	explicit string
	key      string
	ln       net.Listener     // bound, not yet served
	cert     *tls.Certificate // [http] cert and key, read before anything starts
	srv      *httpapi.Server
	fe       api.FrontEnd
	err      error          // why it failed, when it did
	sys      *actors.System // hosts the streams' actors
}

// bindHTTP reads the API's key and binds its address, unless [http]
// enabled is false. When it cannot and the config file turned the API on,
// it returns a FrontEndError; on by default, the API is off (said by
// warn, once every front-end is bound) and http.unavailable emitted.
func bindHTTP(cfg Config, home string, bus *eventlog.Bus) (*httpFront, error) {
	c := cfg.HTTP
	h := &httpFront{cfg: c, explicit: explicitKey(cfg, "http", "listen", "enabled"),
		fe: api.FrontEnd{Name: "http", Address: c.Listen}}
	if !c.Enabled {
		h.fe.Address, h.fe.Off = "", "[http] enabled = false"
		return h, nil
	}
	key, err := httpapi.LoadKey(home)
	if err != nil {
		return h, h.failed(bus, "cannot read its key", err.Error(), err)
	}
	// Its certificate before anything starts: a file missing or bad is
	// known at once, not once the lanes and the fleet are up.
	if c.Cert != "" {
		if h.cert, err = httpapi.LoadCertificate(c); err != nil {
			return h, h.failed(bus, "cannot read its certificate", err.Error(), err)
		}
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return h, h.failed(bus, "cannot listen on "+c.Listen, offReason(c.Listen, err), err)
	}
	h.key, h.ln = key, ln
	h.fe.Address = ln.Addr().String()
	return h, nil
}

// failed marks the API off, failed with err: a FrontEndError when the
// config file turned it on.
func (h *httpFront) failed(bus *eventlog.Bus, what, off string, err error) error {
	bus.Emit(httpapi.Unavailable{Addr: h.cfg.Listen, Error: err.Error()})
	h.fe = api.FrontEnd{Name: "http", Off: off, Failed: true}
	h.err = err
	if h.explicit != "" {
		return &FrontEndError{What: "the HTTP API (" + h.explicit + ") " + what, Err: err}
	}
	return nil
}

// warn says that the API, on by default, failed to start.
func (h *httpFront) warn(log zerolog.Logger) {
	if h.err != nil {
		log.Warn().Err(h.err).Str("addr", h.cfg.Listen).Msg("http: going on without the HTTP API")
	}
}

// start serves the API on its bound address, once the lanes take jobs,
// and Loopsy's domain behind it, its methods registered on the method
// table (ctrl, which the API calls). When it cannot, as bindHTTP: a
// FrontEndError when the config file turned it on, else warned and off.
// mounts are the other front-ends served on its listener (the dashboard,
// /metrics); observe hears of every request answered.
func (h *httpFront) start(home string, st *state.Store, version string, ctrl *control.Server, bus *eventlog.Bus, started time.Time, log zerolog.Logger,
	mounts []httpapi.Mount, observe func(route string, status int, d time.Duration)) error {
	if h.ln == nil {
		return nil
	}
	ln := h.ln
	h.ln = nil // Start serves or closes it
	dom, err := newLoopsy(h.cfg, ln.Addr(), st, bus, log)
	var srv *httpapi.Server
	if err != nil {
		ln.Close()
		bus.Emit(httpapi.Unavailable{Addr: h.cfg.Listen, Error: err.Error()})
	} else {
		dom.Register(ctrl)
		srv, err = httpapi.Start(httpapi.Options{Config: h.cfg, APIKey: h.key, NodeID: st.NodeID(), Version: version, Caller: ctrl,
			OnClose: dom.Stop, Home: home, Bus: bus, Logger: log, Started: started, Listener: ln, Certificate: h.cert,
			Mounts: mounts, Observe: observe, System: h.sys})
	}
	if err != nil {
		h.fe = api.FrontEnd{Name: "http", Off: err.Error(), Failed: true}
		h.err = err
		if h.explicit != "" {
			return &FrontEndError{What: "the HTTP API (" + h.explicit + ") cannot start", Err: err}
		}
		h.warn(log)
		return nil
	}
	h.srv = srv
	dom.Start()
	return nil
}

// closeListener closes the address bound and never served (Run failed
// before start).
func (h *httpFront) closeListener() {
	if h.ln != nil {
		h.ln.Close()
		h.ln = nil
	}
}

// registerHTTPInfo registers http.info: where the Loopsy API listens, for
// the CLI's peers and run --peer. When it is off, the call says why.
func registerHTTPInfo(mux api.Mux, h *httpFront, nodeID string) {
	mux.Handle("http.info", func(call api.Call) {
		var p api.NoParams
		if err := call.Decode(&p); err != nil {
			call.Fail(err)
			return
		}
		if h.srv == nil {
			call.Fail(api.Errorf(api.CodeInvalidState, "the HTTP API is off: %s", h.fe.Off))
			return
		}
		call.Respond(map[string]any{"addr": h.srv.Addr(), "tls": h.cfg.Cert != "", "node_id": nodeID})
	})
}

// isLoopback says addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.IP.IsLoopback()
	}
	return false
}

// uiFrontEnd is the dashboard as a front-end: its URL, or why it is off.
func uiFrontEnd(cfg Config, h *httpFront, dash *ui.Server) api.FrontEnd {
	fe := api.FrontEnd{Name: "ui"}
	switch {
	case !cfg.UI.Enabled:
		fe.Off = "[ui] enabled = false"
	case h.srv == nil:
		fe.Off = "the HTTP API is off"
	case dash == nil:
		fe.Off = "not started"
	default:
		scheme := "http"
		if cfg.HTTP.Cert != "" {
			scheme = "https"
		}
		fe.Address = scheme + "://" + h.srv.Addr() + "/ui/"
	}
	return fe
}
