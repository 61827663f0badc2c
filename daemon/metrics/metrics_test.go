package metrics

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/clanker"
	"github.com/orchestrd/orchestrd/daemon/control"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/fleet"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/loops"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// weird is text a job, an agent or a client could write: it must never
// reach a label.
const weird = "évil\"} 1\n# TYPE x counter\nx{a=\"b\"} 9 \x00\u202e/../../etc/passwd"

func newBus(t *testing.T) *eventlog.Bus {
	t.Helper()
	bus, err := eventlog.Open(eventlog.Options{Path: t.TempDir() + "/events.ndjson"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	return bus
}

func newMetrics(t *testing.T, bus *eventlog.Bus) *Metrics {
	t.Helper()
	m := New(Options{Lanes: []string{"net", "no-net"}, Pools: []string{"claude"}, Version: "1.2.3"})
	if bus != nil {
		t.Cleanup(m.Subscribe(bus))
	}
	return m
}

// exposition is what GET /metrics answers, as text.
func exposition(t *testing.T, m *Metrics) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "/metrics", nil)
	rec := &recorder{h: http.Header{}}
	m.Handler().ServeHTTP(rec, req)
	if rec.code != 0 && rec.code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.code, rec.b.String())
	}
	return rec.b.String()
}

type recorder struct {
	h    http.Header
	code int
	b    strings.Builder
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) WriteHeader(c int)           { r.code = c }
func (r *recorder) Write(p []byte) (int, error) { return r.b.Write(p) }

