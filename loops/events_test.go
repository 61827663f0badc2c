package loops

import (
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
		LoopCreated{rec},
		LoopUpdated{rec},
		LoopIterationEnded{ID: rec.ID, Iteration: 1, Status: "failed"},
		LoopArtifact{ID: rec.ID, Path: ".loopr/specs/001-x.spec.md"},
		LoopIterationStarted{ID: rec.ID, Iteration: 1, TaskID: "t-1", PromptBytes: 100},
		LoopValidationStarted{ID: rec.ID, Iteration: 1, JobID: "j-1", Lane: "no-net"},
		LoopValidationFailed{ID: rec.ID, Iteration: 1, Reason: "exit_code", ExitCode: &code, JobID: "j-1", TaskID: "t-1", FeedbackBytes: 40},
		LoopValidationPassed{ID: rec.ID, Iteration: 2, JobID: "j-2"},
		LoopCommitted{ID: rec.ID, Iteration: 2, Commit: "abc"},
		LoopMerged{ID: rec.ID, Branch: rec.Branch, Into: "loop/" + pid},
		LoopMergeConflicted{ID: rec.ID, Branch: rec.Branch, Into: "main"},
		LoopChildrenSpawned{ID: pid, Children: []string{rec.ID}},
		LoopApprovalAsked{ID: pid, ApprovalID: "a-1", Question: "plan"},
		LoopEnded{ID: rec.ID, Status: api.LoopFailed, Error: api.LoopErrMaxIterations},
		LoopPaused{ID: rec.ID, Reason: "requested"},
		LoopResumed{ID: rec.ID, Reason: "requested"},
		LoopCancelled{ID: rec.ID, TaskID: "t-1"},
		LoopDeleted{ID: pid, Removed: []string{pid, rec.ID}},
		LoopRecovered{ID: rec.ID, Iteration: 3, Interrupted: true, WIPCommit: "def"},
		LoopGitFailed{ID: rec.ID, Op: "commit"},
	)
}
