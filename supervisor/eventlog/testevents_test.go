package eventlog

// Stand-ins for the domains' events. The bus and the reader know no domain
// (each domain defines its kinds beside the code that emits them and tests
// them there, with eventlogtest), so their tests log these: the same kinds
// and JSON fields as the events they stand for, or a part of them. Being in
// a test file, they are not registered.

type daemonStarted struct {
	Pid     int      `json:"pid"`
	Version string   `json:"version"`
	Home    string   `json:"home"`
	Lanes   []string `json:"lanes"`
}

func (daemonStarted) Kind() string { return "daemon.started" }

type runnerSpawned struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
	Attempt  int    `json:"attempt"`
	Network  string `json:"network"`
}

func (runnerSpawned) Kind() string { return "runner.spawned" }

type runnerSpawnFailed struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Error    string `json:"error"`
}

func (runnerSpawnFailed) Kind() string { return "runner.spawn_failed" }

type runnerExited struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	Pid      int    `json:"pid"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	UptimeMs int64  `json:"uptime_ms"`
	Cause    string `json:"cause"`
	Spawned  bool   `json:"spawned"`
}

func (runnerExited) Kind() string { return "runner.exited" }

type runnerRestartScheduled struct {
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
	DelayMs  int64  `json:"delay_ms"`
}

func (runnerRestartScheduled) Kind() string { return "runner.restart_scheduled" }

type laneStarted struct {
	Lane    string `json:"lane"`
	Runners int    `json:"runners"`
}

func (laneStarted) Kind() string { return "lane.started" }

type laneRecovered struct {
	Lane string `json:"lane"`
}

func (laneRecovered) Kind() string { return "lane.recovered" }

type jobQueued struct {
	JobID  string `json:"job_id"`
	Lane   string `json:"lane"`
	Queued int    `json:"queued"`
}

func (jobQueued) Kind() string { return "job.queued" }

type jobDispatched struct {
	JobID    string `json:"job_id"`
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
}

func (jobDispatched) Kind() string { return "job.dispatched" }

type jobOrphaned struct {
	JobID    string `json:"job_id"`
	Lane     string `json:"lane"`
	RunnerID string `json:"runner_id"`
}

func (jobOrphaned) Kind() string { return "job.orphaned" }

// jobFinished is logged with its summary; subscribers receive {"job":
// Record} (a WireDataer).
type jobFinished struct {
	JobID      string `json:"job_id"`
	Lane       string `json:"lane"`
	State      string `json:"state"`
	ExitCode   *int32 `json:"exit_code,omitempty"`
	DurationMs int64  `json:"duration_ms"`
	Record     any    `json:"-"`
}

func (jobFinished) Kind() string { return "job.finished" }
func (e jobFinished) WireData() any {
	return struct {
		Job any `json:"job"`
	}{e.Record}
}

// jobOutput is Ephemeral: delivered, never logged.
type jobOutput struct {
	JobID  string `json:"job_id"`
	Stream string `json:"stream"`
	Data   string `json:"data"`
}

func (jobOutput) Kind() string { return "job.output" }
func (jobOutput) Ephemeral()   {}

type connOpened struct {
	ConnID string `json:"conn_id"`
	Pid    int32  `json:"pid"`
	UID    uint32 `json:"uid"`
}

func (connOpened) Kind() string { return "conn.opened" }

type subscriberOverflowed struct {
	ConnID  string `json:"conn_id"`
	Policy  string `json:"policy"`
	Dropped uint64 `json:"dropped"`
}

func (subscriberOverflowed) Kind() string { return "subscriber.overflowed" }

type actorPanicked struct {
	Actor string `json:"actor"`
	Panic string `json:"panic"`
	Stack string `json:"stack"`
}

func (actorPanicked) Kind() string { return "actor.panicked" }