// Counters come from the bus's events: each kind counted by its lane,
// pool and state; an unknown lane or pool is not counted; a value the
// code did not choose is "other"; nothing an event carries besides those
// reaches a label.
func TestCountersFromEvents(t *testing.T) {
	bus := newBus(t)
	m := newMetrics(t, bus)
	code := func(c int32) *int32 { return &c }
	for range 3 {
		bus.Emit(lanes.JobQueued{JobID: "j-" + weird, Lane: "net", Queued: 1})
	}
	bus.Emit(lanes.JobQueued{JobID: "j-x", Lane: "no-such-lane"})
	bus.Emit(lanes.JobRejected{Lane: "net", Reason: "queue_full"})
	bus.Emit(lanes.JobFinished{JobID: "j-1" + weird, Lane: "net", State: "succeeded", DurationMs: 1500, ExitCode: code(0),
		Error: weird, Signal: weird, Record: api.JobRecord{ID: "j-1", Command: weird, Output: weird}})
	bus.Emit(lanes.JobFinished{JobID: "j-2", Lane: "net", State: "failed", DurationMs: 20, Error: weird,
		Record: api.JobRecord{ID: "j-2", Usage: &api.Usage{Source: api.UsageSourceProcfs, UserSeconds: 1.5, SystemSeconds: 0.25, PeakRSSBytes: 48 << 20}}})
	bus.Emit(lanes.JobFinished{JobID: "j-3", Lane: "no-net", State: weird, DurationMs: 1})
	bus.Emit(lanes.JobFinished{JobID: "j-4", Lane: weird, State: "failed"})
	bus.Emit(lanes.JobOrphaned{JobID: "j-5", Lane: "net", RunnerID: weird, Reason: "runner_lost"})
	bus.Emit(lanes.RunnerRestartScheduled{Lane: "net", RunnerID: "net-0", Reason: "killed_memory_limit", Policy: "crash_loop"})
	bus.Emit(lanes.RunnerRestartScheduled{Lane: "net", RunnerID: "net-0", Reason: weird})
	bus.Emit(lanes.RunnerKilled{Lane: "no-net", Reason: "runner_unresponsive", Detail: weird})
	bus.Emit(lanes.LaneDegraded{Lane: "net", RestartsInWindow: 11})
	bus.Emit(lanes.OrphanKilled{Pid: 9, JobID: weird, Command: weird, Reason: "job_ended"})
	bus.Emit(approvals.ApprovalRequested{ID: "a-1", Source: api.SourceReachout, ToolName: weird, Cwd: weird})
	bus.Emit(approvals.ApprovalRequested{ID: "a-2", Source: weird})
	bus.Emit(approvals.ApprovalAutoResolved{ID: "a-3", Rule: weird, Decision: "Allow", ToolName: weird})
	bus.Emit(executors.TaskFinished{TaskID: weird, Executor: "claude", State: api.TaskCompleted, MessageCount: 4,
		Usage: &api.Usage{Source: api.UsageSourceProcfs, Scope: api.UsageScopeExecutor, UserSeconds: 2, SystemSeconds: 0.5,
			PeakRSSBytes: 200 << 20, Samples: 3}})
	// Ended before its first sample: not counted.
	bus.Emit(executors.TaskFinished{TaskID: "t-3", Executor: "claude", State: api.TaskCompleted,
		Usage: &api.Usage{Source: api.UsageSourceProcfs, Scope: api.UsageScopeExecutor}})
	bus.Emit(executors.TaskFinished{TaskID: "t-2", Executor: weird, State: api.TaskFailed})
	bus.Emit(executors.ExecutorPaused{Pool: "claude", Executor: "claude-1", Pending: 3})
	bus.Emit(executors.ExecutorRestartScheduled{Pool: "claude", Policy: "crash_loop"})
	bus.Emit(loops.LoopIterationEnded{ID: weird, Iteration: 1, Status: "passed", Passed: true})
	bus.Emit(loops.LoopIterationEnded{ID: "l-2", Iteration: 1, Status: "failed"})
	bus.Emit(clanker.Paused{Repo: weird, Pod: weird, Message: weird})
	bus.Emit(clanker.SpoolDeadLettered{Repo: weird})
	bus.Emit(control.SubscriberOverflowed{ConnID: "c1", Policy: control.OverflowDropOldest, Dropped: 40})
	bus.Emit(control.SubscriberOverflowed{ConnID: "c2", Policy: control.OverflowDisconnect})
	bus.Emit(fleet.ClusterNodeLost{Node: weird, Incarnation: weird, By: "a", Reason: "heartbeat_expired", Jobs: []string{weird}})
	bus.Emit(fleet.ClusterNodeLost{Node: "b", By: "a", Reason: weird})
	// What the metrics never subscribe to is not counted (and costs nothing).
	bus.Emit(lanes.JobOutput{JobID: "j-1", Stream: "stdout", Data: weird})

	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.jobsSubmitted.vec.WithLabelValues("net")), 3, "submitted net"},
		{testutil.ToFloat64(m.jobsSubmitted.vec.WithLabelValues("no-net")), 0, "submitted no-net"},
		{testutil.ToFloat64(m.jobsRejected.vec.WithLabelValues("net", "queue_full")), 1, "rejected"},
		{testutil.ToFloat64(m.jobsFinished.vec.WithLabelValues("net", "succeeded")), 1, "finished net succeeded"},
		{testutil.ToFloat64(m.jobsFinished.vec.WithLabelValues("net", "failed")), 1, "finished net failed"},
		{testutil.ToFloat64(m.jobsFinished.vec.WithLabelValues("no-net", "other")), 1, "finished no-net other"},
		{testutil.ToFloat64(m.jobsOrphaned.vec.WithLabelValues("net", "runner_lost")), 1, "orphaned"},
		{testutil.ToFloat64(m.runnerRestarts.vec.WithLabelValues("net", "killed_memory_limit")), 1, "restart"},
		{testutil.ToFloat64(m.runnerRestarts.vec.WithLabelValues("net", "other")), 1, "restart other"},
		{testutil.ToFloat64(m.runnersKilled.vec.WithLabelValues("no-net", "runner_unresponsive")), 1, "killed"},
		{testutil.ToFloat64(m.laneDegradations.vec.WithLabelValues("net")), 1, "degraded"},
		{testutil.ToFloat64(m.orphansKilled.vec.WithLabelValues("job_ended")), 1, "orphan killed"},
		{testutil.ToFloat64(m.approvalsRequested.vec.WithLabelValues("reachout")), 1, "approval reachout"},
		{testutil.ToFloat64(m.approvalsRequested.vec.WithLabelValues("other")), 1, "approval other"},
		{testutil.ToFloat64(m.approvalsAuto.vec.WithLabelValues("other")), 1, "auto Allow (not an identifier)"},
		{testutil.ToFloat64(m.tasksFinished.vec.WithLabelValues("claude", "completed")), 2, "task"},
		{testutil.ToFloat64(m.executorPauses.vec.WithLabelValues("claude")), 1, "pause"},
		{testutil.ToFloat64(m.executorRestarts.vec.WithLabelValues("claude", "crash_loop")), 1, "executor restart"},
		{testutil.ToFloat64(m.loopIterations.vec.WithLabelValues("passed")), 1, "iteration passed"},
		{testutil.ToFloat64(m.loopIterations.vec.WithLabelValues("failed")), 1, "iteration failed"},
		{testutil.ToFloat64(m.clankerPauses.vec.WithLabelValues()), 1, "clanker pause"},
		{testutil.ToFloat64(m.clankerDeadLettered.vec.WithLabelValues()), 1, "dead letter"},
		{testutil.ToFloat64(m.subscriberOverflows.vec.WithLabelValues("drop_oldest")), 1, "overflow drop_oldest"},
		{testutil.ToFloat64(m.subscriberOverflows.vec.WithLabelValues("disconnect")), 1, "overflow disconnect"},
		{testutil.ToFloat64(m.subscriberDropped.vec.WithLabelValues()), 40, "dropped events"},
		{testutil.ToFloat64(m.nodesLost.vec.WithLabelValues("heartbeat_expired")), 1, "node lost"},
		{testutil.ToFloat64(m.nodesLost.vec.WithLabelValues("other")), 1, "node lost, another reason"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.jobDuration.vec); n != 2 {
		t.Errorf("job_duration_seconds has %d series, want one per lane", n)
	}
	out := exposition(t, m)
	for _, want := range []string{
		`orchestrd_job_duration_seconds_sum{lane="net"} 1.52`,
		`orchestrd_job_duration_seconds_count{lane="net"} 2`,
		`orchestrd_job_duration_seconds_bucket{lane="net",le="0.05"} 1`,
		`orchestrd_job_cpu_seconds_sum{lane="net"} 1.75`, // the job with a usage: the other is not counted
		`orchestrd_job_cpu_seconds_count{lane="net"} 1`,
		`orchestrd_job_peak_rss_bytes_bucket{lane="net",le="6.7108864e+07"} 1`,
		`orchestrd_job_peak_rss_bytes_bucket{lane="net",le="1.6777216e+07"} 0`,
		`orchestrd_job_cpu_seconds_count{lane="no-net"} 0`,                 // made at New
		`orchestrd_jobs_finished_total{lane="no-net",state="succeeded"} 0`, // made at New
		`orchestrd_build_info{version="1.2.3"} 1`,
		`orchestrd_task_cpu_seconds_sum{pool="claude"} 2.5`, // the sampled task: the one of no sample is not counted
		`orchestrd_task_cpu_seconds_count{pool="claude"} 1`,
		`orchestrd_task_peak_rss_bytes_bucket{pool="claude",le="2.68435456e+08"} 1`,
		`orchestrd_task_peak_rss_bytes_bucket{pool="claude",le="6.7108864e+07"} 0`,
		`orchestrd_cluster_nodes_lost_total{reason="restarted"} 0`, // made at New
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no line %q in\n%s", want, out)
		}
	}
	for _, bad := range []string{"évil", "passwd", "no-such-lane", "j-1", "a-1", "c1", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("%q reached the exposition", bad)
		}
	}
	if problems, err := testutil.GatherAndLint(m.Registry()); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

