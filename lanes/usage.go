package lanes

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes/runner"
	"github.com/orchestrd/orchestrd/platform/proc/proctree"
	"github.com/orchestrd/orchestrd/platform/proc/usage"
)

// What a job costs the machine: the daemon samples each running job's
// process tree every usageSampler.every (the [daemon] usage_sample_interval)
// and its terminal record keeps the sum (api.Usage).
//
// The daemon reads /proc itself (it runs as its runners' and their jobs'
// uid) with gopsutil; the runner sends nothing and stays lean (no gopsutil
// in its binary). The daemon knows the runner's pid, not the job's: a job's
// processes are the runner's children whose environment names the job
// (runner.EnvJobID, set at their exec) and their descendants. A child once
// found to be the job's is remembered by pid and start time, so a job that
// changes its environment stays found and a reused pid is not taken for
// it.
//
// Every figure comes from procfs (api.UsageSourceProcfs). A job with a
// cgroup of its own (a runner started with --cgroup) would better be read
// from it (cpu.stat, memory.peak, io.stat: children that died between
// samples counted too), but the runner reuses its jobs' cgroups (a pool:
// their counters carry over from job to job) and does not tell the daemon
// which one a job has; that source is not read yet.

// maxUsageSamplers bounds the samples taken at once, whatever the number
// of running jobs: a sample waits for a place (and is skipped, not
// queued, when none is free within its interval).
const maxUsageSamplers = 2

// usageSampler is the daemon's: how often to sample, and the places.
type usageSampler struct {
	every time.Duration
	slots chan struct{}
}

func newUsageSampler(every time.Duration) usageSampler {
	return usageSampler{every: every, slots: make(chan struct{}, maxUsageSamplers)}
}

// sampleUsage (to a job actor): time to sample its tree, if the epoch-th
// dispatch still runs.
type sampleUsage struct{ epoch int }

// usageSampled: a sample of the epoch-th dispatch is done; u is the sum so far.
type usageSampled struct {
	epoch int
	u     api.Usage
}

// procKey names a process across pid reuse.
type procKey struct {
	pid   int32
	start int64 // ms since the epoch (gopsutil's CreateTime)
}

// usageTracker is a job's samples so far. One sample at a time uses it
// (the job actor starts the next once the last is done), on its own
// goroutine; the actor only sees the api.Usage each sample returns.
// This file finds the job's roots; platform/proc/usage measures their trees.
type usageTracker struct {
	runnerPid int
	jobID     string
	ours      map[procKey]bool // the runner's children looked at: the job's or not
	m         *usage.Tracker
}

func newUsageTracker(runnerPid int, jobID string) *usageTracker {
	return &usageTracker{runnerPid: runnerPid, jobID: jobID, ours: map[procKey]bool{}, m: usage.NewTracker()}
}

// sample measures the job's tree once and returns the sum so far (see
// usage.Tracker.Sample).
func (t *usageTracker) sample() api.Usage {
	ctx := context.Background()
	var roots []int
	// The job's roots: the runner's children that are the job's. Those
	// not listed any more are forgotten: their pids may name others next.
	present := make(map[procKey]struct{}, len(t.ours))
	for _, f := range bytes.Fields(proctree.Children(nil, t.runnerPid)) {
		pid, err := strconv.Atoi(string(f))
		if err != nil || pid <= 0 {
			continue
		}
		p, err := process.NewProcessWithContext(ctx, int32(pid))
		if err != nil {
			continue
		}
		start, err := p.CreateTimeWithContext(ctx)
		if err != nil {
			continue
		}
		k := procKey{int32(pid), start}
		present[k] = struct{}{}
		ours, known := t.ours[k]
		if !known {
			ours = t.isJobs(ctx, p)
			t.ours[k] = ours
		}
		if ours {
			roots = append(roots, pid)
		}
	}
	for k := range t.ours {
		if _, ok := present[k]; !ok {
			delete(t.ours, k)
		}
	}
	return t.m.Sample(roots)
}

// isJobs reports whether p, a child of the runner, is the job's: its
// environment (as it was exec'd) names the job. The value is compared,
// never kept or logged.
func (t *usageTracker) isJobs(ctx context.Context, p *process.Process) bool {
	env, err := p.EnvironWithContext(ctx)
	if err != nil {
		return false
	}
	want := runner.EnvJobID + "=" + t.jobID
	for _, kv := range env {
		if kv == want {
			return true
		}
	}
	return false
}
