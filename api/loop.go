package api

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Loops: Loopr's loops (an agent iterating in a git worktree until a
// validation command passes), as the control socket and the store show
// them. The record is Loopr's (src/domain/loop_record.rs): snake_case, its
// members in Loopr's order, then orchestrd's.

// LoopType is a loop's level in the tree: a plan spawns specs, a spec
// phases, a phase one code loop.
type LoopType string

const (
	LoopPlan  LoopType = "plan"
	LoopSpec  LoopType = "spec"
	LoopPhase LoopType = "phase"
	LoopCode  LoopType = "code"
)

// LoopTypes are the loop types, from the root down.
var LoopTypes = []LoopType{LoopPlan, LoopSpec, LoopPhase, LoopCode}

// Valid reports whether t names a loop type.
func (t LoopType) Valid() bool {
	switch t {
	case LoopPlan, LoopSpec, LoopPhase, LoopCode:
		return true
	}
	return false
}

// LoopStatus is a loop's lifecycle state (Loopr's names).
type LoopStatus string

const (
	LoopPending     LoopStatus = "pending"
	LoopRunning     LoopStatus = "running"
	LoopPaused      LoopStatus = "paused"
	LoopRebasing    LoopStatus = "rebasing"
	LoopComplete    LoopStatus = "complete"
	LoopFailed      LoopStatus = "failed"
	LoopInvalidated LoopStatus = "invalidated"
)

// LoopStatuses are every status, in lifecycle order.
var LoopStatuses = []LoopStatus{LoopPending, LoopRunning, LoopPaused, LoopRebasing, LoopComplete, LoopFailed, LoopInvalidated}

// Terminal reports whether s is a final status (Loopr's: complete,
// failed, invalidated).
func (s LoopStatus) Terminal() bool {
	return s == LoopComplete || s == LoopFailed || s == LoopInvalidated
}

