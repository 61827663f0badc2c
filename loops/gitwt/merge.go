package gitwt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/orchestrd/orchestrd/api"
)

// MergeResult is what Merge did.
type MergeResult struct {
	Commit    string // into's head after the merge (the merge commit); "" on a conflict
	Conflict  bool   // the merge conflicted: it was aborted, into and branch are as they were
	Conflicts int    // how many paths conflicted
}

// checkout is where a branch is checked out.
type checkout struct {
	path     string
	prunable bool
}

// checkoutOf says where refs/heads/branch is checked out ("" path: not),
// from git's administrative files (the main HEAD, each linked worktree's
// HEAD and gitdir): what git worktree list reads, without its output
// formats that differ between git versions.
func (r *Repo) checkoutOf(branch string) (checkout, error) {
	want := "ref: refs/heads/" + branch
	if b, err := readSmall(filepath.Join(r.gitDir, "HEAD")); err != nil {
		return checkout{}, err
	} else if strings.TrimSpace(string(b)) == want {
		return checkout{path: r.Dir}, nil
	}
	base := filepath.Join(r.gitDir, "worktrees")
	ents, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return checkout{}, nil
	}
	if err != nil {
		return checkout{}, err
	}
	for _, e := range ents {
		b, err := readSmall(filepath.Join(base, e.Name(), "HEAD"))
		if err != nil || strings.TrimSpace(string(b)) != want {
			continue
		}
		gd, err := readSmall(filepath.Join(base, e.Name(), "gitdir"))
		if err != nil {
			return checkout{path: "", prunable: true}, nil
		}
		dotgit := strings.TrimRight(string(gd), "\n")
		_, err = os.Lstat(dotgit)
		return checkout{path: filepath.Dir(dotgit), prunable: err != nil}, nil
	}
	return checkout{}, nil
}

// Merge merges branch into the branch into, --no-ff, with message, and
// returns into's new head. Where into is checked out decides how:
//   - in a worktree of orchestrd's (a parent loop's): there;
//   - in the main working tree, or a worktree the user made: there, only
//     when it has no uncommitted changes to tracked files and no merge in
//     progress (else a *DirtyError, ErrDirty, naming the paths: the
//     user's work is never touched);
//   - nowhere: in a temporary detached worktree
//     (<repo>/.loopr/worktrees/.merge-<random>, removed after), and
//     into is then moved to the merge with a compare-and-swap from the
//     head the merge started at.
//
// A conflict aborts the merge (into's worktree as it was) and is a result,
// not an error: Conflict, with the number of conflicting paths; branch is
// left as it is.
func (r *Repo) Merge(ctx context.Context, into, branch, message string) (MergeResult, error) {
	op := "merging " + branch + " into " + into
	if err := r.validBranch(ctx, op, into); err != nil {
		return MergeResult{}, err
	}
	if err := r.validBranch(ctx, op, branch); err != nil {
		return MergeResult{}, err
	}
	if strings.TrimSpace(message) == "" {
		return MergeResult{}, fmt.Errorf("%s: an empty commit message", op)
	}
	ov, unlock, err := r.begin(ctx, op)
	if err != nil {
		return MergeResult{}, err
	}
	defer unlock()
	bs := r.bare(op, ov)
	old, err := r.revParse(ctx, bs, "refs/heads/"+into)
	if err != nil {
		return MergeResult{}, err
	}
	if _, err := r.revParse(ctx, bs, "refs/heads/"+branch); err != nil {
		return MergeResult{}, err
	}
	co, err := r.checkoutOf(into)
	if err != nil {
		return MergeResult{}, fmt.Errorf("%s: %w", op, err)
	}
	if co.prunable {
		if _, err := run(ctx, bs, "worktree", "prune"); err != nil {
			return MergeResult{}, err
		}
		co = checkout{}
	}
	switch {
	case co.path == r.Dir:
		return mergeIn(ctx, r.main(op, ov), branch, message)
	case co.path != "" && filepath.Dir(co.path) == filepath.Join(r.Dir, WorktreesDir):
		s, err := r.ours(ctx, op, co.path, false)
		if err != nil {
			return MergeResult{}, err
		}
		return mergeIn(ctx, s, branch, message)
	case co.path != "":
		admin, err := r.adminDir(co.path)
		if err != nil {
			return MergeResult{}, fmt.Errorf("%s: %w", op, err)
		}
		if admin == "" {
			return MergeResult{}, fmt.Errorf("%s: %s is checked out in a worktree git has no record of", op, into)
		}
		if err := checkOwnedDir(co.path); err != nil {
			return MergeResult{}, fmt.Errorf("%s: %w", op, err)
		}
		aov, err := hardening(ctx, op, admin)
		if err != nil {
			return MergeResult{}, err
		}
		return mergeIn(ctx, scope{op: op, gitDir: admin, workTree: co.path, overrides: aov}, branch, message)
	}
	// Not checked out: a temporary worktree, then a compare-and-swap.
	tmp := filepath.Join(r.Dir, WorktreesDir, ".merge-"+api.RandomHex(8))
	if err := r.addWorktree(ctx, op, ov, tmp, "", old); err != nil {
		return MergeResult{}, err
	}
	defer func() {
		// Removed even when ctx has ended.
		_ = r.removeWorktree(context.WithoutCancel(ctx), op, ov, tmp)
	}()
	s, err := r.ours(ctx, op, tmp, true)
	if err != nil {
		return MergeResult{}, err
	}
	res, err := mergeIn(ctx, s, branch, message)
	if err != nil || res.Conflict || res.Commit == old {
		return res, err
	}
	if _, err := run(ctx, bs, "update-ref", "-m", message, "refs/heads/"+into, res.Commit, old); err != nil {
		return MergeResult{}, err
	}
	return res, nil
}

