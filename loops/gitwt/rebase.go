package gitwt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/orchestrd/orchestrd/platform/beneath"
)

// Bounds on what Rebase reads of the conflicting files for a prompt.
const (
	MaxHunkBytes      = 4 << 10  // of one file's conflict-marked regions
	MaxHunksTotal     = 24 << 10 // of all the files' together
	maxConflictPaths  = 1000     // conflicting paths listed; more are counted
	maxMarkerLineScan = 64 << 10 // a line longer than this is read in pieces (only a piece at a line's start can be a marker)
)

// ErrNoRebase is ResolveRebase or a continued Rebase in a worktree with
// no rebase in progress.
var ErrNoRebase = errors.New("no rebase in progress")

// Conflict is a path a rebase stopped on, and its conflict-marked
// regions as the worktree holds them. Path and Hunks are what the agent
// (or the other side's agent) wrote: for its prompt, never for a log.
type Conflict struct {
	Path  string // relative to the worktree
	Hunks string // the regions from a <<<<<<< line to its >>>>>>> line, at most MaxHunkBytes; "" when git left no markers (a binary file, a file deleted on one side)
	Cut   bool   // Hunks was cut at its bound
}

// RebaseResult is what Rebase did.
type RebaseResult struct {
	Onto      string     // the commit onto's branch was at
	Commit    string     // the worktree's head after it: the merge commit, or the head as it was when onto's head was in it already; "" on a conflict
	Conflicts []Conflict // the paths it stopped on (at most 1000), in path order; none when it applied
	More      int        // conflicting paths not listed
	Continued bool       // it took up a rebase left in progress (its conflicts as the worktree holds them now)
	WIP       string     // the commit of what the worktree held uncommitted before it ("" : nothing)
}

// Rebase brings the branch checked out in the loop worktree onto the
// head of the branch onto (its parent's, which a sibling's merge moved):
// onto's head is merged into it, in the worktree, with message (not
// --no-ff: nothing to merge is no commit). Of the ways to do it, this
// one stops at most once (a rebase replaying commit after commit could
// stop at each), keeps the branch's own commits as they are (nothing is
// rewritten, so a crash halfway loses nothing) and leaves what a person
// reads in the worktree as git always does: the conflict markers. The
// merge that follows, of the branch into onto, is then a clean one.
//
// A conflict is a result: the merge stays in progress (MERGE_HEAD, the
// index's unmerged entries, the markers in the files) for the agent to
// resolve the files and ResolveRebase to commit; its Conflicts name the
// paths with their conflict-marked regions (read beneath the worktree,
// never through a link). A rebase already in progress is taken up as it
// is (Continued): its conflicts as the files hold them now. What the
// worktree holds uncommitted otherwise (a failed iteration's work) is
// committed first (WIP, as CommitAll does), so that the merge never meets
// a dirty tree and nothing of it is lost. Hardened as every operation
// here: the repository's lock, hooks off, no filter or merge driver runs
// (a path whose attributes name one is a conflict without markers).
func (r *Repo) Rebase(ctx context.Context, worktree, onto, message string) (RebaseResult, error) {
	op := "rebasing worktree " + worktree + " onto " + onto
	if err := r.validBranch(ctx, op, onto); err != nil {
		return RebaseResult{}, err
	}
	if strings.TrimSpace(message) == "" {
		return RebaseResult{}, fmt.Errorf("%s: an empty commit message", op)
	}
	s, unlock, err := r.beginWorktree(ctx, op, worktree)
	if err != nil {
		return RebaseResult{}, err
	}
	defer unlock()
	// The markers in the form the conflicts are read in, whatever the
	// repository's config says.
	s.overrides = append(slices.Clip(s.overrides), [2]string{"merge.conflictStyle", "merge"})
	sha, err := r.revParse(ctx, s, "refs/heads/"+onto)
	if err != nil {
		return RebaseResult{}, err
	}
	res := RebaseResult{Onto: sha}
	merging, err := inMerge(s)
	if err != nil {
		return RebaseResult{}, err
	}
	if merging {
		paths, more, err := unmerged(ctx, s)
		if err != nil {
			return RebaseResult{}, err
		}
		if len(paths) > 0 {
			res.Continued, res.More = true, more
			res.Conflicts, err = readConflicts(s.workTree, paths)
			return res, err
		}
		// Staged and not committed (a crash between the two): started
		// again.
		if _, err := run(ctx, s, "merge", "--abort"); err != nil {
			return RebaseResult{}, err
		}
	}
	wip, changed, err := commitAll(ctx, s, "WIP: before rebasing onto "+onto)
	if err != nil {
		return RebaseResult{}, err
	}
	if changed {
		res.WIP = wip
	}
	_, merr := run(ctx, s, "merge", "--no-edit", "--no-verify", "--no-log", "--no-stat", "--no-progress",
		"-m", message, "--end-of-options", sha)
	if merr == nil {
		res.Commit, err = headOf(ctx, s)
		return res, err
	}
	paths, more, err := unmerged(ctx, s)
	if err == nil && len(paths) > 0 && ctx.Err() == nil {
		res.More = more
		res.Conflicts, err = readConflicts(s.workTree, paths)
		return res, err
	}
	if merging, _ := inMerge(s); merging {
		if _, err := run(context.WithoutCancel(ctx), s, "merge", "--abort"); err != nil {
			return RebaseResult{}, fmt.Errorf("%s: aborting the merge (%w) after: %w", op, err, merr)
		}
	}
	return RebaseResult{}, merr
}

