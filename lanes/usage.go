package lanes

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"time"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/platform/proc/proctree"
	"github.com/orchestrd/orchestrd/wire"
)

// What a job costs the machine: the daemon samples each running job's
// process tree every usageSampler.every (the [daemon] usage_sample_interval;
// every limitSampleEvery at least while its lane limits jobs, jobusage.go)
// and its terminal record keeps the sum (api.Usage), with the runner's
// wait4 figures of the root at its end where they are larger (a job
// shorter than a sample interval is measured whole that way).
//
// The daemon reads /proc itself (it runs as its runners' and their jobs'
// uid) with gopsutil; the runner stays lean (no gopsutil in its binary)
// and says only which process is the job's root: JobStarted, its pid in
// the runner's pid namespace and its start time (wire.CapJobUsage). A
// job's tree is that root's descendants; every process a sample finds in
// it is pinned by pid and start time and stays the job's after it is
// re-parented to the runner (a double fork), so what the job leaves
// behind is counted, and a reused pid is not taken for it. A process's
// environment (ORCHESTRD_JOB_ID) is never looked at: another job's orphan
// that names this job is a stranger here. Where the job has a cgroup of
// its own (JobStarted.Cgroup, taken only directly below its runner's),
// every process in it is the job's too, however early it left the tree.
// A runner that does not announce
// CapJobUsage (Loopr's) names no root: its jobs are not sampled and the
// lane's limits do not apply to them.
//
// The samples come from procfs (api.UsageSourceProcfs). Where a job has
// a cgroup of its own (a runner started with --cgroup), the runner reads
// its cpu.stat at the job's start and end (a pooled cgroup's counters
// carry over from job to job, so the job's CPU is the difference) and
// sends it with the Result: the record's CPU is then the cgroup's
// (api.UsageSourceCgroup, CgroupFigures "cpu"). memory.peak and io.stat
// would need the memory and io controllers, which are not enabled for
// job cgroups; memory and I/O stay procfs's.

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

// usageSampled: a sample of the epoch-th dispatch is done; u is the sum
// so far, now what the tree uses at this sample.
type usageSampled struct {
	epoch int
	u     api.Usage
	now   treeNow
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
	root      wire.JobStarted
	found     bool                    // the root was found (and pinned) by a sample
	pinned    map[procKey]struct{}    // the job's processes alive at the last sample
	seen      map[procKey]procFigures // every process of the job a sample saw: its last figures
	u         api.Usage
}

func newUsageTracker(runnerPid int, root wire.JobStarted) *usageTracker {
	return &usageTracker{runnerPid: runnerPid, root: root, pinned: map[procKey]struct{}{},
		seen: map[procKey]procFigures{}, u: api.Usage{Source: api.UsageSourceProcfs}}
}

// treeNow is what a sample found the job's tree using at that moment, for
// its lane's limits.
type treeNow struct {
	rss uint64
	// cpu is the larger of the sum so far and the CPU time of the
	// processes alive now with that of the children they reaped (which
	// counts children that lived and died between two samples).
	cpu float64
}

// sample measures the job's tree once and returns the sum so far and what
// the tree uses now. A process that exits (or whose pid is taken by
// another) while it is read keeps the figures of its last whole sample.
func (t *usageTracker) sample() (api.Usage, treeNow) {
	ctx := context.Background()
	type want struct {
		pid int
		key procKey // a pinned process: still it, or its pid names another now
	}
	var (
		buf     []byte
		queue   []want
		rss     uint64
		threads int
		ticks   uint64
	)
	if !t.found {
		if pid, ok := findRoot(t.runnerPid, t.root); ok {
			t.found = true
			queue = append(queue, want{pid: pid})
		}
	}
	for k := range t.pinned {
		queue = append(queue, want{pid: int(k.pid), key: k})
	}
	if t.root.Cgroup != "" {
		// Every process in the job's own cgroup is the job's, however it
		// left the root's tree (and before any sample saw it).
		buf = appendCgroupProcs(buf[:0], t.root.Cgroup)
		for _, f := range bytes.Fields(buf) {
			if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
				queue = append(queue, want{pid: pid})
			}
		}
	}
	alive := make(map[procKey]struct{}, len(t.pinned))
	// The root, the pinned processes and their descendants, at most
	// proctree.MaxProcs of them.
	visited := map[int]struct{}{}
	for n := 0; len(queue) > 0 && n < proctree.MaxProcs; {
		w := queue[0]
		queue = queue[1:]
		if _, dup := visited[w.pid]; dup {
			continue
		}
		visited[w.pid] = struct{}{}
		n++
		k, fig, r, th, ok := measure(ctx, w.pid)
		if !ok || (w.key != procKey{} && k != w.key) {
			continue // gone, or not ours to read: its last figures stand
		}
		alive[k] = struct{}{}
		t.seen[k] = fig
		rss += r
		threads += th
		ticks += proctree.CPUTicks(w.pid)
		buf = proctree.Children(buf[:0], w.pid)
		for _, f := range bytes.Fields(buf) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				queue = append(queue, want{pid: c})
			}
		}
	}
	t.pinned = alive // the gone are forgotten: their pids may name others next
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
	return t.u, treeNow{rss: rss, cpu: max(sum.user+sum.sys, float64(ticks)/proctree.UserHZ)}
}

// appendCgroupProcs appends the pids listed in dir's cgroup.procs (as the
// daemon's pid namespace numbers them) to dst; nothing if it cannot be
// read (the job's cgroup is gone once the job is).
func appendCgroupProcs(dst []byte, dir string) []byte {
	b, err := os.ReadFile(dir + "/cgroup.procs")
	if err != nil {
		return dst
	}
	return append(dst, b...)
}

// findRoot finds the job's root among the runner's children: the one
// whose pid in the runner's pid namespace and start time are what the
// runner said (JobStarted), and returns its pid as the daemon sees it.
// False if it is not (or no longer) there.
func findRoot(runnerPid int, root wire.JobStarted) (int, bool) {
	// The runner's pid namespace is the innermost one it sees itself in
	// (the last of its NSpid); its children's pids there are at the same
	// depth. A deeper namespace of a job's own is not looked at.
	self, ok := proctree.NSPids(runnerPid)
	if !ok || len(self) == 0 {
		return 0, false
	}
	depth := len(self) - 1
	for _, f := range bytes.Fields(proctree.Children(nil, runnerPid)) {
		pid, err := strconv.Atoi(string(f))
		if err != nil || pid <= 0 {
			continue
		}
		ns, ok := proctree.NSPids(pid)
		if !ok || len(ns) <= depth || ns[depth] != root.Pid {
			continue
		}
		if st, ok := proc.ReadStat(pid); ok && st.PPid == runnerPid && st.StartTime == root.StartTicks {
			return pid, true
		}
	}
	return 0, false
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
