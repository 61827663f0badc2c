// Package metrics is the daemon's Prometheus metrics (GET /metrics): a
// registry of its own (never the process-wide default) with the Go
// collector, a process collector (client_golang's process_* metrics, read
// more cheaply: process.go) and three kinds of orchestrd_ metrics.
//
//   - Counters of what happened come from the event bus: one EventSink
//     subscribed to the exact kinds it counts (never "*", never
//     job.output, whose very making Bus.Wants gates), each Deliver a type
//     switch and an atomic increment on a child made before (no
//     allocation, no JSON: an EventSink gets no WireData made for it).
//   - Gauges of what is now are read at scrape time from the domains'
//     in-memory counters (Sources): lane status, pending approvals, pools,
//     loops, clanker's tallies, the store writer's counters. Never the
//     state store's tables: a scrape costs the same with 10 or 10,000
//     finished jobs.
//   - Observations the daemon hands over: the HTTP API's requests
//     (ObserveHTTP, its Observe hook), the state store's commits
//     (ObserveCommit, its OnCommit hook), an approval's end (ApprovalEnded,
//     approvals' OnEnded) and an actor's panic (ActorPanicked).
//
// Labels are bounded: lane and pool are the config's names (an event of
// another is not counted); state, status, source, decision, policy and
// reason are values the code chooses, checked against the known ones or
// against a plain-identifier form and capped in number ("other" past the
// cap); route is a ServeMux pattern. No label ever holds a job's, task's or
// approval's id or anything a job, an agent or a client wrote.
package metrics

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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

// Namespace prefixes every metric of orchestrd's own.
const Namespace = "orchestrd"

// other is the label value for a value past a metric's cap or not of the
// known ones.
const other = "other"

// maxSeries caps the children a counter with a free label (a reason, a
// route) makes; past it the free label is "other".
const maxSeries = 256

// Options configures New.
type Options struct {
	// Lanes and Pools are the configured lanes' and executor pools' names:
	// the only values of the lane and pool labels.
	Lanes []string
	Pools []string
	// Version is orchestrd's (orchestrd_build_info).
	Version string
	// Home is the daemon's home: with it, the node's figures are
	// exported (orchestrd_node_*, its free space the home's).
	Home string
}

// Sources are the domains' in-memory counters the gauges read at scrape
// time. Any may be nil (not started, or in a test).
type Sources struct {
	Lanes     interface{ Lanes() []api.LaneStatus }
	Approvals interface{ PendingApprovals() []api.Approval }
	Executors interface {
		Metrics() []executors.PoolMetrics
	}
	Loops interface {
		CountsByType() map[api.LoopType]map[api.LoopStatus]int
	}
	Clanker interface {
		Tallies() map[string]clanker.RepoTally
		Sockets() []clanker.RepoSocket
	}
	Store   interface{ Stats() state.Stats }
	Bus     interface{ DroppedTotal() uint64 }
	Control interface{ Metrics() api.ConnMetrics }
}

// Metrics is the daemon's registry and what feeds it. Its methods are safe
// from any goroutine.
type Metrics struct {
	reg     *prometheus.Registry
	lanes   map[string]bool
	pools   map[string]bool
	laneLs  []string // sorted
	poolLs  []string // sorted
	sources atomic.Pointer[Sources]
	handler http.Handler

	jobsSubmitted    *counters
	jobsRejected     *counters
	jobsFinished     *counters
	jobsOrphaned     *counters
	jobDuration      *histograms
	jobCPU           *histograms
	jobPeakRSS       *histograms
	runnerRestarts   *counters
	runnersKilled    *counters
	laneDegradations *counters
	orphansKilled    *counters

	approvalsRequested *counters
	approvalsAuto      *counters
	approvalResolution *histograms

	tasksFinished    *counters
	taskCPU          *histograms
	taskPeakRSS      *histograms
	executorPauses   *counters
	executorRestarts *counters
	agentTokens      *counters
	agentCost        *counters

	loopIterations *counters

	clankerPauses       *counters
	clankerDeadLettered *counters

	subscriberOverflows *counters
	subscriberDropped   *counters

	actorPanics *counters

	nodesLost *counters

	httpRequests *counters
	httpDuration *histograms

	commitDuration prometheus.Histogram
	commitWrites   prometheus.Histogram
}