// ResolveRebase commits the rebase in progress in worktree (the merge
// Rebase left) once no conflicting path holds a conflict marker any more:
// unresolved names those that do (nothing is committed then, the rebase
// stays in progress). The worktree is committed as CommitAll does
// (everything, links as links), as the merge's commit with message.
func (r *Repo) ResolveRebase(ctx context.Context, worktree, message string) (commit string, unresolved []string, err error) {
	op := "committing the rebase of worktree " + worktree
	s, unlock, err := r.beginWorktree(ctx, op, worktree)
	if err != nil {
		return "", nil, err
	}
	defer unlock()
	if merging, err := inMerge(s); err != nil {
		return "", nil, err
	} else if !merging {
		return "", nil, fmt.Errorf("%s: %w", op, ErrNoRebase)
	}
	paths, _, err := unmerged(ctx, s)
	if err != nil {
		return "", nil, err
	}
	d, err := beneath.OpenRoot(s.workTree, beneath.Options{})
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", op, err)
	}
	defer d.Close()
	for _, p := range paths {
		n, err := markersIn(d, p)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", op, err)
		}
		if n > 0 {
			unresolved = append(unresolved, p)
		}
	}
	if len(unresolved) > 0 {
		return "", unresolved, nil
	}
	commit, _, err = commitAll(ctx, s, message)
	return commit, nil, err
}

// RecoverRebase is what a restart does to the worktree of a loop that
// was rebasing: a stale index.lock is removed (as RecoverWIP does); a
// rebase in progress is kept for Rebase to take up (merging), else the
// uncommitted work is committed as "WIP: recovery" (commit, changed).
func (r *Repo) RecoverRebase(ctx context.Context, worktree string) (commit string, changed, merging bool, err error) {
	op := "recovering the rebase of worktree " + worktree
	s, unlock, err := r.beginWorktree(ctx, op, worktree)
	if err != nil {
		return "", false, false, err
	}
	defer unlock()
	if err := os.Remove(filepath.Join(s.gitDir, "index.lock")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", false, false, fmt.Errorf("%s: %w", op, err)
	}
	if merging, err = inMerge(s); err != nil || merging {
		return "", false, merging, err
	}
	commit, changed, err = commitAll(ctx, s, "WIP: recovery")
	return commit, changed, false, err
}

// inMerge: a merge is in progress in s (its MERGE_HEAD, in the git
// directory the agent cannot write).
func inMerge(s scope) (bool, error) {
	_, err := os.Lstat(filepath.Join(s.gitDir, "MERGE_HEAD"))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("%s: %w", s.op, err)
}

