package lanes

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// liveConn is a runner's connection as the lane's front-end lists it: its
// runner's actor makes it when it takes the connection, counts the bytes
// it queues for the runner (its writer counts them taken) and lets go of
// it when it drops the connection.
type liveConn struct {
	id     string // the runner's
	pid    int32
	since  time.Time
	queued atomic.Int64
}

func (c *liveConn) info() api.ConnInfo {
	return api.ConnInfo{Kind: "runner", ID: c.id, Pid: c.pid, Since: c.since,
		AgeMs: time.Since(c.since).Milliseconds(), QueuedBytes: c.queued.Load()}
}

// runnerConns are a lane's bring-your-own runners' connections: those
// that came through its socket and were handed to a runner actor.
type runnerConns struct {
	mu sync.Mutex
	m  map[*liveConn]struct{}
}

func (rc *runnerConns) add(c *liveConn) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.m == nil {
		rc.m = map[*liveConn]struct{}{}
	}
	rc.m[c] = struct{}{}
}

func (rc *runnerConns) remove(c *liveConn) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.m, c)
}

func (rc *runnerConns) list() []api.ConnInfo {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make([]api.ConnInfo, 0, len(rc.m))
	for c := range rc.m {
		out = append(out, c.info())
	}
	return out
}

// Conns lists at most max of the connections open now to lane's socket,
// the oldest first, and how many are open: the bring-your-own runners
// connected (kind "runner", its id, its peer pid, bytes queued for it)
// and the connections still handshaking (kind "handshake").
func (m *Manager) Conns(lane string, max int) ([]api.ConnInfo, int) {
	h := m.lanes[lane]
	if h == nil {
		return nil, 0
	}
	all := h.byo.list()
	h.srvMu.Lock()
	srv := h.srv
	h.srvMu.Unlock()
	if srv != nil {
		hs, _ := srv.List(-1)
		all = append(all, hs...)
	}
	slices.SortFunc(all, func(a, b api.ConnInfo) int { return a.Since.Compare(b.Since) })
	n := len(all)
	if max >= 0 && len(all) > max {
		all = all[:max]
	}
	return all, n
}