// A sink's Deliver is on every emitter's path: a known child's increment
// allocates nothing, and job.finished's record is never marshalled for it.
func TestDeliverAllocatesNothing(t *testing.T) {
	bus := newBus(t)
	m := newMetrics(t, nil)
	var made atomic.Int64
	rec := &eventlog.Record{Kind: "job.finished", Event: lanes.JobFinished{JobID: "j-1", Lane: "net", State: "succeeded",
		DurationMs: 12, Record: wireCounter{&made}}}
	s := sink{m}
	if n := testing.AllocsPerRun(1000, func() { s.Deliver(rec) }); n != 0 {
		t.Fatalf("Deliver of job.finished allocates %v times", n)
	}
	q := &eventlog.Record{Kind: "job.queued", Event: lanes.JobQueued{JobID: "j", Lane: "no-net"}}
	if n := testing.AllocsPerRun(1000, func() { s.Deliver(q) }); n != 0 {
		t.Fatalf("Deliver of job.queued allocates %v times", n)
	}
	if n := testing.AllocsPerRun(1000, func() { m.ObserveHTTP("GET /metrics", 200, time.Millisecond) }); n != 0 {
		t.Fatalf("ObserveHTTP allocates %v times", n)
	}
	// Subscribed alone to job.finished, the metrics cost the emitter no
	// JSON of the record: the bus makes no Wire for an EventSink.
	defer m.Subscribe(bus)()
	bus.Emit(lanes.JobFinished{JobID: "j-2", Lane: "net", State: "failed", Record: wireCounter{&made}})
	if made.Load() != 0 {
		t.Fatalf("the job's record was marshalled %d times for the metrics", made.Load())
	}
	if got := testutil.ToFloat64(m.jobsFinished.vec.WithLabelValues("net", "failed")); got != 1 {
		t.Fatalf("finished net failed %v", got)
	}
}

// wireCounter counts how often it is marshalled.
type wireCounter struct{ n *atomic.Int64 }

func (w wireCounter) MarshalJSON() ([]byte, error) { w.n.Add(1); return []byte(`{}`), nil }