// Job states a job ends in (job.finished), task states a task ends in
// (task.finished), the approval's end states, the loop iteration statuses:
// the children made at New, so a rate is 0 before the first.
var (
	jobEndStates = []string{string(api.StateSucceeded), string(api.StateFailed), string(api.StateTimeout),
		string(api.StateCancelled), string(api.StateError)}
	taskEndStates = []string{string(api.TaskCompleted), string(api.TaskFailed), string(api.TaskCancelled),
		string(api.TaskTimeout)}
	approvalSources = []string{api.SourceReachout, api.SourcePlan, api.SourceControl, api.SourceExecutor}
	approvalEnds    = []string{string(api.ApprovalAllowed), string(api.ApprovalDenied), string(api.ApprovalAlwaysAllowed),
		string(api.ApprovalReplied), string(api.ApprovalTimedOut), string(api.ApprovalCancelled)}
	iterationStatuses = []string{"passed", "failed", "interrupted"}
	runnerStates      = []string{"starting", "ready", "backoff", "stopping"}
	executorStates    = []string{"starting", "idle", "busy", "stopping"}
	taskLiveStates    = []string{string(api.TaskQueued), string(api.TaskRunning)}
	clankerStatuses   = []string{"queued", "running", "needs_judge", "rework", "blocked", "paused", "done", "failed"}
	overflowPolicies  = []string{control.OverflowDropOldest, control.OverflowDisconnect}
	tokenKinds        = []string{"input", "output", "cache_read", "cache_write"}
	nodeLostReasons   = []string{"heartbeat_expired", "restarted"}
)

// Buckets, in seconds.
var (
	jobBuckets      = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200}
	approvalBuckets = []float64{.1, .5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}
	commitBuckets   = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	cpuBuckets      = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	rssBuckets      = []float64{1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30, 16 << 30}
	batchBuckets    = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
	httpBuckets     = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// New makes the registry: the Go and process collectors, every counter
