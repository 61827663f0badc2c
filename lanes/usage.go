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
	// A process's start time is its boot-relative start plus the boot
	// time, read from /proc/stat each time unless cached: the boot time
	// does not change, and /proc/stat is the dearest file a sample reads.
	process.EnableBootTimeCache(true)
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

type procFigures struct {
	user, sys   float64
	read, write uint64
}

// usageTracker is a job's samples so far. One sample at a time uses it
// (the job actor starts the next once the last is done), on its own
// goroutine; the actor only sees the api.Usage each sample returns.
type usageTracker struct {
	runnerPid int
	jobID     string
	ours      map[procKey]bool        // the runner's children looked at: the job's or not
	seen      map[procKey]procFigures // every process of the job a sample saw: its last figures
	u         api.Usage
}

func newUsageTracker(runnerPid int, jobID string) *usageTracker {
	return &usageTracker{runnerPid: runnerPid, jobID: jobID, ours: map[procKey]bool{},
		seen: map[procKey]procFigures{}, u: api.Usage{Source: api.UsageSourceProcfs}}
}

// sample measures the job's tree once and returns the sum so far. A
// process that exits (or whose pid is taken by another) while it is read
// keeps the figures of its last whole sample.
func (t *usageTracker) sample() api.Usage {
	ctx := context.Background()
	var (
		buf     []byte
		queue   []int
		rss     uint64
		threads int
	)
	// The job's roots: the runner's children that are the job's. Those
	// not listed any more are forgotten: their pids may name others next.
	present := make(map[procKey]struct{}, len(t.ours))
	buf = proctree.Children(buf[:0], t.runnerPid)
	for _, f := range bytes.Fields(buf) {
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
			queue = append(queue, pid)
		}
	}
	for k := range t.ours {
		if _, ok := present[k]; !ok {
			delete(t.ours, k)
		}
	}
	// The roots and their descendants, at most proctree.MaxProcs of them.
	visited := map[int]struct{}{}
	for n := 0; len(queue) > 0 && n < proctree.MaxProcs; {
		pid := queue[0]
		queue = queue[1:]
		if _, dup := visited[pid]; dup {
			continue
		}
		visited[pid] = struct{}{}
		n++
		k, fig, r, th, ok := measure(ctx, pid)
		if !ok {
			continue // gone, or not ours to read: its last figures stand
		}
		t.seen[k] = fig
		rss += r
		threads += th
		buf = proctree.Children(buf[:0], pid)
		for _, f := range bytes.Fields(buf) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				queue = append(queue, c)
			}
		}
	}
	var sum procFigures
	for _, f := range t.seen {
		sum.user += f.user
		sum.sys += f.sys
		sum.read += f.read
		sum.write += f.write
	}
	t.u.UserSeconds, t.u.SystemSeconds, t.u.ReadBytes, t.u.WriteBytes = sum.user, sum.sys, sum.read, sum.write
	t.u.PeakRSSBytes = max(t.u.PeakRSSBytes, rss)
	t.u.PeakThreads = max(t.u.PeakThreads, threads)
	t.u.Samples++
	return t.u
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

// measure reads one process's figures; ok is false if it is gone (or
// became another process) before they were all read.
func measure(ctx context.Context, pid int) (k procKey, f procFigures, rss uint64, threads int, ok bool) {
	p, err := process.NewProcessWithContext(ctx, int32(pid))
	if err != nil {
		return k, f, 0, 0, false
	}
	start, err := p.CreateTimeWithContext(ctx)
	if err != nil {
		return k, f, 0, 0, false
	}
	k = procKey{int32(pid), start}
	ts, err := p.TimesWithContext(ctx)
	if err != nil {
		return k, f, 0, 0, false
	}
	mem, err := p.MemoryInfoWithContext(ctx)
	if err != nil {
		return k, f, 0, 0, false
	}
	th, err := p.NumThreadsWithContext(ctx)
	if err != nil {
		return k, f, 0, 0, false
	}
	f.user, f.sys, rss, threads = ts.User, ts.System, mem.RSS, int(th)
	if io, err := p.IOCountersWithContext(ctx); err == nil {
		f.read, f.write = io.ReadBytes, io.WriteBytes
	}
	// Still the same process: a pid reused while it was read would mix
	// two processes' figures.
	again, err := process.NewProcessWithContext(ctx, int32(pid)) // CreateTime is cached per Process
	if err != nil {
		return k, f, 0, 0, false
	}
	if st, err := again.CreateTimeWithContext(ctx); err != nil || st != start {
		return k, f, 0, 0, false
	}
	return k, f, rss, threads, true
}
