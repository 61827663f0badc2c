package loops

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/loops/artifact"
	"github.com/orchestrd/orchestrd/loops/gitwt"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Loop actor messages.
type (
	// do runs f in the actor, unless the loop moved on (gen differs): what
	// a task, a job, git or the store answered.
	do struct {
		gen int
		f   func(c *actors.Context)
	}
	slotGranted  struct{}
	childChanged struct{ rec api.LoopRecord }
	ctl          struct {
		op    string
		arg   string
		reply func(any, error)
	}
	mergeDone struct {
		conflict bool
		err      error
	}
	usageLimitPassed struct{}
	// mergeRetry: try the merge of a root waiting to merge (merge_waiting)
	// again: its poll, loop.merge (reply).
	mergeRetry struct{}
)

// anyGen is a do that runs whatever the loop's generation.
const anyGen = -1

// loop is one live loop's actor: it owns the loop's record, its current
// iteration and its children's bookkeeping. It never blocks: the agent's
// task, the validation job, git and the store answer with messages.
type loop struct {
	m      *Manager
	sup    actors.Ref
	rec    api.LoopRecord
	how    int
	reply  func(api.LoopRecord, error)
	parent *api.LoopRecord
	kids   []api.LoopRecord // as recovered

	self actors.Ref
	// held: the task and job the loop had under way when it ended (a
	// cancel stops them; they may still be dying): its worktree goes once
	// they have ended.
	held    heldWork
	gen     int                // bumped when the work under way is dropped (cancel, a new iteration)
	it      *api.LoopIteration // the current iteration
	slot    bool
	kidStat map[string]api.LoopStatus
	kidErr  map[string]string
	// kidUsage: each child's TokenUsage (its own and its children's), as
	// its last record said.
	kidUsage map[string]*api.TokenUsage
	gate     func(reason string)
	resumeT  func()
	// denials: what the iteration's feedback says of the tool uses its
	// task had refused ("" when none was), should validation fail.
	denials string
	// guard checks the repository's git directory against its copy taken
	// before the iteration's agent ran (Git.Guard); nil before one is.
	guard func() ([]string, error)
	// merging: a merge is under way; mergeT stops the timer of the next
	// try of a root waiting to merge; mergeReplies are the loop.merge
	// calls answered once the try is over.
	merging      bool
	mergeT       func()
	mergeReplies []func(any, error)
	// A rebase's (rebase.go): the iteration whose resolution is
	// committed, the parent's head the branch was last rebased onto with
	// no conflict, whether the round to come follows a merge that
	// conflicted, the last failed rebase iteration's feedback.
	resolved           uint32
	cleanOnto          string
	mergeConflicted    bool
	lastRebaseFeedback string
}

func (l *loop) Receive(c *actors.Context) {
	switch msg := c.Message().(type) {
	case actors.Started:
		l.self = c.Self()
		l.kidStat = map[string]api.LoopStatus{}
		l.kidErr = map[string]string{}
		l.kidUsage = map[string]*api.TokenUsage{}
		for _, k := range l.kids {
			l.kidStat[k.ID] = k.Status
			l.kidErr[k.ID] = k.Error
			l.kidUsage[k.ID] = k.TokenUsage
		}
		if l.how == spawnRecovered {
			l.recover(c)
			return
		}
		if l.how == spawnMerge {
			l.reviveMerge(c)
			return
		}
		l.save(c, true, l.next, func(c *actors.Context) {
			if l.reply != nil {
				l.reply(l.rec, nil)
				l.reply = nil
			}
		})
	case do:
		if msg.gen == anyGen || msg.gen == l.gen {
			msg.f(c)
		}
	case slotGranted:
		if l.slot {
			return // already holding one
		}
		l.slot = true
		if l.rec.Status.Terminal() || l.rec.Status == api.LoopPaused || (l.rec.Stage != "" && l.rec.Stage != api.StageIterating) {
			l.freeSlot(c) // a grant it no longer needs
			return
		}
		l.begin(c)
	case childChanged:
		l.childChanged(c, msg.rec)
	case ctl:
		l.control(c, msg)
	case mergeRetry:
		l.mergeT = nil
		l.retryMerge(c, nil)
	case usageLimitPassed:
		l.resumeT = nil
		if l.rec.Status == api.LoopPaused {
			l.m.bus.Emit(LoopResumed{ID: l.rec.ID, Reason: "usage_limit_passed"})
			l.rec.Status, l.rec.Paused, l.rec.ResumeAt = api.LoopPending, false, 0
			l.persist(c, false, l.next)
		}
	case actors.Stopping:
		l.gen++
		if l.resumeT != nil {
			l.resumeT()
		}
		if l.mergeT != nil {
			l.mergeT()
		}
	}
}

// poster returns a function that runs f in the actor, if the loop has not
// moved on meanwhile (its generation now). Call it in the actor; the
// function it returns is safe from any goroutine.
func (l *loop) poster() func(f func(c *actors.Context)) {
	gen, sys, self := l.gen, l.m.sys, l.self
	return func(f func(c *actors.Context)) { sys.Send(self, do{gen: gen, f: f}) }
}

// async runs work off the actor and then f with its error in the actor.
func (l *loop) async(work func() error, f func(c *actors.Context, err error)) {
	gen, sys, self := l.gen, l.m.sys, l.self
	go func() {
		err := work()
		sys.Send(self, do{gen: gen, f: func(c *actors.Context) { f(c, err) }})
	}()
}

// persist commits the record (and the current iteration) and then tells:
// loop.created or loop.updated, the supervisor, then runs then. Nobody
// hears of a change before it is committed.
//
// then runs only if the loop has not moved on meanwhile (a cancel, say:
// its generation is the same); always runs in any case (an answer owed).
func (l *loop) persist(c *actors.Context, created bool, then func(c *actors.Context)) {
	l.save(c, created, then, nil)
}

func (l *loop) save(c *actors.Context, created bool, then, always func(c *actors.Context)) {
	gen := l.gen
	l.rec.UpdatedAt = time.Now().UnixMilli()
	rec := l.rec
	var it *api.LoopIteration
	if l.it != nil {
		cp := *l.it
		it = &cp
	}
	st := l.m.opts.Store
	sys, self := l.m.sys, l.self
	tell := func(err error) {
		sys.Send(self, do{gen: anyGen, f: func(c *actors.Context) {
			if err != nil {
				l.m.log.Error().Err(err).Str("loop_id", rec.ID).Msg("recording a loop in the state store")
			}
			// The supervisor first: whoever hears the event and calls a
			// method finds the supervisor knowing the change.
			c.Send(l.sup, changed{rec: rec})
			if created {
				l.m.bus.Emit(LoopCreated{newLoopLine(rec)})
			} else {
				l.m.bus.Emit(LoopUpdated{newLoopLine(rec)})
			}
			if always != nil {
				always(c)
			}
			if then != nil && l.gen == gen {
				then(c)
			}
		}})
	}
	if it != nil {
		if err := st.SaveIteration(*it, func(error) {}); err != nil {
			l.m.log.Error().Err(err).Str("loop_id", rec.ID).Msg("recording an iteration in the state store")
		}
	}
	if err := st.SaveLoop(rec, tell); err != nil {
		tell(err)
	}
}