// (with its known children at 0) and the scrape-time gauges, which read
// nothing until Attach.
func New(opts Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), lanes: map[string]bool{}, pools: map[string]bool{}}
	for _, l := range opts.Lanes {
		m.lanes[l] = true
	}
	for _, p := range opts.Pools {
		m.pools[p] = true
	}
	m.laneLs, m.poolLs = sortedSet(m.lanes), sortedSet(m.pools)
	m.reg.MustRegister(collectors.NewGoCollector(), newProcessCollector())
	if opts.Home != "" {
		m.reg.MustRegister(newNodeCollector(opts.Home))
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1: the running orchestrd's version.", ConstLabels: prometheus.Labels{"version": opts.Version}})
	info.Set(1)

	// The labels before the first free one are the config's (lane, pool).
	fixed := func(labels []string) int {
		n := 0
		for n < len(labels) && (labels[n] == "lane" || labels[n] == "pool") {
			n++
		}
		return n
	}
	// orchestrd's own metrics are one collector: the registry gathers
	// each collector on a goroutine of its own, and two dozen goroutines
	// a scrape cost more than the metrics they collect.
	var own collectorList
	c := func(name, help string, labels ...string) *counters {
		cs := newCounters(prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels), fixed(labels))
		own = append(own, cs.vec)
		return cs
	}
	h := func(name, help string, buckets []float64, labels ...string) *histograms {
		hs := newHistograms(prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name,
			Help: help, Buckets: buckets}, labels), fixed(labels))
		own = append(own, hs.vec)
		return hs
	}
	m.jobsSubmitted = c("jobs_submitted_total", "Jobs queued on a lane (job.queued; jobs a restarted daemon queues again count again).", "lane")
	m.jobsRejected = c("jobs_rejected_total", "Job submissions a lane refused (job.rejected), by reason: queue_full, store_unavailable.", "lane", "reason")
	m.jobsFinished = c("jobs_finished_total", "Jobs that reached a terminal state (job.finished), by lane and state.", "lane", "state")
	m.jobsOrphaned = c("jobs_orphaned_total", "Jobs failed because their runner was lost (job.orphaned), by reason.", "lane", "reason")
	m.jobDuration = h("job_duration_seconds", "How long finished jobs ran (job.finished duration_ms), by lane.", jobBuckets, "lane")
	m.jobCPU = h("job_cpu_seconds", "CPU time (user + system) finished jobs' process trees used, as sampled (job.finished record.usage), by lane; jobs never sampled are not counted.", cpuBuckets, "lane")
	m.jobPeakRSS = h("job_peak_rss_bytes", "The most resident memory finished jobs' process trees held at a sample (job.finished record.usage), by lane; jobs never sampled are not counted.", rssBuckets, "lane")
	m.runnerRestarts = c("runner_restarts_total", "Runner processes scheduled to start again (runner.restart_scheduled), by lane and reason (the cause of the runner's death).", "lane", "reason")
	m.runnersKilled = c("runners_killed_total", "Runner processes the daemon killed (runner.killed), by lane and reason.", "lane", "reason")
	m.laneDegradations = c("lane_degradations_total", "Times a lane went over its restart intensity (lane.degraded).", "lane")
	m.orphansKilled = c("orphan_processes_killed_total", "Job processes killed for outliving their job or runner (process.orphan_killed), by reason.", "reason")
	m.approvalsRequested = c("approvals_requested_total", "Approvals that became pending (approval.requested), by source.", "source")
	m.approvalsAuto = c("approvals_auto_resolved_total", "Approval requests a rule answered at once (approval.auto_resolved), by decision.", "decision")
	m.approvalResolution = h("approval_resolution_seconds", "Time from an approval's request to its end, by source and how it ended (allowed, denied, always_allowed, replied, timed_out, cancelled).", approvalBuckets, "source", "decision")
	m.tasksFinished = c("executor_tasks_finished_total", "Executor tasks that reached a terminal state (task.finished), by pool and state.", "pool", "state")
	m.taskCPU = h("task_cpu_seconds", "CPU time (user + system) the executor's process tree used while a finished agent task ran, as sampled (task.finished usage), by pool; tasks never sampled are not counted.", cpuBuckets, "pool")
	m.taskPeakRSS = h("task_peak_rss_bytes", "The most resident memory the executor's process tree held at a sample while a finished agent task ran (task.finished usage), by pool; tasks never sampled are not counted.", rssBuckets, "pool")
	m.executorPauses = c("executor_pauses_total", "Times an executor's notifications were paused for backpressure (executor.paused), by pool.", "pool")
	m.executorRestarts = c("executor_restarts_total", "Executor processes scheduled to start again (executor.restart_scheduled), by pool and policy.", "pool", "policy")
	m.agentTokens = c("agent_tokens_total", "Tokens the executors' agents reported spending (task.finished token_usage), by pool and kind: input, output, cache_read, cache_write.", "pool", "kind")
	m.agentCost = c("agent_cost_usd_total", "What the executors' agents said their tokens cost, in US dollars (task.finished token_usage.cost_usd), by pool.", "pool")
	m.loopIterations = c("loop_iterations_total", "Loop iterations that ended (loop.iteration), by status: passed, failed, interrupted.", "status")
	m.clankerPauses = c("clanker_pauses_total", "Times a clanker repo's fleet was paused for a usage limit (clanker.paused).")
	m.clankerDeadLettered = c("clanker_lines_dead_lettered_total", "Spool lines clanker's repos could not apply (clanker.line_dead_lettered).")
	m.subscriberOverflows = c("subscriber_overflows_total", "Times a control-socket subscriber fell behind (subscriber.overflowed), by policy: drop_oldest, disconnect.", "policy")
	m.subscriberDropped = c("subscriber_dropped_events_total", "Events dropped to control-socket subscribers that fell behind (subscriber.overflowed dropped).")
	m.actorPanics = c("actor_panics_total", "Panics caught in actors, by actor kind.", "kind")
	m.nodesLost = c("cluster_nodes_lost_total", "Fleet nodes this node declared lost (cluster.node_lost), by reason: heartbeat_expired, restarted. Always 0 outside a fleet.", "reason")
	m.httpRequests = c("http_requests_total", "HTTP API requests answered, by route (the ServeMux pattern; \"none\" when none matched) and status code.", "route", "code")
	m.httpDuration = h("http_request_duration_seconds", "How long HTTP API requests took to answer (a stream: its whole life), by route.", httpBuckets, "route")
	m.commitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "state_commit_duration_seconds",
		Help: "How long each state-store transaction took to commit (BEGIN to COMMIT, the fsync too at durability power).", Buckets: commitBuckets})
	m.commitWrites = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "state_commit_writes",
		Help: "Writes each state-store transaction committed together (group commit).", Buckets: batchBuckets})
	own = append(own, info, m.commitDuration, m.commitWrites, &gauges{m: m, d: newDescs()})
	m.reg.MustRegister(own)

	// The known children, at 0.
	for _, l := range m.laneLs {
		m.jobsSubmitted.seed(l)
		m.jobDuration.seed(l)
		m.jobCPU.seed(l)
		m.jobPeakRSS.seed(l)
		m.laneDegradations.seed(l)
		for _, s := range jobEndStates {
			m.jobsFinished.seed(l, s)
		}
	}
	for _, p := range m.poolLs {
		m.executorPauses.seed(p)
		m.agentCost.seed(p)
		m.taskCPU.seed(p)
		m.taskPeakRSS.seed(p)
		for _, k := range tokenKinds {
			m.agentTokens.seed(p, k)
		}
		for _, s := range taskEndStates {
			m.tasksFinished.seed(p, s)
		}
	}
	for _, s := range approvalSources {
		m.approvalsRequested.seed(s)
	}
	for _, s := range iterationStatuses {
		m.loopIterations.seed(s)
	}
	for _, p := range overflowPolicies {
		m.subscriberOverflows.seed(p)
	}
	m.clankerPauses.seed()
	m.clankerDeadLettered.seed()
	m.subscriberDropped.seed()
	for _, r := range nodeLostReasons {
		m.nodesLost.seed(r)
	}

	// Not compressed: some 20 KiB a scrape, on loopback by default, where
	// gzip would double the scrape's time for nothing.
	m.handler = promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 8, DisableCompression: true}))
	return m
}

