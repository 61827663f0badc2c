package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orchestrd/orchestrd/api"
)

// descs are the scrape-time metrics' descriptions.
type descs struct {
	laneQueued, laneRunning, laneQueueLimit, laneRunners, laneSpares, laneDegraded, laneMemory *prometheus.Desc
	approvalsPending                                                                           *prometheus.Desc
	executorTasks, executors, executorsPaused, executorMessages                                *prometheus.Desc
	loops                                                                                      *prometheus.Desc
	clankerTasks, clankerRepos, clankerPaused                                                  *prometheus.Desc
	stateCommits, stateWrites, stateFailed, stateQueued                                        *prometheus.Desc
	eventlogDropped                                                                            *prometheus.Desc
	connections, connectionsSeen                                                               *prometheus.Desc
}

func newDescs() *descs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
	}
	return &descs{
		laneQueued:       d("lane_queued_jobs", "Jobs waiting in a lane's queue now (its queue depth).", "lane"),
		laneRunning:      d("lane_running_jobs", "Jobs a lane's runners hold now (dispatched or running).", "lane"),
		laneQueueLimit:   d("lane_queue_limit", "A lane's queue_limit (0: none).", "lane"),
		laneRunners:      d("lane_runners", "A lane's runners by state: starting, ready (spares too), backoff, stopping.", "lane", "state"),
		laneSpares:       d("lane_spare_runners", "A lane's ready runners kept idle as warm spares.", "lane"),
		laneDegraded:     d("lane_degraded", "1 while a lane is over its restart intensity (degraded), else 0.", "lane"),
		laneMemory:       d("lane_runner_memory_bytes", "The memory a lane's runners report, summed.", "lane"),
		approvalsPending: d("approvals_pending", "Approvals waiting for an answer now, by source.", "source"),
		executorTasks:    d("executor_tasks", "A pool's live tasks by state: queued, running.", "pool", "state"),
		executors:        d("executors", "A pool's executor processes by state: starting, idle, busy, stopping.", "pool", "state"),
		executorsPaused:  d("executors_paused", "A pool's executors whose notifications are paused now (backpressure).", "pool"),
		executorMessages: d("executor_messages_total", "report_messages a pool's executors sent, committed and published (task.message).", "pool"),
		loops:            d("loops", "Loops by type (plan, spec, phase, code) and status.", "type", "status"),
		clankerTasks:     d("clanker_tasks", "clanker's tasks in every repo served, by status.", "status"),
		clankerRepos:     d("clanker_repos", "clanker repos by state: served, failed (not served: frontend.list says why).", "state"),
		clankerPaused:    d("clanker_repos_paused", "clanker repos whose fleet is paused now (usage limit)."),
		stateCommits:     d("state_commits_total", "Transactions the state store's writer committed."),
		stateWrites:      d("state_writes_total", "Writes the state store's writer committed."),
		stateFailed:      d("state_write_failures_total", "Writes that ended with an error (refused by the store or SQLite)."),
		stateQueued:      d("state_writes_queued", "Writes waiting for the state store's writer now."),
		eventlogDropped:  d("eventlog_dropped_total", "Event-log lines dropped because the log's writer fell behind or a write failed."),
		connections:      d("control_connections", "Control-socket connections open now."),
		connectionsSeen:  d("control_connections_total", "Control-socket connections accepted."),
	}
}

