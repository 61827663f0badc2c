package executors

import (
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc/usage"
)

// What an agent task costs the machine: while a task runs, its actor
// samples the process tree of the executor running it (the executor's pid
// and its descendants: the agent CLI it starts for the task, the tools
// that agent runs) every usageSampler.every (the daemon's [daemon]
// usage_sample_interval), with platform/proc/usage, the measurer the
// lanes domain uses for jobs. An executor serves one task at a time but
// lives across many: the tracker counts from the task's start (the
// executor itself from what it had used as the task was handed to it, a
// process older than the task from its first sample) and the record says
// so (api.UsageScopeExecutor). Its end takes a last
// sample (on a goroutine, as every sample; the record waits
// finalSampleWait for it at most), so the record holds the agent's CPU up
// to its end: each process's reaped children's CPU counts (cutime,
// cstime), so an agent the executor reaped after the last periodic
// sample is counted whole. A task whose last sample did not come in time
// keeps the one before; one with none says so (Samples 0). Every figure
// comes from procfs.

// firstUsageSample: a task's first sample, unless usage_sample_interval is
// shorter.
var firstUsageSample = 100 * time.Millisecond

// finalSampleWait bounds how long an ended task's record waits for its
// last sample.
var finalSampleWait = 250 * time.Millisecond

// maxUsageSamplers bounds the samples of tasks taken at once, whatever the
// number of running tasks: a sample that finds no place free is skipped,
// not queued.
const maxUsageSamplers = 2

// usageSampler is the manager's: how often to sample, and the places.
type usageSampler struct {
	every time.Duration
	slots chan struct{}
}

func newUsageSampler(every time.Duration) usageSampler {
	return usageSampler{every: max(every, 0), slots: make(chan struct{}, maxUsageSamplers)}
}

// Messages of a task actor.
type (
	// sampleTask: time to sample the executor's tree.
	sampleTask struct{}
	// taskSampled: a sample is done; u is the sum so far.
	taskSampled struct{ u api.Usage }
	// finalSampleDue: the ended task's last sample is late (or done).
	finalSampleDue struct{}
)

// startUsage starts sampling the tree of the executor at pid that now runs
// the task, if the daemon samples.
func (t *taskActor) startUsage(c *actors.Context, pid int) {
	every := t.ps.m.usage.every
	if every <= 0 || pid <= 0 {
		return
	}
	t.usageT, t.usagePid = usage.NewTrackerSince(), pid
	// The executor's baseline now, before it has the task: what an agent
	// it starts and reaps before the first sample used is then counted.
	// One process's /proc files, read here (not on a goroutine) so that
	// it is taken before the task is sent.
	t.usageT.Baseline(pid)
	t.sampleTimer = c.After(min(every, firstUsageSample), sampleTask{})
}

// sampleTask starts a sample on a goroutine when a place is free (never
// inside Receive: /proc is read there), and the next one's timer.
func (t *taskActor) sampleTask(c *actors.Context) {
	if t.ended || t.usageT == nil {
		return
	}
	t.sampleTimer = c.After(t.ps.m.usage.every, sampleTask{})
	if t.sampling {
		return // the last one still runs
	}
	slots := t.ps.m.usage.slots
	select {
	case slots <- struct{}{}:
	default:
		return // as many samples as allowed are under way: this one is skipped
	}
	t.sampling = true
	tr, pid, self, sys := t.usageT, t.usagePid, c.Self(), c.System()
	go func() {
		u, _ := tr.Sample([]int{pid})
		<-slots
		sys.Send(self, taskSampled{u: u})
	}()
}

// taskSampled keeps a sample's sum in the record (the live one too). At
// the task's end: a periodic sample under way then is followed by the
// last; the last finishes the task.
func (t *taskActor) taskSampled(c *actors.Context, m taskSampled) {
	wasSampling := t.sampling
	t.sampling = false
	if t.finished {
		return // too late: its record keeps the sample before
	}
	u := m.u
	u.Scope = api.UsageScopeExecutor
	t.rec.Usage = &u
	if !t.ended {
		t.ps.m.sampled(t.rec.ID, u)
		return
	}
	if wasSampling && t.lastPending {
		t.lastPending = false
		t.startLast(c)
		return
	}
	t.finish(c)
}

// finalSample starts the ended task's last sample (after the one under
// way, if any) and the bound on the wait for it; false if the task is
// not sampled.
func (t *taskActor) finalSample(c *actors.Context) bool {
	if t.sampleTimer != nil {
		t.sampleTimer()
		t.sampleTimer = nil
	}
	if t.usageT == nil {
		return false
	}
	c.After(finalSampleWait, finalSampleDue{})
	if t.sampling {
		t.lastPending = true
		return true
	}
	t.startLast(c)
	return true
}

// startLast samples the tree once more on a goroutine. It waits for a
// place (a last sample is not skipped; finalSampleWait bounds the
// record's wait, not the sample).
func (t *taskActor) startLast(c *actors.Context) {
	t.sampling = true
	slots := t.ps.m.usage.slots
	tr, pid, self, sys := t.usageT, t.usagePid, c.Self(), c.System()
	go func() {
		slots <- struct{}{}
		u, _ := tr.Sample([]int{pid})
		<-slots
		sys.Send(self, taskSampled{u: u})
	}()
}

// stopUsage stops sampling: the task ended. One sampled but ended before
// its first sample says so in its record: a usage of no sample (kept out
// of the record until then, so that a task the daemon's crash ended is
// not said to have ended too soon).
func (t *taskActor) stopUsage() {
	if t.sampleTimer != nil {
		t.sampleTimer()
		t.sampleTimer = nil
	}
	if t.usageT != nil && t.rec.Usage == nil {
		t.rec.Usage = &api.Usage{Source: api.UsageSourceProcfs, Scope: api.UsageScopeExecutor}
	}
}
