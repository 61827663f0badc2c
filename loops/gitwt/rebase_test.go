package gitwt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// siblings makes a parent p with children p-001 (README's second line
// changed, merged into p) and p-002 (README's second line changed too,
// and a file of its own), committed: p-002's merge into p conflicts.
func siblings(t *testing.T, r *Repo) (parent, a, b, cb string) {
	t.Helper()
	ctx := ctxT(t)
	parent = addLoop(t, r, "p", "main")
	a = addLoop(t, r, "p-001", "loop/p")
	b = addLoop(t, r, "p-002", "loop/p")
	write(t, filepath.Join(a, "README"), "one\ntwo A\nthree\n", 0o644)
	write(t, filepath.Join(b, "README"), "one\ntwo B\nthree\n", 0o644)
	write(t, filepath.Join(b, "b.txt"), "b's\n", 0o644)
	commit(t, r, a, "a")
	cb = commit(t, r, b, "b")
	if res, err := r.Merge(ctx, "loop/p", "loop/p-001", "merge a"); err != nil || res.Conflict {
		t.Fatalf("merge a: %+v %v", res, err)
	}
	if res, err := r.Merge(ctx, "loop/p", "loop/p-002", "merge b"); err != nil || !res.Conflict {
		t.Fatalf("merge b should conflict: %+v %v", res, err)
	}
	return parent, a, b, cb
}

// A child whose sibling's merge moved the parent applies cleanly onto the
// parent's new head: one merge commit on its branch, its own commits
// kept, and its merge into the parent is then clean.
func TestRebaseClean(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	addLoop(t, r, "p", "main")
	a := addLoop(t, r, "p-001", "loop/p")
	b := addLoop(t, r, "p-002", "loop/p")
	write(t, filepath.Join(a, "a.txt"), "a\n", 0o644)
	write(t, filepath.Join(b, "b.txt"), "b\n", 0o644)
	commit(t, r, a, "a")
	cb := commit(t, r, b, "b")
	if _, err := r.Merge(ctx, "loop/p", "loop/p-001", "merge a"); err != nil {
		t.Fatal(err)
	}
	ph, _ := r.BranchHead(ctx, "loop/p")
	res, err := r.Rebase(ctx, b, "loop/p", "rebase b")
	if err != nil || len(res.Conflicts) != 0 || res.Onto != ph || len(res.Commit) != 40 || res.Continued {
		t.Fatalf("Rebase: %+v %v", res, err)
	}
	if ps := parents(t, r, res.Commit); len(ps) != 2 || ps[0] != cb || ps[1] != ph {
		t.Fatalf("the rebase's commit's parents: %v (want %s %s)", ps, cb, ph)
	}
	if h, _ := r.BranchHead(ctx, "loop/p-002"); h != res.Commit {
		t.Fatalf("loop/p-002 at %s, not the rebase's commit", h)
	}
	if _, err := os.Stat(filepath.Join(b, "a.txt")); err != nil {
		t.Fatalf("a's work is not in b's worktree: %v", err)
	}
	// Again: onto's head is in it already, nothing to do.
	again, err := r.Rebase(ctx, b, "loop/p", "rebase b")
	if err != nil || again.Commit != res.Commit || len(again.Conflicts) != 0 {
		t.Fatalf("Rebase again: %+v %v", again, err)
	}
	if m, err := r.Merge(ctx, "loop/p", "loop/p-002", "merge b"); err != nil || m.Conflict {
		t.Fatalf("merge after the rebase: %+v %v", m, err)
	}
	files := gitT(t, r.Dir, "ls-tree", "--name-only", "loop/p")
	if !strings.Contains(files, "a.txt") || !strings.Contains(files, "b.txt") {
		t.Fatalf("loop/p:\n%s", files)
	}
}

// A conflict stops the rebase with the conflicting file and its
// conflict-marked region; markers left are refused; once resolved, the
// rebase commits and the merge into the parent is clean. Work left
// uncommitted is committed before; ResolveRebase without a rebase is an
// error.
func TestRebaseConflict(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	_, _, b, cb := siblings(t, r)
	if _, _, err := r.ResolveRebase(ctx, b, "resolve"); !errors.Is(err, ErrNoRebase) {
		t.Fatalf("ResolveRebase with none in progress: %v", err)
	}
	// Work left uncommitted is committed first (a failed iteration's).
	write(t, filepath.Join(b, "wip.txt"), "left\n", 0o644)
	res, err := r.Rebase(ctx, b, "loop/p", "rebase b")
	if err != nil || len(res.Conflicts) != 1 || res.Commit != "" || len(res.WIP) != 40 {
		t.Fatalf("Rebase: %+v %v", res, err)
	}
	if ps := parents(t, r, res.WIP); len(ps) != 1 || ps[0] != cb {
		t.Fatalf("the WIP commit's parents: %v", ps)
	}
	if got := gitT(t, r.Dir, "show", "loop/p-002:wip.txt"); got != "left" {
		t.Fatalf("wip.txt on loop/p-002: %q", got)
	}
	cb = res.WIP
	c := res.Conflicts[0]
	if c.Path != "README" || c.Cut || !strings.HasPrefix(c.Hunks, "<<<<<<< ") || !strings.Contains(c.Hunks, "two B\n=======\ntwo A\n>>>>>>> ") ||
		strings.Contains(c.Hunks, "one") || strings.Contains(c.Hunks, "three") {
		t.Fatalf("the conflict: %+v", c)
	}
	// Taken up again as it is.
	again, err := r.Rebase(ctx, b, "loop/p", "rebase b")
	if err != nil || !again.Continued || len(again.Conflicts) != 1 || again.Conflicts[0].Hunks != c.Hunks {
		t.Fatalf("Rebase continued: %+v %v", again, err)
	}
	// Markers left: refused, named, nothing committed.
	if commit, unresolved, err := r.ResolveRebase(ctx, b, "resolve"); err != nil || commit != "" || len(unresolved) != 1 || unresolved[0] != "README" {
		t.Fatalf("ResolveRebase with markers: %q %v %v", commit, unresolved, err)
	}
	// Refused: the branch has not moved.
	if h, _ := r.BranchHead(ctx, "loop/p-002"); h != cb {
		t.Fatalf("loop/p-002 moved: %s", h)
	}
	// Resolved this time (both sides kept).
	write(t, filepath.Join(b, "README"), "one\ntwo A\ntwo B\nthree\n", 0o644)
	commit, unresolved, err := r.ResolveRebase(ctx, b, "resolve")
	if err != nil || len(unresolved) != 0 || len(commit) != 40 {
		t.Fatalf("ResolveRebase: %q %v %v", commit, unresolved, err)
	}
	ph, _ := r.BranchHead(ctx, "loop/p")
	if ps := parents(t, r, commit); len(ps) != 2 || ps[0] != cb || ps[1] != ph {
		t.Fatalf("the resolution's parents: %v", ps)
	}
	if m, err := r.Merge(ctx, "loop/p", "loop/p-002", "merge b"); err != nil || m.Conflict {
		t.Fatalf("merge after the resolution: %+v %v", m, err)
	}
	if got := gitT(t, r.Dir, "show", "loop/p:README"); got != "one\ntwo A\ntwo B\nthree" {
		t.Fatalf("loop/p's README: %q", got)
	}
}

