package daemon

import (
	"time"

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
