package gitwt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// gitT runs the real git in dir for a test's setup and checks, with no
// config of the machine's.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "LANG=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newRepo makes a repository on main with one commit and opens it.
func newRepo(t *testing.T) *Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed: %v", err)
	}
	dir := t.TempDir()
	gitT(t, dir, "init", "-q", "-b", "main")
	write(t, filepath.Join(dir, "README"), "one\ntwo\nthree\n", 0o644)
	gitT(t, dir, "add", "README")
	gitT(t, dir, "commit", "-q", "-m", "first")
	r, err := Open(ctxT(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// addLoop adds the worktree of loop id on loop/<id> from from.
func addLoop(t *testing.T, r *Repo, id, from string) string {
	t.Helper()
	p := r.WorktreePath(id)
	if err := r.AddWorktree(ctxT(t), p, "loop/"+id, from); err != nil {
		t.Fatalf("AddWorktree %s: %v", id, err)
	}
	return p
}

func commit(t *testing.T, r *Repo, wt, msg string) string {
	t.Helper()
	c, changed, err := r.CommitAll(ctxT(t), wt, msg)
	if err != nil || !changed || len(c) != 40 {
		t.Fatalf("CommitAll %s: %q %v %v", wt, c, changed, err)
	}
	return c
}

// parents lists a commit's parents.
func parents(t *testing.T, r *Repo, c string) []string {
	t.Helper()
	f := strings.Fields(gitT(t, r.Dir, "rev-list", "--parents", "-n", "1", c))
	return f[1:]
}

func TestVersion(t *testing.T) {
	for v, ok := range map[string]bool{"git version 2.39.5": true, "git version 2.32.0": true, "git version 3.0": true,
		"git version 2.31.1": false, "git version 1.9.5": false, "git version 2.45.1.windows.1": true, "nonsense": false, "": false} {
		if err := versionOK(v); (err == nil) != ok {
			t.Errorf("versionOK(%q): %v", v, err)
		}
	}
	if err := checkVersion(); err != nil {
		t.Fatalf("this machine's git: %v", err)
	}
}

func TestOpen(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	if b, err := r.CurrentBranch(ctx); err != nil || b != "main" {
		t.Fatalf("CurrentBranch: %q %v", b, err)
	}
	for _, dir := range []string{t.TempDir(), filepath.Join(r.Dir, ".git"), filepath.Join(t.TempDir(), "nothing")} {
		if _, err := Open(ctx, dir); err == nil {
			t.Errorf("Open(%s): no error", dir)
		}
	}
	sub := filepath.Join(r.Dir, "sub")
	write(t, filepath.Join(sub, "f"), "x", 0o644)
	if _, err := Open(ctx, sub); err == nil {
		t.Errorf("Open of a subdirectory: no error")
	}
}

// A worktree, a commit, a --no-ff merge into the parent's worktree and
// into main checked out in the main working tree (clean), removal.
func TestAddCommitMerge(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	parent := addLoop(t, r, "p", "main")
	child := addLoop(t, r, "p-001", "loop/p")
	if !r.WorktreeExists(child) {
		t.Fatal("WorktreeExists: false for a worktree just made")
	}
	if err := r.AddWorktree(ctx, child, "loop/other", "main"); !errors.Is(err, os.ErrExist) {
		t.Fatalf("AddWorktree over an existing path: %v", err)
	}
	for _, bad := range []string{filepath.Join(r.Dir, "elsewhere"), filepath.Join(r.Dir, WorktreesDir, "..x"), "rel/x"} {
		if err := r.AddWorktree(ctx, bad, "loop/x", "main"); !errors.Is(err, ErrNotOurs) {
			t.Errorf("AddWorktree(%s): %v, want ErrNotOurs", bad, err)
		}
	}
	if c, changed, err := r.CommitAll(ctx, child, "nothing"); err != nil || changed || c != gitT(t, r.Dir, "rev-parse", "main") {
		t.Fatalf("CommitAll of a clean worktree: %q, changed %v, %v", c, changed, err)
	}
	write(t, filepath.Join(child, "src", "a.go"), "package a\n", 0o644)
	write(t, filepath.Join(child, "ignored.log"), "x", 0o644)
	write(t, filepath.Join(child, ".gitignore"), "*.log\n", 0o644)
	if err := os.Symlink("/etc/passwd", filepath.Join(child, "link")); err != nil {
		t.Fatal(err)
	}
	c := commit(t, r, child, "loop p-001: iteration 1")
	if got := gitT(t, r.Dir, "log", "-1", "--format=%an <%ae>|%s", c); got != "orchestrd <orchestrd@localhost>|loop p-001: iteration 1" {
		t.Fatalf("commit: %q", got)
	}
	files := gitT(t, r.Dir, "ls-tree", "-r", "--name-only", c)
	if !strings.Contains(files, "src/a.go") || strings.Contains(files, "ignored.log") {
		t.Fatalf("committed files: %q", files)
	}
	if mode := gitT(t, r.Dir, "ls-tree", c, "link"); !strings.HasPrefix(mode, "120000") {
		t.Fatalf("the link is not stored as a link: %q", mode)
	}
	if h, err := r.BranchHead(ctx, "loop/p-001"); err != nil || h != c {
		t.Fatalf("BranchHead: %q %v, want %s", h, err, c)
	}
	oldParent, _ := r.BranchHead(ctx, "loop/p")
	res, err := r.Merge(ctx, "loop/p", "loop/p-001", "merge loop p-001")
	if err != nil || res.Conflict || len(res.Commit) != 40 {
		t.Fatalf("Merge: %+v %v", res, err)
	}
	if ps := parents(t, r, res.Commit); len(ps) != 2 || ps[0] != oldParent || ps[1] != c {
		t.Fatalf("merge commit's parents: %v, want [%s %s]", ps, oldParent, c)
	}
	if _, err := os.Stat(filepath.Join(parent, "src", "a.go")); err != nil {
		t.Fatalf("the parent's worktree has not the child's file: %v", err)
	}
	// main is checked out in the (clean) main working tree: merged there.
	oldMain, _ := r.BranchHead(ctx, "main")
	res, err = r.Merge(ctx, "main", "loop/p", "merge loop p")
	if err != nil || res.Conflict {
		t.Fatalf("Merge into main: %+v %v", res, err)
	}
	if ps := parents(t, r, res.Commit); len(ps) != 2 || ps[0] != oldMain {
		t.Fatalf("main's merge commit's parents: %v", ps)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, "src", "a.go")); err != nil {
		t.Fatalf("main's working tree has not the merged file: %v", err)
	}
	if st := gitT(t, r.Dir, "status", "--porcelain"); st != "" {
		t.Fatalf("the main working tree is not clean after the merge (.loopr excluded): %q", st)
	}
	// The agent left a directory it cannot write to (as the daemon's user,
	// not root, removing what is in it would fail).
	write(t, filepath.Join(child, "ro", "f"), "x", 0o444)
	if err := os.Chmod(filepath.Join(child, "ro"), 0o500); err != nil {
		t.Fatal(err)
	}
	for _, wt := range []string{child, parent} {
		if err := r.RemoveWorktree(ctx, wt); err != nil {
			t.Fatal(err)
		}
		if r.WorktreeExists(wt) {
			t.Fatalf("%s still exists", wt)
		}
	}
	if err := r.RemoveWorktree(ctx, child); err != nil {
		t.Fatalf("RemoveWorktree of a worktree gone: %v", err)
	}
	if wl := gitT(t, r.Dir, "worktree", "list", "--porcelain"); strings.Count(wl, "worktree ") != 1 {
		t.Fatalf("worktrees left: %s", wl)
	}
	if ok, err := r.BranchExists(ctx, "loop/p-001"); !ok || err != nil {
		t.Fatalf("branch gone with its worktree: %v %v", ok, err)
	}
	if err := r.DeleteBranch(ctx, "loop/p-001"); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.BranchExists(ctx, "loop/p-001"); ok || err != nil {
		t.Fatalf("BranchExists after DeleteBranch: %v %v", ok, err)
	}
	if err := r.DeleteBranch(ctx, "loop/p-001"); err != nil {
		t.Fatalf("DeleteBranch of a branch gone: %v", err)
	}
	if err := r.DeleteBranch(ctx, "-D"); err == nil {
		t.Fatal("DeleteBranch(-D): no error")
	}
}

// A branch that exists (a loop recovered) gets a worktree on it as it is.
func TestAddWorktreeExistingBranch(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	wt := addLoop(t, r, "a", "main")
	write(t, filepath.Join(wt, "f"), "x", 0o644)
	c := commit(t, r, wt, "work")
	// The daemon died and the worktree's directory went.
	if err := os.RemoveAll(wt); err != nil {
		t.Fatal(err)
	}
	if r.WorktreeExists(wt) {
		t.Fatal("WorktreeExists: true for a removed directory")
	}
	if err := r.AddWorktree(ctx, wt, "loop/a", "main"); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, wt, "rev-parse", "HEAD"); got != c {
		t.Fatalf("recovered worktree at %s, want the branch's %s", got, c)
	}
	if _, err := os.Stat(filepath.Join(wt, "f")); err != nil {
		t.Fatal(err)
	}
}

