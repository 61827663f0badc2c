package loops

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind loops emits is registered, sampled here, and logged as it
// promises.
func TestKinds(t *testing.T) {
	pid := "1-00ff"
	rec := api.LoopRecord{ID: pid + "-001", LoopType: api.LoopSpec, ParentID: &pid, OutputArtifacts: []string{},
		MaxIterations: 10, Status: api.LoopRunning, Context: []byte(`{"task":"t"}`), CreatedAt: 1, UpdatedAt: 2,
		Repo: "/r", Base: "main", Branch: "loop/" + pid + "-001"}
	code := int32(2)
	eventlogtest.CheckKinds(t,
		LoopCreated{newLoopLine(rec)},
		LoopUpdated{newLoopLine(rec)},
		LoopIterationEnded{ID: rec.ID, Iteration: 1, Status: "failed"},
		LoopArtifact{ID: rec.ID, Path: ".loopr/specs/001-x.spec.md"},
		LoopIterationStarted{ID: rec.ID, Iteration: 1, TaskID: "t-1", PromptBytes: 100},
		LoopValidationStarted{ID: rec.ID, Iteration: 1, JobID: "j-1", Lane: "no-net"},
		LoopValidationFailed{ID: rec.ID, Iteration: 1, Reason: "exit_code", ExitCode: &code, JobID: "j-1", TaskID: "t-1", FeedbackBytes: 40},
		LoopValidationPassed{ID: rec.ID, Iteration: 2, JobID: "j-2"},
		LoopCommitted{ID: rec.ID, Iteration: 2, Commit: "abc"},
		LoopMerged{ID: rec.ID, Branch: rec.Branch, Into: "loop/" + pid},
		LoopMergeConflicted{ID: rec.ID, Branch: rec.Branch, Into: "main"},
		LoopRebaseStarted{ID: rec.ID, Onto: "loop/" + pid, Head: "abc", Continued: true},
		LoopRebased{ID: rec.ID, Commit: "abc", Iteration: 3},
		LoopRebaseConflicted{ID: rec.ID, Files: 2, Iteration: 3},
		LoopBranchDeleted{ID: rec.ID, Branch: rec.Branch, Into: "loop/" + pid},
		LoopArtifactsDropped{ID: pid, Into: "main", Files: 3, Commit: "abc"},
		LoopChildrenSpawned{ID: pid, Children: []string{rec.ID}},
		LoopApprovalAsked{ID: pid, ApprovalID: "a-1", Question: "plan"},
		LoopEnded{ID: rec.ID, Status: api.LoopFailed, Error: api.LoopErrMaxIterations},
		LoopPaused{ID: rec.ID, Reason: "requested"},
		LoopResumed{ID: rec.ID, Reason: "requested"},
		LoopCancelled{ID: rec.ID, TaskID: "t-1"},
		LoopDeleted{ID: pid, Removed: []string{pid, rec.ID}},
		LoopRecovered{ID: rec.ID, Iteration: 3, Interrupted: true, WIPCommit: "def"},
		LoopGitFailed{ID: rec.ID, Op: "commit"},
		LoopGitTampered{ID: rec.ID, Iteration: 2, After: "validation", Paths: []string{"hooks/pre-commit"}, Restored: true},
		LoopBudgetExceeded{ID: rec.ID, CostUSD: 1.25, MaxCostUSD: 1, Iteration: 3},
		LoopMergeWaiting{ID: pid, Into: "main", Files: 2},
		LoopMergeRetried{ID: pid, Into: "main", From: "failed (git_failed)"},
	)
}

// loop.created and loop.updated give subscribers the whole record (Loopr's
// wire) and the log only what no agent or job wrote: progress (validation
// output) and context (the task) as a size or not at all.
func TestLoopLineKeepsAgentTextOut(t *testing.T) {
	rec := api.LoopRecord{ID: "1-00ff", LoopType: api.LoopCode, OutputArtifacts: []string{}, MaxIterations: 5, Iteration: 2,
		Status: api.LoopRunning, Progress: "\n---\n## Iteration 1 Failed\nSECRET-FROM-THE-JOB\n",
		Context: []byte(`{"task":"TASK-TEXT"}`), Repo: "/r", Base: "main", Branch: "loop/1-00ff"}
	for _, ev := range []interface {
		WireData() any
	}{LoopCreated{newLoopLine(rec)}, LoopUpdated{newLoopLine(rec)}} {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(line, []byte("SECRET-FROM-THE-JOB")) || bytes.Contains(line, []byte("TASK-TEXT")) ||
			!bytes.Contains(line, []byte(`"progress_bytes":`+strconv.Itoa(len(rec.Progress)))) || !bytes.Contains(line, []byte(`"status":"running"`)) {
			t.Fatalf("log line %s", line)
		}
		wire, err := json.Marshal(ev.WireData())
		if err != nil {
			t.Fatal(err)
		}
		var back api.LoopRecord
		if err := json.Unmarshal(wire, &back); err != nil || back.Progress != rec.Progress || back.ID != rec.ID {
			t.Fatalf("wire data %s: %v", wire, err)
		}
	}
}
