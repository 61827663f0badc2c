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
// lives across many: the tracker counts from the task's start (a process
// older than the task, the executor itself, from its first sample) and
// the record says so (api.UsageScopeExecutor). The usage is as of the last
// sample; a task that ends before its first sample (firstUsageSample in)
// cost nothing to measure, and its record says that it has none
// (Samples 0). Every figure comes from procfs.

// firstUsageSample: a task's first sample, unless usage_sample_interval is
// shorter.
var firstUsageSample = 100 * time.Millisecond

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
)

// startUsage starts sampling the tree of the executor at pid that now runs
// the task, if the daemon samples.
func (t *taskActor) startUsage(c *actors.Context, pid int) {
	every := t.ps.m.usage.every
	if every <= 0 || pid <= 0 {
		return
	}
	t.usageT, t.usagePid = usage.NewTrackerSince(), pid
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

// taskSampled keeps a sample's sum in the record (the live one too).
func (t *taskActor) taskSampled(m taskSampled) {
	t.sampling = false
	if t.ended {
		return // its end keeps the last sample before it
	}
	u := m.u
	u.Scope = api.UsageScopeExecutor
	t.rec.Usage = &u
	t.ps.m.sampled(t.rec.ID, u)
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
