package lanes

import (
	"context"

	"github.com/orchestrd/orchestrd/api"
)

// Cluster is the fleet (package fleet, wired in by the daemon with
// SetCluster): jobs of shared lanes go through it, from every front-end
// that submits through the Manager (control socket, Loopsy API, loops).
// nil: one machine, and nothing here changes.
type Cluster interface {
	// Serves: lane is a shared lane some live node of the fleet serves
	// (this one included).
	Serves(lane string) bool
	// Owns: id names a cluster job (the ids a fleet gives).
	Owns(id string) bool
	// Submit records spec as a queued cluster job and commits it into its
	// lane's work queue; reply gets the id once both are committed (once,
	// on any goroutine; it must not block). The node that runs the job
	// applies its lane's defaults.
	Submit(spec api.JobSpec, reply func(id string, err error))
	// Get reads a cluster job's record, with the output it kept.
	Get(id string) (api.JobRecord, bool, error)
	// Wait calls fn once with the job's terminal record (at once if it
	// has ended) until cancel is called.
	Wait(id string, fn func(api.JobRecord)) (cancel func(), err error)
	// Cancel cancels a queued or running cluster job, wherever it is.
	Cancel(id string, force bool, reply func(wasRunning bool, err error))
	// List lists cluster jobs matching f, oldest first, without output.
	List(f api.Filter) ([]api.JobRecord, error)
	// Follow delivers the job's output from its first byte, in order, to
	// sink, which may block (the fleet reads no further meanwhile), until
	// the job ends: it returns the terminal record (without output).
	// A sink error or ctx ending stops it with that error.
	Follow(ctx context.Context, id string, sink func(stream string, data []byte) error) (api.JobRecord, error)
}
