package gitwt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// evil writes an executable script that appends its name to marker.
func evil(t *testing.T, p, marker string) {
	t.Helper()
	write(t, p, "#!/bin/sh\necho "+filepath.Base(p)+" \"$@\" >> '"+marker+"'\ncat\n", 0o755)
}

// evils makes a directory of evil scripts with names, each appending to
// the marker file it returns (written by none yet).
func evils(t *testing.T, names ...string) (marker, dir string) {
	t.Helper()
	marker = filepath.Join(t.TempDir(), "ran")
	dir = t.TempDir()
	for _, n := range names {
		evil(t, filepath.Join(dir, n), marker)
	}
	return marker, dir
}

// noMarker fails the test if anything wrote marker.
func noMarker(t *testing.T, marker string) {
	t.Helper()
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("an agent's program ran: %q", b)
	}
}

var hookNames = []string{"pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout",
	"pre-merge-commit", "post-merge", "reference-transaction", "post-index-change", "pre-auto-gc", "post-rewrite"}

// The repository's hooks, a hooksPath, fsmonitor, filter and merge
// drivers in the repository's config and the worktree's config.worktree,
// named by the agent's .gitattributes: none runs, through add, commit,
// merge (into a worktree and by compare-and-swap) and removal.
func TestHostileConfigAndHooks(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	marker, evilDir := evils(t, "fsmonitor", "filter", "merge")
	// The agent's .gitattributes, committed where every later checkout
	// and merge sees it, before any evil config exists.
	write(t, filepath.Join(r.Dir, ".gitattributes"), "* filter=evil merge=evil\n*.txt filter=evil.two\n", 0o644)
	gitT(t, r.Dir, "add", ".gitattributes")
	gitT(t, r.Dir, "commit", "-q", "-m", "attributes")
	for _, h := range hookNames {
		evil(t, filepath.Join(r.Dir, ".git", "hooks", h), marker)
		evil(t, filepath.Join(evilDir, "hooks", h), marker)
	}
	cfg := func(args ...string) { gitT(t, r.Dir, append([]string{"config"}, args...)...) }
	cfg("core.hooksPath", filepath.Join(evilDir, "hooks"))
	cfg("core.fsmonitor", filepath.Join(evilDir, "fsmonitor"))
	cfg("filter.evil.clean", filepath.Join(evilDir, "filter")+" clean %f")
	cfg("filter.evil.smudge", filepath.Join(evilDir, "filter")+" smudge %f")
	cfg("filter.evil.required", "true")
	cfg("filter.evil.two.process", filepath.Join(evilDir, "filter")+" process")
	cfg("merge.evil.driver", filepath.Join(evilDir, "merge")+" %O %A %B")
	cfg("merge.default", "evil")
	cfg("extensions.worktreeConfig", "true")
	cfg("commit.gpgSign", "true")
	cfg("gpg.program", filepath.Join(evilDir, "filter"))
	noMarker(t, marker) // git config runs nothing

	parent := addLoop(t, r, "p", "main")
	a := addLoop(t, r, "p-001", "loop/p")
	b := addLoop(t, r, "p-002", "loop/p")
	// The worktree's own config, as the agent would write it.
	adminA, _ := r.adminDir(a)
	write(t, filepath.Join(adminA, "config.worktree"), "[core]\n\tfsmonitor = "+filepath.Join(evilDir, "fsmonitor")+
		"\n\thooksPath = "+filepath.Join(evilDir, "hooks")+"\n[filter \"wt\"]\n\tclean = "+filepath.Join(evilDir, "filter")+"\n", 0o644)
	write(t, filepath.Join(a, ".gitattributes"), "* filter=wt merge=evil\n", 0o644)
	write(t, filepath.Join(a, "README"), "one\ntwo A\nthree\n", 0o644)
	write(t, filepath.Join(a, "x.txt"), "a\n", 0o644)
	write(t, filepath.Join(b, "README"), "one B\ntwo\nthree\n", 0o644)
	ca := commit(t, r, a, "a")
	commit(t, r, b, "b")
	noMarker(t, marker)
	// The content went in as written (no clean filter).
	if got := gitT(t, r.Dir, "show", ca+":x.txt"); got != "a" {
		t.Fatalf("x.txt committed as %q", got)
	}
	res, err := r.Merge(ctx, "loop/p", "loop/p-001", "merge a")
	if err != nil || res.Conflict {
		t.Fatalf("merge a: %+v %v", res, err)
	}
	// README changed on both sides, not overlapping: the text merge
	// would take both; the agent's merge driver is `false` (a conflict).
	res, err = r.Merge(ctx, "loop/p", "loop/p-002", "merge b")
	if err != nil || !res.Conflict {
		t.Fatalf("merge b through the neutralised driver: %+v %v", res, err)
	}
	noMarker(t, marker)
	// Into a branch checked out nowhere: a temporary worktree's checkout.
	if err := r.RemoveWorktree(ctx, parent); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Merge(ctx, "loop/p", "loop/p-001", "again"); err != nil || res.Conflict {
		t.Fatalf("merge into loop/p checked out nowhere: %+v %v", res, err)
	}
	if _, _, err := r.RecoverWIP(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, wt := range []string{a, b} {
		if err := r.RemoveWorktree(ctx, wt); err != nil {
			t.Fatal(err)
		}
	}
	noMarker(t, marker)
	// The same git, run as the agent would, does run them: the test can fail.
	write(t, filepath.Join(r.Dir, "x.txt"), "x\n", 0o644)
	gitT(t, r.Dir, "add", "x.txt")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the evil config does not run even for plain git: the test shows nothing (%v)", err)
	}
}