// Valid reports whether s names a status.
func (s LoopStatus) Valid() bool {
	for _, v := range LoopStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// Loop error codes (LoopRecord.Error), for a loop that ended failed or
// invalidated: why, in a word a script can match.
const (
	LoopErrMaxIterations  = "max_iterations"  // validation never passed
	LoopErrMergeConflict  = "merge_conflict"  // its branch did not merge into its parent's (kept, named)
	LoopErrChildFailed    = "child_failed"    // a child failed: the parent ends failed once its siblings ended
	LoopErrWorktreeGone   = "worktree_gone"   // its worktree was not there after a restart
	LoopErrCancelled      = "cancelled"       // loop.cancel, of it or an ancestor
	LoopErrPlanRejected   = "plan_rejected"   // plan.reject
	LoopErrParentIterated = "parent_iterated" // plan.iterate ran the plan again: its children are invalidated
	LoopErrGit            = "git_failed"      // git could not make or commit its worktree
	LoopErrGitTampered    = "git_tampered"    // its repository's git directory changed during an iteration (put back)
	LoopErrAgent          = "agent_failed"    // its executor pool refused every task
	LoopErrActorFailed    = "actor_failed"    // the daemon's actor of the loop failed (a bug: see actor.panicked)
	// LoopErrBudgetExceeded: what its agents' tasks cost (its own
	// iterations and its children's, token_usage.cost_usd) passed its
	// max_cost_usd; its live descendants end with it.
	LoopErrBudgetExceeded = "budget_exceeded"
	// LoopErrAuthFailed: its agent's key was refused (a task ended
	// auth_failed): not retried, as every iteration would be refused.
	LoopErrAuthFailed = "auth_failed"
)

// LoopRecord is a loop as loop.get, loop.list, loop.created and
// loop.updated show it. Times are Unix milliseconds, as Loopr's.
type LoopRecord struct {
	ID                string          `json:"id"`
	LoopType          LoopType        `json:"loop_type"`
	ParentID          *string         `json:"parent_id"` // null for a root, never omitted
	InputArtifact     *string         `json:"input_artifact"`
	OutputArtifacts   []string        `json:"output_artifacts"`
	PromptPath        string          `json:"prompt_path"`
	ValidationCommand string          `json:"validation_command"`
	MaxIterations     uint32          `json:"max_iterations"`
	Worktree          string          `json:"worktree"`
	Iteration         uint32          `json:"iteration"`
	Status            LoopStatus      `json:"status"`
	Progress          string          `json:"progress"`
	Context           json.RawMessage `json:"context"` // a plan's task in context.task
	CreatedAt         int64           `json:"created_at"`
	UpdatedAt         int64           `json:"updated_at"`

	// orchestrd's, after Loopr's.
	Error    string `json:"error,omitempty"`    // a LoopErr* code, for failed and invalidated
	Message  string `json:"message,omitempty"`  // what happened, in words (the failed children, the conflicting branch)
	Repo     string `json:"repo"`               // the git repository
	Base     string `json:"base"`               // the branch a root started from and merges into
	Branch   string `json:"branch"`             // loop/<id>
	TaskID   string `json:"task_id,omitempty"`  // the running iteration's executor task
	JobID    string `json:"job_id,omitempty"`   // the running iteration's validation job
	Children int    `json:"children,omitempty"` // how many loops it spawned
	Paused   bool   `json:"pause_requested,omitempty"`
	// Stage is what a running loop is doing: iterating, approval (a
	// validated plan waits for a person), children (it waits for its
	// children), merge (a complete tree waits for a person to approve its
	// merge into its base), merge_waiting (for its base's checkout to be
	// clean: MergeWait).
	Stage      string `json:"stage,omitempty"`
	ApprovalID string `json:"approval_id,omitempty"` // the approval it waits for
	// MaxCostUSD: the loop fails budget_exceeded once TokenUsage's
	// cost_usd passes it (0: no limit; loop.create's max_cost_usd, else
	// [loops] max_cost_usd). A root's counts its children's.
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	// OwnUsage sums the tokens and cost of its own iterations' tasks;
	// TokenUsage that and its children's TokenUsage.
	OwnUsage   *TokenUsage `json:"own_token_usage,omitempty"`
	TokenUsage *TokenUsage `json:"token_usage,omitempty"`
	// MergedInto is the branch its work was merged into (its parent's, or
	// a root's base); "" while it was not: then Branch holds it.
	MergedInto string `json:"merged_into,omitempty"`
	// ResumeAt (unix ms) is when a loop paused for its agent's usage
	// limit resumes by itself (0: not such a pause); a restarted daemon
	// keeps it.
	ResumeAt int64 `json:"resume_at,omitempty"`
	// MergeWait is why a root waits to merge into its base (stage
	// merge_waiting): the base is checked out with uncommitted changes.
	MergeWait *MergeWait `json:"merge_waiting,omitempty"`
	// RebaseOnto is the branch (its parent's) a child whose merge
	// conflicted is (status rebasing), or was, brought onto;
	// RebaseIterations counts the iterations it spent on that (resolving
	// the conflicts, passing validation again): [loops]
	// max_rebase_iterations bounds them, apart from max_iterations.
	RebaseOnto       string `json:"rebase_onto,omitempty"`
	RebaseIterations uint32 `json:"rebase_iterations,omitempty"`
}

// MergeWait is why a complete root waits to merge into its base (stage
// merge_waiting): the base is checked out in Checkout with uncommitted
// changes to Files (the first ones git status names; Total counts them
// all), or a merge in progress there. It merges once the checkout is
// clean (tried every little while, and at once on loop.merge). The paths
// are the user's: shown through printable, never logged.
type MergeWait struct {
	Into       string   `json:"into"`
	Checkout   string   `json:"checkout"`
	Files      []string `json:"files,omitempty"`
	Total      int      `json:"total,omitempty"`
	InProgress bool     `json:"merge_in_progress,omitempty"`
	Since      int64    `json:"since"` // Unix milliseconds
}

// Words is why it waits, in words: "checkout has uncommitted changes in
// a.go, b.go and 3 more files".
func (w *MergeWait) Words() string {
	if w.InProgress {
		return "checkout has a merge in progress"
	}
	s := "checkout has uncommitted changes in " + strings.Join(w.Files, ", ")
	if more := w.Total - len(w.Files); more > 0 {
		s += " and " + Count(more, "more file")
	}
	return s
}

// MergeFailedPrefix begins the Message of a loop whose branch could not
// be merged (error git_failed).
const MergeFailedPrefix = "its branch could not be merged into "

// MergeRetryable reports whether r is a root whose merge into its base
// failed (git_failed): loop.merge tries it again.
func (r LoopRecord) MergeRetryable() bool {
	return r.ParentID == nil && r.Status == LoopFailed && r.Error == LoopErrGit && r.MergedInto == "" &&
		strings.HasPrefix(r.Message, MergeFailedPrefix)
}

// Loop stages (LoopRecord.Stage).
const (
	StageIterating = "iterating"
	StageApproval  = "approval"
	StageChildren  = "children"
	StageMerge     = "merge"
	// StageMergeWaiting: a complete root waits to merge into its base,
	// whose checkout has uncommitted changes (LoopRecord.MergeWait).
	StageMergeWaiting = "merge_waiting"
)

// LoopIteration is one iteration of a loop, as loop.get's iterations show
// it: its prompt, its agent's task, its validation job and what came of it.
type LoopIteration struct {
	LoopID    string `json:"loop_id"`
	Iteration uint32 `json:"iteration"`
	Prompt    string `json:"prompt"`
	TaskID    string `json:"task_id,omitempty"`
	JobID     string `json:"job_id,omitempty"`
	Status    string `json:"status"` // running, passed, failed, interrupted
	Passed    bool   `json:"passed"`
	Feedback  string `json:"feedback,omitempty"` // what the next iteration is told
	// TokenUsage and Denied are its agent's task's (tool uses refused).
	TokenUsage *TokenUsage `json:"token_usage,omitempty"`
	Denied     int         `json:"denied,omitempty"`
	Commit     string      `json:"commit,omitempty"`
	// Rebase: a rebase iteration (its prompt the conflicts, or the
	// validation that failed after a rebase).
	Rebase     bool  `json:"rebase,omitempty"`
	StartedAt  int64 `json:"started_at"`
	FinishedAt int64 `json:"finished_at,omitempty"`
}

// TaskLoop is what execute_prompt carries of the loop a task iterates
// (TaskSpec.Loop), and what `orchestrd executor` gives its agent as
// ORCHESTRD_LOOP_ID, _TYPE, _ITERATION and _ARTIFACT.
type TaskLoop struct {
	ID        string   `json:"id"`
	LoopType  LoopType `json:"loop_type"`
	Iteration uint32   `json:"iteration"`
	Artifact  string   `json:"artifact,omitempty"` // relative to the worktree
}

// Loop method shapes.
type (
	// LoopListParams is loop.list's params.
	LoopListParams struct {
		Status   LoopStatus `json:"status,omitempty"`
		LoopType LoopType   `json:"loop_type,omitempty"`
		ParentID string     `json:"parent_id,omitempty"`
		Limit    int        `json:"limit,omitempty"`
		Cursor   string     `json:"cursor,omitempty"`
	}
	// LoopListResult is loop.list's answer: oldest first (a tree reads
	// down), next_cursor when there are more.
	LoopListResult struct {
		Loops      []LoopRecord `json:"loops"`
		NextCursor string       `json:"next_cursor,omitempty"`
	}
	// LoopGetResult is loop.get's answer.
	LoopGetResult struct {
		Loop       LoopRecord      `json:"loop"`
		Iterations []LoopIteration `json:"iterations"`
	}
	// LoopCreatePlanParams is loop.create_plan's params.
	LoopCreatePlanParams struct {
		Description string `json:"description"`
		Repo        string `json:"repo,omitempty"` // default: the daemon's [loops] repo, else refused
		Base        string `json:"base,omitempty"` // default: the repo's current branch
		// MaxCostUSD: the loop (with its children) fails budget_exceeded
		// past this cost; 0 is [loops] max_cost_usd.
		MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	}
	// LoopCreateParams is loop.create's params (orchestrd's: a root loop
	// of any type; its answer is loop.create_plan's).
	LoopCreateParams struct {
		LoopType    LoopType `json:"loop_type"`
		Description string   `json:"description"`
		Repo        string   `json:"repo,omitempty"`
		Base        string   `json:"base,omitempty"`
		MaxCostUSD  float64  `json:"max_cost_usd,omitempty"`
	}
	// LoopCreatePlanResult is its answer: loop_id (the spec's) and id
	// (what Loopr's client reads), the same.
	LoopCreatePlanResult struct {
		LoopID string `json:"loop_id"`
		ID     string `json:"id"`
		Status string `json:"status"` // "created"
	}
)

// CodeVersionMismatch is initialize's error for a client whose major
// version is not the daemon's (Loopr's VersionMismatch, data
// {client_version, daemon_version}). Only initialize answers it: the same
// number is CodeQueueFull of job.submit and task.execute. A loop that is
// not there is CodeNotFound (the spec's LoopNotFound, 1001), a method its
// status does not allow CodeInvalidState (1002, the status named).
const CodeVersionMismatch = 1004

// ChildLoopID is the id of parent's n-th child (from 1): {parent}-{NNN}.
func ChildLoopID(parent string, n int) string {
	s := strconv.Itoa(n)
	if len(s) < 3 {
		s = strings.Repeat("0", 3-len(s)) + s
	}
	return parent + "-" + s
}