// unmerged lists the index's unmerged paths (at most maxConflictPaths,
// sorted; more counts the rest).
func unmerged(ctx context.Context, s scope) (paths []string, more int, err error) {
	seen := map[string]bool{}
	rec := &records{fn: func(rec []byte) {
		if _, p, ok := bytes.Cut(rec, []byte{'\t'}); ok && !seen[string(p)] {
			seen[string(p)] = true
		}
	}}
	if err := runTo(ctx, s, rec, "ls-files", "-u", "-z"); err != nil {
		return nil, 0, err
	}
	for p := range seen {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	if len(paths) > maxConflictPaths {
		more = len(paths) - maxConflictPaths
		paths = paths[:maxConflictPaths]
	}
	return paths, more, nil
}

// readConflicts reads each path's conflict-marked regions beneath dir,
// within MaxHunkBytes a file and MaxHunksTotal in all. A path that is
// not a regular file beneath dir (gone, a link, a directory) has none.
func readConflicts(dir string, paths []string) ([]Conflict, error) {
	d, err := beneath.OpenRoot(dir, beneath.Options{})
	if err != nil {
		return nil, fmt.Errorf("reading the conflicts in %s: %w", dir, err)
	}
	defer d.Close()
	left := MaxHunksTotal
	out := make([]Conflict, 0, len(paths))
	for _, p := range paths {
		c := Conflict{Path: p}
		if left > 0 {
			if f, err := d.Open(p); err == nil {
				c.Hunks, _, c.Cut, err = scanConflicts(f, min(MaxHunkBytes, left))
				f.Close()
				if err != nil {
					return nil, fmt.Errorf("reading the conflicts in %s: %w", dir, err)
				}
				left -= len(c.Hunks)
			}
		} else {
			c.Cut = true
		}
		out = append(out, c)
	}
	return out, nil
}

// markersIn counts the conflict marker lines of the file p beneath d (0
// when it is not a regular file there: gone, a link, a directory).
func markersIn(d *beneath.Dir, p string) (int, error) {
	f, err := d.Open(p)
	if err != nil {
		return 0, nil
	}
	defer f.Close()
	_, n, _, err := scanConflicts(f, 0)
	return n, err
}

// markerOf: line (a line's start) is a conflict marker line: seven '<',
// '>' or '|' (diff3's base) then a space or the line's end; it returns
// that character, else 0. "=======" is not one on its own (a Markdown
// heading's underline is one).
func markerOf(line []byte) byte {
	if len(line) < 7 {
		return 0
	}
	c := line[0]
	if c != '<' && c != '>' && c != '|' {
		return 0
	}
	for _, b := range line[1:7] {
		if b != c {
			return 0
		}
	}
	if len(line) > 7 && line[7] != ' ' && line[7] != '\n' && line[7] != '\r' {
		return 0
	}
	return c
}

// maxHunkLine bounds one line of a region as scanConflicts keeps it.
const maxHunkLine = 512

// scanConflicts reads r and returns its conflict-marked regions (from a
// <<<<<<< line through its >>>>>>> line, each line at most maxHunkLine
// bytes, regions separated by a blank line) within max bytes (0: none
// kept), how many marker lines it holds, and whether the regions were
// cut.
func scanConflicts(r io.Reader, max int) (hunks string, markers int, cut bool, err error) {
	br := bufio.NewReaderSize(r, maxMarkerLineScan)
	var out strings.Builder
	atStart, in := true, false
	for {
		line, rerr := br.ReadSlice('\n')
		if len(line) > 0 {
			start := atStart
			atStart = line[len(line)-1] == '\n'
			var m byte
			if start {
				m = markerOf(line)
			}
			if m != 0 {
				markers++
			}
			if m == '<' && !in {
				in = true
				if out.Len() > 0 && !cut {
					out.WriteString("\n")
				}
			}
			if in && start && max > 0 && !cut {
				l := line
				if len(l) > maxHunkLine {
					l = append(l[:maxHunkLine:maxHunkLine], " [...]\n"...)
				} else if !atStart {
					l = append(l[:len(l):len(l)], '\n')
				}
				if out.Len()+len(l) > max {
					cut = true
				} else {
					out.Write(l)
				}
			}
			if m == '>' {
				in = false
			}
		}
		switch {
		case rerr == nil, errors.Is(rerr, bufio.ErrBufferFull):
		case errors.Is(rerr, io.EOF):
			return strings.ToValidUTF8(out.String(), "\uFFFD"), markers, cut, nil
		default:
			return "", 0, false, rerr
		}
	}
}
