package loops

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/loops/artifact"
	"github.com/orchestrd/orchestrd/loops/gitwt"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// A child whose merge into its parent's branch conflicts (a sibling's
// merge changed the same lines first) goes rebasing: its branch is
// brought onto the parent's new head (gitwt's Rebase: the parent's head
// merged into the child's branch, in its worktree, one conflict step),
// then validated again and merged. A conflict starts a rebase iteration
// (the loop's agent, confined as any iteration, the conflicting files and
// their marked regions in its prompt); the daemon refuses a tree with
// markers left, else commits the resolution. [loops]
// max_rebase_iterations bounds those iterations; past it the loop fails
// merge_conflict, its branch kept. RebaseOnto in the record says a loop
// is rebasing whatever its status says (paused, pending after a
// restart): begin goes on with the rebase, never with a plain iteration.

// rebase: the loop's merge into its parent's branch onto conflicted.
func (l *loop) rebase(c *actors.Context, onto string) {
	l.rec.RebaseOnto, l.mergeConflicted, l.lastRebaseFeedback = onto, true, ""
	l.rec.Status, l.rec.Stage = api.LoopRebasing, ""
	l.persist(c, false, l.next)
}

// rebaseRound brings the branch onto its parent's head: applied, its
// validation runs again; on a conflict, a rebase iteration starts (or the
// loop fails past max_rebase_iterations). It holds a slot.
func (l *loop) rebaseRound(c *actors.Context) {
	l.gen++
	if l.rec.Status != api.LoopRebasing {
		l.rec.Status = api.LoopRebasing // pending again after a pause or a restart
		l.persist(c, false, nil)
	}
	r := l.rec
	var out RebaseOutcome
	var guard func() ([]string, error)
	git := l.m.opts.Git
	l.async(func() error {
		var err error
		if out, err = git.Rebase(r.Repo, r.Worktree, r.RebaseOnto, fmt.Sprintf("loop %s: rebased onto %s", r.ID, r.RebaseOnto)); err != nil {
			return err
		}
		if guard, err = git.Guard(r.Repo); err != nil {
			return fmt.Errorf("copying the git directory's config, hooks and info: %w", err)
		}
		return nil
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.gitFailed(c, "rebase", "rebasing a loop's branch onto its parent's", "its branch "+r.Branch+" could not be rebased onto "+r.RebaseOnto, err)
			return
		}
		if l.rec.Status == api.LoopPaused {
			return // paused meanwhile: resumed, the round runs again
		}
		l.guard = guard
		if out.WIP != "" {
			l.m.bus.Emit(LoopCommitted{ID: r.ID, Iteration: r.Iteration, Commit: out.WIP})
		}
		l.m.bus.Emit(LoopRebaseStarted{ID: r.ID, Onto: r.RebaseOnto, Head: out.Onto, Continued: out.Continued})
		again := l.mergeConflicted
		l.mergeConflicted = false
		if len(out.Conflicts) == 0 {
			if again && out.Onto == l.cleanOnto {
				// Applied onto this very head before, and the merge
				// conflicted all the same: it would again.
				l.rebaseGaveUp(c, nil, "it still conflicts after being rebased onto its head")
				return
			}
			l.cleanOnto = out.Onto
			l.m.bus.Emit(LoopRebased{ID: r.ID, Commit: out.Commit})
			l.rebaseValidate(c)
			return
		}
		paths := make([]string, len(out.Conflicts))
		for i, cf := range out.Conflicts {
			paths[i] = cf.Path
		}
		files := len(out.Conflicts) + out.More
		if int(l.rec.RebaseIterations) >= l.m.cfg.MaxRebaseIterations {
			l.m.bus.Emit(LoopRebaseConflicted{ID: r.ID, Files: files})
			l.rebaseGaveUp(c, paths, "")
			return
		}
		l.rec.RebaseIterations++
		l.m.bus.Emit(LoopRebaseConflicted{ID: r.ID, Files: files, Iteration: l.rec.Iteration + 1})
		l.started(c, l.conflictPrompt(out))
	})
}

// rebaseValidate runs the loop's validation command on the rebased
// branch (no agent ran: no iteration); it passes, the branch merges.
func (l *loop) rebaseValidate(c *actors.Context) {
	r := l.rec
	if r.ValidationCommand == "" {
		l.freeSlot(c)
		l.merge(c, r.RebaseOnto)
		return
	}
	l.validationJob(c, r.Iteration, func(c *actors.Context, err error) {
		// Refused: a failed validation, as an iteration's is.
		l.rebaseValidated(c, JobResult{State: api.StateError, Error: "the validation job was refused: " + firstLine(err.Error())})
	}, l.rebaseValidated)
}

