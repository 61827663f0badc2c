package daemon

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind the daemon emits is registered, sampled here, and logged as
// it promises.
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		DaemonStarted{Pid: 1, Version: "v1", Home: "/h", Lanes: []string{"a", "b"}, Recovered: true, Requeued: 2, Failed: 1, SeqSkipped: 65000},
		DaemonStopping{Signal: "SIGTERM", Reason: "signal"},
		DaemonStopped{UptimeMs: 1234567, Killed: 2},
		ActorPanicked{Actor: "lane/review", Panic: "index out of range", Stack: "goroutine 1 [running]:\nmain.main()\n\t/x.go:1", Directive: "restart"},
		ActorRestarted{Actor: "lane/review", Restarts: 1},
		JobsPruned{Count: 500, RetainJobs: 10000, RetainFor: "168h0m0s"},
		ApprovalsPruned{Count: 12, RetainJobs: 10000, RetainFor: "168h0m0s"},
		MetricsUpdate{RunningLoops: 2, Loops: map[string]int{"running": 2, "pending": 1}},
	)
}
