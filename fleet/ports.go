package fleet

import "github.com/orchestrd/orchestrd/api"

// Local is what the fleet needs of this node's lanes (implemented by
// lanes.Manager, handed over by the daemon): which shared lanes it serves,
// room on them, and running a job the fleet gave it under the job's
// cluster id.
type Local interface {
	// SharedLanes lists the lanes of this node's config with shared = true.
	SharedLanes() []string
	// FreeSlots is how many more jobs lane can start now: slots of its
	// ready runners less its running and queued jobs (never below 0).
	FreeSlots(lane string) int
	// OnSlotFreed sets fn, called (it must not block) whenever room may
	// have been made on a shared lane: a job of it ended, a runner became
	// ready.
	OnSlotFreed(fn func())
	// Run starts cluster job id of spec on its lane, recorded in this
	// node's store too. sink gets every byte of its output in order (it may
	// block: the job is held back meanwhile, as by a slow reader); done gets
	// its terminal record (without output) once, after the last sink. An
	// error: the lane refused it (unknown, full, stopping), and neither is
	// called.
	Run(id string, spec api.JobSpec, sink func(stream string, data []byte), done func(api.JobRecord)) error
	// Cancel cancels job id if it runs here (force: SIGKILL at once).
	Cancel(id string, force bool, reply func(wasRunning bool, err error))
	// Stdin gives job id, run here with stdin_stream, the next piece of
	// its stdin (eof: then its end); reply runs once the piece is on its
	// way to the job, which waits for the job to read (flow control).
	Stdin(id string, data []byte, eof bool, reply func(error))
}