// rebaseValidated: the validation after a rebase that applied at once
// ended. Passed, the branch merges; failed, a rebase iteration gets the
// failure (or the loop fails past max_rebase_iterations).
func (l *loop) rebaseValidated(c *actors.Context, res JobResult) {
	r := l.rec
	if r.Status == api.LoopPaused {
		l.persist(c, false, nil)
		return // resumed, the round runs again
	}
	if res.Passed() {
		l.m.bus.Emit(LoopValidationPassed{ID: r.ID, Iteration: r.Iteration, JobID: res.JobID})
		l.freeSlot(c)
		// What the validation left is committed, as after any
		// iteration's, then the merge.
		l.async(func() error {
			_, err := l.m.opts.Git.CommitAll(r.Repo, r.Worktree, fmt.Sprintf("loop %s: validated after rebasing onto %s", r.ID, r.RebaseOnto))
			return err
		}, func(c *actors.Context, err error) {
			if err != nil {
				l.gitFailed(c, "commit", "committing a rebased loop's worktree", "its work could not be committed", err)
				return
			}
			l.merge(c, r.RebaseOnto)
		})
		return
	}
	fb := strings.Replace(artifact.ValidationFeedback(int(r.Iteration), l.validationOf(res)),
		"## Iteration "+strconv.Itoa(int(r.Iteration))+" Failed\n",
		"## Validation Failed After Rebasing Onto "+r.RebaseOnto+"\n", 1)
	l.rec.Progress += fb
	l.m.bus.Emit(LoopValidationFailed{ID: r.ID, Iteration: r.Iteration, Reason: "after_rebase", ExitCode: res.ExitCode,
		JobID: res.JobID, FeedbackBytes: len(fb)})
	if int(l.rec.RebaseIterations) >= l.m.cfg.MaxRebaseIterations {
		l.rebaseGaveUp(c, nil, "its validation does not pass after it was rebased onto "+r.RebaseOnto)
		return
	}
	l.rec.RebaseIterations++
	l.started(c, l.fixPrompt(fb))
}

// resolveRebase: a rebase iteration's agent is done. Markers left in a
// conflicting file fail the iteration (its feedback names the files);
// else the resolution is committed, then validate goes on as for any
// iteration.
func (l *loop) resolveRebase(c *actors.Context) {
	r, n := l.rec, l.it.Iteration
	var commit string
	var unresolved []string
	l.async(func() error {
		var err error
		commit, unresolved, err = l.m.opts.Git.ResolveRebase(r.Repo, r.Worktree, fmt.Sprintf("loop %s: rebased onto %s (iteration %d)", r.ID, r.RebaseOnto, n))
		if errors.Is(err, gitwt.ErrNoRebase) {
			return nil // a rebase iteration fixing the validation: nothing in progress
		}
		return err
	}, func(c *actors.Context, err error) {
		if err != nil {
			l.gitFailed(c, "resolve_rebase", "committing a loop's rebase", "its rebase onto "+r.RebaseOnto+" could not be committed", err)
			return
		}
		if len(unresolved) > 0 {
			l.iterationFailed(c, "conflict_markers", "Conflict markers (<<<<<<< ... >>>>>>>) are left in "+
				api.Count(len(unresolved), "file")+": "+showPaths(unresolved)+
				". Nothing was committed: resolve every conflict in them, keeping both sides' intent, and remove the markers.", nil)
			return
		}
		l.resolved = n
		if commit != "" {
			l.it.Commit = commit
			l.m.bus.Emit(LoopRebased{ID: r.ID, Commit: commit, Iteration: n})
		}
		l.validate(c)
	})
}

// rebaseGaveUp fails a rebasing loop past max_rebase_iterations (or one
// that cannot be rebased): merge_conflict, naming the files that
// conflicted (paths, when the last try stopped on them) or why, and the
// command that shows the rest. The branch is kept (finish keeps an
// unmerged branch).
func (l *loop) rebaseGaveUp(c *actors.Context, paths []string, why string) {
	r := l.rec
	msg := fmt.Sprintf("its branch %s conflicts with %s", r.Branch, r.RebaseOnto)
	switch {
	case len(paths) > 0:
		msg += fmt.Sprintf(" in %s (%s) after %s (max_rebase_iterations = %d)", api.Count(len(paths), "file"), showPaths(paths),
			api.Count(int(r.RebaseIterations), "rebase iteration"), l.m.cfg.MaxRebaseIterations)
	case why != "":
		msg += ": " + why + fmt.Sprintf(" (%s, max_rebase_iterations = %d)", api.Count(int(r.RebaseIterations), "rebase iteration"), l.m.cfg.MaxRebaseIterations)
	}
	msg += fmt.Sprintf("; the branch is kept unmerged: orchestrd loop show %s", r.ID)
	l.fail(c, api.LoopErrMergeConflict, msg)
}

// showPaths names at most 10 paths for a person (each quoted unless it is
// a plain name: they are agent-written).
func showPaths(paths []string) string {
	var b strings.Builder
	for i, p := range paths {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(paths)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if eventlog.Ident(p) == p {
			b.WriteString(p)
		} else {
			if len(p) > 200 {
				p = p[:200]
			}
			b.WriteString(strconv.Quote(p))
		}
	}
	return b.String()
}