// next decides what the loop does now that nothing is under way.
func (l *loop) next(c *actors.Context) {
	switch {
	case l.rec.Status.Terminal():
		l.finish(c)
	case l.rec.Status == api.LoopPaused:
		l.freeSlot(c)
	case l.rec.Stage == api.StageChildren:
		l.checkChildren(c)
	case l.rec.Stage == api.StageApproval || l.rec.Stage == api.StageMerge:
		// waiting for a person
	case l.rec.Stage == api.StageMergeWaiting:
		l.retryMerge(c, nil)
	case l.slot:
		l.begin(c)
	default:
		c.Send(l.sup, wantSlot{id: l.rec.ID})
	}
}

func (l *loop) freeSlot(c *actors.Context) {
	if l.slot {
		l.slot = false
	}
	c.Send(l.sup, freeSlot{id: l.rec.ID})
}

// begin starts the next iteration: the worktree (made at the first), the
// prompt, then the agent's task.
func (l *loop) begin(c *actors.Context) {
	if l.rec.Paused {
		l.pauseNow(c, "requested")
		return
	}
	if l.rec.RebaseOnto != "" {
		l.rebaseRound(c)
		return
	}
	l.gen++
	r := l.rec
	var prompt string
	var guard func() ([]string, error)
	l.async(func() error {
		if _, err := os.Lstat(r.Worktree); err != nil {
			from := r.Base
			if l.parent != nil {
				from = l.parent.Branch
			}
			if err := l.m.opts.Git.AddWorktree(r.Repo, r.Worktree, r.Branch, from); err != nil {
				return fmt.Errorf("adding the worktree: %w", err)
			}
		}
		var err error
		if guard, err = l.m.opts.Git.Guard(r.Repo); err != nil {
			return fmt.Errorf("copying the git directory's config, hooks and info: %w", err)
		}
		in := artifact.PromptInput{LoopID: r.ID, Task: readContext(r).Task, Artifact: artifactPath(r),
			Validation: r.ValidationCommand, Iteration: r.Iteration + 1, MaxIterations: r.MaxIterations, Progress: r.Progress}
		if r.InputArtifact != nil {
			in.InputPath = *r.InputArtifact
			if b, err := readBeneath(r.Worktree, *r.InputArtifact); err != nil {
				in.Input = "(the input artifact " + *r.InputArtifact + " could not be read)"
			} else {
				in.Input = string(b)
			}
		}
		prompt, err = l.m.templates.Render(r.LoopType, in)
		return err
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.gitFailed(c, "add_worktree", "preparing a loop's worktree", "its worktree could not be made", err)
			return
		}
		if l.rec.Status == api.LoopPaused {
			return // paused while its worktree was made: no iteration starts
		}
		l.guard = guard
		l.started(c, prompt)
	})
}

// started records the iteration and starts its agent's task.
func (l *loop) started(c *actors.Context, prompt string) {
	n, st := l.rec.Iteration+1, api.LoopRunning
	if l.rec.RebaseOnto != "" {
		st = api.LoopRebasing
	}
	l.rec.Iteration, l.rec.Status, l.rec.Stage = n, st, api.StageIterating
	l.it = &api.LoopIteration{LoopID: l.rec.ID, Iteration: n, Prompt: prompt, Status: "running", StartedAt: time.Now().UnixMilli(),
		Rebase: l.rec.RebaseOnto != ""}
	tc := l.m.cfg.For(l.rec.LoopType)
	spec := api.TaskSpec{Executor: tc.Executor, Prompt: prompt, Cwd: l.rec.Worktree, PermissionMode: l.m.cfg.PermissionMode,
		Loop:    &api.TaskLoop{ID: l.rec.ID, LoopType: l.rec.LoopType, Iteration: n, Artifact: artifactPath(l.rec)},
		Confine: &api.TaskConfine{Repo: l.rec.Repo, Worktree: l.rec.Worktree}}
	l.persist(c, false, func(c *actors.Context) {
		post := l.poster()
		l.m.opts.Agents.Execute(spec, func(taskID string, err error) {
			post(func(c *actors.Context) { l.taskStarted(c, taskID, err) })
		})
	})
}

func (l *loop) taskStarted(c *actors.Context, taskID string, err error) {
	if err != nil {
		l.m.log.Error().Err(err).Str("loop_id", l.rec.ID).Msg("starting a loop's agent task")
		l.it.Status, l.it.FinishedAt = "failed", time.Now().UnixMilli()
		l.it.Feedback = "the agent's task was refused: " + firstLine(err.Error())
		l.fail(c, api.LoopErrAgent, l.it.Feedback)
		return
	}
	l.it.TaskID, l.rec.TaskID = taskID, taskID
	l.m.bus.Emit(LoopIterationStarted{ID: l.rec.ID, Iteration: l.it.Iteration, TaskID: taskID, PromptBytes: len(l.it.Prompt)})
	l.persist(c, false, func(c *actors.Context) {
		post := l.poster()
		if err := l.m.opts.Agents.Wait(taskID, func(tr api.TaskRecord) {
			post(func(c *actors.Context) { l.taskEnded(c, tr) })
		}); err != nil {
			l.taskEnded(c, api.TaskRecord{ID: taskID, State: api.TaskFailed, Error: &api.TaskError{Code: "lost", Message: err.Error()}})
		}
	})
}

// isUsageLimit reports whether a task failed because its agent hit a
// usage limit.
func isUsageLimit(e *api.TaskError) bool {
	if e == nil {
		return false
	}
	code := strings.ToLower(e.Code)
	return strings.Contains(code, "usage_limit") || strings.Contains(code, "rate_limit")
}

func (l *loop) taskEnded(c *actors.Context, tr api.TaskRecord) {
	l.rec.TaskID = ""
	l.checkGit(c, "agent", func(c *actors.Context) { l.afterTask(c, tr) })
}

