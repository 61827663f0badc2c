package daemon

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control"
	"github.com/orchestrd/orchestrd/platform/nodefigs"
)

// registerMethods gives the control socket the daemon's own methods:
// status (its services in order, with their state), tree.get (the actor
// tree), metrics.get (the daemon's, the lanes' and the control socket's
// counters) and frontend.list (every way into the daemon: its address, or
// why it is off). The services register theirs (services.go).
func registerMethods(srv *control.Server, r *root) {
	sys, mgr, started, fronts := r.sys, r.mgr, r.started, r.fronts
	// Loopr's status: what its TUI shows in its header. Params, if any,
	// are ignored (as initialize's extra members are).
	srv.Handle("status", func(call api.Call) {
		var ignored map[string]json.RawMessage
		if err := call.Decode(&ignored); err != nil {
			call.Fail(err)
			return
		}
		st := api.Status{Running: true, Version: r.opts.Version, LLMReady: r.chatMgr.Ready(), Services: r.runner.Status()}
		if nf, err := nodefigs.Read(context.Background(), r.opts.Home); err != nil {
			st.NodeError = err.Error()
		} else {
			st.Node = &nf
		}
		call.Respond(st)
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
		byStatus, running := r.loopsMgr.Counts()
		call.Respond(api.Metrics{UptimeMs: time.Since(started).Milliseconds(), LaneMetrics: mgr.Metrics(),
			Goroutines: runtime.NumGoroutine(), OpenFDs: openFDs(), ConnMetrics: srv.Metrics(),
			FinishedOutputBytes: mgr.FinishedOutputBytes(),
			LoopMetrics:         api.LoopMetrics{RunningLoops: running, LoopsByStatus: byStatus}})
	})
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
