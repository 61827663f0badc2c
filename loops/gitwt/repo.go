// Package gitwt is git for Loopr's loops: a worktree and a branch per
// loop, orchestrd's commits of what the agent left in it, and the --no-ff
// merges of a validated child into its parent's branch and of a finished
// tree into its base.
//
// Everything runs the real git binary, hardened: the agent controls every
// file of a loop's worktree (its .gitattributes, the worktree's own .git
// file) and may have written the repository's .git/config or a
// worktree's config.worktree, so
//   - every git runs with a clean environment (no system or global config,
//     a private HOME, LANG=C, no prompt, our identity) and command-line
//     config over anything the repository's config says: hooks off
//     (core.hooksPath=/dev/null), no fsmonitor, no signing, no transport,
//     no background gc, and every filter and merge driver the config
//     defines neutralised (no clean, smudge or process command; merge
//     drivers `false`), since .gitattributes (the agent's) names them;
//   - the git directory and work tree are always given explicitly
//     (--git-dir=<repo>/.git/worktrees/<name> found by us from git's own
//     administrative files, --work-tree=<path>), never discovered from a
//     worktree's .git file the agent could point elsewhere;
//   - a worktree is one only if it is at <repo>/.loopr/worktrees/<name>,
//     reached through real directories, and git's records say so;
//   - git's output is bounded and never in an error's text (GitError).
//
// Operations on one repository are serialised (git's index and ref locks
// would fail one of two concurrent commands): every Repo opened on the
// same .git shares one lock, and each method holds it for its whole run.
// Methods block (they run git): call them off an actor's Receive.
package gitwt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxGitlinks bounds the repositories nested in a worktree CommitAll
// takes.
const maxGitlinks = 1000

// WorktreesDir is where loop worktrees are, relative to the repository.
const WorktreesDir = ".loopr/worktrees"

// ErrDirty is a merge refused because the branch to merge into is checked
// out in a working tree with uncommitted changes to tracked files (or a
// merge in progress): orchestrd never touches them.
var ErrDirty = errors.New("has uncommitted changes")

// maxDirtyPaths bounds the paths a DirtyError names.
const maxDirtyPaths = 10

// DirtyError is ErrDirty with what git status said: the checkout, the
// first paths with uncommitted changes (at most maxDirtyPaths; Total
// counts them all), or a merge in progress there. The paths are the
// user's: whoever shows them makes them safe to (eventlog.Ident).
type DirtyError struct {
	Op         string
	WorkTree   string
	Paths      []string
	Total      int
	InProgress bool // a merge in progress (MERGE_HEAD)
}

func (e *DirtyError) Error() string {
	if e.InProgress {
		return fmt.Sprintf("%s: %s %v (a merge in progress)", e.Op, e.WorkTree, ErrDirty)
	}
	return fmt.Sprintf("%s: %s %v (%d entries)", e.Op, e.WorkTree, ErrDirty, e.Total)
}

// Is makes errors.Is(err, ErrDirty) true.
func (e *DirtyError) Is(target error) bool { return target == ErrDirty }

// statusPaths are the paths of git status --porcelain -z's records: a
// rename's or copy's new path (its old one, the record after, skipped).
func statusPaths(st []byte) []string {
	var out []string
	recs := bytes.Split(st, []byte{0})
	for i := 0; i < len(recs); i++ {
		r := recs[i]
		if len(r) < 4 {
			continue
		}
		out = append(out, string(r[3:]))
		if r[0] == 'R' || r[0] == 'C' {
			i++
		}
	}
	return out
}

// ErrNotOurs is a worktree path that is not one orchestrd made (outside
// <repo>/.loopr/worktrees, reached through a link, or unknown to git).
var ErrNotOurs = errors.New("not a worktree of orchestrd's")

// Repo is a git repository orchestrd runs loops in.
type Repo struct {
	Dir    string // the repository's top directory (real path)
	gitDir string // Dir/.git
}