// However many distinct reasons, routes or codes come, a metric's series
// stay bounded; lanes and pools stay the config's.
func TestCardinalityBounded(t *testing.T) {
	bus := newBus(t)
	m := newMetrics(t, bus)
	for i := range 5000 {
		bus.Emit(lanes.RunnerRestartScheduled{Lane: "net", Reason: fmt.Sprintf("reason_%d", i)})
		bus.Emit(lanes.JobFinished{JobID: fmt.Sprintf("j-%d", i), Lane: fmt.Sprintf("lane-%d", i), State: "failed"})
		m.ObserveHTTP(fmt.Sprintf("GET /x/%d", i), 100+i%500, time.Millisecond)
		m.ActorPanicked(fmt.Sprintf("kind_%d", i))
	}
	for _, c := range []struct {
		name string
		n    int
		max  int
	}{
		{"runner_restarts", testutil.CollectAndCount(m.runnerRestarts.vec), maxSeries + 1},
		{"jobs_finished", testutil.CollectAndCount(m.jobsFinished.vec), 2 * len(jobEndStates)},
		{"http_requests", testutil.CollectAndCount(m.httpRequests.vec), maxSeries + 1},
		{"http_request_duration", testutil.CollectAndCount(m.httpDuration.vec), maxSeries + 1},
		{"actor_panics", testutil.CollectAndCount(m.actorPanics.vec), maxSeries + 1},
	} {
		if c.n > c.max {
			t.Errorf("%s: %d series, want at most %d", c.name, c.n, c.max)
		}
	}
	if got := testutil.ToFloat64(m.runnerRestarts.vec.WithLabelValues("net", "other")); got != 5000-maxSeries {
		t.Errorf("restarts past the cap: %v, want %d", got, 5000-maxSeries)
	}
}

// fakeSources are the domains' accessors, as a test sets them.
type fakeSources struct {
	lanes     []api.LaneStatus
	pending   []api.Approval
	pools     []executors.PoolMetrics
	loops     map[api.LoopType]map[api.LoopStatus]int
	tallies   map[string]clanker.RepoTally
	sockets   []clanker.RepoSocket
	stats     state.Stats
	dropped   uint64
	conns     api.ConnMetrics
	scrapes   atomic.Int64
	slowStore bool
}

func (f *fakeSources) Lanes() []api.LaneStatus               { f.scrapes.Add(1); return f.lanes }
func (f *fakeSources) PendingApprovals() []api.Approval      { return f.pending }
func (f *fakeSources) Metrics() []executors.PoolMetrics      { return f.pools }
func (f *fakeSources) Tallies() map[string]clanker.RepoTally { return f.tallies }
func (f *fakeSources) Sockets() []clanker.RepoSocket         { return f.sockets }
func (f *fakeSources) Stats() state.Stats                    { return f.stats }
func (f *fakeSources) DroppedTotal() uint64                  { return f.dropped }
func (f *fakeSources) CountsByType() map[api.LoopType]map[api.LoopStatus]int {
	return f.loops
}

type conns struct{ c api.ConnMetrics }

func (c conns) Metrics() api.ConnMetrics { return c.c }

