package daemon

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/daemon/httpapi"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// startHTTP starts Loopsy's HTTP API unless [http] enabled is off; nil
// when off or when it cannot start (it warned and said why:
// http.unavailable).
func startHTTP(c httpapi.Config, home, nodeID, version string, mgr *lanes.Manager, bus *eventlog.Bus, started time.Time, log zerolog.Logger) *httpapi.Server {
	if !c.Enabled {
		return nil
	}
	key, err := httpapi.LoadKey(home)
	if err != nil {
		log.Warn().Err(err).Msg("http: going on without the HTTP API")
		bus.Emit(httpapi.Unavailable{Addr: c.Listen, Error: err.Error()})
		return nil
	}
	srv, err := httpapi.Start(httpapi.Options{Config: c, APIKey: key, NodeID: nodeID, Version: version, Lanes: mgr,
		Bus: bus, Logger: log, Started: started})
	if err != nil {
		return nil
	}
	return srv
}