// Open opens the non-bare repository whose top directory is dir. dir and
// its .git directory must be owned by the daemon's uid; a .git file (dir
// itself a linked worktree or a submodule) is refused.
func Open(ctx context.Context, dir string) (*Repo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", dir, err)
	}
	for _, p := range []string{real, filepath.Join(real, ".git")} {
		if err := checkOwnedDir(p); err != nil {
			return nil, fmt.Errorf("opening repository %s: %w", dir, err)
		}
	}
	if err := checkVersion(); err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", dir, err)
	}
	r := &Repo{Dir: real, gitDir: filepath.Join(real, ".git")}
	out, err := run(ctx, scope{op: "opening repository " + dir, gitDir: r.gitDir, workTree: r.Dir}, "rev-parse", "--is-bare-repository", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || lines[0] != "false" || lines[1] != r.Dir {
		return nil, fmt.Errorf("opening repository %s: not the top of a non-bare git repository", dir)
	}
	return r, nil
}

// checkOwnedDir: p is a directory (not a link) owned by our uid.
func checkOwnedDir(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", p)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s is owned by uid %d, not by the daemon's (%d)", p, st.Uid, os.Getuid())
	}
	return nil
}

// WorktreePath is where the worktree named name (a loop's id) goes:
// <repo>/.loopr/worktrees/<name>.
func (r *Repo) WorktreePath(name string) string {
	return filepath.Join(r.Dir, WorktreesDir, name)
}

func (r *Repo) main(op string, ov [][2]string) scope {
	return scope{op: op, gitDir: r.gitDir, workTree: r.Dir, overrides: ov}
}

func (r *Repo) bare(op string, ov [][2]string) scope {
	return scope{op: op, gitDir: r.gitDir, overrides: ov}
}