// A conflict: aborted, the parent's branch and worktree as they were,
// the child's branch kept.
func TestMergeConflict(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	parent := addLoop(t, r, "p", "main")
	a := addLoop(t, r, "p-001", "loop/p")
	b := addLoop(t, r, "p-002", "loop/p")
	write(t, filepath.Join(a, "README"), "A\n", 0o644)
	write(t, filepath.Join(b, "README"), "B\n", 0o644)
	write(t, filepath.Join(b, "other"), "b's\n", 0o644)
	commit(t, r, a, "a")
	cb := commit(t, r, b, "b")
	if res, err := r.Merge(ctx, "loop/p", "loop/p-001", "merge a"); err != nil || res.Conflict {
		t.Fatalf("first merge: %+v %v", res, err)
	}
	before, _ := r.BranchHead(ctx, "loop/p")
	res, err := r.Merge(ctx, "loop/p", "loop/p-002", "merge b")
	if err != nil || !res.Conflict || res.Conflicts != 1 || res.Commit != "" {
		t.Fatalf("conflicting merge: %+v %v", res, err)
	}
	if after, _ := r.BranchHead(ctx, "loop/p"); after != before {
		t.Fatalf("the parent's branch moved: %s -> %s", before, after)
	}
	if h, _ := r.BranchHead(ctx, "loop/p-002"); h != cb {
		t.Fatalf("the child's branch moved: %s", h)
	}
	if st := gitT(t, parent, "status", "--porcelain", "--untracked-files=all"); st != "" {
		t.Fatalf("the parent's worktree is not as it was: %q", st)
	}
	if _, err := os.Stat(filepath.Join(parent, ".git")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "README")); string(b) != "A\n" {
		t.Fatalf("parent's README: %q", b)
	}
	// It merges again once fixed (nothing left in progress).
	write(t, filepath.Join(b, "README"), "A\n", 0o644)
	commit(t, r, b, "b fixed")
	if res, err := r.Merge(ctx, "loop/p", "loop/p-002", "merge b"); err != nil || res.Conflict {
		t.Fatalf("merge after the fix: %+v %v", res, err)
	}
}