// Registry is the registry (for tests and benchmarks).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format (never
// compressed), at most 8 scrapes at once.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Attach gives the gauges their sources; until then they are not
// reported. It may be called again (a later call replaces the sources).
func (m *Metrics) Attach(s Sources) { m.sources.Store(&s) }

// Kinds are the event kinds Subscribe counts: exact kinds only.
var Kinds = []string{
	"job.queued", "job.rejected", "job.finished", "job.orphaned",
	"runner.restart_scheduled", "runner.killed", "lane.degraded", "process.orphan_killed",
	"approval.requested", "approval.auto_resolved",
	"task.finished", "executor.paused", "executor.restart_scheduled",
	"loop.iteration",
	"clanker.paused", "clanker.line_dead_lettered",
	"subscriber.overflowed",
	"cluster.node_lost",
}

// Subscribe counts bus's events of Kinds until the returned function is
// called.
func (m *Metrics) Subscribe(bus *eventlog.Bus) (unsubscribe func()) {
	return bus.Subscribe(Kinds, sink{m})
}

// sink is the bus's EventSink: Deliver runs on the emitter's goroutine,
// so it only increments.
type sink struct{ m *Metrics }

func (sink) EventsOnly() {}

func (s sink) Deliver(r *eventlog.Record) {
	m := s.m
	switch e := r.Event.(type) {
	case lanes.JobQueued:
		if m.lanes[e.Lane] {
			m.jobsSubmitted.inc(e.Lane)
		}
	case lanes.JobRejected:
		if m.lanes[e.Lane] {
			m.jobsRejected.inc(e.Lane, token(e.Reason))
		}
	case lanes.JobFinished:
		if m.lanes[e.Lane] {
			m.jobsFinished.inc(e.Lane, known(e.State, jobEndStates))
			m.jobDuration.observe(float64(e.DurationMs)/1000, e.Lane)
			if r, ok := e.Record.(api.JobRecord); ok && r.Usage != nil {
				u := r.Usage
				m.jobCPU.observe(u.UserSeconds+u.SystemSeconds, e.Lane)
				m.jobPeakRSS.observe(float64(u.PeakRSSBytes), e.Lane)
			}
		}
	case lanes.JobOrphaned:
		if m.lanes[e.Lane] {
			m.jobsOrphaned.inc(e.Lane, token(e.Reason))
		}
	case lanes.RunnerRestartScheduled:
		if m.lanes[e.Lane] {
			m.runnerRestarts.inc(e.Lane, token(e.Reason))
		}
	case lanes.RunnerKilled:
		if m.lanes[e.Lane] {
			m.runnersKilled.inc(e.Lane, token(e.Reason))
		}
	case lanes.LaneDegraded:
		if m.lanes[e.Lane] {
			m.laneDegradations.inc(e.Lane)
		}
	case lanes.OrphanKilled:
		m.orphansKilled.inc(token(e.Reason))
	case approvals.ApprovalRequested:
		m.approvalsRequested.inc(known(e.Source, approvalSources))
	case approvals.ApprovalAutoResolved:
		m.approvalsAuto.inc(token(e.Decision))
	case executors.TaskFinished:
		if m.pools[e.Executor] {
			m.tasksFinished.inc(e.Executor, known(string(e.State), taskEndStates))
			if u := e.Usage; u != nil && u.Samples > 0 {
				m.taskCPU.observe(u.UserSeconds+u.SystemSeconds, e.Executor)
				m.taskPeakRSS.observe(float64(u.PeakRSSBytes), e.Executor)
			}
			if u := e.TokenUsage; u != nil {
				for i, n := range []int64{u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens} {
					if n > 0 {
						m.agentTokens.add(float64(n), e.Executor, tokenKinds[i])
					}
				}
				if u.CostUSD > 0 {
					m.agentCost.add(u.CostUSD, e.Executor)
				}
			}
		}
	case executors.ExecutorPaused:
		if m.pools[e.Pool] {
			m.executorPauses.inc(e.Pool)
		}
	case executors.ExecutorRestartScheduled:
		if m.pools[e.Pool] {
			m.executorRestarts.inc(e.Pool, token(e.Policy))
		}
	case loops.LoopIterationEnded:
		m.loopIterations.inc(known(e.Status, iterationStatuses))
	case clanker.Paused:
		m.clankerPauses.inc()
	case clanker.SpoolDeadLettered:
		m.clankerDeadLettered.inc()
	case fleet.ClusterNodeLost:
		m.nodesLost.inc(known(e.Reason, nodeLostReasons))
	case control.SubscriberOverflowed:
		m.subscriberOverflows.inc(known(e.Policy, overflowPolicies))
		if e.Dropped > 0 {
			m.subscriberDropped.add(float64(e.Dropped))
		}
	}
}