// The gauges are read from the sources at each scrape, every known label
// value there (zeros too), values the code did not choose as "other".
func TestGaugesFromSources(t *testing.T) {
	m := newMetrics(t, nil)
	if out := exposition(t, m); strings.Contains(out, "orchestrd_lane_queued_jobs") {
		t.Fatalf("gauges before Attach:\n%s", out)
	}
	f := &fakeSources{
		lanes: []api.LaneStatus{
			{Name: "net", QueueLimit: 100, Queued: 7, Running: 2, Degraded: true, Runners: []api.RunnerStatus{
				{ID: "net-0", State: "ready", MemoryBytes: 1000}, {ID: "net-1", State: "ready", Spare: true, MemoryBytes: 500},
				{ID: "net-2", State: "backoff"}, {ID: weird, State: weird}}},
			{Name: "no-net", Runners: []api.RunnerStatus{{State: "starting"}}},
			{Name: weird, Queued: 99},
		},
		pending: []api.Approval{{ID: "a-1", Source: "reachout", ToolName: weird}, {ID: "a-2", Source: "plan"},
			{ID: "a-3", Source: "reachout"}, {ID: "a-4", Source: weird}},
		pools: []executors.PoolMetrics{{Name: "claude", Tasks: map[api.TaskState]int{api.TaskQueued: 3, api.TaskRunning: 1, api.TaskCompleted: 1},
			Executors: map[string]int{"busy": 1, "idle": 2}, Paused: 1, Messages: 12345}, {Name: weird, Messages: 1}},
		loops:   map[api.LoopType]map[api.LoopStatus]int{api.LoopCode: {api.LoopRunning: 2, api.LoopFailed: 1}},
		tallies: map[string]clanker.RepoTally{"/r1": {Tasks: map[string]int{"queued": 2, "done": 5}, Paused: true}, "/r2": {Tasks: map[string]int{"queued": 1, weird: 1}}},
		sockets: []clanker.RepoSocket{{Path: "/r1", Socket: "/r1/s"}, {Path: "/r2", Error: weird}},
		stats:   state.Stats{Commits: 10, Writes: 30, Failed: 1, Queued: 4},
		dropped: 17,
	}
	m.Attach(Sources{Lanes: f, Approvals: f, Executors: f, Loops: f, Clanker: f, Store: f, Bus: f,
		Control: conns{api.ConnMetrics{Connections: 2, ConnectionsSeen: 9}}})
	want := `
# HELP orchestrd_lane_queued_jobs Jobs waiting in a lane's queue now (its queue depth).
# TYPE orchestrd_lane_queued_jobs gauge
orchestrd_lane_queued_jobs{lane="net"} 7
orchestrd_lane_queued_jobs{lane="no-net"} 0
# HELP orchestrd_lane_runners A lane's runners by state: starting, ready (spares too), backoff, stopping.
# TYPE orchestrd_lane_runners gauge
orchestrd_lane_runners{lane="net",state="backoff"} 1
orchestrd_lane_runners{lane="net",state="other"} 1
orchestrd_lane_runners{lane="net",state="ready"} 2
orchestrd_lane_runners{lane="net",state="starting"} 0
orchestrd_lane_runners{lane="net",state="stopping"} 0
orchestrd_lane_runners{lane="no-net",state="backoff"} 0
orchestrd_lane_runners{lane="no-net",state="ready"} 0
orchestrd_lane_runners{lane="no-net",state="starting"} 1
orchestrd_lane_runners{lane="no-net",state="stopping"} 0
# HELP orchestrd_lane_degraded 1 while a lane is over its restart intensity (degraded), else 0.
# TYPE orchestrd_lane_degraded gauge
orchestrd_lane_degraded{lane="net"} 1
orchestrd_lane_degraded{lane="no-net"} 0
# HELP orchestrd_lane_spare_runners A lane's ready runners kept idle as warm spares.
# TYPE orchestrd_lane_spare_runners gauge
orchestrd_lane_spare_runners{lane="net"} 1
orchestrd_lane_spare_runners{lane="no-net"} 0
# HELP orchestrd_lane_runner_memory_bytes The memory a lane's runners report, summed.
# TYPE orchestrd_lane_runner_memory_bytes gauge
orchestrd_lane_runner_memory_bytes{lane="net"} 1500
orchestrd_lane_runner_memory_bytes{lane="no-net"} 0
# HELP orchestrd_approvals_pending Approvals waiting for an answer now, by source.
# TYPE orchestrd_approvals_pending gauge
orchestrd_approvals_pending{source="control"} 0
orchestrd_approvals_pending{source="executor"} 0
orchestrd_approvals_pending{source="other"} 1
orchestrd_approvals_pending{source="plan"} 1
orchestrd_approvals_pending{source="reachout"} 2
# HELP orchestrd_executor_tasks A pool's live tasks by state: queued, running.
# TYPE orchestrd_executor_tasks gauge
orchestrd_executor_tasks{pool="claude",state="ending"} 1
orchestrd_executor_tasks{pool="claude",state="queued"} 3
orchestrd_executor_tasks{pool="claude",state="running"} 1
# HELP orchestrd_executors A pool's executor processes by state: starting, idle, busy, stopping.
# TYPE orchestrd_executors gauge
orchestrd_executors{pool="claude",state="busy"} 1
orchestrd_executors{pool="claude",state="idle"} 2
orchestrd_executors{pool="claude",state="starting"} 0
orchestrd_executors{pool="claude",state="stopping"} 0
# HELP orchestrd_executors_paused A pool's executors whose notifications are paused now (backpressure).
# TYPE orchestrd_executors_paused gauge
orchestrd_executors_paused{pool="claude"} 1
# HELP orchestrd_executor_messages_total report_messages a pool's executors sent, committed and published (task.message).
# TYPE orchestrd_executor_messages_total counter
orchestrd_executor_messages_total{pool="claude"} 12345
# HELP orchestrd_clanker_tasks clanker's tasks in every repo served, by status.
# TYPE orchestrd_clanker_tasks gauge
orchestrd_clanker_tasks{status="blocked"} 0
orchestrd_clanker_tasks{status="done"} 5
orchestrd_clanker_tasks{status="failed"} 0
orchestrd_clanker_tasks{status="needs_judge"} 0
orchestrd_clanker_tasks{status="other"} 1
orchestrd_clanker_tasks{status="paused"} 0
orchestrd_clanker_tasks{status="queued"} 3
orchestrd_clanker_tasks{status="rework"} 0
orchestrd_clanker_tasks{status="running"} 0
# HELP orchestrd_clanker_repos clanker repos by state: served, failed (not served: frontend.list says why).
# TYPE orchestrd_clanker_repos gauge
orchestrd_clanker_repos{state="failed"} 1
orchestrd_clanker_repos{state="served"} 1
# HELP orchestrd_clanker_repos_paused clanker repos whose fleet is paused now (usage limit).
# TYPE orchestrd_clanker_repos_paused gauge
orchestrd_clanker_repos_paused 1
# HELP orchestrd_state_commits_total Transactions the state store's writer committed.
# TYPE orchestrd_state_commits_total counter
orchestrd_state_commits_total 10
# HELP orchestrd_state_writes_queued Writes waiting for the state store's writer now.
# TYPE orchestrd_state_writes_queued gauge
orchestrd_state_writes_queued 4
# HELP orchestrd_eventlog_dropped_total Event-log lines dropped because the log's writer fell behind or a write failed.
# TYPE orchestrd_eventlog_dropped_total counter
orchestrd_eventlog_dropped_total 17
# HELP orchestrd_control_connections Control-socket connections open now.
# TYPE orchestrd_control_connections gauge
orchestrd_control_connections 2
`
	names := []string{"orchestrd_lane_queued_jobs", "orchestrd_lane_runners", "orchestrd_lane_degraded",
		"orchestrd_lane_spare_runners", "orchestrd_lane_runner_memory_bytes", "orchestrd_approvals_pending",
		"orchestrd_executor_tasks", "orchestrd_executors", "orchestrd_executors_paused", "orchestrd_executor_messages_total",
		"orchestrd_clanker_tasks", "orchestrd_clanker_repos", "orchestrd_clanker_repos_paused", "orchestrd_state_commits_total",
		"orchestrd_state_writes_queued", "orchestrd_eventlog_dropped_total", "orchestrd_control_connections"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	out := exposition(t, m)
	if !strings.Contains(out, `orchestrd_loops{status="running",type="code"} 2`+"\n") ||
		!strings.Contains(out, `orchestrd_loops{status="pending",type="plan"} 0`+"\n") {
		t.Errorf("loops by type and status:\n%s", out)
	}
	if n := strings.Count(out, "orchestrd_loops{"); n != len(api.LoopTypes)*len(api.LoopStatuses) {
		t.Errorf("%d loops series, want every type and status", n)
	}
	if strings.Contains(out, "évil") || strings.Contains(out, "passwd") {
		t.Errorf("a source's text reached the exposition:\n%s", out)
	}
	if problems, err := testutil.GatherAndLint(m.Registry()); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

// The hooks the daemon hands out: the HTTP API's requests, the store's
// commits, an approval's end, an actor's panic.
func TestObservers(t *testing.T) {
	m := newMetrics(t, nil)
	m.ObserveHTTP("GET /metrics", 200, 3*time.Millisecond)
	m.ObserveHTTP("GET /metrics", 401, time.Millisecond)
	m.ObserveHTTP("", 404, time.Millisecond)
	m.ObserveHTTP("POST /api/v1/execute", 999, time.Second)
	m.ObserveCommit(12, 2*time.Millisecond)
	now := time.Now()
	m.ApprovalEnded(api.Approval{ID: weird, Source: api.SourceReachout, State: api.ApprovalAllowed, CreatedAt: now.Add(-90 * time.Second),
		Resolution: &api.Resolution{Decision: api.DecisionAllow, At: now, By: weird}})
	m.ApprovalEnded(api.Approval{Source: api.SourcePlan, State: api.ApprovalTimedOut, CreatedAt: now.Add(-time.Hour),
		Resolution: &api.Resolution{Decision: api.DecisionTimeout, At: now}})
	m.ActorPanicked("runner")
	out := exposition(t, m)
	for _, want := range []string{
		`orchestrd_http_requests_total{code="200",route="GET /metrics"} 1`,
		`orchestrd_http_requests_total{code="401",route="GET /metrics"} 1`,
		`orchestrd_http_requests_total{code="404",route="none"} 1`,
		`orchestrd_http_requests_total{code="other",route="POST /api/v1/execute"} 1`,
		`orchestrd_http_request_duration_seconds_count{route="GET /metrics"} 2`,
		`orchestrd_state_commit_duration_seconds_bucket{le="0.0025"} 1`,
		`orchestrd_state_commit_writes_sum 12`,
		`orchestrd_approval_resolution_seconds_sum{decision="allowed",source="reachout"} 90`,
		`orchestrd_approval_resolution_seconds_bucket{decision="timed_out",source="plan",le="3600"} 1`,
		`orchestrd_approval_resolution_seconds_bucket{decision="timed_out",source="plan",le="1800"} 0`,
		`orchestrd_actor_panics_total{kind="runner"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no line %q in\n%s", want, out)
		}
	}
}

// [metrics] listen must be loopback.
func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:9464", "127.0.0.2:0", "[::1]:9464", "localhost:9464", "[::ffff:127.0.0.1]:1"} {
		if err := CheckLoopback(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{":9464", "0.0.0.0:9464", "[::]:9464", "10.0.0.1:9464", "192.168.1.2:9464",
		"example.com:9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "[fe80::1%lo]:9464", "localhost.:9464", ""} {
		if err := CheckLoopback(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if errs := Validate("metrics", Config{Listen: "0.0.0.0:9464"}); len(errs) != 1 ||
		!strings.HasPrefix(errs[0].Error(), `metrics.listen must be a loopback address`) {
		t.Errorf("Validate: %v", errs)
	}
	if errs := Validate("metrics", DefaultConfig()); errs != nil {
		t.Errorf("the default: %v", errs)
	}
}

// The listener of its own serves GET /metrics without a key (plain even
// when gzip is asked, as Prometheus does), 404 elsewhere, and stops
// cleanly.
func TestServer(t *testing.T) {
	m := newMetrics(t, nil)
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, m.Handler(), zeroLogger())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + s.Addr()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	get := func(method, path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r io.Reader = resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" {
			if r, err = gzip.NewReader(resp.Body); err != nil {
				t.Fatal(err)
			}
		}
		b, _ := io.ReadAll(r)
		return resp, string(b)
	}
	resp, body := get("GET", "/metrics", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(body, "orchestrd_build_info") || !strings.Contains(body, "go_goroutines") ||
		!strings.Contains(body, "process_open_fds") {
		t.Fatalf("GET /metrics: %d %s\n%.400s", resp.StatusCode, resp.Header, body)
	}
	resp, body = get("GET", "/metrics", map[string]string{"Accept-Encoding": "gzip"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" || !strings.Contains(body, "orchestrd_build_info") {
		t.Fatalf("GET /metrics asking gzip: %d %s, want it plain", resp.StatusCode, resp.Header)
	}
	for _, c := range []struct {
		method, path string
		code         int
	}{{"GET", "/", 404}, {"GET", "/metrics/x", 404}, {"POST", "/metrics", 405}, {"GET", "/debug/pprof/", 404}} {
		if resp, _ := get(c.method, c.path, nil); resp.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.code)
		}
	}
	if _, err := Listen("0.0.0.0:0"); err == nil {
		t.Fatal("Listen took 0.0.0.0")
	}
}

// A scrape reads only memory: with big sources it stays well under the
// daemon's 5 ms.
func BenchmarkScrape(b *testing.B) {
	m := New(Options{Lanes: []string{"net", "no-net", "heavy"}, Pools: []string{"claude"}, Version: "x"})
	f := &fakeSources{}
	for _, l := range []string{"net", "no-net", "heavy"} {
		ls := api.LaneStatus{Name: l, Queued: 5}
		for i := range 8 {
			ls.Runners = append(ls.Runners, api.RunnerStatus{ID: fmt.Sprint(l, i), State: "ready"})
		}
		f.lanes = append(f.lanes, ls)
	}
	m.Attach(Sources{Lanes: f, Approvals: f, Executors: f, Loops: f, Clanker: f, Store: f, Bus: f})
	req, _ := http.NewRequest("GET", "/metrics", nil)
	b.ResetTimer()
	for b.Loop() {
		rec := &recorder{h: http.Header{}}
		m.Handler().ServeHTTP(rec, req)
	}
}

func zeroLogger() zerolog.Logger { return zerolog.Nop() }

// described are the names of every metric the registry can export (a
// histogram's _bucket, _sum and _count too), whether or not it has a
// series yet: from the collectors' descriptions.
func described(t *testing.T, m *Metrics) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 1024)
	for _, c := range []prometheus.Collector{m.jobsSubmitted.vec, m.jobsRejected.vec, m.jobsFinished.vec, m.jobsOrphaned.vec,
		m.jobDuration.vec, m.jobCPU.vec, m.jobPeakRSS.vec, m.runnerRestarts.vec, m.runnersKilled.vec, m.laneDegradations.vec, m.orphansKilled.vec,
		m.approvalsRequested.vec, m.approvalsAuto.vec, m.approvalResolution.vec, m.tasksFinished.vec, m.executorPauses.vec,
		m.taskCPU.vec, m.taskPeakRSS.vec, m.executorRestarts.vec, m.agentTokens.vec, m.agentCost.vec, m.loopIterations.vec, m.clankerPauses.vec, m.clankerDeadLettered.vec,
		m.subscriberOverflows.vec, m.subscriberDropped.vec, m.actorPanics.vec, m.httpRequests.vec, m.httpDuration.vec, m.nodesLost.vec,
		m.commitDuration, m.commitWrites, &gauges{m: m, d: newDescs()}} {
		c.Describe(ch)
	}
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	for d := range ch {
		name := fq.FindStringSubmatch(d.String())[1]
		out[name] = true
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			out[name+s] = true
		}
	}
	// The Go and process collectors', and build_info, as gathered.
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		out[f.GetName()] = true
	}
	return out
}

// Every metric the example Grafana dashboard and its variables query is
// one this registry exports: no query on a name that does not exist.
func TestDashboardNamesExist(t *testing.T) {
	m := newMetrics(t, nil)
	names := described(t, m)
	b, err := os.ReadFile("../../examples/grafana-orchestrd.json")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`\b(?:orchestrd|go|process)_[a-z_]+\b`).FindAllString(string(b), -1)
	if len(used) < 40 {
		t.Fatalf("the dashboard uses %d metric names", len(used))
	}
	seen := map[string]bool{}
	for _, n := range used {
		if !names[n] && !seen[n] {
			t.Errorf("the dashboard queries %s, which orchestrd does not export", n)
		}
		seen[n] = true
	}
	for n := range names {
		if strings.HasPrefix(n, "orchestrd_") && !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_sum") &&
			!strings.HasSuffix(n, "_count") && !seen[n] && !seen[n+"_bucket"] && !seen[n+"_count"] {
			t.Errorf("%s is on no panel of the dashboard", n)
		}
	}
}

// Every metric examples/orchestrd-alerts.yml's rules name is one orchestrd
// exports (a counter with a free label, such as runner_restarts_total's
// reason, shows in a scrape from its first event on), or Prometheus's own
// up; each rule names one at least.
func TestAlertNamesExist(t *testing.T) {
	m := newMetrics(t, nil)
	names := described(t, m)
	names["up"] = true
	b, err := os.ReadFile("../../examples/orchestrd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	exprs := regexp.MustCompile(`(?m)^\s+expr: (.+)$`).FindAllStringSubmatch(string(b), -1)
	if n := strings.Count(string(b), "- alert:"); n == 0 || n != len(exprs) {
		t.Fatalf("examples/orchestrd-alerts.yml has %d alerts and %d one-line exprs", n, len(exprs))
	}
	for _, e := range exprs {
		used := regexp.MustCompile(`\b(?:orchestrd|go|process)_[a-z_]+\b|\bup\b`).FindAllString(e[1], -1)
		if len(used) == 0 {
			t.Errorf("a rule names no metric: %s", e[1])
		}
		for _, n := range used {
			if !names[n] {
				t.Errorf("a rule queries %s, which orchestrd does not export: %s", n, e[1])
			}
		}
	}
}

// The process collector says what client_golang's says, by the same names,
// help and types (but the network counters, left out), and costs less.
func TestProcessCollectorAgrees(t *testing.T) {
	ours, theirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	ours.MustRegister(newProcessCollector())
	theirs.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	get := func(r *prometheus.Registry) map[string]*dto.MetricFamily {
		fams, err := r.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			out[f.GetName()] = f
		}
		return out
	}
	o, th := get(ours), get(theirs)
	for name, f := range th {
		if strings.HasPrefix(name, "process_network_") {
			continue
		}
		g, ok := o[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if g.GetHelp() != f.GetHelp() || g.GetType() != f.GetType() {
			t.Errorf("%s: help %q type %v, want %q %v", name, g.GetHelp(), g.GetType(), f.GetHelp(), f.GetType())
		}
		val := func(f *dto.MetricFamily) float64 {
			m := f.GetMetric()[0]
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
		a, b := val(g), val(f)
		tol := map[string]float64{"process_cpu_seconds_total": 0.5, "process_open_fds": 2,
			"process_resident_memory_bytes": 64 << 20, "process_virtual_memory_bytes": 256 << 20, "process_start_time_seconds": 1}[name]
		if math.Abs(a-b) > tol {
			t.Errorf("%s = %v, client_golang's %v", name, a, b)
		}
	}
	if len(o) != 7 {
		t.Errorf("%d families: %v", len(o), slices.Collect(maps.Keys(o)))
	}
}

func BenchmarkProcessCollector(b *testing.B) {
	for _, c := range []struct {
		name string
		c    prometheus.Collector
	}{{"ours", newProcessCollector()}, {"client_golang", collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}} {
		b.Run(c.name, func(b *testing.B) {
			r := prometheus.NewRegistry()
			r.MustRegister(c.c)
			for b.Loop() {
				r.Gather()
			}
		})
	}
}
