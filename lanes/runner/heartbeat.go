package runner

import (
	"os"
	"time"

	"github.com/orchestrd/orchestrd/platform/proc/proctree"
	"github.com/orchestrd/orchestrd/wire"
)

// heartbeatLoop sends a Heartbeat every interval until stop is closed.
func (r *runner) heartbeatLoop(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	self := os.Getpid()
	var pids []int
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// The runner and its jobs' trees: jobs run in process groups
		// of their own but stay its children, so walking down from the
		// runner finds them. Their main pids are roots too, in case one
		// was re-parented (the runner is not a subreaper).
		pids = append(r.runningPids(pids[:0]), self)
		hb := wire.Heartbeat{
			ActiveJobs:  r.activeJobs(),
			UptimeSecs:  uint64(time.Since(r.started) / time.Second),
			MemoryBytes: proctree.RSS(pids...),
		}
		if err := r.send(wire.TypeHeartbeat, hb); err != nil {
			return
		}
	}
}

func (r *runner) activeJobs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

// runningPids appends the main process ids of the jobs still running.
func (r *runner) runningPids(dst []int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.jobs {
		j.mu.Lock()
		if j.pid > 0 && !j.exited {
			dst = append(dst, j.pid)
		}
		j.mu.Unlock()
	}
	return dst
}