// rebaseHeader is what both rebase prompts begin with.
func (l *loop) rebaseHeader() string {
	r := l.rec
	return fmt.Sprintf("# Rebase of loop %s onto %s\n\nYou are the agent of loop %s (a %s loop). Its task:\n\n%s\n\n"+
		"Its work, on branch %s, was validated, but it could not be merged into its parent's branch %s: "+
		"a sibling loop's work was merged there first and changes the same lines. "+
		"orchestrd merged the head of %s into this worktree (rebase iteration %d of at most %d).\n\n",
		r.ID, r.RebaseOnto, r.ID, r.LoopType, boundTail(readContext(r).Task, 4<<10), r.Branch, r.RebaseOnto, r.RebaseOnto,
		r.RebaseIterations, l.m.cfg.MaxRebaseIterations)
}

// rebaseRules is what both rebase prompts end with.
func (l *loop) rebaseRules() string {
	s := "- Do not run git: the worktree's git directory is read-only to you; orchestrd commits what you leave.\n"
	if cmd := l.rec.ValidationCommand; cmd != "" {
		s += "- Then orchestrd runs the loop's validation (`" + boundTail(cmd, artifact.MaxCommand) + "`) and, once it passes, merges the branch into " + l.rec.RebaseOnto + ".\n"
	} else {
		s += "- Then orchestrd merges the branch into " + l.rec.RebaseOnto + ".\n"
	}
	return s
}

// conflictPrompt is a rebase iteration's prompt for the conflicts out
// stopped on: each file with its conflict-marked regions (bounded by
// gitwt), what to do, and the feedback of the last rebase iteration.
func (l *loop) conflictPrompt(out RebaseOutcome) string {
	var b strings.Builder
	b.WriteString(l.rebaseHeader())
	fmt.Fprintf(&b, "Git stopped on %s. In each region below, the lines between `<<<<<<<` and `=======` are this loop's side, "+
		"those between `=======` and `>>>>>>>` the parent's (with its sibling's work); `|||||||` starts the common ancestor's lines where shown.\n\n",
		api.Count(len(out.Conflicts)+out.More, "conflicting file"))
	for _, cf := range out.Conflicts {
		b.WriteString("## " + cf.Path + "\n\n")
		switch {
		case cf.Hunks != "":
			b.WriteString("```\n" + cf.Hunks)
			if !strings.HasSuffix(cf.Hunks, "\n") {
				b.WriteString("\n")
			}
			b.WriteString("```\n")
			if cf.Cut {
				b.WriteString("(cut here: read the file itself for the rest of its conflicts)\n")
			}
		case cf.Cut:
			b.WriteString("(not shown: the prompt's room for conflicts is used up; read the file itself)\n")
		default:
			b.WriteString("(no conflict markers: git could not merge this file's content, a binary file or one deleted on one side; " +
				"it holds this loop's side now: make it what both sides together need)\n")
		}
		b.WriteString("\n")
	}
	if out.More > 0 {
		fmt.Fprintf(&b, "And %d more conflicting files, not listed: find them by their markers.\n\n", out.More)
	}
	b.WriteString("What to do:\n" +
		"- Resolve every conflict: edit each file so that no conflict marker line (`<<<<<<<`, `|||||||`, `=======`, `>>>>>>>`) is left.\n" +
		"- Keep both sides' intent: this loop's work and its sibling's. Drop a side's change only where the other already does the same.\n" +
		"- A file with markers left is refused: nothing is committed and the next rebase iteration gets what is left.\n")
	b.WriteString(l.rebaseRules())
	if last := l.lastFeedback(); last != "" {
		b.WriteString("\n## The last rebase iteration\n" + last)
	}
	return b.String()
}

// fixPrompt is a rebase iteration's prompt when the rebase applied but
// the validation failed after it (fb its feedback).
func (l *loop) fixPrompt(fb string) string {
	var b strings.Builder
	b.WriteString(l.rebaseHeader())
	b.WriteString("The merge had no conflict (or they were resolved), but the loop's validation fails now:\n")
	b.WriteString(fb)
	b.WriteString("\nWhat to do:\n" +
		"- Make the validation pass again with both this loop's work and its sibling's in the tree: keep both sides' intent.\n")
	b.WriteString(l.rebaseRules())
	return b.String()
}

// lastFeedback is the feedback of the last iteration, when it was a
// rebase iteration that failed (markers left, validation), else "".
func (l *loop) lastFeedback() string {
	if l.lastRebaseFeedback == "" {
		return ""
	}
	return boundTail(l.lastRebaseFeedback, 4<<10)
}

// rebaseIterationEnded keeps a failed rebase iteration's feedback for
// the next one's prompt.
func (l *loop) rebaseIterationEnded(it *api.LoopIteration) {
	if it != nil && it.Rebase && it.Status == "failed" {
		l.lastRebaseFeedback = it.Feedback
	}
}