// A branch checked out nowhere is merged in a temporary worktree and
// moved by compare-and-swap; nothing is left behind.
func TestMergeNotCheckedOut(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	gitT(t, r.Dir, "branch", "base2", "main")
	wt := addLoop(t, r, "x", "base2")
	write(t, filepath.Join(wt, "new"), "n\n", 0o644)
	c := commit(t, r, wt, "x")
	old, _ := r.BranchHead(ctx, "base2")
	mainBefore, _ := r.BranchHead(ctx, "main")
	res, err := r.Merge(ctx, "base2", "loop/x", "merge x")
	if err != nil || res.Conflict {
		t.Fatalf("Merge: %+v %v", res, err)
	}
	if h, _ := r.BranchHead(ctx, "base2"); h != res.Commit {
		t.Fatalf("base2 at %s, want the merge %s", h, res.Commit)
	}
	if ps := parents(t, r, res.Commit); len(ps) != 2 || ps[0] != old || ps[1] != c {
		t.Fatalf("parents %v", ps)
	}
	if h, _ := r.BranchHead(ctx, "main"); h != mainBefore {
		t.Fatal("main moved")
	}
	ents, _ := os.ReadDir(filepath.Join(r.Dir, WorktreesDir))
	if len(ents) != 1 {
		t.Fatalf("left in %s: %v", WorktreesDir, ents)
	}
	if wl := gitT(t, r.Dir, "worktree", "list", "--porcelain"); strings.Count(wl, "worktree ") != 2 {
		t.Fatalf("worktrees: %s", wl)
	}
	// A branch whose worktree's directory went (a crash): the stale
	// record is pruned and the merge goes through a temporary worktree.
	gone := addLoop(t, r, "gone", "main")
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	w := addLoop(t, r, "w", "loop/gone")
	write(t, filepath.Join(w, "w"), "w\n", 0o644)
	commit(t, r, w, "w")
	if res, err := r.Merge(ctx, "loop/gone", "loop/w", "merge w"); err != nil || res.Conflict {
		t.Fatalf("Merge into a branch whose worktree went: %+v %v", res, err)
	} else if h, _ := r.BranchHead(ctx, "loop/gone"); h != res.Commit {
		t.Fatalf("loop/gone at %s, want %s", h, res.Commit)
	}
	if err := r.RemoveWorktree(ctx, w); err != nil {
		t.Fatal(err)
	}
	// A conflict there leaves the branch as it was, and no worktree.
	gitT(t, r.Dir, "branch", "base3", "main")
	y := addLoop(t, r, "y", "base3")
	write(t, filepath.Join(y, "README"), "Y\n", 0o644)
	commit(t, r, y, "y")
	z := addLoop(t, r, "z", "base3")
	write(t, filepath.Join(z, "README"), "Z\n", 0o644)
	gitT(t, r.Dir, "update-ref", "refs/heads/base3", commit(t, r, z, "z"))
	b3, _ := r.BranchHead(ctx, "base3")
	res, err = r.Merge(ctx, "base3", "loop/y", "merge y")
	if err != nil || !res.Conflict || res.Conflicts != 1 {
		t.Fatalf("conflicting merge into a branch checked out nowhere: %+v %v", res, err)
	}
	if h, _ := r.BranchHead(ctx, "base3"); h != b3 {
		t.Fatal("base3 moved on a conflict")
	}
	if ents, _ := os.ReadDir(filepath.Join(r.Dir, WorktreesDir)); len(ents) != 3 {
		t.Fatalf("left in %s: %v", WorktreesDir, ents)
	}
}

