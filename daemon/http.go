package daemon

import (
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/daemon/httpapi"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// loopsyStore keeps the HTTP API's context and peers in the state store.
type loopsyStore struct{ st *state.Store }

var _ httpapi.Store = loopsyStore{}

func (s loopsyStore) Enqueue(w state.Write, done func(error)) error { return s.st.Enqueue(w, done) }
func (s loopsyStore) Context(nowMs int64) ([]state.LoopsyRow, error) {
	return s.st.Loopsy().Context(nowMs)
}
func (s loopsyStore) Peers() ([]state.LoopsyRow, error) { return s.st.Loopsy().Peers() }

// startHTTP starts Loopsy's HTTP API unless [http] enabled is off; nil
// when off or when it cannot start (it warned and said why:
// http.unavailable).
func startHTTP(c httpapi.Config, home string, st *state.Store, version string, mgr *lanes.Manager, bus *eventlog.Bus, started time.Time, log zerolog.Logger) *httpapi.Server {
	if !c.Enabled {
		return nil
	}
	key, err := httpapi.LoadKey(home)
	if err != nil {
		log.Warn().Err(err).Msg("http: going on without the HTTP API")
		bus.Emit(httpapi.Unavailable{Addr: c.Listen, Error: err.Error()})
		return nil
	}
	srv, err := httpapi.Start(httpapi.Options{Config: c, APIKey: key, NodeID: st.NodeID(), Version: version, Lanes: mgr,
		Store: loopsyStore{st}, Home: home, Bus: bus, Logger: log, Started: started})
	if err != nil {
		return nil
	}
	return srv
}

// registerHTTPInfo registers http.info: where the Loopsy API listens, for
// the CLI's peers and run --peer. When it is off or could not start, the
// call says so.
func registerHTTPInfo(mux api.Mux, srv *httpapi.Server, c httpapi.Config, nodeID string) {
	mux.Handle("http.info", func(call api.Call) {
		var p api.NoParams
		if err := call.Decode(&p); err != nil {
			call.Fail(err)
			return
		}
		switch {
		case !c.Enabled:
			call.Fail(api.Errorf(api.CodeInvalidState, "the HTTP API is off ([http] enabled = false)"))
		case srv == nil:
			call.Fail(api.Errorf(api.CodeInvalidState, "the HTTP API is not serving (the event log's http.unavailable says why)"))
		default:
			call.Respond(map[string]any{"addr": srv.Addr(), "tls": c.Cert != "", "node_id": nodeID})
		}
	})
}