// checkGit checks the repository's git directory against the copy taken
// before the iteration (after names the step that just ran), then runs
// next; a change is put back and fails the loop git_tampered.
func (l *loop) checkGit(c *actors.Context, after string, next func(c *actors.Context)) {
	guard := l.guard
	if guard == nil {
		next(c)
		return
	}
	var changed []string
	l.async(func() error {
		var err error
		changed, err = guard()
		return err
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.m.bus.Emit(LoopGitFailed{ID: l.rec.ID, Op: "check_git_dir"})
			l.m.log.Error().Err(err).Str("loop_id", l.rec.ID).Msg("checking the repository's git directory after an iteration")
			fb := "the repository's git directory could not be checked: " + firstLine(err.Error())
			if l.it != nil {
				l.it.Feedback = fb
			}
			l.fail(c, api.LoopErrGit, fb)
			return
		}
		if len(changed) == 0 {
			next(c)
			return
		}
		n := l.rec.Iteration // a rebase's validation runs in no iteration
		if l.it != nil {
			n = l.it.Iteration
		}
		ev := LoopGitTampered{ID: l.rec.ID, Iteration: n, After: after, Restored: true}
		for i, p := range changed {
			if i == 20 {
				ev.More = len(changed) - i
				break
			}
			ev.Paths = append(ev.Paths, eventlog.Ident(p))
		}
		l.m.bus.Emit(ev)
		l.m.log.Error().Str("loop_id", l.rec.ID).Uint32("iteration", n).Str("after", after).
			Int("paths", len(changed)).Msg("the repository's git directory changed during a loop's iteration: put back, the loop fails (loop.git_tampered names the paths)")
		who := "the agent"
		if after == "validation" {
			who = "the validation command"
		}
		fb := fmt.Sprintf("%s changed the repository's git directory (%s: its config, hooks or info), "+
			"which runs code on the next git command; it was put back as it was before the iteration", who, api.Count(len(changed), "path"))
		if l.it != nil {
			l.it.Feedback = fb
		}
		l.fail(c, api.LoopErrGitTampered, fb)
	})
}

func (l *loop) afterTask(c *actors.Context, tr api.TaskRecord) {
	l.it.TokenUsage, l.it.Denied = tr.TokenUsage, tr.Denied
	if tr.TokenUsage != nil {
		own := api.TokenUsage{}
		own.Add(l.rec.OwnUsage)
		own.Add(tr.TokenUsage)
		l.rec.OwnUsage = &own
		l.sumUsage()
	}
	if l.overBudget(c) {
		return
	}
	if tr.State != api.TaskCompleted {
		if isUsageLimit(tr.Error) {
			l.it.Status, l.it.FinishedAt = "interrupted", time.Now().UnixMilli()
			l.usagePause(c, tr.Error.RetryAt)
			return
		}
		if tr.Error != nil && tr.Error.Code == api.TaskErrAuthFailed {
			// Every iteration would be refused the same: the loop ends
			// here rather than spend its iterations on it.
			l.it.Status, l.it.FinishedAt = "failed", time.Now().UnixMilli()
			l.it.Feedback = "the agent's key was refused (auth_failed)"
			l.fail(c, api.LoopErrAuthFailed, "the agent's model endpoint refused its key (task "+tr.ID+" ended auth_failed): "+
				"check the pool's secrets and secrets.toml, then start a new loop")
			return
		}
		code := ""
		if tr.Error != nil {
			code = tr.Error.Code
		}
		out := fmt.Sprintf("The agent's task ended %s (%s).", tr.State, code)
		l.withDenials(c, tr, func(c *actors.Context, denials string) {
			l.iterationFailed(c, "task_failed", denials+out, nil)
		})
		return
	}
	if tr.Denied == 0 {
		l.denials = ""
		l.validate(c)
		return
	}
	l.withDenials(c, tr, func(c *actors.Context, denials string) {
		l.denials = denials
		l.validate(c)
	})
}

// withDenials runs next with what the iteration's feedback says of the
// tool uses refused in its task ("" when none was): how many, and which
// tools, as the task's permission_denied messages name them.
func (l *loop) withDenials(c *actors.Context, tr api.TaskRecord, next func(c *actors.Context, denials string)) {
	if tr.Denied == 0 {
		next(c, "")
		return
	}
	post := l.poster()
	l.m.opts.Agents.DeniedTools(tr, func(tools []string) {
		post(func(c *actors.Context) { next(c, denialText(tr.Denied, tools)) })
	})
}

// denialText is the feedback line of n tool uses refused.
func denialText(n int, tools []string) string {
	text := render.DeniedOfAgent(n)
	if len(tools) > 0 {
		if len(tools) > 10 {
			tools = append(slices.Clone(tools[:10]), fmt.Sprintf("and %d more", len(tools)-10))
		}
		text += " (" + strings.Join(tools, ", ") + ")"
	}
	return text + ": what needed them was not done. Do without them, or ask for what the loop's permission_mode allows.\n"
}

// sumUsage makes the record's TokenUsage its own iterations' and its
// children's.
func (l *loop) sumUsage() {
	var t api.TokenUsage
	any := l.rec.OwnUsage != nil
	t.Add(l.rec.OwnUsage)
	for _, u := range l.kidUsage {
		if u != nil {
			t.Add(u)
			any = true
		}
	}
	if any {
		l.rec.TokenUsage = &t
	}
}

// overBudget fails a loop whose cost passed its max_cost_usd, its live
// descendants with it (loop.budget_exceeded), and reports whether it did.
func (l *loop) overBudget(c *actors.Context) bool {
	r := l.rec
	if r.MaxCostUSD <= 0 || r.TokenUsage == nil || r.TokenUsage.CostUSD <= r.MaxCostUSD || r.Status.Terminal() {
		return false
	}
	l.m.bus.Emit(LoopBudgetExceeded{ID: r.ID, CostUSD: r.TokenUsage.CostUSD, MaxCostUSD: r.MaxCostUSD, Iteration: r.Iteration})
	if r.TaskID != "" {
		l.m.opts.Agents.Stop(r.TaskID, true)
	}
	if r.JobID != "" {
		l.m.opts.Jobs.Cancel(r.JobID)
	}
	if len(l.kidStat) > 0 {
		c.Send(l.sup, control{op: "budget_children", id: r.ID, reply: func(any, error) {}})
	}
	l.fail(c, api.LoopErrBudgetExceeded, fmt.Sprintf("its agents' tasks cost $%.4f, over its max_cost_usd of $%.4f: it and its live descendants were stopped",
		r.TokenUsage.CostUSD, r.MaxCostUSD))
	return true
}

