package lanes

import (
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// This file enforces a lane's max_memory_bytes and max_cpu_seconds on each
// job: the job's usage sampler (usage.go) measures its process tree (the
// descendants of the root its runner named: never a process's own word,
// never its environment), at least every limitSampleEvery while a limit
// applies, and a job over either limit is stopped the way a cancel stops
// it (SIGTERM, the kill grace, SIGKILL) and ends failed with
// memory_exceeded or cpu_exceeded. Lanes set no cgroup memory or CPU limit
// on jobs, so the measurement is the only enforcement.

// limitSampleEvery is how often a job of a lane with a limit is measured
// (the runners' heartbeat, which the limits were checked on before).
const limitSampleEvery = time.Second

// JobUsage is what a job's process tree uses now.
type JobUsage struct {
	RSSBytes   uint64
	CPUSeconds float64
}

// jobRoot (to a job actor): its runner started it and named its root
// process (wire.JobStarted); the lane's limits ride along.
type jobRoot struct {
	runnerPid int
	root      wire.JobStarted
	maxMem    uint64
	maxCPU    float64
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

// rooted starts sampling a running job once its runner named its root:
// every usage_sample_interval, and every limitSampleEvery at least when
// its lane limits jobs. The first sample is as its running record: a job
// that ends sooner costs none (its Result's rusage says what it used).
func (j *jobActor) rooted(c *actors.Context, m jobRoot) {
	if j.rec.State != api.StateRunning || j.usageT != nil || m.runnerPid <= 0 {
		return
	}
	j.limits = LaneConfig{MaxMemoryBytes: m.maxMem, MaxCPUSeconds: m.maxCPU}
	every := j.sh.usage.every
	if j.limits.limitsJobs() && (every <= 0 || every > limitSampleEvery) {
		every = limitSampleEvery
	}
	if every <= 0 {
		return
	}
	j.sampleEvery = every
	j.usageT = newUsageTracker(m.runnerPid, m.root)
	c.After(min(every, runningRecordDelay), sampleUsage{epoch: j.epoch})
}

// checkLimits stops the job if what its tree uses now is over a limit of
// its lane.
func (j *jobActor) checkLimits(c *actors.Context, now treeNow) {
	e, over := j.limits.overLimit(JobUsage{RSSBytes: now.RSS, CPUSeconds: now.CPU})
	if !over {
		return
	}
	e.JobID, e.Lane, e.RunnerID = j.rec.ID, j.rec.Lane, j.rec.RunnerID
	j.overLimit(c, jobOverLimit{e: e})
}

// maxRusageKiB bounds a Result's max_rss_kib (a runner's word): 16 TiB.
const maxRusageKiB = 1 << 34

// addRusage takes the runner's wait4 figures of the job's root (its
// reaped descendants included) where they are larger than the samples':
// CPU user and system, peak RSS (the largest one process held); and the
// CPU its cgroup counted, where the runner read it (source cgroup for
// CPU). A job that ended before its first sample has only these.
func (j *jobActor) addRusage(ru *wire.JobRusage) {
	u := j.usage
	if !j.usageSeen {
		u = api.Usage{Source: api.UsageSourceProcfs}
	}
	u.UserSeconds = max(u.UserSeconds, float64(ru.UserMicros)/1e6)
	u.SystemSeconds = max(u.SystemSeconds, float64(ru.SystemMicros)/1e6)
	u.PeakRSSBytes = max(u.PeakRSSBytes, min(ru.MaxRSSKiB, maxRusageKiB)*1024)
	if ru.CgroupCPU {
		// Its cgroup counted every process of it, those nobody waited for
		// and those no sample saw included.
		u.UserSeconds, u.SystemSeconds = float64(ru.CgroupUserMicros)/1e6, float64(ru.CgroupSystemMicros)/1e6
		u.Source, u.CgroupFigures = api.UsageSourceCgroup, api.UsageCgroupCPU
	}
	j.usage, j.usageSeen = u, true
}
