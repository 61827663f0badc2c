package lanes

import (
	"time"

	"github.com/orchestrd/orchestrd/actors"
)

// A lane's min_free_memory: while the node's available memory is below
// it, the lane starts none of its queued jobs (they wait, queued, and are
// not refused) and, in a fleet, takes no job of a shared lane from the
// fleet's queue (FreeSlots is 0). The lane checks every memCheckEvery and
// says when it stops and starts again (lane.paused, lane.resumed).

// memCheckEvery is how often a lane with min_free_memory reads the node's
// available memory.
const memCheckEvery = time.Second

// memCheck: time for the lane to compare the node's available memory
// with its min_free_memory.
type memCheck struct{}

// memHold decides whether a lane holds its jobs back: its min_free_memory
// (0: never), the node's available memory and whether it could be read,
// and whether it held them at the last check (kept when the memory could
// not be read).
func memHold(minFree, avail uint64, readOK, wasHeld bool) bool {
	switch {
	case minFree == 0:
		return false
	case !readOK:
		return wasHeld
	}
	return avail < minFree
}

// checkMemory is one check: it holds or releases the lane's jobs, with
// the event, and arms the next check.
func (l *laneActor) checkMemory(c *actors.Context) {
	minFree := l.h.cfg.MinFreeMemory
	if minFree == 0 {
		return
	}
	avail, err := (*l.sh.memAvail.Load())()
	if err != nil {
		l.sh.log.Warn().Err(err).Str("lane", l.h.name).Msg("min_free_memory: cannot read the node's memory")
	}
	was := l.h.memHeld.Load()
	held := memHold(minFree, avail, err == nil, was)
	if held != was {
		l.h.memHeld.Store(held)
		if held {
			l.sh.bus.Emit(LanePaused{Lane: l.h.name, Reason: "min_free_memory", AvailableBytes: avail, MinFreeMemory: minFree})
		} else {
			l.sh.bus.Emit(LaneResumed{Lane: l.h.name, Reason: "min_free_memory", AvailableBytes: avail, MinFreeMemory: minFree})
			l.dispatch(c)
		}
		l.publish()
	}
	c.After(memCheckEvery, memCheck{})
}
