package loops

import (
	"slices"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/loops/gitwt"
)

// mergeWait: a root's merge into its base found the base checked out with
// uncommitted changes (or a merge in progress there). The user's work is
// never touched: the loop waits (merge_waiting, saying which files), and
// tries again every [loops] merge_retry (each try a git status of the
// base's checkout, under the repository's lock) and at once on loop.merge. A restart keeps
// it waiting (its record says so).
func (l *loop) mergeWait(c *actors.Context, d *gitwt.DirtyError) {
	w := &api.MergeWait{Into: l.rec.Base, Checkout: d.WorkTree, Files: slices.Clone(d.Paths), Total: d.Total,
		InProgress: d.InProgress, Since: time.Now().UnixMilli()}
	old := l.rec.MergeWait
	same := l.rec.Stage == api.StageMergeWaiting && old != nil && old.Checkout == w.Checkout &&
		old.InProgress == w.InProgress && old.Total == w.Total && slices.Equal(old.Files, w.Files)
	if old != nil && l.rec.Stage == api.StageMergeWaiting {
		w.Since = old.Since
	}
	if l.rec.Status != api.LoopPaused {
		// Paused meanwhile: it stays paused; resume tries again.
		l.rec.Status = api.LoopRunning
		l.armMergePoll(c)
	}
	if same {
		l.answerMerges(l.rec)
		return
	}
	l.rec.Stage, l.rec.MergeWait = api.StageMergeWaiting, w
	l.m.bus.Emit(LoopMergeWaiting{ID: l.rec.ID, Into: l.rec.Base, Files: d.Total, InProgress: d.InProgress})
	l.m.log.Info().Str("loop_id", l.rec.ID).Int("files", d.Total).Bool("merge_in_progress", d.InProgress).
		Msg("a loop waits to merge into its base: the base's checkout has uncommitted changes (orchestrd loop show names them); it merges once they are committed or stashed")
	l.save(c, false, nil, func(c *actors.Context) { l.answerMerges(l.rec) })
}

// armMergePoll sets the timer of the next try of a waiting merge.
func (l *loop) armMergePoll(c *actors.Context) {
	if l.mergeT != nil {
		l.mergeT()
	}
	l.mergeT = c.After(l.m.cfg.MergeRetry.Duration, mergeRetry{})
}

// retryMerge tries the merge of a root waiting to merge (merge_waiting)
// again; reply (loop.merge's, or nil) gets the record once the try is
// over: complete, still waiting, or failed. A try under way is not
// started twice: reply waits for it.
func (l *loop) retryMerge(c *actors.Context, reply func(any, error)) {
	if l.rec.Stage != api.StageMergeWaiting {
		if reply != nil {
			reply(nil, mergeNotApplicable(l.rec))
		}
		return
	}
	if l.rec.Status == api.LoopPaused {
		// Paused: its poll stops; resume tries again.
		if reply != nil {
			reply(nil, mergeNotApplicable(l.rec))
		}
		return
	}
	if reply != nil {
		l.mergeReplies = append(l.mergeReplies, reply)
	}
	if l.merging {
		return
	}
	if l.mergeT != nil {
		l.mergeT()
		l.mergeT = nil
	}
	l.merge(c, l.rec.Base)
}

// reviveMerge: loop.merge on a root whose merge into its base failed
// (git_failed, before merges waited, or a git error): it is live again,
// waiting to merge, and tries at once. Its artifacts were left out of
// the base (commit_artifacts = false) before that merge: only the merge
// is done again.
func (l *loop) reviveMerge(c *actors.Context) {
	if l.reply != nil {
		reply := l.reply
		l.mergeReplies = append(l.mergeReplies, func(v any, err error) {
			r, _ := v.(api.LoopRecord)
			reply(r, err)
		})
		l.reply = nil
	}
	l.m.bus.Emit(LoopMergeRetried{ID: l.rec.ID, Into: l.rec.Base, From: string(l.rec.Status) + " (" + l.rec.Error + ")"})
	l.rec.Status, l.rec.Stage, l.rec.Error, l.rec.Message = api.LoopRunning, api.StageMergeWaiting, "", ""
	l.persist(c, false, func(c *actors.Context) { l.retryMerge(c, nil) })
}

// answerMerges answers the loop.merge calls waiting for the try under
// way with the record r.
func (l *loop) answerMerges(r api.LoopRecord) {
	rs := l.mergeReplies
	l.mergeReplies = nil
	for _, f := range rs {
		f(r, nil)
	}
}

// mergeNotApplicable is loop.merge's error for a loop that does not wait
// to merge: what it is, and the command that applies, in the CLI's words.
func mergeNotApplicable(r api.LoopRecord) error {
	id := r.ID
	var why string
	switch {
	case r.ParentID != nil:
		why = "it is a child of " + *r.ParentID + ": its parent merges it once it is complete; orchestrd loop merge applies to a root waiting to merge into its base"
	case r.Status == api.LoopComplete && r.MergedInto != "":
		why = "it is complete, merged into " + r.MergedInto + " already"
	case r.Status == api.LoopComplete:
		why = "it is complete and its merge was not approved: its branch " + r.Branch + " holds its work (git merge " + r.Branch + " merges it by hand)"
	case r.Status.Terminal():
		why = "it is " + string(r.Status)
		if r.Error != "" {
			why += " (" + r.Error + ")"
		}
		why += ", not by its merge: orchestrd loop show " + id + " says how; orchestrd loop merge applies to a loop waiting to merge (merge_waiting) or whose merge failed (git_failed)"
	case r.Status == api.LoopPaused:
		why = "it is paused: orchestrd loop resume " + id + " goes on"
		if r.Stage == api.StageMergeWaiting {
			why += " (and tries its merge again)"
		}
	case r.Stage == api.StageMerge:
		why = "its merge into " + r.Base + " waits for a person: orchestrd plan approve " + id + " merges it"
	default:
		stage := r.Stage
		if stage == "" {
			stage = "not started"
		}
		why = "it is " + string(r.Status) + " (" + stage + "): it merges into " + r.Base + " once it is complete; orchestrd loop merge applies to a loop waiting to merge (merge_waiting)"
	}
	return api.Errorf(api.CodeInvalidState, "loop %s: orchestrd loop merge does not apply: %s", id, why)
}
