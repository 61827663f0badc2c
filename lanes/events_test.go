package lanes

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind lanes emits is registered, sampled here, and logged as it
// promises.
func TestKinds(t *testing.T) {
	killed, failed := 137, int32(1)
	eventlogtest.CheckKinds(t,
		RunnerSpawned{Lane: "review", RunnerID: "review-1", Pid: 42, Attempt: 1, Network: "none"},
		RunnerSpawnFailed{Lane: "review", RunnerID: "review-1", Error: "exec: not found"},
		RunnerReady{Lane: "review", RunnerID: "review-1", Pid: 42, Slots: 4, Spawned: true, Version: "r1", StartMs: 80},
		RunnerExited{Lane: "review", RunnerID: "review-1", Pid: 42, ExitCode: &killed, Signal: "SIGKILL", UptimeMs: 5000, Cause: "killed_memory", Spawned: true},
		RunnerKilled{Lane: "review", RunnerID: "review-1", Pid: 42, Reason: "memory_limit", Detail: "rss 2.1 GiB > 2 GiB"},
		RunnerHeartbeatBehind{Lane: "review", RunnerID: "review-1", Pid: 42, UnreadBytes: 4096, TimeoutMs: 5000},
		RunnerRestartScheduled{Lane: "review", RunnerID: "review-1", DelayMs: 500, RestartsInWindow: 2, Reason: "exited", Policy: "crash_loop"},
		RunnerPromoted{Lane: "review", RunnerID: "review-2", Pid: 43, Replaces: "review-1"},
		RunnerRejected{Lane: "review", Pid: 7, Reason: "bad token"},
		LaneStarted{Lane: "review", Runners: 2, Slots: 8, Network: "none", Socket: "/h/review.sock"},
		LaneDegraded{Lane: "review", RestartsInWindow: 5, MaxR: 5, MaxTMs: 60000},
		LaneRecovered{Lane: "review"},
		JobQueued{JobID: "j1", Lane: "review", Queued: 3},
		JobRejected{Lane: "review", Reason: "queue_full"},
		JobDispatched{JobID: "j1", Lane: "review", RunnerID: "review-1", Pid: 42},
		JobFinished{JobID: "j1", Lane: "review", RunnerID: "review-1", State: "failed", ExitCode: &failed, Error: "boom", DurationMs: 900,
			Signal: "SIGSEGV", OutputBytes: 10, OutputTruncated: true, StoppedBy: "sigkill", Record: map[string]any{"id": "j1"}},
		JobCancelRequested{JobID: "j1", Lane: "review", State: "running", Force: true, Again: true},
		JobOrphaned{JobID: "j1", Lane: "review", RunnerID: "review-1", Reason: "runner_lost"},
		LanePaused{Lane: "review", Reason: "min_free_memory", AvailableBytes: 1 << 30, MinFreeMemory: 2 << 30},
		LaneResumed{Lane: "review", Reason: "min_free_memory", AvailableBytes: 3 << 30, MinFreeMemory: 2 << 30},
		JobLimitExceeded{JobID: "j1", Lane: "review", RunnerID: "review-1", Limit: "memory", Measured: 3 << 20, Max: 1 << 20},
		JobRequeued{JobID: "j1", Lane: "review", RunnerID: "review-1", Reason: "runner_lost"},
		JobOutput{JobID: "j1", Stream: "stdout", Data: "hello\n"},
		OrphanKilled{Pid: 50, Pgid: 50, JobID: "j1", Lane: "review", Command: "sleep", Reason: "runner_gone"},
		JobRecovered{JobID: "j1", Lane: "review", Action: "failed", Was: "running", Error: "daemon_lost"},
		StateWriteFailed{What: "record job j1 submitted", Error: "state store /h/state.db: disk I/O error"},
		JobStreamOpened{JobID: "j1", Reader: "control", From: "start"},
		JobStreamClosed{JobID: "j1", Reader: "http", Reason: "detached", Bytes: 1 << 20, Missed: 4096},
	)
}

// job.finished: the log has the summary, subscribers the whole record.
func TestJobFinishedWireCarriesTheRecord(t *testing.T) {
	b, err := eventlog.Open(eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	code := int32(0)
	rec := &api.JobRecord{ID: "j1", Lane: "l", State: api.StateSucceeded, ExitCode: &code, Output: "all good"}
	r := b.Emit(JobFinished{JobID: "j1", Lane: "l", State: "succeeded", ExitCode: &code, DurationMs: 10, Record: rec})
	recJSON, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"event":"job.finished","data":{"job":` + string(recJSON) + "}}\n"; string(r.Wire()) != want ||
		!bytes.Contains(r.Wire(), []byte(`"output":"all good"`)) {
		t.Fatalf("job.finished Wire() = %s\nwant %s", r.Wire(), want)
	}
	if want := `"kind":"job.finished","job_id":"j1","lane":"l","state":"succeeded","exit_code":0,"duration_ms":10}`; !bytes.HasSuffix(r.Line, []byte(want)) {
		t.Fatalf("job.finished line %s, want it to end %s", r.Line, want)
	}
}