// validate checks the iteration: the artifact of a plan, spec or phase,
// then the validation command.
func (l *loop) validate(c *actors.Context) {
	if l.it.Rebase && l.resolved != l.it.Iteration {
		l.resolveRebase(c) // the resolution committed first (rebase.go)
		return
	}
	r := l.rec
	art := artifactPath(r)
	if art == "" {
		l.runValidation(c)
		return
	}
	l.async(func() error {
		b, err := readBeneath(r.Worktree, art)
		if err != nil {
			return fmt.Errorf("the %s artifact %s is missing or unreadable: write it there", r.LoopType, art)
		}
		switch r.LoopType {
		case api.LoopPlan:
			_, err = artifact.ParsePlan(b)
		case api.LoopSpec:
			_, err = artifact.ParseSpec(b)
		}
		if err != nil {
			return fmt.Errorf("the %s artifact %s does not parse: %w", r.LoopType, art, err)
		}
		return nil
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.iterationFailed(c, "artifact_invalid", err.Error(), nil)
			return
		}
		l.runValidation(c)
	})
}

func (l *loop) runValidation(c *actors.Context) {
	if l.rec.ValidationCommand == "" {
		l.validated(c, "")
		return
	}
	l.validationJob(c, l.it.Iteration, func(c *actors.Context, err error) {
		l.iterationFailed(c, "job_failed", "The validation job was refused: "+firstLine(err.Error()), nil)
	}, l.afterJob)
}

// validationJob runs the loop's validation command as a job on its
// validation lane, in its worktree (iteration n: the event's). While it
// runs its id is in the record (and the running iteration's, if one
// runs); its end is checked for tampering with the git directory, then
// given to ended; a refused job to refused.
func (l *loop) validationJob(c *actors.Context, n uint32, refused func(*actors.Context, error), ended func(*actors.Context, JobResult)) {
	tc := l.m.cfg.For(l.rec.LoopType)
	spec := api.JobSpec{Lane: tc.ValidationLane, Argv: []string{"sh", "-c", l.rec.ValidationCommand}, Cwd: l.rec.Worktree,
		TimeoutMs: uint64(tc.ValidationTimeout.Milliseconds()), ToolName: "loop-validation", AgentID: l.rec.ID}
	post := l.poster()
	l.m.opts.Jobs.Run(spec, func(jobID string, err error) {
		post(func(c *actors.Context) {
			if err != nil {
				refused(c, err)
				return
			}
			l.rec.JobID = jobID
			if l.it != nil {
				l.it.JobID = jobID
			}
			l.m.bus.Emit(LoopValidationStarted{ID: l.rec.ID, Iteration: n, JobID: jobID, Lane: tc.ValidationLane})
			l.persist(c, false, nil)
		})
	}, func(res JobResult) {
		post(func(c *actors.Context) {
			l.rec.JobID = ""
			l.checkGit(c, "validation", func(c *actors.Context) { ended(c, res) })
		})
	})
}

func (l *loop) afterJob(c *actors.Context, res JobResult) {
	if res.Passed() {
		l.validated(c, res.JobID)
		return
	}
	reason := "exit_code"
	if res.ExitCode == nil {
		reason = "job_failed"
	}
	l.validationFailed(c, reason, l.validationOf(res))
}

// validationOf is how a failed validation job ended, for its feedback.
func (l *loop) validationOf(res JobResult) artifact.Validation {
	v := artifact.Validation{Command: l.rec.ValidationCommand, ExitCode: res.ExitCode, Duration: res.Duration, Output: res.Tail}
	switch {
	case res.State == api.StateTimeout:
		v.Ended = "killed at its " + l.m.cfg.For(l.rec.LoopType).ValidationTimeout.Duration.String() + " timeout (validation_timeout)"
	case res.ExitCode == nil && res.Error != "":
		v.Ended = "the job ended " + string(res.State) + ": " + firstLine(res.Error)
	case res.ExitCode == nil:
		v.Ended = "the job ended " + string(res.State)
	}
	return v
}

// validationFailed ends the iteration failed by its validation command:
// its feedback names the command, how it ended, how long it ran and its
// output's tail.
func (l *loop) validationFailed(c *actors.Context, reason string, v artifact.Validation) {
	v.Note = l.denials
	l.denials = ""
	l.failIteration(c, reason, artifact.ValidationFeedback(int(l.it.Iteration), v), v.ExitCode)
}

// iterationFailed ends the iteration failed: its feedback is appended to
// the progress; the next iteration starts, or the loop fails at its
// max_iterations.
func (l *loop) iterationFailed(c *actors.Context, reason, out string, exit *int32) {
	if l.denials != "" && reason != "task_failed" {
		out = l.denials + out
	}
	l.denials = ""
	l.failIteration(c, reason, feedback(l.it.Iteration, out), exit)
}

// failedWhy is an iteration's failure reason in words.
func failedWhy(reason string) string {
	switch reason {
	case "task_failed":
		return "its agent's task failed"
	case "artifact_invalid":
		return "its artifact was missing or invalid"
	case "exit_code":
		return "its validation command failed"
	case "job_failed":
		return "its validation job did not run to an exit code"
	case "conflict_markers":
		return "conflict markers were left"
	}
	return reason
}

// failIteration ends the iteration failed with its feedback fb.
func (l *loop) failIteration(c *actors.Context, reason, fb string, exit *int32) {
	it := l.it
	it.Status, it.Passed, it.FinishedAt = "failed", false, time.Now().UnixMilli()
	it.Feedback = fb
	l.rec.Progress += fb
	l.m.bus.Emit(LoopValidationFailed{ID: l.rec.ID, Iteration: it.Iteration, Reason: reason, ExitCode: exit,
		JobID: it.JobID, TaskID: it.TaskID, FeedbackBytes: len(fb)})
	l.m.bus.Emit(LoopIterationEnded{ID: l.rec.ID, Iteration: it.Iteration, Status: "failed", Passed: false})
	l.rebaseIterationEnded(it)
	if it.Iteration >= l.rec.MaxIterations && !it.Rebase { // a rebase's are bounded by max_rebase_iterations
		l.fail(c, api.LoopErrMaxIterations, fmt.Sprintf("no iteration passed in %s; the last: %s (orchestrd loop show %s has each one's feedback)",
			api.Count(int(l.rec.MaxIterations), "iteration"), failedWhy(reason), l.rec.ID))
		return
	}
	l.persist(c, false, func(c *actors.Context) {
		l.it = nil
		l.next(c)
	})
}