// A resolution that keeps the branch's side whole (the tree is HEAD's) is
// still committed: the rebase's commit records the parent's head.
func TestRebaseResolvedAsOurs(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	_, _, b, cb := siblings(t, r)
	if res, err := r.Rebase(ctx, b, "loop/p", "rebase b"); err != nil || len(res.Conflicts) != 1 {
		t.Fatalf("Rebase: %+v %v", res, err)
	}
	write(t, filepath.Join(b, "README"), "one\ntwo B\nthree\n", 0o644)
	commit, unresolved, err := r.ResolveRebase(ctx, b, "resolve")
	if err != nil || len(unresolved) != 0 || commit == cb || len(parents(t, r, commit)) != 2 {
		t.Fatalf("ResolveRebase: %q %v %v", commit, unresolved, err)
	}
}

// A conflicting path the agent made a link (to a file outside with
// markers) is read as no file: never followed.
func TestRebaseConflictLink(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	_, _, b, _ := siblings(t, r)
	if res, err := r.Rebase(ctx, b, "loop/p", "rebase b"); err != nil || len(res.Conflicts) != 1 {
		t.Fatalf("Rebase: %+v %v", res, err)
	}
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, outside, "<<<<<<< SECRET-OUTSIDE\n>>>>>>> x\n", 0o644)
	if err := os.Remove(filepath.Join(b, "README")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(b, "README")); err != nil {
		t.Fatal(err)
	}
	res, err := r.Rebase(ctx, b, "loop/p", "rebase b")
	if err != nil || !res.Continued || len(res.Conflicts) != 1 || res.Conflicts[0].Hunks != "" {
		t.Fatalf("Rebase through a link: %+v %v", res, err)
	}
}

// The marker scan: regions kept within the bound, marker lines counted,
// "=======" alone and markers inside a line not counted.
func TestScanConflicts(t *testing.T) {
	text := "a\n=======\nx <<<<<<< y\n<<<<<<< HEAD\nours\n||||||| base\nbase\n=======\ntheirs\n>>>>>>> other\nb\n<<<<<<<\nno end"
	hunks, n, cut, err := scanConflicts(strings.NewReader(text), 1000)
	if err != nil || n != 4 || cut {
		t.Fatalf("scan: %q %d %v %v", hunks, n, cut, err)
	}
	want := "<<<<<<< HEAD\nours\n||||||| base\nbase\n=======\ntheirs\n>>>>>>> other\n\n<<<<<<<\nno end\n"
	if hunks != want {
		t.Fatalf("hunks %q, want %q", hunks, want)
	}
	if h, _, cut, _ := scanConflicts(strings.NewReader(text), 20); !cut || len(h) > 20 {
		t.Fatalf("bounded: %q %v", h, cut)
	}
	long := "<<<<<<< a\n" + strings.Repeat("x", 100<<10) + "\n<<<<<<< not at a line's start? no: this one is\n>>>>>>> b\n"
	h, n, _, err := scanConflicts(strings.NewReader(long), MaxHunkBytes)
	if err != nil || n != 3 || len(h) > MaxHunkBytes || !strings.Contains(h, " [...]\n") {
		t.Fatalf("long line: %d %d %v", len(h), n, err)
	}
}

func FuzzScanConflicts(f *testing.F) {
	f.Add([]byte("<<<<<<< HEAD\na\n=======\nb\n>>>>>>> x\n"), 64)
	f.Add([]byte("plain\ntext"), 0)
	f.Add([]byte("<<<<<<<\n<<<<<<<\r\n>>>>>>>"), 5)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		if max < 0 || max > 1<<20 {
			return
		}
		h, n, _, err := scanConflicts(strings.NewReader(string(b)), max)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(h) || utf8.Valid(b) && len(h) > max {
			t.Fatalf("%d bytes of hunks (max %d), valid UTF-8: %v", len(h), max, utf8.ValidString(h))
		}
		if n == 0 && h != "" || max == 0 && h != "" {
			t.Fatalf("hunks %q with %d markers, max %d", h, n, max)
		}
		if n > strings.Count(string(b), "\n")+1 {
			t.Fatalf("%d markers in %d lines", n, strings.Count(string(b), "\n")+1)
		}
	})
}
