package main

import (
	"bytes"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

func TestDrawLoopsTree(t *testing.T) {
	t.Parallel()
	p := func(s string) *string { return &s }
	root := "1764000000000-00112233aabbccdd"
	loops := []api.LoopRecord{
		{ID: root, LoopType: api.LoopPlan, Status: api.LoopComplete, Iteration: 2, MaxIterations: 10},
		{ID: root + "-002", ParentID: p(root), LoopType: api.LoopSpec, Status: api.LoopFailed, Iteration: 10, MaxIterations: 10, Error: api.LoopErrMaxIterations},
		{ID: root + "-001", ParentID: p(root), LoopType: api.LoopSpec, Status: api.LoopRunning, Iteration: 1, MaxIterations: 10},
		{ID: root + "-001-001", ParentID: p(root + "-001"), LoopType: api.LoopPhase, Status: api.LoopPending, MaxIterations: 10},
		{ID: root + "-003", ParentID: p(root), LoopType: api.LoopSpec, Status: api.LoopRebasing, Iteration: 4, MaxIterations: 10,
			RebaseOnto: "loop/" + root, RebaseIterations: 2},
		// Its parent is not listed (filtered out): drawn as a root.
		{ID: "1764000000001-ffffffffffffffff-003", ParentID: p("1764000000001-ffffffffffffffff"), LoopType: api.LoopCode,
			Status: api.LoopRunning, Iteration: 3, MaxIterations: 100, Paused: true},
		{ID: "1764000000002-eeeeeeeeeeeeeeee", LoopType: api.LoopCode, Status: api.LoopRunning, Iteration: 2, MaxIterations: 100,
			Base: "main", Stage: api.StageMerge, ApprovalID: "a-1"},
	}
	var b bytes.Buffer
	drawLoops(&b, loops)
	want := "[plan] " + root + " - complete (2/10)\n" +
		"  [spec] " + root + "-001 - running (1/10)\n" +
		"    [phase] " + root + "-001-001 - pending (0/10)\n" +
		"  [spec] " + root + "-002 - failed (10/10) [max_iterations]\n" +
		"  [spec] " + root + "-003 - rebasing (4/10) [rebasing onto loop/" + root + ": 2 rebase iterations]\n" +
		"[code] 1764000000001-ffffffffffffffff-003 - running (3/100) [pausing after this iteration]\n" +
		"[code] 1764000000002-eeeeeeeeeeeeeeee - running (2/100) [merge into main awaiting approval: orchestrd plan approve 1764000000002-eeeeeeeeeeeeeeee]\n"
	if b.String() != want {
		t.Fatalf("tree:\n%s\nwant:\n%s", b.String(), want)
	}
}
