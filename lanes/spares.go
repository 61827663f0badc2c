package lanes

import (
	"github.com/orchestrd/orchestrd/actors"
)

// Spare runners. A lane with `spares = S` starts runners+S spawned runners.
// Up to `runners` of the ready ones serve: the lane dispatches to them. The
// others are spares: started, handshaken and heartbeating, but given no
// jobs. When a serving runner is lost, a ready spare serves in its place at
// once (runner.promoted), without waiting for a process to start; the lost
// runner restarts under the lane's restart policy and, once ready, is the
// new spare. Bring-your-own runners always serve and do not count against
// `runners`. With spares = 0 every ready runner serves. A lane with
// runners = 0 (bring-your-own only) starts no spares: nothing would use them.
//
// Why lanes default to one spare: a fresh runner needs ~5 ms from exec to
// handshake (Go runtime and package start-up of the orchestrd binary), so a
// restart without a spare takes ~7 ms; a promoted spare serves in ~1 ms. The
// price is one idle runner per lane (~11 MB RSS, one heartbeat a second).

// effectiveSpares is how many spares the lane actually starts.
func (c LaneConfig) effectiveSpares() int {
	if c.Runners == 0 {
		return 0
	}
	return c.Spares
}

// assignRole decides whether a runner that has just become ready serves.
func (l *laneActor) assignRole(s *runnerSlot) {
	if !s.spawned {
		s.serving = true
		return
	}
	n := 0
	for _, o := range l.runners {
		if o != s && o.spawned && o.serving {
			n++
		}
	}
	s.serving = n < l.h.cfg.Runners
}

// lostServing notes that runner id (slot s) is down or gone. If it was
// serving, a ready spare takes its place.
func (l *laneActor) lostServing(c *actors.Context, id string, s *runnerSlot) {
	if !s.serving {
		return
	}
	s.serving = false
	if !s.spawned || l.stopping {
		// At shutdown every runner is on its way out: nothing to promote.
		return
	}
	for _, sid := range l.order {
		sp := l.runners[sid]
		if sp != s && sp.spawned && sp.ready && !sp.serving {
			sp.serving = true
			l.sh.bus.Emit(RunnerPromoted{Lane: l.h.name, RunnerID: sid, Pid: sp.status.Pid, Replaces: id})
			l.dispatch(c)
			return
		}
	}
}
