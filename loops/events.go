package loops

import (
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Loop events. Loopr's clients read loop.created, loop.updated,
// loop.iteration and loop.artifact; the others are the supervisor's log
// of every decision. None carries what an agent wrote: sizes, hashes and
// codes only (a loop's record carries its progress, the validation
// output a person reads with loop.get: loop.created and loop.updated are
// Loopr's wire shape).

// LoopCreated: a loop was recorded. A subscriber's data is the record
// itself (Loopr's wire); the log line has what a person needs of it and
// nothing an agent or a job wrote (loopLine: the record's progress holds
// validation output, its context the task a client gave).
type LoopCreated struct{ loopLine }

func (LoopCreated) Kind() string { return "loop.created" }

// LoopUpdated: a loop's record changed (committed); data as LoopCreated's.
type LoopUpdated struct{ loopLine }

func (LoopUpdated) Kind() string { return "loop.updated" }

// loopLine is what loop.created and loop.updated write to the log: the
// record's ids, type, status and counts, its progress as a size.
type loopLine struct {
	ID            string         `json:"id"`
	LoopType      api.LoopType   `json:"loop_type"`
	ParentID      *string        `json:"parent_id"`
	Status        api.LoopStatus `json:"status"`
	Iteration     uint32         `json:"iteration"`
	MaxIterations uint32         `json:"max_iterations"`
	Stage         string         `json:"stage,omitempty"`
	ApprovalID    string         `json:"approval_id,omitempty"`
	Error         string         `json:"error,omitempty"`
	TaskID        string         `json:"task_id,omitempty"`
	JobID         string         `json:"job_id,omitempty"`
	ProgressBytes int            `json:"progress_bytes"`
	Record        api.LoopRecord `json:"-"`
}

func newLoopLine(r api.LoopRecord) loopLine {
	return loopLine{ID: r.ID, LoopType: r.LoopType, ParentID: r.ParentID, Status: r.Status, Iteration: r.Iteration,
		MaxIterations: r.MaxIterations, Stage: r.Stage, ApprovalID: r.ApprovalID, Error: r.Error, TaskID: r.TaskID,
		JobID: r.JobID, ProgressBytes: len(r.Progress), Record: r}
}

// WireData is the record itself, as Loopr's client reads it.
func (e LoopCreated) WireData() any { return e.Record }

// WireData is the record itself, as Loopr's client reads it.
func (e LoopUpdated) WireData() any { return e.Record }

// LoopIterationEnded is Loopr's loop.iteration: an iteration ended, passed
// or not.
type LoopIterationEnded struct {
	ID        string `json:"id"`
	Iteration uint32 `json:"iteration"`
	Status    string `json:"status"`
	Passed    bool   `json:"passed"`
}

func (LoopIterationEnded) Kind() string { return "loop.iteration" }

// LoopArtifact is Loopr's loop.artifact: the loop's artifact (a path
// relative to its worktree) is committed.
type LoopArtifact struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

func (LoopArtifact) Kind() string { return "loop.artifact" }

// LoopIterationStarted: an iteration's agent task was started.
type LoopIterationStarted struct {
	ID          string `json:"id"`
	Iteration   uint32 `json:"iteration"`
	TaskID      string `json:"task_id"`
	PromptBytes int    `json:"prompt_bytes"`
}

func (LoopIterationStarted) Kind() string { return "loop.iteration_started" }

// LoopValidationStarted: an iteration's validation job was submitted.
type LoopValidationStarted struct {
	ID        string `json:"id"`
	Iteration uint32 `json:"iteration"`
	JobID     string `json:"job_id"`
	Lane      string `json:"lane"`
}

func (LoopValidationStarted) Kind() string { return "loop.validation_started" }

// LoopValidationFailed: an iteration did not validate; the next one is
// told why (feedback_bytes of it).
type LoopValidationFailed struct {
	ID            string `json:"id"`
	Iteration     uint32 `json:"iteration"`
	Reason        string `json:"reason"` // exit_code, job_failed, task_failed, artifact_invalid
	ExitCode      *int32 `json:"exit_code,omitempty"`
	JobID         string `json:"job_id,omitempty"`
	TaskID        string `json:"task_id,omitempty"`
	FeedbackBytes int    `json:"feedback_bytes"`
}

func (LoopValidationFailed) Kind() string { return "loop.validation_failed" }

// LoopValidationPassed: an iteration validated.
type LoopValidationPassed struct {
	ID        string `json:"id"`
	Iteration uint32 `json:"iteration"`
	JobID     string `json:"job_id,omitempty"`
}

func (LoopValidationPassed) Kind() string { return "loop.validation_passed" }

// LoopCommitted: a validated iteration's work was committed in its
// worktree (commit "" : there was nothing to commit).
type LoopCommitted struct {
	ID        string `json:"id"`
	Iteration uint32 `json:"iteration"`
	Commit    string `json:"commit"`
	Recovery  bool   `json:"recovery,omitempty"` // a WIP: recovery commit
}

func (LoopCommitted) Kind() string { return "loop.committed" }

// LoopMerged: a loop's branch was merged into Into.
type LoopMerged struct {
	ID     string `json:"id"`
	Branch string `json:"branch"`
	Into   string `json:"into"`
}

func (LoopMerged) Kind() string { return "loop.merged" }

// LoopBranchDeleted: a loop's branch was deleted once its work was merged
// into Into (its parent's branch, or a root's base) and its worktree
// removed ([loops] keep_branches = false).
type LoopBranchDeleted struct {
	ID     string `json:"id"`
	Branch string `json:"branch"`
	Into   string `json:"into"`
}

func (LoopBranchDeleted) Kind() string { return "loop.branch_deleted" }

// LoopArtifactsDropped: a root's branch dropped its tree's .loopr/
// artifacts in a commit of its own before merging into Into ([loops]
// commit_artifacts = false); they stay in the branch's history.
type LoopArtifactsDropped struct {
	ID     string `json:"id"`
	Into   string `json:"into"`
	Files  int    `json:"files"`
	Commit string `json:"commit"`
}

func (LoopArtifactsDropped) Kind() string { return "loop.artifacts_dropped" }

// LoopMergeConflicted: a loop's branch did not merge into Into; the branch
// is kept.
type LoopMergeConflicted struct {
	ID     string `json:"id"`
	Branch string `json:"branch"`
	Into   string `json:"into"`
}

func (LoopMergeConflicted) Kind() string { return "loop.merge_conflicted" }

// LoopRebaseStarted: a child whose merge into its parent's branch
// conflicted (status rebasing) is being brought onto Onto's head (the
// commit Head): Onto merged into its branch, in its worktree.
// Continued: a rebase left in progress (by an earlier iteration, or a
// daemon that stopped) is taken up as it is.
type LoopRebaseStarted struct {
	ID        string `json:"id"`
	Onto      string `json:"onto"`
	Head      string `json:"head"`
	Continued bool   `json:"continued,omitempty"`
}

func (LoopRebaseStarted) Kind() string { return "loop.rebase_started" }

// LoopRebased: the rebase applied (at once, or as an iteration's agent
// resolved it: Iteration); Commit is the branch's head after it.
// Validation runs again, then the merge.
type LoopRebased struct {
	ID        string `json:"id"`
	Commit    string `json:"commit"`
	Iteration uint32 `json:"iteration,omitempty"`
}

func (LoopRebased) Kind() string { return "loop.rebased" }

// LoopRebaseConflicted: the rebase stopped on Files conflicting files
// (a count: their names are the agent's text, in its prompt only);
// Iteration is the iteration started to resolve them, 0 when none is
// (past max_rebase_iterations: the loop fails merge_conflict).
type LoopRebaseConflicted struct {
	ID        string `json:"id"`
	Files     int    `json:"files"`
	Iteration uint32 `json:"iteration"`
}

func (LoopRebaseConflicted) Kind() string { return "loop.rebase_conflicted" }

// LoopChildrenSpawned: a validated loop (or an approved plan) spawned its
// children.
type LoopChildrenSpawned struct {
	ID       string   `json:"id"`
	Children []string `json:"children"`
}

func (LoopChildrenSpawned) Kind() string { return "loop.children_spawned" }

// LoopApprovalAsked: a loop waits for a person (kind plan: may the plan
// spawn its specs; kind merge: may the tree merge into its base).
type LoopApprovalAsked struct {
	ID         string `json:"id"`
	ApprovalID string `json:"approval_id"`
	Question   string `json:"question"` // plan, merge
}

func (LoopApprovalAsked) Kind() string { return "loop.approval_asked" }

// LoopEnded: a loop reached a terminal status.
type LoopEnded struct {
	ID     string         `json:"id"`
	Status api.LoopStatus `json:"status"`
	Error  string         `json:"error,omitempty"`
}

func (LoopEnded) Kind() string { return "loop.ended" }

// LoopPaused, LoopResumed: loop.pause and loop.resume (or a usage limit).
type LoopPaused struct {
	ID     string `json:"id"`
	Reason string `json:"reason"` // requested, usage_limit
	// Until: when a usage_limit pause resumes by itself (the agent's
	// retry_at when it gave one, later than now and within 24h; else
	// usage_limit_pause from now); RetryAt says the agent gave it.
	Until   *time.Time `json:"until,omitempty"`
	RetryAt bool       `json:"retry_at,omitempty"`
}

func (LoopPaused) Kind() string { return "loop.paused" }

// LoopBudgetExceeded: what the loop's agents' tasks cost (with its
// children's) passed its max_cost_usd: it fails budget_exceeded, its live
// descendants with it.
type LoopBudgetExceeded struct {
	ID         string  `json:"id"`
	CostUSD    float64 `json:"cost_usd"`
	MaxCostUSD float64 `json:"max_cost_usd"`
	Iteration  uint32  `json:"iteration"`
}

func (LoopBudgetExceeded) Kind() string { return "loop.budget_exceeded" }

type LoopResumed struct {
	ID     string `json:"id"`
	Reason string `json:"reason"` // requested, usage_limit_passed
}

func (LoopResumed) Kind() string { return "loop.resumed" }

// LoopCancelled: loop.cancel of it or of an ancestor.
type LoopCancelled struct {
	ID     string `json:"id"`
	TaskID string `json:"task_id,omitempty"` // stopped
	JobID  string `json:"job_id,omitempty"`  // cancelled
}

func (LoopCancelled) Kind() string { return "loop.cancelled" }

// LoopDeleted: loop.delete removed a loop and its descendants.
type LoopDeleted struct {
	ID      string   `json:"id"`
	Removed []string `json:"removed"`
}

func (LoopDeleted) Kind() string { return "loop.deleted" }

// LoopRecovered: a loop a dead daemon left running goes on; its
// interrupted iteration is counted and the next one has the next number.
type LoopRecovered struct {
	ID          string `json:"id"`
	Iteration   uint32 `json:"iteration"`
	Interrupted bool   `json:"interrupted"` // an iteration was under way
	WIPCommit   string `json:"wip_commit,omitempty"`
}

func (LoopRecovered) Kind() string { return "loop.recovered" }

// LoopGitFailed: a git operation of a loop failed (its first line of
// error, which is git's, not the agent's).
type LoopGitFailed struct {
	ID string `json:"id"`
	Op string `json:"op"`
}

func (LoopGitFailed) Kind() string { return "loop.git_failed" }

// LoopMergeWaiting: a complete root did not merge into its base, which
// is checked out with uncommitted changes (Files of them, or a merge in
// progress there): it waits (stage merge_waiting) and tries again by
// itself and on loop.merge. The paths are in the loop's record, never
// here: they are the user's.
type LoopMergeWaiting struct {
	ID         string `json:"id"`
	Into       string `json:"into"`
	Files      int    `json:"files"`
	InProgress bool   `json:"merge_in_progress,omitempty"`
}

func (LoopMergeWaiting) Kind() string { return "loop.merge_waiting" }

// LoopMergeRetried: loop.merge made a root whose merge into its base had
// failed (From: its status and error) live again, waiting to merge.
type LoopMergeRetried struct {
	ID   string `json:"id"`
	Into string `json:"into"`
	From string `json:"from"`
}

func (LoopMergeRetried) Kind() string { return "loop.merge_retried" }

// LoopGitTampered: the repository's git directory (its config, hooks,
// info, a worktree's config.worktree) changed during an iteration, where
// only a person may change it. What changed was put back as it was
// before the iteration; the loop fails git_tampered. Paths are relative
// to the git directory, each as eventlog.Ident shows a name someone else
// chose (a hook's name is the agent's).
type LoopGitTampered struct {
	ID        string   `json:"id"`
	Iteration uint32   `json:"iteration"`
	After     string   `json:"after"` // "agent" or "validation": which step wrote it
	Paths     []string `json:"paths"`
	More      int      `json:"more,omitempty"` // paths past the first 20, not named
	Restored  bool     `json:"restored"`
}

func (LoopGitTampered) Kind() string { return "loop.git_tampered" }

func init() {
	eventlog.Register(LoopCreated{}, LoopUpdated{}, LoopIterationEnded{}, LoopArtifact{}, LoopIterationStarted{},
		LoopValidationStarted{}, LoopValidationFailed{}, LoopValidationPassed{}, LoopCommitted{}, LoopMerged{},
		LoopBranchDeleted{}, LoopArtifactsDropped{},
		LoopMergeConflicted{}, LoopRebaseStarted{}, LoopRebased{}, LoopRebaseConflicted{}, LoopChildrenSpawned{}, LoopApprovalAsked{}, LoopEnded{}, LoopPaused{}, LoopResumed{},
		LoopCancelled{}, LoopDeleted{}, LoopRecovered{}, LoopGitFailed{}, LoopGitTampered{}, LoopBudgetExceeded{},
		LoopMergeWaiting{}, LoopMergeRetried{})
}