// validated: the iteration passed. Its work is committed, then the loop
// goes on by its type.
func (l *loop) validated(c *actors.Context, jobID string) {
	it := l.it
	it.Status, it.Passed, it.FinishedAt = "passed", true, time.Now().UnixMilli()
	l.m.bus.Emit(LoopValidationPassed{ID: l.rec.ID, Iteration: it.Iteration, JobID: jobID})
	r := l.rec
	var commit string
	l.async(func() error {
		var err error
		commit, err = l.m.opts.Git.CommitAll(r.Repo, r.Worktree, fmt.Sprintf("loop %s: iteration %d", r.ID, it.Iteration))
		return err
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.gitFailed(c, "commit", "committing a loop's iteration", "its work could not be committed", err)
			return
		}
		it.Commit = commit
		l.m.bus.Emit(LoopCommitted{ID: r.ID, Iteration: it.Iteration, Commit: commit})
		l.m.bus.Emit(LoopIterationEnded{ID: r.ID, Iteration: it.Iteration, Status: "passed", Passed: true})
		if art := artifactPath(r); art != "" && !slices.Contains(l.rec.OutputArtifacts, art) {
			l.rec.OutputArtifacts = append(l.rec.OutputArtifacts, art)
		}
		l.freeSlot(c)
		l.persist(c, false, func(c *actors.Context) {
			l.it = nil
			if art := artifactPath(r); art != "" {
				l.m.bus.Emit(LoopArtifact{ID: r.ID, Path: art})
			}
			l.afterValidated(c)
		})
	})
}

// afterValidated moves a validated loop on by its type: a code loop
// merges up and is complete; a plan asks a person; a spec spawns its
// phases, a phase its code loop.
func (l *loop) afterValidated(c *actors.Context) {
	if l.rec.RebaseOnto != "" {
		l.merge(c, l.rec.RebaseOnto) // a rebase iteration passed: the merge again
		return
	}
	switch l.rec.LoopType {
	case api.LoopCode:
		l.mergeUp(c)
	case api.LoopPlan:
		l.askPlan(c)
	default:
		l.spawnKids(c)
	}
}

func (l *loop) askPlan(c *actors.Context) {
	r := l.rec
	art := artifactPath(r)
	var content string
	var specs []artifact.SpecItem
	l.async(func() error {
		b, err := readBeneath(r.Worktree, art)
		if err != nil {
			return err
		}
		content = string(b)
		p, err := artifact.ParsePlan(b)
		specs = p.Specs
		return err
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.fail(c, api.LoopErrGit, "its committed plan could not be read again: "+firstLine(err.Error()))
			return
		}
		names := make([]string, len(specs))
		for i, s := range specs {
			names[i] = "spec-" + s.Name
		}
		l.askGate(c, api.KindPlan, api.StageApproval, content, names, func(c *actors.Context, a GateAnswer) {
			l.planAnswered(c, a, specs)
		})
	})
}

// askGate puts the loop's plan or merge (kind) to a person through the
// gate, content and specs being what the person reads; the loop waits at
// stage, and answered runs on its actor with the answer.
func (l *loop) askGate(c *actors.Context, kind, stage, content string, specs []string, answered func(*actors.Context, GateAnswer)) {
	id := l.rec.ID
	post := l.poster()
	approvalID, cancel, err := l.m.opts.Gate.Ask(id, kind, content, specs, func(a GateAnswer) {
		post(func(c *actors.Context) { answered(c, a) })
	})
	if err != nil {
		l.fail(c, api.LoopErrAgent, "its "+kind+" could not be put to a person: "+firstLine(err.Error()))
		return
	}
	l.gate = cancel
	l.m.setPlanApproval(id, approvalID)
	l.rec.Stage, l.rec.ApprovalID = stage, approvalID
	l.m.bus.Emit(LoopApprovalAsked{ID: id, ApprovalID: approvalID, Question: kind})
	l.persist(c, false, nil)
}

func (l *loop) planAnswered(c *actors.Context, a GateAnswer, _ []artifact.SpecItem) {
	l.gate = nil
	l.m.setPlanApproval(l.rec.ID, "")
	l.rec.ApprovalID = ""
	switch {
	case a.Approved:
		l.spawnKids(c)
	case a.Iterate:
		// The plan runs again with the feedback; its children (none yet
		// at this stage, but those of an earlier approval) are invalidated.
		l.rec.Progress += fmt.Sprintf("\n---\n## Iteration %d Feedback From Review\n%s\n", l.rec.Iteration, boundTail(a.Feedback, MaxFeedback))
		l.rec.Stage = ""
		c.Send(l.sup, control{op: "invalidate_children", id: l.rec.ID, reply: func(any, error) {}})
		l.persist(c, false, l.next)
	default:
		l.fail(c, api.LoopErrPlanRejected, "the plan was rejected: "+firstLine(boundTail(a.Reason, 512)))
	}
}

// spawnKids makes the loop's children from its artifact: a plan's specs, a
// spec's phases, a phase's code loop.
func (l *loop) spawnKids(c *actors.Context) {
	r := l.rec
	art := artifactPath(r)
	var kids []api.LoopRecord
	l.async(func() error {
		b, err := readBeneath(r.Worktree, art)
		if err != nil {
			return err
		}
		// Each child's task, and what its artifact's slug is made of
		// (unique in the tree: a phase's names its spec).
		var tasks, slugs []string
		var kt api.LoopType
		switch r.LoopType {
		case api.LoopPlan:
			p, err := artifact.ParsePlan(b)
			if err != nil {
				return err
			}
			kt = api.LoopSpec
			for _, s := range p.Specs {
				tasks = append(tasks, "spec-"+s.Name+": "+s.Description)
				slugs = append(slugs, s.Name)
			}
		case api.LoopSpec:
			sp, err := artifact.ParseSpec(b)
			if err != nil {
				return err
			}
			kt = api.LoopPhase
			spec, _, _ := strings.Cut(readContext(r).Task, ":")
			for _, p := range sp.Phases {
				tasks = append(tasks, fmt.Sprintf("Phase %d of %s, %s: %s", p.Number, spec, p.Name, p.Description))
				slugs = append(slugs, strings.TrimPrefix(spec, "spec-")+" "+p.Name)
			}
		default:
			kt = api.LoopCode
			tasks = []string{"Implement the phase described in " + art + "."}
			slugs = []string{""}
		}
		now := time.Now().UnixMilli()
		tc := l.m.cfg.For(kt)
		for i, t := range tasks {
			id := api.ChildLoopID(r.ID, i+1)
			pid, in := r.ID, art
			ctx := makeContext(t, artifactFor(kt, id, slugs[i]))
			kids = append(kids, api.LoopRecord{ID: id, LoopType: kt, ParentID: &pid, InputArtifact: &in,
				OutputArtifacts: []string{}, PromptPath: l.m.cfg.Prompts[string(kt)], ValidationCommand: tc.ValidationCommand, MaxIterations: tc.MaxIterations,
				Worktree: worktreeDir(r.Repo, id), Status: api.LoopPending, Context: ctx, CreatedAt: now + int64(i),
				UpdatedAt: now, Repo: r.Repo, Base: r.Base, Branch: "loop/" + id})
		}
		return nil
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.fail(c, api.LoopErrGit, "its artifact could not be read again to spawn children: "+firstLine(err.Error()))
			return
		}
		ids := make([]string, len(kids))
		for i, k := range kids {
			ids[i] = k.ID
			l.kidStat[k.ID] = api.LoopPending
		}
		l.rec.Stage, l.rec.Children = api.StageChildren, len(kids)
		l.m.bus.Emit(LoopChildrenSpawned{ID: l.rec.ID, Children: ids})
		l.persist(c, false, func(c *actors.Context) {
			c.Send(l.sup, spawnChildren{parent: l.rec.ID, children: kids})
		})
	})
}