// mergeIn merges refs/heads/branch into what is checked out in s.
func mergeIn(ctx context.Context, s scope, branch, message string) (MergeResult, error) {
	if _, err := os.Lstat(filepath.Join(s.gitDir, "MERGE_HEAD")); err == nil {
		return MergeResult{}, &DirtyError{Op: s.op, WorkTree: s.workTree, InProgress: true}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return MergeResult{}, fmt.Errorf("%s: %w", s.op, err)
	}
	st, err := run(ctx, s, "status", "--porcelain", "-z", "--untracked-files=no", "--ignore-submodules=all")
	if err != nil {
		return MergeResult{}, err
	}
	if paths := statusPaths(st); len(paths) > 0 {
		return MergeResult{}, &DirtyError{Op: s.op, WorkTree: s.workTree, Paths: paths[:min(len(paths), maxDirtyPaths)], Total: len(paths)}
	}
	_, merr := run(ctx, s, "merge", "--no-ff", "--no-edit", "--no-verify", "--no-log", "--no-stat", "--no-progress",
		"-m", message, "--end-of-options", "refs/heads/"+branch)
	if merr == nil {
		head, err := headOf(ctx, s)
		return MergeResult{Commit: head}, err
	}
	// Failed: count the conflicts, and abort whatever is in progress.
	conflicts := 0
	if out, err := run(ctx, s, "ls-files", "-u", "-z"); err == nil {
		seen := map[string]bool{}
		for _, rec := range bytes.Split(out, []byte{0}) {
			if _, p, ok := bytes.Cut(rec, []byte{'\t'}); ok && !seen[string(p)] {
				seen[string(p)] = true
			}
		}
		conflicts = len(seen)
	}
	if _, err := os.Lstat(filepath.Join(s.gitDir, "MERGE_HEAD")); err == nil || conflicts > 0 {
		if _, err := run(context.WithoutCancel(ctx), s, "merge", "--abort"); err != nil {
			return MergeResult{}, fmt.Errorf("%s: aborting the merge (%w) after: %w", s.op, err, merr)
		}
	}
	if conflicts > 0 && ctx.Err() == nil {
		return MergeResult{Conflict: true, Conflicts: conflicts}, nil
	}
	return MergeResult{}, merr
}