// The agent rewrites the worktree's .git file to point at another
// repository, or swaps the worktree for a link: orchestrd commits into
// its own repository, or refuses.
func TestHostileGitFile(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	other := newRepo(t)
	otherHead := gitT(t, other.Dir, "rev-parse", "HEAD")
	wt := addLoop(t, r, "x", "main")
	write(t, filepath.Join(wt, ".git"), "gitdir: "+filepath.Join(other.Dir, ".git")+"\n", 0o644)
	write(t, filepath.Join(wt, "work"), "w\n", 0o644)
	c := commit(t, r, wt, "work")
	if h, _ := r.BranchHead(ctx, "loop/x"); h != c {
		t.Fatalf("loop/x at %s, want %s", h, c)
	}
	if got := gitT(t, other.Dir, "rev-parse", "HEAD"); got != otherHead {
		t.Fatal("the other repository got a commit")
	}
	if st := gitT(t, other.Dir, "status", "--porcelain"); st != "" {
		t.Fatalf("the other repository's index changed: %q", st)
	}
	// The .git file itself is never committed.
	if files := gitT(t, r.Dir, "ls-tree", "-r", "--name-only", c); strings.Contains(files, ".git\n") || strings.HasPrefix(files, ".git\n") {
		t.Fatalf("committed: %q", files)
	}
	// A worktree swapped for a link to another directory: refused.
	y := addLoop(t, r, "y", "main")
	target := t.TempDir()
	if err := os.RemoveAll(y); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(wt, y); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.CommitAll(ctx, y, "via a link"); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("CommitAll through a link: %v, want ErrNotOurs", err)
	}
	_ = target
	for _, p := range []string{r.Dir, other.Dir, filepath.Join(r.Dir, WorktreesDir, "nope"), filepath.Join(wt, "sub")} {
		if _, _, err := r.CommitAll(ctx, p, "m"); !errors.Is(err, ErrNotOurs) {
			t.Errorf("CommitAll(%s): %v, want ErrNotOurs", p, err)
		}
	}
	if err := r.RemoveWorktree(ctx, y); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(wt, "work")); err != nil {
		t.Fatalf("removing a link removed what it pointed at: %v", err)
	}
}

// An agent makes a repository of its own inside its worktree (a nested
// .git it controls, config and all): orchestrd's git never runs a git in
// it, so its filter never runs.
func TestHostileNestedRepo(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	marker, evilDir := evils(t, "filter", "fsmonitor")
	p := addLoop(t, r, "p", "main")
	c := addLoop(t, r, "p-001", "loop/p")
	// The parent's agent made sub/ a repository with a file, committed.
	sub := filepath.Join(p, "sub")
	write(t, filepath.Join(sub, "f"), "content\n", 0o644)
	write(t, filepath.Join(sub, ".gitattributes"), "* filter=nested\n", 0o644)
	gitT(t, sub, "init", "-q")
	gitT(t, sub, "add", "-A")
	gitT(t, sub, "commit", "-q", "-m", "nested")
	gitT(t, sub, "config", "filter.nested.clean", filepath.Join(evilDir, "filter")+" clean")
	gitT(t, sub, "config", "filter.nested.required", "true")
	gitT(t, sub, "config", "core.fsmonitor", filepath.Join(evilDir, "fsmonitor"))
	pc := commit(t, r, p, "parent's work")
	if got := gitT(t, r.Dir, "ls-tree", pc, "sub"); !strings.HasPrefix(got, "160000 commit ") {
		t.Fatalf("the nested repository is not committed as a gitlink: %q", got)
	}
	noMarker(t, marker)
	// Its file touched: a status in sub would run the clean filter.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(sub, "f"), future, future); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(c, "g"), "g\n", 0o644)
	commit(t, r, c, "child's work")
	noMarker(t, marker)
	if res, err := r.Merge(ctx, "loop/p", "loop/p-001", "merge"); err != nil || res.Conflict {
		t.Fatalf("Merge: %+v %v", res, err)
	}
	noMarker(t, marker)
	if _, _, err := r.CommitAll(ctx, p, "again"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.RecoverWIP(ctx, p); err != nil {
		t.Fatal(err)
	}
	noMarker(t, marker)
	// git status as a person would run it there does run it: the test
	// can fail.
	gitT(t, p, "status", "--porcelain")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the nested repository's filter does not run even for plain git status: the test shows nothing (%v)", err)
	}
}