func (l *loop) childChanged(c *actors.Context, rec api.LoopRecord) {
	if _, ok := l.kidStat[rec.ID]; !ok && l.rec.Stage != api.StageChildren {
		return
	}
	l.kidStat[rec.ID] = rec.Status
	l.kidErr[rec.ID] = rec.Error
	if old := l.kidUsage[rec.ID]; rec.TokenUsage != nil && (old == nil || *old != *rec.TokenUsage) {
		l.kidUsage[rec.ID] = rec.TokenUsage
		l.sumUsage()
		if l.overBudget(c) {
			return
		}
		if !l.rec.Status.Terminal() {
			l.persist(c, false, nil)
		}
	}
	if l.rec.Stage == api.StageChildren && !l.rec.Status.Terminal() && l.rec.Status != api.LoopPaused {
		l.checkChildren(c)
	}
}

// checkChildren ends a parent whose children have all ended: complete
// (merged up) when all are complete, else failed naming the failed ones.
func (l *loop) checkChildren(c *actors.Context) {
	var failed []string
	for id, st := range l.kidStat {
		if !st.Terminal() {
			return
		}
		if st != api.LoopComplete {
			failed = append(failed, id)
		}
	}
	slices.Sort(failed)
	if len(failed) > 0 {
		l.fail(c, api.LoopErrChildFailed, "failed children: "+strings.Join(failed, ", "))
		return
	}
	l.mergeUp(c)
}

// mergeUp merges a complete loop's branch into its parent's (the parent's
// actor merges, one child at a time), or a root's into its base once a
// person approves or at once with auto_merge.
func (l *loop) mergeUp(c *actors.Context) {
	r := l.rec
	if r.ParentID != nil {
		into := ""
		if l.parent != nil {
			into = l.parent.Branch
		}
		l.merge(c, into)
		return
	}
	if l.m.cfg.AutoMerge {
		l.mergeRoot(c)
		return
	}
	l.askGate(c, api.KindMerge, api.StageMerge, fmt.Sprintf("Merge loop %s's branch %s into %s?", r.ID, r.Branch, r.Base), nil,
		l.mergeAnswered)
}

// mergeAnswered: a person answered whether the complete tree merges into
// its base.
func (l *loop) mergeAnswered(c *actors.Context, a GateAnswer) {
	r := l.rec
	l.gate = nil
	l.m.setPlanApproval(r.ID, "")
	l.rec.ApprovalID = ""
	if a.Approved {
		l.mergeRoot(c)
		return
	}
	// Not merged: the tree is complete, its branch kept.
	l.rec.Message = "its branch " + r.Branch + " was not merged into " + r.Base + ": the merge was not approved"
	l.complete(c)
}

// mergeRoot merges a complete root's branch into its base; with [loops]
// commit_artifacts = false, after a commit on that branch that drops the
// tree's .loopr/ artifacts.
func (l *loop) mergeRoot(c *actors.Context) {
	if l.m.cfg.CommitArtifacts {
		l.merge(c, l.rec.Base)
		return
	}
	r := l.rec
	var commit string
	var files int
	l.async(func() error {
		var err error
		commit, files, err = l.dropArtifacts(r)
		return err
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.gitFailed(c, "drop_artifacts", "dropping a tree's .loopr/ artifacts before its merge",
				"its .loopr/ artifacts could not be left out of "+r.Base+" (commit_artifacts = false)", err)
			return
		}
		if files > 0 {
			l.m.bus.Emit(LoopArtifactsDropped{ID: r.ID, Into: r.Base, Files: files, Commit: commit})
		}
		l.merge(c, r.Base)
	})
}

// dropArtifacts removes the artifacts of root r's tree (its own and its
// descendants', as their records name them) from its worktree and commits
// that; files is how many were there. It blocks (git).
func (l *loop) dropArtifacts(r api.LoopRecord) (commit string, files int, err error) {
	recs, err := l.m.opts.Store.Loops()
	if err != nil {
		return "", 0, fmt.Errorf("reading the tree's loops: %w", err)
	}
	parent := map[string]string{}
	for _, x := range recs {
		if x.ParentID != nil {
			parent[x.ID] = *x.ParentID
		}
	}
	inTree := func(id string) bool {
		for n := 0; n < 64 && id != ""; n++ {
			if id == r.ID {
				return true
			}
			id = parent[id]
		}
		return false
	}
	for _, x := range recs {
		art := artifactPath(x)
		if art == "" || !inTree(x.ID) {
			continue
		}
		if _, err := readBeneath(r.Worktree, art); err == nil {
			files++
		}
		if err := artifact.RemoveBeneath(r.Worktree, art); err != nil {
			return "", 0, err
		}
	}
	if files == 0 {
		return "", 0, nil
	}
	commit, err = l.m.opts.Git.CommitAll(r.Repo, r.Worktree, fmt.Sprintf("loop %s: .loopr/ artifacts left out of %s", r.ID, r.Base))
	return commit, files, err
}

// merge merges the loop's branch into into (its parent's branch, or a
// root's base).
func (l *loop) merge(c *actors.Context, into string) {
	r := l.rec
	var conflict bool
	l.merging = true
	l.async(func() error {
		if into == "" {
			return errors.New("its parent is not known")
		}
		var err error
		conflict, err = l.m.opts.Git.Merge(r.Repo, into, r.Branch, fmt.Sprintf("merge loop %s", r.ID))
		return err
	}, func(c *actors.Context, err error) {
		l.merging = false
		l.merged(c, mergeDone{conflict: conflict, err: err})
	})
}

