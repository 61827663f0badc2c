package lanes

import (
	"fmt"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes/runner"
	"github.com/orchestrd/orchestrd/platform/proc/proctree"
)

// This file enforces a lane's max_memory_bytes and max_cpu_seconds on each
// job: with each heartbeat of a runner holding jobs, the daemon measures
// each job's process tree itself (JobUsageReader; never the runner's
// word), and a job over either limit is stopped the way a cancel stops it
// (SIGTERM, the kill grace, SIGKILL) and ends failed with memory_exceeded
// or cpu_exceeded. Lanes set no cgroup memory or CPU limit on jobs, so the
// measurement is the only enforcement.

// JobUsage is what a job's process tree uses now.
type JobUsage struct {
	RSSBytes   uint64
	CPUSeconds float64
}

// JobUsageReader reads what each job of a runner process uses now, by job
// id. Jobs it cannot see are left out.
type JobUsageReader interface {
	RunnerJobs(runnerPid int) map[string]JobUsage
}

// procJobUsage reads /proc: a job's tree is the runner's child started
// with ORCHESTRD_JOB_ID naming it, and every descendant of it (one that
// daemonised out of it is not counted).
type procJobUsage struct{}

func (procJobUsage) RunnerJobs(runnerPid int) map[string]JobUsage {
	out := map[string]JobUsage{}
	for id, roots := range proctree.ChildrenByEnv(runnerPid, runner.EnvJobID) {
		u := proctree.TreeUsage(roots...)
		out[id] = JobUsage{RSSBytes: u.RSSBytes, CPUSeconds: float64(u.CPUTicks) / proctree.UserHZ}
	}
	return out
}

// jobsSampled: the usage of a runner's jobs, measured for its gen-th
// incarnation.
type jobsSampled struct {
	gen   int
	usage map[string]JobUsage
}

// jobOverLimit (to a job actor): its tree was measured over a limit.
type jobOverLimit struct{ e JobLimitExceeded }

// limitsJobs reports whether the lane bounds its jobs' usage.
func (l LaneConfig) limitsJobs() bool { return l.MaxMemoryBytes > 0 || l.MaxCPUSeconds > 0 }

// overLimit returns the event for usage over one of the lane's limits
// (memory first), and false if it is within both.
func (l LaneConfig) overLimit(u JobUsage) (JobLimitExceeded, bool) {
	if l.MaxMemoryBytes > 0 && u.RSSBytes > l.MaxMemoryBytes {
		return JobLimitExceeded{Limit: "memory", Measured: float64(u.RSSBytes), Max: float64(l.MaxMemoryBytes)}, true
	}
	if l.MaxCPUSeconds > 0 && u.CPUSeconds > l.MaxCPUSeconds {
		return JobLimitExceeded{Limit: "cpu", Measured: u.CPUSeconds, Max: l.MaxCPUSeconds}, true
	}
	return JobLimitExceeded{}, false
}

// limitErr is a job's error for a limit of JobLimitExceeded.
func limitErr(limit string) string {
	if limit == "memory" {
		return api.ErrMemoryExceeded
	}
	return api.ErrCPUExceeded
}

// sampleJobs measures the runner's jobs off the actor's goroutine, one
// measurement at a time.
func (r *runnerActor) sampleJobs(c *actors.Context) {
	if r.sampling || r.pid <= 0 || len(r.jobs) == 0 {
		return
	}
	r.sampling = true
	pid, gen, self, sys, rd := r.pid, r.gen, c.Self(), c.System(), r.sh.limits
	go func() { sys.Send(self, jobsSampled{gen: gen, usage: rd.RunnerJobs(pid)}) }()
}

// jobsSampled tells each job measured over a limit, once.
func (r *runnerActor) jobsSampled(c *actors.Context, m jobsSampled) {
	r.sampling = false
	if m.gen != r.gen || r.down {
		return
	}
	for id := range r.overJobs {
		if _, ok := r.jobs[id]; !ok {
			delete(r.overJobs, id)
		}
	}
	for id, u := range m.usage {
		j, ok := r.jobs[id]
		if !ok || r.overJobs[id] {
			continue
		}
		if e, over := r.cfg.overLimit(u); over {
			if r.overJobs == nil {
				r.overJobs = map[string]bool{}
			}
			r.overJobs[id] = true
			e.JobID, e.Lane, e.RunnerID = id, r.laneN, r.id
			c.Send(j, jobOverLimit{e: e})
		}
	}
}

// overLimit stops a running job measured over a limit of its lane: the
// event, then a cancel on its runner (SIGTERM, its kill grace, SIGKILL);
// its end is recorded failed with memory_exceeded or cpu_exceeded.
func (j *jobActor) overLimit(c *actors.Context, m jobOverLimit) {
	if j.rec.State.Terminal() || j.limitErr != "" {
		return
	}
	j.limitErr = limitErr(m.e.Limit)
	j.sh.bus.Emit(m.e)
	j.sh.log.Info().Str("job_id", j.rec.ID).Str("lane", j.rec.Lane).Str("limit", m.e.Limit).
		Str("measured", fmt.Sprint(m.e.Measured)).Msg("job over its lane's limit: stopping it")
	j.cancelOnRunner(c)
}
