package loops

import (
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/loops/gitwt"
)

// RebaseOutcome is what Git.Rebase did (gitwt's result: the conflicting
// paths and their regions are the agents' text, for a prompt only).
type RebaseOutcome = gitwt.RebaseResult

// The loops domain reaches the rest of the daemon through these small
// interfaces; daemon.Run hands it implementations over the executors, the
// lanes, the approvals, the state store and git. Every method returns at
// once (a loop's actor calls them from Receive); what takes time answers
// through its function, called exactly once on any goroutine, which must
// not block. Git is the exception: its calls block, and the loops domain
// makes them on goroutines of its own, never from an actor.

// Agents runs an iteration's agent: an executor task.
type Agents interface {
	// Execute starts a task; reply gets its id once it is recorded.
	Execute(spec api.TaskSpec, reply func(taskID string, err error))
	// Wait calls done once with the task's record when it has ended.
	Wait(taskID string, done func(api.TaskRecord)) error
	// Stop stops a running task (force: at once).
	Stop(taskID string, force bool)
	// DeniedTools calls done once with the names of the tools whose use
	// was refused in an ended task (its permission_denied messages, each
	// name once, as eventlog.Ident makes a name someone else chose safe
	// to show), nil when they cannot be read.
	DeniedTools(tr api.TaskRecord, done func(tools []string))
}

// JobResult is how an iteration's validation job ended.
type JobResult struct {
	JobID    string
	State    api.State
	ExitCode *int32
	Error    string // the job's error (a timeout, a lost runner)
	// Duration is how long the job ran.
	Duration time.Duration
	// Tail is the last bytes of the job's output, at most MaxFeedback.
	Tail []byte
}

// Passed reports whether the job exited 0.
func (r JobResult) Passed() bool {
	return r.State == api.StateSucceeded && r.ExitCode != nil && *r.ExitCode == 0
}

// Jobs runs validation jobs on a lane.
type Jobs interface {
	// Run submits a job: started gets its id once it is recorded (or the
	// refusal, and then ended is never called); ended gets its result once
	// it has finished.
	Run(spec api.JobSpec, started func(jobID string, err error), ended func(JobResult))
	// Cancel kills a running job at once.
	Cancel(jobID string)
	// Wait calls done once the job has ended (at once if it has); the
	// func it returns forgets done.
	Wait(jobID string, done func()) (func(), error)
}

// GateAnswer is a person's answer to a loop's question.
type GateAnswer struct {
	ApprovalID string
	Approved   bool
	// Iterate: the plan is to run again with Feedback (plan.iterate).
	Iterate  bool
	Feedback string
	Reason   string // why it was rejected, timed out or cancelled
}

// Gate asks people: may a validated plan spawn its specs (kind plan), may
// a complete tree merge into its base.
type Gate interface {
	// Ask puts a question; answer is called once. content and specs are
	// what the approval shows.
	Ask(loopID, kind, content string, specs []string, answer func(GateAnswer)) (approvalID string, cancel func(reason string), err error)
	// Await hears the answer to a question asked before (by a daemon
	// that died since): answer is called once; an error if the approval
	// is not known.
	Await(approvalID string, answer func(GateAnswer)) error
}

// Store is the loops' durable record. The write methods queue the write
// and return at once: an error if it was refused outright (done is then
// not called), else done is called once, with nil once it is committed.
// Writes are committed in the order they are queued.
type Store interface {
	SaveLoop(r api.LoopRecord, done func(error)) error
	SaveIteration(it api.LoopIteration, done func(error)) error
	DeleteLoops(ids []string, done func(error)) error
	// Loops reads every loop, oldest first.
	Loops() ([]api.LoopRecord, error)
	Iterations(loopID string) ([]api.LoopIteration, error)
}

// Git is what the loops do with git (GitWT, over loops/gitwt, is the
// real one). Every call blocks; the domain makes them off its actors.
type Git interface {
	// CurrentBranch is the branch checked out in repo.
	CurrentBranch(repo string) (string, error)
	// AddWorktree makes dir (<repo>/.loopr/worktrees/<id>) a worktree of
	// repo on a new branch made from from (an existing branch is checked
	// out as it is).
	AddWorktree(repo, dir, branch, from string) error
	// CommitAll commits everything in the worktree dir as msg; commit is
	// the new commit's hash, "" when there was nothing to commit.
	CommitAll(repo, dir, msg string) (commit string, err error)
	// RecoverWIP commits what an interrupted iteration left in dir as
	// "WIP: recovery" ("" : nothing).
	RecoverWIP(repo, dir string) (commit string, err error)
	// Merge merges branch into into (--no-ff, msg), wherever into is
	// checked out. conflict reports a merge that did not apply (aborted:
	// both branches as they were).
	Merge(repo, into, branch, msg string) (conflict bool, err error)
	// Rebase brings the branch of the worktree dir onto the head of the
	// branch onto (merges it in, gitwt's Repo.Rebase): Conflicts empty, it
	// applied (Commit its head); else the rebase stays in progress, the
	// markers in the files, Conflicts naming them with their regions (a
	// rebase already in progress is taken up as it is).
	Rebase(repo, dir, onto, msg string) (RebaseOutcome, error)
	// ResolveRebase commits the rebase in progress in dir as msg, unless a
	// conflicting file still holds conflict markers: unresolved names
	// those (nothing committed).
	ResolveRebase(repo, dir, msg string) (commit string, unresolved []string, err error)
	// RecoverRebase is RecoverWIP for a loop that was rebasing: a rebase
	// in progress is kept (merging), else the work left is committed.
	RecoverRebase(repo, dir string) (commit string, merging bool, err error)
	// RemoveWorktree removes the worktree dir of repo (what is in it is
	// gone; its branch stays).
	RemoveWorktree(repo, dir string) error
	// DeleteBranch deletes a branch of repo; deleted is false when it was
	// not there.
	DeleteBranch(repo, branch string) (deleted bool, err error)
	// Guard copies what of repo's git directory could make git run code
	// (its config, hooks, info, worktrees' config.worktree); check puts
	// back what changed since and names it (relative to the git
	// directory), none when nothing did.
	Guard(repo string) (check func() (changed []string, err error), err error)
}