// begin takes the repository's lock and reads the driver overrides.
func (r *Repo) begin(ctx context.Context, op string) ([][2]string, func(), error) {
	unlock, err := lockRepo(ctx, r.gitDir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	ov, err := hardening(ctx, op, r.gitDir)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return ov, unlock, nil
}

// beginWorktree is begin for work in worktree, one of ours: the
// repository locked (unlock releases it) and the worktree's scope.
func (r *Repo) beginWorktree(ctx context.Context, op, worktree string) (scope, func(), error) {
	_, unlock, err := r.begin(ctx, op)
	if err != nil {
		return scope{}, nil, err
	}
	s, err := r.ours(ctx, op, worktree, false)
	if err != nil {
		unlock()
		return scope{}, nil, err
	}
	return s, unlock, nil
}

// CurrentBranch is the branch checked out in the repository's main
// working tree (a detached HEAD is an error).
func (r *Repo) CurrentBranch(ctx context.Context) (string, error) {
	const op = "reading the current branch"
	out, err := run(ctx, r.bare(op, nil), "symbolic-ref", "-q", "--short", "HEAD")
	if exitCode(err) == 1 {
		return "", fmt.Errorf("%s: HEAD is detached", op)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// validBranch checks a branch name orchestrd is given (ours or the
// operator's: never starting with '-', and a valid ref name).
func (r *Repo) validBranch(ctx context.Context, op, b string) error {
	if b == "" || strings.HasPrefix(b, "-") || len(b) > 250 {
		return fmt.Errorf("%s: %q is not a valid branch name", op, b)
	}
	if _, err := run(ctx, r.bare(op, nil), "check-ref-format", "--branch", b); err != nil {
		return fmt.Errorf("%s: %q is not a valid branch name", op, b)
	}
	return nil
}

// BranchExists reports whether refs/heads/branch exists.
func (r *Repo) BranchExists(ctx context.Context, branch string) (bool, error) {
	op := "looking up branch " + branch
	if err := r.validBranch(ctx, op, branch); err != nil {
		return false, err
	}
	return branchExists(ctx, r.bare(op, nil), branch)
}

// branchExists asks git, in s, whether refs/heads/branch exists: show-ref
// exits 1 when it does not.
func branchExists(ctx context.Context, s scope, branch string) (bool, error) {
	_, err := run(ctx, s, "show-ref", "--verify", "--quiet", "refs/heads/"+branch)
	if exitCode(err) == 1 {
		return false, nil
	}
	return err == nil, err
}

// BranchHead is the commit refs/heads/branch points at.
func (r *Repo) BranchHead(ctx context.Context, branch string) (string, error) {
	op := "reading branch " + branch
	if err := r.validBranch(ctx, op, branch); err != nil {
		return "", err
	}
	return r.revParse(ctx, r.bare(op, nil), "refs/heads/"+branch)
}

func (r *Repo) revParse(ctx context.Context, s scope, rev string) (string, error) {
	out, err := run(ctx, s, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil {
		if exitCode(err) == 1 {
			return "", fmt.Errorf("%s: %q is not a commit", s.op, rev)
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// checkName: a worktree's name is one path component of [A-Za-z0-9._-],
// not starting with '.' or '-'.
func checkName(name string) error {
	if name == "" || len(name) > 200 || name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("%q is not a valid worktree name", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%q is not a valid worktree name", name)
		}
	}
	return nil
}

// placeOf checks that path is <repo>/.loopr/worktrees/<name> (name as
// checkName allows, or a merge's temporary when temp) and returns name.
func (r *Repo) placeOf(path string, temp bool) (string, error) {
	p := filepath.Clean(path)
	if !filepath.IsAbs(p) || filepath.Dir(p) != filepath.Join(r.Dir, WorktreesDir) {
		return "", fmt.Errorf("%s: %w: not directly beneath %s", path, ErrNotOurs, filepath.Join(r.Dir, WorktreesDir))
	}
	name := filepath.Base(p)
	if temp && strings.HasPrefix(name, ".merge-") {
		return name, checkName(name[len(".merge-"):])
	}
	if err := checkName(name); err != nil {
		return "", fmt.Errorf("%s: %w: %v", path, ErrNotOurs, err)
	}
	return name, nil
}

// adminDir finds git's administrative directory of the linked worktree
// at path (<repo>/.git/worktrees/<n> whose gitdir file says
// <path>/.git): from git's own records, never from the worktree's .git
// file. "" when there is none.
func (r *Repo) adminDir(path string) (string, error) {
	base := filepath.Join(r.gitDir, "worktrees")
	ents, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("listing %s: %w", base, err)
	}
	want := filepath.Join(path, ".git")
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		b, err := readSmall(filepath.Join(base, e.Name(), "gitdir"))
		if err != nil {
			continue
		}
		if strings.TrimRight(string(b), "\n") == want {
			return filepath.Join(base, e.Name()), nil
		}
	}
	return "", nil
}

func readSmall(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 8192))
}

// place checks that path is a worktree orchestrd made (see placeOf;
// each directory from the repository down a real directory of ours, and
// git's record of it there) and returns its administrative directory.
func (r *Repo) place(op, path string, temp bool) (admin string, err error) {
	if _, err := r.placeOf(path, temp); err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	p := filepath.Clean(path)
	for _, d := range []string{filepath.Join(r.Dir, ".loopr"), filepath.Join(r.Dir, WorktreesDir), p} {
		if err := checkOwnedDir(d); err != nil {
			return "", fmt.Errorf("%s: %w: %v", op, ErrNotOurs, err)
		}
	}
	admin, err = r.adminDir(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	if admin == "" {
		return "", fmt.Errorf("%s: %s: %w: git has no worktree there", op, path, ErrNotOurs)
	}
	return admin, nil
}

// ours is place and the scope to run git in the worktree, with the
// drivers' overrides read from its config (config.worktree included).
func (r *Repo) ours(ctx context.Context, op, path string, temp bool) (scope, error) {
	admin, err := r.place(op, path, temp)
	if err != nil {
		return scope{}, err
	}
	ov, err := hardening(ctx, op, admin)
	if err != nil {
		return scope{}, err
	}
	return scope{op: op, gitDir: admin, workTree: filepath.Clean(path), overrides: ov}, nil
}

// WorktreeExists reports whether path is a worktree orchestrd made that
// is still there (its directory and git's record of it).
func (r *Repo) WorktreeExists(path string) bool {
	_, err := r.place("", path, false)
	return err == nil
}

// mkWorktreesDir makes <repo>/.loopr/worktrees (0700) and keeps it out of
// the main working tree's status (.git/info/exclude).
func (r *Repo) mkWorktreesDir() error {
	for _, d := range []string{filepath.Join(r.Dir, ".loopr"), filepath.Join(r.Dir, WorktreesDir)} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := checkOwnedDir(d); err != nil {
			return err
		}
	}
	info := filepath.Join(r.gitDir, "info")
	if err := os.MkdirAll(info, 0o755); err != nil {
		return err
	}
	excl := filepath.Join(info, "exclude")
	b, err := readSmall(excl)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	const line = "/" + WorktreesDir + "/"
	if bytes.Contains(b, []byte("\n"+line+"\n")) || bytes.HasPrefix(b, []byte(line+"\n")) {
		return nil
	}
	f, err := os.OpenFile(excl, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	pre := ""
	if len(b) > 0 && b[len(b)-1] != '\n' {
		pre = "\n"
	}
	_, err = f.WriteString(pre + "# orchestrd's loop worktrees\n" + line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// AddWorktree makes the worktree path (<repo>/.loopr/worktrees/<name>,
// which must not exist) on a new branch started at from (a branch or a
// commit): `git worktree add -b branch path from`. A branch that already
// exists (a loop recovered after a crash) is checked out as it is, from
// is then not used.
func (r *Repo) AddWorktree(ctx context.Context, path, branch, from string) error {
	op := "adding worktree " + path
	if _, err := r.placeOf(path, false); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	path = filepath.Clean(path)
	if err := r.validBranch(ctx, op, branch); err != nil {
		return err
	}
	ov, unlock, err := r.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	return r.addWorktree(ctx, op, ov, path, branch, from)
}

func (r *Repo) addWorktree(ctx context.Context, op string, ov [][2]string, path, branch, from string) error {
	if err := r.mkWorktreesDir(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w", op, fs.ErrExist)
	}
	s := r.bare(op, ov)
	// A worktree whose directory is gone (a crash) would hold its branch.
	if _, err := run(ctx, s, "worktree", "prune"); err != nil {
		return err
	}
	exists := false
	if branch != "" {
		var err error
		if exists, err = branchExists(ctx, s, branch); err != nil {
			return err
		}
	}
	var args []string
	switch {
	case branch == "": // a merge's temporary: detached at from
		args = []string{"worktree", "add", "--detach", "--end-of-options", path, from}
	case exists:
		args = []string{"worktree", "add", "--end-of-options", path, branch}
	default:
		sha, err := r.revParse(ctx, s, from)
		if err != nil {
			return err
		}
		args = []string{"worktree", "add", "--no-track", "-b", branch, "--end-of-options", path, sha}
	}
	if _, err := run(ctx, s, args...); err != nil {
		return err
	}
	admin, err := r.adminDir(path)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if admin == "" {
		return fmt.Errorf("%s: git made no record of the worktree", op)
	}
	return nil
}

// RemoveWorktree removes the worktree at path, whatever is in it (its
// directory, without following links, then git's record of it). A
// worktree already gone is not an error. The branch stays.
func (r *Repo) RemoveWorktree(ctx context.Context, path string) error {
	op := "removing worktree " + path
	if _, err := r.placeOf(path, true); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	ov, unlock, err := r.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	return r.removeWorktree(ctx, op, ov, filepath.Clean(path))
}

func (r *Repo) removeWorktree(ctx context.Context, op string, ov [][2]string, path string) error {
	if err := checkOwnedDir(filepath.Join(r.Dir, WorktreesDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", op, err)
	}
	admin, err := r.adminDir(path)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	// os.RemoveAll unlinks links, never follows them.
	if err := removeAll(path); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if admin != "" {
		// Unlocked, so that prune takes it.
		_ = os.Remove(filepath.Join(admin, "locked"))
	}
	_, err = run(ctx, r.bare(op, ov), "worktree", "prune")
	return err
}

// DeleteBranch deletes refs/heads/branch (merged or not). A branch that
// is not there is not an error; one checked out in a worktree is.
func (r *Repo) DeleteBranch(ctx context.Context, branch string) error {
	op := "deleting branch " + branch
	if err := r.validBranch(ctx, op, branch); err != nil {
		return err
	}
	ov, unlock, err := r.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	s := r.bare(op, ov)
	exists, err := branchExists(ctx, s, branch)
	if err != nil || !exists {
		return err
	}
	_, err = run(ctx, s, "branch", "-D", "--end-of-options", branch)
	return err
}

// CommitAll stages everything in the worktree (git add -A: .gitignore
// respected; a link is stored as a link, never followed) and commits it
// with message if anything changed. It returns the worktree's HEAD (the
// new commit, or the old one when changed is false).
func (r *Repo) CommitAll(ctx context.Context, worktree, message string) (commit string, changed bool, err error) {
	op := "committing worktree " + worktree
	s, unlock, err := r.beginWorktree(ctx, op, worktree)
	if err != nil {
		return "", false, err
	}
	defer unlock()
	return commitAll(ctx, s, message)
}

func commitAll(ctx context.Context, s scope, message string) (string, bool, error) {
	if strings.TrimSpace(message) == "" {
		return "", false, fmt.Errorf("%s: an empty commit message", s.op)
	}
	// A repository the agent made in the worktree and committed (a
	// gitlink) is left as it is: git add would run a git status inside it,
	// under its own config, the agent's. A new one is added (as a gitlink,
	// which runs nothing in it).
	args := []string{"add", "-A", "--", "."}
	gitlinks := 0
	rec := &records{fn: func(rec []byte) {
		if p, ok := bytes.CutPrefix(rec, []byte("160000 ")); ok {
			if _, path, ok := bytes.Cut(p, []byte{'\t'}); ok && gitlinks < maxGitlinks {
				args = append(args, ":(exclude,literal)"+string(path))
			}
			gitlinks++
		}
	}}
	if err := runTo(ctx, s, rec, "ls-files", "--stage", "-z"); err != nil {
		return "", false, err
	}
	if gitlinks > maxGitlinks || rec.long > 0 {
		return "", false, fmt.Errorf("%s: the worktree holds %d repositories of its own (at most %d) or a path over 64 KiB: refused", s.op, gitlinks, maxGitlinks)
	}
	if _, err := run(ctx, s, args...); err != nil {
		return "", false, err
	}
	// Anything staged? The index written as a tree against HEAD's: object
	// work only, no look into the work tree or a repository nested in it.
	tree, err := run(ctx, s, "write-tree")
	if err != nil {
		return "", false, err
	}
	headTree, err := run(ctx, s, "rev-parse", "--verify", "--quiet", "HEAD^{tree}")
	if err != nil {
		return "", false, err
	}
	// A merge in progress (a rebase's) is committed even when its tree is
	// HEAD's: its commit is what records onto's head as merged.
	merging, err := inMerge(s)
	if err != nil {
		return "", false, err
	}
	if !merging && bytes.Equal(bytes.TrimSpace(tree), bytes.TrimSpace(headTree)) {
		head, err := headOf(ctx, s)
		return head, false, err
	}
	if _, err := run(ctx, s, "commit", "-q", "--no-verify", "--no-edit", "--cleanup=verbatim", "-m", message); err != nil {
		return "", false, err
	}
	head, err := headOf(ctx, s)
	return head, err == nil, err
}

func headOf(ctx context.Context, s scope) (string, error) {
	out, err := run(ctx, s, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// RecoverWIP is what a restart does to a loop's worktree whose iteration
// was interrupted: a merge left in progress is aborted, a stale
// index.lock (the daemon was killed while git ran; this process holds
// the repository's lock, so no git of ours is running there) removed, and
// the uncommitted work committed as "WIP: recovery".
func (r *Repo) RecoverWIP(ctx context.Context, worktree string) (commit string, changed bool, err error) {
	op := "recovering worktree " + worktree
	s, unlock, err := r.beginWorktree(ctx, op, worktree)
	if err != nil {
		return "", false, err
	}
	defer unlock()
	if err := os.Remove(filepath.Join(s.gitDir, "index.lock")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("%s: %w", op, err)
	}
	if _, err := os.Lstat(filepath.Join(s.gitDir, "MERGE_HEAD")); err == nil {
		if _, err := run(ctx, s, "merge", "--abort"); err != nil {
			return "", false, err
		}
	}
	return commitAll(ctx, s, "WIP: recovery")
}

// removeAll is os.RemoveAll (links unlinked, never followed), making the
// directories the agent left unwritable writable again when it fails.
func removeAll(path string) error {
	err := os.RemoveAll(path)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, werr error) error {
		if d != nil && d.IsDir() && d.Type()&fs.ModeSymlink == 0 {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}