// merged is the answer to this loop's merge (into its parent's branch or
// its base).
func (l *loop) merged(c *actors.Context, msg mergeDone) {
	into := l.rec.Base
	if l.parent != nil {
		into = l.parent.Branch
	}
	var dirty *gitwt.DirtyError
	switch {
	case l.rec.ParentID == nil && errors.As(msg.err, &dirty):
		l.mergeWait(c, dirty)
	case msg.err != nil:
		l.m.bus.Emit(LoopGitFailed{ID: l.rec.ID, Op: "merge"})
		l.fail(c, api.LoopErrGit, api.MergeFailedPrefix+into+": "+firstLine(msg.err.Error()))
	case msg.conflict:
		l.m.bus.Emit(LoopMergeConflicted{ID: l.rec.ID, Branch: l.rec.Branch, Into: into})
		if l.rec.ParentID != nil && l.m.cfg.MaxRebaseIterations > 0 {
			l.rebase(c, into) // rebase.go
			return
		}
		l.fail(c, api.LoopErrMergeConflict, "its branch "+l.rec.Branch+" conflicts with "+into+": kept unmerged")
	default:
		l.m.bus.Emit(LoopMerged{ID: l.rec.ID, Branch: l.rec.Branch, Into: into})
		l.rec.MergedInto = into
		l.complete(c)
	}
}

func (l *loop) complete(c *actors.Context) {
	l.rec.Status, l.rec.Stage, l.rec.TaskID, l.rec.JobID = api.LoopComplete, "", "", ""
	l.rec.MergeWait = nil
	l.m.bus.Emit(LoopEnded{ID: l.rec.ID, Status: api.LoopComplete})
	l.persist(c, false, l.finish)
}

// gitFailed ends the loop failed on a git error: a loop.git_failed event
// for op, err logged as what was being done (doing), and the loop's
// message why, then err's first line.
func (l *loop) gitFailed(c *actors.Context, op, doing, why string, err error) {
	l.m.bus.Emit(LoopGitFailed{ID: l.rec.ID, Op: op})
	l.m.log.Error().Err(err).Str("loop_id", l.rec.ID).Msg(doing)
	l.fail(c, api.LoopErrGit, why+": "+firstLine(err.Error()))
}

// fail ends the loop failed with code.
func (l *loop) fail(c *actors.Context, code, message string) {
	l.end(c, api.LoopFailed, code, message)
}

func (l *loop) end(c *actors.Context, st api.LoopStatus, code, message string) {
	l.endThen(c, st, code, message, nil)
}

// endThen is end; then runs once the end is committed and the supervisor
// told.
func (l *loop) endThen(c *actors.Context, st api.LoopStatus, code, message string, then func()) {
	l.gen++
	if l.it != nil && l.it.Status == "running" {
		l.it.Status, l.it.FinishedAt = "failed", time.Now().UnixMilli()
	}
	if l.gate != nil {
		l.gate("loop ended")
		l.gate = nil
	}
	l.m.setPlanApproval(l.rec.ID, "")
	l.held = heldWork{task: l.rec.TaskID, job: l.rec.JobID}
	l.rec.Status, l.rec.Error, l.rec.Message, l.rec.Stage = st, code, message, ""
	l.rec.TaskID, l.rec.JobID, l.rec.ApprovalID, l.rec.MergeWait = "", "", "", nil
	l.m.bus.Emit(LoopEnded{ID: l.rec.ID, Status: st, Error: code})
	l.save(c, false, l.finish, func(c *actors.Context) {
		if then != nil {
			then()
		}
	})
}

// finish: the loop has ended. Its worktree goes, then its branch once its
// work is merged (unless keep_branches; a branch whose work was not merged
// stays until loop.delete); its actor stops once its children's merges
// are done.
func (l *loop) finish(c *actors.Context) {
	l.freeSlot(c)
	r := l.rec
	l.answerMerges(r)
	l.m.cleanAfter(r, l.held)
	l.m.mu.Lock()
	if l.m.done == nil {
		l.m.done = map[string]bool{}
	}
	l.m.done[r.ID] = true
	l.m.mu.Unlock()
	c.Send(l.sup, ended{id: r.ID})
	c.StopSelf()
}

func (l *loop) pauseNow(c *actors.Context, reason string) {
	l.rec.Status, l.rec.Paused = api.LoopPaused, false
	l.m.bus.Emit(LoopPaused{ID: l.rec.ID, Reason: reason})
	l.freeSlot(c)
	l.persist(c, false, nil)
}

// usagePause pauses a loop whose agent hit a usage limit; it resumes by
// itself after usage_limit_pause.
func (l *loop) usagePause(c *actors.Context, retryAt *time.Time) {
	l.rec.Progress += feedback(l.it.Iteration, "The agent hit a usage limit; the loop paused.")
	l.it.Feedback = "usage limit"
	l.it = nil
	wait, given := usageWait(retryAt, l.m.cfg.UsageLimitPause.Duration, time.Now())
	until := time.Now().Add(wait).UTC()
	l.rec.Status, l.rec.Paused, l.rec.ResumeAt = api.LoopPaused, false, until.UnixMilli()
	l.m.bus.Emit(LoopPaused{ID: l.rec.ID, Reason: "usage_limit", Until: &until, RetryAt: given})
	l.freeSlot(c)
	l.persist(c, false, nil)
	l.resumeT = c.After(wait, usageLimitPassed{})
}

// maxUsageWait bounds how long a retry_at may pause a loop.
const maxUsageWait = 24 * time.Hour

// usageWait is how long a loop whose agent hit a usage limit stays
// paused: until the agent's retry_at when it gave one later than now
// (at most 24h), else pause (usage_limit_pause); given says retry_at
// was taken.
func usageWait(retryAt *time.Time, pause time.Duration, now time.Time) (wait time.Duration, given bool) {
	if retryAt != nil && retryAt.After(now) {
		return min(retryAt.Sub(now), maxUsageWait), true
	}
	return pause, false
}