// ObserveHTTP is the HTTP API's Observe: one request answered.
func (m *Metrics) ObserveHTTP(route string, status int, d time.Duration) {
	if route == "" {
		route = "none"
	}
	m.httpRequests.inc(route, statusCode(status))
	m.httpDuration.observe(d.Seconds(), route)
}

// ObserveCommit is the state store's OnCommit: one transaction committed.
func (m *Metrics) ObserveCommit(writes int, d time.Duration) {
	m.commitDuration.Observe(d.Seconds())
	m.commitWrites.Observe(float64(writes))
}

// ApprovalEnded is approvals' OnEnded: the time from a's request to its
// end, by its source and its end state.
func (m *Metrics) ApprovalEnded(a api.Approval) {
	end := time.Now()
	if a.Resolution != nil && !a.Resolution.At.IsZero() {
		end = a.Resolution.At
	}
	d := max(end.Sub(a.CreatedAt), 0)
	m.approvalResolution.observe(d.Seconds(), known(a.Source, approvalSources), known(string(a.State), approvalEnds))
}

// ActorPanicked counts a panic caught in an actor of kind (job, runner,
// lane, ...).
func (m *Metrics) ActorPanicked(kind string) { m.actorPanics.inc(token(kind)) }

// collectorList is collectors gathered as one, in order, on the
// registry's one goroutine for it.
type collectorList []prometheus.Collector