// gauges is the collector of what is now, read from Sources at each
// scrape: memory only, a few locks, no store.
type gauges struct {
	m *Metrics
	d *descs
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	d := g.d
	for _, x := range []*prometheus.Desc{d.laneQueued, d.laneRunning, d.laneQueueLimit, d.laneRunners, d.laneSpares,
		d.laneDegraded, d.laneMemory, d.approvalsPending, d.executorTasks, d.executors, d.executorsPaused,
		d.executorMessages, d.loops, d.clankerTasks, d.clankerRepos, d.clankerPaused, d.stateCommits, d.stateWrites,
		d.stateFailed, d.stateQueued, d.eventlogDropped, d.connections, d.connectionsSeen} {
		ch <- x
	}
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	s := g.m.sources.Load()
	if s == nil {
		return
	}
	d := g.d
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	counter := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labels...)
	}
	if s.Lanes != nil {
		for _, l := range s.Lanes.Lanes() {
			if !g.m.lanes[l.Name] {
				continue
			}
			gauge(d.laneQueued, float64(l.Queued), l.Name)
			gauge(d.laneRunning, float64(l.Running), l.Name)
			gauge(d.laneQueueLimit, float64(l.QueueLimit), l.Name)
			gauge(d.laneDegraded, b2f(l.Degraded), l.Name)
			byState := make(map[string]int, len(runnerStates))
			spares, mem := 0, uint64(0)
			for _, r := range l.Runners {
				byState[known(r.State, runnerStates)]++
				if r.Spare {
					spares++
				}
				mem += r.MemoryBytes
			}
			for _, st := range runnerStates {
				gauge(d.laneRunners, float64(byState[st]), l.Name, st)
			}
			if n := byState[other]; n > 0 {
				gauge(d.laneRunners, float64(n), l.Name, other)
			}
			gauge(d.laneSpares, float64(spares), l.Name)
			gauge(d.laneMemory, float64(mem), l.Name)
		}
	}
	if s.Approvals != nil {
		bySource := make(map[string]int, len(approvalSources))
		for _, a := range s.Approvals.PendingApprovals() {
			bySource[known(a.Source, approvalSources)]++
		}
		for _, src := range approvalSources {
			gauge(d.approvalsPending, float64(bySource[src]), src)
		}
		if n := bySource[other]; n > 0 {
			gauge(d.approvalsPending, float64(n), other)
		}
	}
	if s.Executors != nil {
		for _, p := range s.Executors.Metrics() {
			if !g.m.pools[p.Name] {
				continue
			}
			tasks := 0
			for _, st := range taskLiveStates {
				n := p.Tasks[api.TaskState(st)]
				tasks += n
				gauge(d.executorTasks, float64(n), p.Name, st)
			}
			// A finished task until its end is committed.
			var ending int
			for st, n := range p.Tasks {
				if st.Terminal() {
					ending += n
				}
			}
			gauge(d.executorTasks, float64(ending), p.Name, "ending")
			byState := make(map[string]int, len(executorStates))
			for st, n := range p.Executors {
				byState[known(st, executorStates)] += n
			}
			for _, st := range executorStates {
				gauge(d.executors, float64(byState[st]), p.Name, st)
			}
			if n := byState[other]; n > 0 {
				gauge(d.executors, float64(n), p.Name, other)
			}
			gauge(d.executorsPaused, float64(p.Paused), p.Name)
			counter(d.executorMessages, float64(p.Messages), p.Name)
		}
	}
	if s.Loops != nil {
		counts := s.Loops.CountsByType()
		for _, lt := range api.LoopTypes {
			for _, st := range api.LoopStatuses {
				gauge(d.loops, float64(counts[lt][st]), string(lt), string(st))
			}
		}
	}
	if s.Clanker != nil {
		byStatus := make(map[string]int, len(clankerStatuses))
		paused := 0
		for _, t := range s.Clanker.Tallies() {
			for st, n := range t.Tasks {
				byStatus[known(st, clankerStatuses)] += n
			}
			if t.Paused {
				paused++
			}
		}
		for _, st := range clankerStatuses {
			gauge(d.clankerTasks, float64(byStatus[st]), st)
		}
		if n := byStatus[other]; n > 0 {
			gauge(d.clankerTasks, float64(n), other)
		}
		gauge(d.clankerPaused, float64(paused))
		served, failed := 0, 0
		for _, r := range s.Clanker.Sockets() {
			if r.Error == "" {
				served++
			} else {
				failed++
			}
		}
		gauge(d.clankerRepos, float64(served), "served")
		gauge(d.clankerRepos, float64(failed), "failed")
	}
	if s.Store != nil {
		st := s.Store.Stats()
		counter(d.stateCommits, float64(st.Commits))
		counter(d.stateWrites, float64(st.Writes))
		counter(d.stateFailed, float64(st.Failed))
		gauge(d.stateQueued, float64(st.Queued))
	}
	if s.Bus != nil {
		counter(d.eventlogDropped, float64(s.Bus.DroppedTotal()))
	}
	if s.Control != nil {
		c := s.Control.Metrics()
		gauge(d.connections, float64(c.Connections))
		counter(d.connectionsSeen, float64(c.ConnectionsSeen))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
