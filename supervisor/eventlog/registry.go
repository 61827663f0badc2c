package eventlog

// knownKinds lists every kind in kinds.go (a test keeps it in sync). The CLI
// uses it to size the kind column and to warn about a --kind that matches
// nothing.
var knownKinds = []string{
	"daemon.started",
	"daemon.stopping",
	"daemon.stopped",
	"runner.spawned",
	"runner.spawn_failed",
	"runner.ready",
	"runner.exited",
	"runner.killed",
	"runner.restart_scheduled",
	"runner.promoted",
	"runner.rejected",
	"lane.started",
	"lane.degraded",
	"lane.recovered",
	"job.queued",
	"job.rejected",
	"job.dispatched",
	"job.finished",
	"job.orphaned",
	"job.requeued",
	"job.output",
	"job.output_evicted",
	"conn.opened",
	"conn.closed",
	"conn.refused",
	"conn.protocol_error",
	"subscriber.overflowed",
	"actor.panicked",
	"actor.restarted",
	"process.orphan_killed",
	"eventlog.dropped",
}

// fieldOrder is the order the CLI prints fields in after ts, seq, kind and
// lane: identity first, then what happened and why, then measurements.
// Fields not listed follow alphabetically.
var fieldOrder = []string{
	"job_id",
	"runner_id",
	"conn_id",
	"actor",
	"pid",
	"pgid",
	"state",
	"reason",
	"policy",
	"cause",
	"error",
	"panic",
	"directive",
	"exit_code",
	"signal",
	"detail",
	"delay_ms",
	"duration_ms",
	"uptime_ms",
	"restarts_in_window",
	"attempt",
}