func (l collectorList) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range l {
		c.Describe(ch)
	}
}

func (l collectorList) Collect(ch chan<- prometheus.Metric) {
	for _, c := range l {
		c.Collect(ch)
	}
}

// statusCodes are the codes' label values, made once.
var statusCodes = func() []string {
	out := make([]string, 600)
	for i := 100; i < 600; i++ {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

func statusCode(status int) string {
	if status < 100 || status >= 600 {
		return other
	}
	return statusCodes[status]
}

// plain is what a free label value may look like: a code's identifier.
var plain = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`) })

// token is v when it looks like an identifier the code chose, else
// "other".
func token(v string) string {
	if plain().MatchString(v) {
		return v
	}
	return other
}

// known is v when it is one of vals, else "other".
func known(v string, vals []string) string {
	if slices.Contains(vals, v) {
		return v
	}
	return other
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// key is up to two label values.
type key [2]string

func mkKey(vals []string) key {
	var k key
	copy(k[:], vals)
	return k
}

// series are a vector's children by their label values, at most
// maxSeries of them (past that, the labels from free on are "other"): a
// lookup of a child made before takes a read lock and allocates nothing.
type series[T any] struct {
	with func(...string) T // the vector's WithLabelValues
	free int
	mu   sync.RWMutex
	m    map[key]T
}

func newSeries[T any](with func(...string) T, free int) *series[T] {
	return &series[T]{with: with, free: free, m: map[key]T{}}
}

func (s *series[T]) seed(vals ...string) { s.get(vals) }

func (s *series[T]) get(vals []string) T {
	k := mkKey(vals)
	s.mu.RLock()
	c, ok := s.m[k]
	s.mu.RUnlock()
	if ok {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok = s.m[k]; ok {
		return c
	}
	if len(s.m) >= maxSeries {
		vals = capped(vals, s.free)
		k = mkKey(vals)
		if c, ok = s.m[k]; ok {
			return c
		}
	}
	c = s.with(slices.Clone(vals)...) // a copy: vals stays on its caller's stack
	s.m[k] = c
	return c
}

// counters and histograms are the series of a CounterVec and a
// HistogramVec.
type (
	counters struct {
		*series[prometheus.Counter]
		vec *prometheus.CounterVec
	}
	histograms struct {
		*series[prometheus.Observer]
		vec *prometheus.HistogramVec
	}
)

func newCounters(vec *prometheus.CounterVec, free int) *counters {
	return &counters{newSeries[prometheus.Counter](vec.WithLabelValues, free), vec}
}

func newHistograms(vec *prometheus.HistogramVec, free int) *histograms {
	return &histograms{newSeries[prometheus.Observer](vec.WithLabelValues, free), vec}
}

func (c *counters) inc(vals ...string) { c.get(vals).Inc() }

func (c *counters) add(n float64, vals ...string) { c.get(vals).Add(n) }

func (h *histograms) observe(v float64, vals ...string) { h.get(vals).Observe(v) }

// capped is vals with those from free on "other".
func capped(vals []string, free int) []string {
	out := slices.Clone(vals)
	for i := free; i < len(out); i++ {
		out[i] = other
	}
	return out
}
