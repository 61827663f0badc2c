package lanes

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/platform/proc/proctree"
	"github.com/orchestrd/orchestrd/platform/proc/usage"
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
// uid) through platform/proc/usage (gopsutil), the measurer agent tasks
// share: this file says which processes are the job's. The runner stays lean (no gopsutil in its binary)
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

// usageTracker is a job's samples so far. One sample at a time uses it
// (the job actor starts the next once the last is done), on its own
// goroutine; the actor only sees the api.Usage each sample returns.
type usageTracker struct {
	runnerPid int
	root      wire.JobStarted
	found     bool // the root was found by a sample (and is pinned by the measurer since)
	m         *usage.Tracker
}

func newUsageTracker(runnerPid int, root wire.JobStarted) *usageTracker {
	return &usageTracker{runnerPid: runnerPid, root: root, m: usage.NewTracker()}
}

// treeNow is what a sample found the job's tree using at that moment, for
// its lane's limits.
type treeNow = usage.Now

// sample measures the job's tree once and returns the sum so far and what
// the tree uses now (usage.Tracker.Sample: the processes it saw are
// pinned, so the job's orphans stay counted).
func (t *usageTracker) sample() (api.Usage, treeNow) {
	var roots []int
	if !t.found {
		if pid, ok := findRoot(t.runnerPid, t.root); ok {
			t.found = true
			roots = append(roots, pid)
		}
	}
	if t.root.Cgroup != "" {
		// Every process in the job's own cgroup is the job's, however it
		// left the root's tree (and before any sample saw it).
		for _, f := range bytes.Fields(appendCgroupProcs(nil, t.root.Cgroup)) {
			if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
				roots = append(roots, pid)
			}
		}
	}
	return t.m.Sample(roots)
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