// The user's working tree with uncommitted changes is never merged into.
func TestDirtyBaseRefused(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	wt := addLoop(t, r, "x", "main")
	write(t, filepath.Join(wt, "new"), "n\n", 0o644)
	commit(t, r, wt, "x")
	write(t, filepath.Join(r.Dir, "README"), "the user's work\n", 0o644)
	before, _ := r.BranchHead(ctx, "main")
	res, err := r.Merge(ctx, "main", "loop/x", "merge x")
	if !errors.Is(err, ErrDirty) || res.Commit != "" {
		t.Fatalf("Merge into a dirty main: %+v %v, want ErrDirty", res, err)
	}
	// It names the paths, as git status says them.
	var de *DirtyError
	if !errors.As(err, &de) || de.Total != 1 || len(de.Paths) != 1 || de.Paths[0] != "README" || de.InProgress || de.WorkTree != r.Dir {
		t.Fatalf("Merge into a dirty main: %#v", de)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, "README")); string(b) != "the user's work\n" {
		t.Fatalf("the user's file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, "new")); err == nil {
		t.Fatal("the merge wrote into the user's tree")
	}
	if h, _ := r.BranchHead(ctx, "main"); h != before {
		t.Fatal("main moved")
	}
	// Untracked files of the user's do not make it dirty.
	gitT(t, r.Dir, "checkout", "--", "README")
	write(t, filepath.Join(r.Dir, "scratch"), "mine\n", 0o644)
	if res, err := r.Merge(ctx, "main", "loop/x", "merge x"); err != nil || res.Conflict {
		t.Fatalf("Merge with only untracked files: %+v %v", res, err)
	}
}