// A rebase in a repository whose config and the agent's attributes name
// hooks, filters and merge drivers: none runs (the driver is `false`, a
// conflict without markers), the resolution commits, and the
// repository's config is left as it was, byte for byte.
func TestHostileRebase(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	marker, evilDir := evils(t, "filter", "merge")
	for _, h := range hookNames {
		evil(t, filepath.Join(r.Dir, ".git", "hooks", h), marker)
	}
	addLoop(t, r, "p", "main")
	a := addLoop(t, r, "p-001", "loop/p")
	b := addLoop(t, r, "p-002", "loop/p")
	write(t, filepath.Join(a, ".gitattributes"), "README merge=evil\n*.txt filter=evil\n", 0o644)
	write(t, filepath.Join(a, "README"), "one\ntwo A\nthree\n", 0o644)
	write(t, filepath.Join(b, "README"), "one\ntwo\nthree B\n", 0o644)
	write(t, filepath.Join(b, "b.txt"), "b\n", 0o644)
	commit(t, r, a, "a")
	commit(t, r, b, "b")
	if res, err := r.Merge(ctx, "loop/p", "loop/p-001", "merge a"); err != nil || res.Conflict {
		t.Fatalf("merge a: %+v %v", res, err)
	}
	cfg := func(args ...string) { gitT(t, r.Dir, append([]string{"config"}, args...)...) }
	cfg("filter.evil.smudge", filepath.Join(evilDir, "filter")+" smudge")
	cfg("filter.evil.clean", filepath.Join(evilDir, "filter")+" clean")
	cfg("merge.evil.driver", filepath.Join(evilDir, "merge")+" %O %A %B")
	cfg("merge.conflictStyle", "zdiff3")
	cfg("core.hooksPath", filepath.Join(r.Dir, ".git", "hooks"))
	before, err := os.ReadFile(filepath.Join(r.Dir, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	// README conflicts, through the agent's merge driver, neutralised.
	res, err := r.Rebase(ctx, b, "loop/p", "rebase b")
	if err != nil || len(res.Conflicts) != 1 || res.Conflicts[0].Path != "README" {
		t.Fatalf("Rebase through the neutralised driver: %+v %v", res, err)
	}
	noMarker(t, marker)
	write(t, filepath.Join(b, "README"), "one\ntwo A\nthree B\n", 0o644)
	write(t, filepath.Join(b, "c.txt"), "c\n", 0o644)
	commit, unresolved, err := r.ResolveRebase(ctx, b, "resolve")
	if err != nil || len(unresolved) != 0 || commit == "" {
		t.Fatalf("ResolveRebase: %q %v %v", commit, unresolved, err)
	}
	if got := gitT(t, r.Dir, "show", commit+":c.txt"); got != "c" {
		t.Fatalf("c.txt went through a filter: %q", got)
	}
	if m, err := r.Merge(ctx, "loop/p", "loop/p-002", "merge b"); err != nil || m.Conflict {
		t.Fatalf("merge b after the rebase: %+v %v", m, err)
	}
	noMarker(t, marker)
	after, err := os.ReadFile(filepath.Join(r.Dir, ".git", "config"))
	if err != nil || string(after) != string(before) {
		t.Fatalf("the repository's config changed: %v\n%s\n---\n%s", err, before, after)
	}
	// The same git, run as the agent would, does run them.
	write(t, filepath.Join(r.Dir, "x.txt"), "x\n", 0o644)
	gitT(t, r.Dir, "add", "x.txt")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the evil config does not run even for plain git: the test shows nothing (%v)", err)
	}
}
