package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// A NATS server can keep a client's connection up and yet never bring the
// answers to its requests back to it: with an external cluster of
// Debian's nats-server 2.9.10, one node's JetStream requests went
// unanswered for the four minutes of its start while the other nodes'
// were answered. A connected client whose JetStream requests have all
// timed out for stallReconnect is made to connect anew (nats.go's
// ForceReconnect: the next server of its list, its subscriptions made
// again), at most once per stallReconnect, a decision the event log shows
// (cluster.reconnect_forced, then the cluster.disconnected and
// cluster.reconnected that follow). A leader's election that outlasts it
// costs one new connection, which is cheap.
const stallReconnect = 3 * opTimeout

// unanswered is told of a JetStream request's failure, err, when every
// one since since has failed: a timeout past stallReconnect replaces
// the connection.
func (f *Fleet) unanswered(since time.Time, err error) {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		return
	}
	if f.nc == nil || !f.nc.IsConnected() {
		return
	}
	now := time.Now()
	if last := time.Unix(0, f.forcedAt.Load()); last.After(since) {
		since = last
	}
	if now.Sub(since) < stallReconnect {
		return
	}
	f.forcedAt.Store(now.UnixNano())
	server := f.nc.ConnectedServerName()
	f.log.Warn().Err(err).Str("server", server).Dur("unanswered", now.Sub(since)).
		Msg("JetStream has answered none of this node's requests over its NATS connection: connecting anew")
	f.emit(ClusterReconnectForced{Node: f.name, Server: server, UnansweredMs: now.Sub(since).Milliseconds()})
	if err := f.nc.ForceReconnect(); err != nil {
		f.log.Warn().Err(err).Msg("reconnecting to NATS")
	}
}
