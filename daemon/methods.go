package daemon

import (
	"encoding/json"
	"os"
	"runtime"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control"
	"github.com/orchestrd/orchestrd/lanes"
)

// registerMethods gives the control socket its methods beyond the
// protocol's own: the lanes' (job.*, lane.list) and the daemon's, tree.get
// (the actor tree), metrics.get (the daemon's, the lanes' and the control
// socket's counters) and frontend.list (every way into the daemon: its
// address, or why it is off).
func registerMethods(srv *control.Server, sys *actors.System, mgr *lanes.Manager, started time.Time, fronts *frontEnds,
	loopCounts func() (map[api.LoopStatus]int, int), version string, llmReady func() bool) {
	mgr.Register(srv)
	// Loopr's status: what its TUI shows in its header. Params, if any,
	// are ignored (as initialize's extra members are).
	srv.Handle("status", func(call api.Call) {
		var ignored map[string]json.RawMessage
		if err := call.Decode(&ignored); err != nil {
			call.Fail(err)
			return
		}
		call.Respond(statusResult{Running: true, Version: version, LLMReady: llmReady()})
	})
	srv.Handle("frontend.list", func(call api.Call) {
		if err := call.Decode(&api.NoParams{}); err != nil {
			call.Fail(err)
			return
		}
		call.Respond(api.FrontEndList{FrontEnds: fronts.list()})
	})
	srv.Handle("tree.get", func(call api.Call) {
		if err := call.Decode(&api.NoParams{}); err != nil {
			call.Fail(err)
			return
		}
		call.Respond(treeResult{Tree: sys.Tree()})
	})
	srv.Handle("metrics.get", func(call api.Call) {
		if err := call.Decode(&api.NoParams{}); err != nil {
			call.Fail(err)
			return
		}
		byStatus, running := loopCounts()
		call.Respond(api.Metrics{UptimeMs: time.Since(started).Milliseconds(), LaneMetrics: mgr.Metrics(),
			Goroutines: runtime.NumGoroutine(), OpenFDs: openFDs(), ConnMetrics: srv.Metrics(),
			FinishedOutputBytes: mgr.FinishedOutputBytes(),
			LoopMetrics:         api.LoopMetrics{RunningLoops: running, LoopsByStatus: byStatus}})
	})
}

// statusResult is status's answer (Loopr's): llm_ready says the chat can
// answer (its pool is configured and has an executor up).
type statusResult struct {
	Running  bool   `json:"running"`
	Version  string `json:"version"`
	LLMReady bool   `json:"llm_ready"`
}

type treeResult struct {
	Tree []actors.TreeNode `json:"tree"`
}

// openFDs counts this process's open file descriptors (-1 if unknown).
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1 // the directory handle ReadDir itself opened
}
