package api

import (
	"encoding/json"
	"testing"
)

// metrics.get's answer is put together from three owners' parts; its bytes
// stay those of the one struct it was: the same fields in the same order.
func TestMetricsJSON(t *testing.T) {
	m := Metrics{UptimeMs: 1,
		LaneMetrics: LaneMetrics{JobsByState: map[State]int64{StateQueued: 2, StateFailed: 3}, JobsSubmitted: 4,
			RunnerRestarts: 5, OrphanedJobs: 6, RunnersByLane: map[string]int64{"net": 7}},
		Goroutines: 8, OpenFDs: 9, ConnMetrics: ConnMetrics{Connections: 10, ConnectionsSeen: 11}, FinishedOutputBytes: 12,
		LoopMetrics: LoopMetrics{RunningLoops: 13, LoopsByStatus: map[LoopStatus]int{LoopRunning: 13, LoopFailed: 14}}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"uptime_ms":1,"jobs_by_state":{"failed":3,"queued":2},"jobs_submitted":4,"runner_restarts":5,` +
		`"orphaned_jobs":6,"runners_by_lane":{"net":7},"goroutines":8,"open_fds":9,"connections":10,` +
		`"connections_seen":11,"finished_output_bytes":12,"running_loops":13,"loops_by_status":{"failed":14,"running":13}}`
	if string(b) != want {
		t.Fatalf("metrics encode as\n%s\nwant\n%s", b, want)
	}
	var back Metrics
	if err := json.Unmarshal(b, &back); err != nil || back.JobsByState[StateFailed] != 3 || back.ConnectionsSeen != 11 ||
		back.FinishedOutputBytes != 12 || back.RunningLoops != 13 || back.LoopsByStatus[LoopFailed] != 14 {
		t.Fatalf("decoded back: %+v (%v)", back, err)
	}
}

func TestError(t *testing.T) {
	e := Errorf(CodeNotFound, "job %s not found", "j-1")
	if e.Error() != "job j-1 not found (code 1001)" || e.Code != 1001 {
		t.Fatalf("Errorf = %#v, %q", e, e.Error())
	}
}