// An interrupted iteration: a stale index.lock and uncommitted work.
func TestRecoverWIP(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	wt := addLoop(t, r, "x", "main")
	write(t, filepath.Join(wt, "half"), "done\n", 0o644)
	admin, err := r.adminDir(wt)
	if err != nil || admin == "" {
		t.Fatal(admin, err)
	}
	write(t, filepath.Join(admin, "index.lock"), "", 0o644)
	if _, _, err := r.CommitAll(ctx, wt, "x"); err == nil {
		t.Fatal("CommitAll with a stale index.lock: no error (the test shows nothing)")
	} else if strings.Contains(err.Error(), wt+"/") || strings.Contains(err.Error(), "index.lock") {
		t.Fatalf("git's output reached the error's text: %v", err)
	} else if ge := (*GitError)(nil); !errors.As(err, &ge) || !strings.Contains(ge.FirstLine(), "index.lock") || ge.Exit != 128 {
		t.Fatalf("the GitError does not keep git's words apart: %#v", err)
	}
	// An ended context: nothing runs, the error says why.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := r.CommitAll(done, wt, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("CommitAll with an ended context: %v", err)
	}
	c, changed, err := r.RecoverWIP(ctx, wt)
	if err != nil || !changed {
		t.Fatalf("RecoverWIP: %v %v", changed, err)
	}
	if s := gitT(t, r.Dir, "log", "-1", "--format=%s", c); s != "WIP: recovery" {
		t.Fatalf("message %q", s)
	}
	if c2, changed, err := r.RecoverWIP(ctx, wt); err != nil || changed || c2 != c {
		t.Fatalf("RecoverWIP of a clean worktree: %s %v %v", c2, changed, err)
	}
}

// Concurrent merges into one parent, through two Repo values: serialised,
// all made.
func TestConcurrentMerges(t *testing.T) {
	r := newRepo(t)
	ctx := ctxT(t)
	r2, err := Open(ctx, r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	addLoop(t, r, "p", "main")
	const n = 6
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("p-%03d", i)
		wt := addLoop(t, r, id, "loop/p")
		write(t, filepath.Join(wt, id), id, 0o644)
		commit(t, r, wt, id)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		rr := r
		if i%2 == 0 {
			rr = r2
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := rr.Merge(ctx, "loop/p", fmt.Sprintf("loop/p-%03d", i), fmt.Sprintf("merge %d", i))
			if err == nil && res.Conflict {
				err = fmt.Errorf("conflict %+v", res)
			}
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := gitT(t, r.Dir, "rev-list", "--merges", "--count", "loop/p"); got != fmt.Sprint(n) {
		t.Fatalf("%s merge commits on loop/p, want %d", got, n)
	}
}

func TestGitErrorText(t *testing.T) {
	e := &GitError{Op: "merging", Command: "merge", Exit: 1, Output: []byte("\n  fatal: x\x1b[31m\xff\nsecond " + strings.Repeat("y", 300)), Cut: 10}
	if got := e.FirstLine(); got != "fatal: x?[31m?" {
		t.Errorf("FirstLine: %q", got)
	}
	if got := e.Error(); got != "merging: git merge: exit status 1 (335 bytes on stderr)" {
		t.Errorf("Error: %q", got)
	}
	long := &GitError{Output: []byte(strings.Repeat("z", 500))}
	if len(long.FirstLine()) != 200 {
		t.Errorf("FirstLine not bounded: %d", len(long.FirstLine()))
	}
	var c capped
	c.max = 4
	c.Write([]byte("abcdef"))
	c.Write([]byte("gh"))
	if c.buf.String() != "abcd" || c.cut != 4 {
		t.Errorf("capped: %q %d", c.buf.String(), c.cut)
	}
}

// git status -z's records as paths: a rename's new path once, its old one
// (the record after) skipped; the paths as they are (spaces, newlines).
func TestStatusPaths(t *testing.T) {
	st := []byte(" M a b\x00R  new\x00old\x00MM x\ny\x00C  c2\x00c1\x00")
	got := statusPaths(st)
	want := []string{"a b", "new", "x\ny", "c2"}
	if !slices.Equal(got, want) {
		t.Fatalf("statusPaths = %q, want %q", got, want)
	}
	if got := statusPaths(nil); len(got) != 0 {
		t.Fatalf("statusPaths(nil) = %q", got)
	}
}
