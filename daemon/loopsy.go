package daemon

import (
	"fmt"
	"net"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/daemon/httpapi"
	"github.com/orchestrd/orchestrd/loopsy"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// loopsyStore keeps Loopsy's context and peers in the state store.
type loopsyStore struct{ st *state.Store }

var _ loopsy.Store = loopsyStore{}

func (s loopsyStore) Enqueue(w state.Write, done func(error)) error { return s.st.Enqueue(w, done) }
func (s loopsyStore) Context(nowMs int64) ([]state.LoopsyRow, error) {
	return s.st.Loopsy().Context(nowMs)
}
func (s loopsyStore) Peers() ([]state.LoopsyRow, error) { return s.st.Loopsy().Peers() }

// newLoopsy is Loopsy's domain as the [http] table c configures it, behind
// the API served at addr.
func newLoopsy(c httpapi.Config, addr net.Addr, st *state.Store, bus *eventlog.Bus, log zerolog.Logger) (*loopsy.Domain, error) {
	cfg := loopsy.Config{MaxValueBytes: c.Context.MaxValueBytes, MaxEntries: c.Context.MaxEntries,
		PruneInterval: c.Context.PruneInterval.Duration, HealthInterval: c.Peers.HealthInterval.Duration,
		HealthFailures: c.Peers.HealthFailures, TLS: c.Cert != "", Discovery: httpapi.DiscoveryOn(c),
		DiscoveryInterval: c.Peers.DiscoveryInterval.Duration, Addr: addr.String(),
		ProtocolVersion: httpapi.ProtocolVersion, Capabilities: httpapi.Capabilities}
	if a, ok := addr.(*net.TCPAddr); ok {
		cfg.Port = a.Port
	}
	for _, m := range c.Peers.Manual {
		host, port, err := httpapi.SplitPeerAddr(m)
		if err != nil { // Validate refused it already
			return nil, fmt.Errorf("[http] peers.manual: %w", err)
		}
		cfg.Manual = append(cfg.Manual, loopsy.PeerAddr{Host: host, Port: port})
	}
	return loopsy.New(loopsy.Options{Config: cfg, Store: loopsyStore{st}, NodeID: st.NodeID(), Bus: bus, Logger: log})
}