// control does loop.start, pause, resume, cancel (the supervisor checked
// the state table) and the supervisor's invalidate.
func (l *loop) control(c *actors.Context, msg ctl) {
	reply := msg.reply
	if reply == nil {
		reply = func(any, error) {}
	}
	if l.rec.Status.Terminal() {
		reply(nil, api.Errorf(api.CodeInvalidState, "loop %s is %s", l.rec.ID, l.rec.Status))
		return
	}
	switch msg.op {
	case "start", "resume":
		if l.rec.Status != api.LoopPaused {
			reply(l.rec, nil) // pending: it starts when a slot is free
			return
		}
		if l.resumeT != nil {
			l.resumeT()
			l.resumeT = nil
		}
		l.m.bus.Emit(LoopResumed{ID: l.rec.ID, Reason: "requested"})
		l.rec.Status, l.rec.Paused, l.rec.ResumeAt = api.LoopPending, false, 0
		if l.rec.Stage != "" && l.rec.Stage != api.StageIterating {
			l.rec.Status = api.LoopRunning
		}
		l.save(c, false, l.next, func(c *actors.Context) { reply(l.rec, nil) })
	case "pause":
		if l.rec.Stage == api.StageIterating && l.it != nil {
			// The running iteration finishes (its result is kept); no
			// new one starts.
			l.rec.Paused = true
			l.save(c, false, nil, func(c *actors.Context) { reply(l.rec, nil) })
			return
		}
		l.rec.Status, l.rec.Paused = api.LoopPaused, false
		l.m.bus.Emit(LoopPaused{ID: l.rec.ID, Reason: "requested"})
		l.freeSlot(c)
		l.save(c, false, nil, func(c *actors.Context) { reply(l.rec, nil) })
	case "merge":
		l.retryMerge(c, reply)
	case "cancel", "invalidate":
		ev := LoopCancelled{ID: l.rec.ID, TaskID: l.rec.TaskID, JobID: l.rec.JobID}
		if l.rec.TaskID != "" {
			l.m.opts.Agents.Stop(l.rec.TaskID, true)
		}
		if l.rec.JobID != "" {
			l.m.opts.Jobs.Cancel(l.rec.JobID)
		}
		l.m.bus.Emit(ev)
		done := func() { reply(map[string]any{"cancelled": true}, nil) }
		switch {
		case msg.op == "invalidate":
			l.endThen(c, api.LoopInvalidated, api.LoopErrParentIterated, "its parent ran again", done)
		case msg.arg == api.LoopErrBudgetExceeded:
			l.endThen(c, api.LoopFailed, api.LoopErrBudgetExceeded, "an ancestor's max_cost_usd was passed", done)
		default:
			l.endThen(c, api.LoopFailed, api.LoopErrCancelled, "cancelled", done)
		}
	default:
		reply(nil, api.Errorf(api.CodeInvalidParams, "unknown loop operation %q", msg.op))
	}
}

// recover takes over a loop a dead daemon left not ended: an iteration
// under way was interrupted (its task and job ended daemon_lost); the
// worktree's uncommitted work is committed (WIP: recovery) and the loop
// goes on with the next iteration number. A worktree that is gone fails
// the loop.
func (l *loop) recover(c *actors.Context) {
	r := l.rec
	if r.Status == api.LoopPaused {
		l.m.bus.Emit(LoopRecovered{ID: r.ID, Iteration: r.Iteration})
		if r.ResumeAt != 0 {
			// A usage-limit pause: it resumes when it would have.
			l.resumeT = c.After(max(0, time.Until(time.UnixMilli(r.ResumeAt))), usageLimitPassed{})
		}
		l.next(c)
		return
	}
	interrupted := r.Stage == api.StageIterating && r.Iteration > 0
	if r.JobID != "" {
		// A validation job the lanes queued again: its result is not
		// wanted any more.
		l.m.opts.Jobs.Cancel(r.JobID)
	}
	var wip string
	var its []api.LoopIteration
	l.async(func() error {
		if r.Iteration == 0 && r.Stage == "" || r.Stage == api.StageMergeWaiting {
			// Never started: nothing to recover. Waiting to merge: its
			// branch is all it needs (a failed merge tried again by
			// loop.merge has no worktree any more).
			return nil
		}
		if _, err := os.Lstat(r.Worktree); err != nil {
			return errWorktreeGone
		}
		if interrupted {
			var err error
			if its, err = l.m.opts.Store.Iterations(r.ID); err != nil {
				return err
			}
		}
		var err error
		switch {
		case r.RebaseOnto != "":
			// A rebase in progress (markers, what its agent did of them)
			// is taken up as it is by the next round; else what was
			// left is committed.
			wip, _, err = l.m.opts.Git.RecoverRebase(r.Repo, r.Worktree)
		case interrupted:
			wip, err = l.m.opts.Git.RecoverWIP(r.Repo, r.Worktree)
		}
		if err != nil {
			return fmt.Errorf("committing the work left in the worktree: %w", err)
		}
		return nil
	}, func(c *actors.Context, err error) {
		if errors.Is(err, errWorktreeGone) {
			l.fail(c, api.LoopErrWorktreeGone, "its worktree "+r.Worktree+" was gone after a restart")
			return
		}
		if err != nil {
			l.m.log.Error().Err(err).Str("loop_id", r.ID).Msg("recovering a loop")
			l.fail(c, api.LoopErrGit, "it could not be recovered: "+firstLine(err.Error()))
			return
		}
		l.m.bus.Emit(LoopRecovered{ID: r.ID, Iteration: r.Iteration, Interrupted: interrupted, WIPCommit: wip})
		if wip != "" {
			l.m.bus.Emit(LoopCommitted{ID: r.ID, Iteration: r.Iteration, Commit: wip, Recovery: true})
		}
		l.rec.TaskID, l.rec.JobID = "", ""
		if interrupted {
			for i := range its {
				if its[i].Iteration == r.Iteration && its[i].Status == "running" {
					it := its[i]
					it.Status, it.FinishedAt = "interrupted", time.Now().UnixMilli()
					it.Feedback = "the daemon stopped during this iteration"
					if wip != "" {
						it.Commit = wip
					}
					l.it = &it
				}
			}
			l.rec.Stage = ""
			if l.rec.Status == api.LoopRunning {
				l.rec.Status = api.LoopPending
			}
			if l.it != nil {
				l.m.bus.Emit(LoopIterationEnded{ID: r.ID, Iteration: r.Iteration, Status: "interrupted"})
			}
		}
		switch l.rec.Stage {
		case api.StageApproval, api.StageMerge:
			// The question asked before the crash is still pending (the
			// approvals recovered it): its answer comes here. Asked again
			// when it is not known any more.
			stage, aid := l.rec.Stage, l.rec.ApprovalID
			post := l.poster()
			err := errors.New("no approval")
			if aid != "" {
				err = l.m.opts.Gate.Await(aid, func(a GateAnswer) {
					post(func(c *actors.Context) {
						if stage == api.StageApproval {
							l.planAnswered(c, a, nil)
						} else {
							l.mergeAnswered(c, a)
						}
					})
				})
			}
			if err == nil {
				l.m.setPlanApproval(r.ID, aid)
				l.persist(c, false, func(c *actors.Context) { l.it = nil })
				return
			}
			l.rec.Stage, l.rec.ApprovalID = "", ""
			l.persist(c, false, func(c *actors.Context) {
				l.it = nil
				if stage == api.StageApproval {
					l.askPlan(c)
				} else {
					l.mergeUp(c)
				}
			})
			return
		}
		l.persist(c, false, func(c *actors.Context) {
			l.it = nil
			l.next(c)
		})
	})
}

var errWorktreeGone = errors.New("worktree gone")

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

func boundTail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
