package executors

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/orchestrd/orchestrd/api"
)

// confinement is what a confined task's executor may not write (ro) and
// the one directory it may (rw, its worktree): the repository read-only
// (its main checkout with it, unless writeCheckout), its shared git
// directory always. Paths are the real ones (links in the repository's
// path resolved here, by the daemon); the worktree must lie inside the
// repository, and sandbox-exec opens each without following a link.
func confinement(c *api.TaskConfine, writeCheckout bool) (ro, rw []string, err error) {
	if !filepath.IsAbs(c.Repo) || !filepath.IsAbs(c.Worktree) {
		return nil, nil, fmt.Errorf("confining the task: %q and %q must be absolute paths", c.Repo, c.Worktree)
	}
	repo, wt := filepath.Clean(c.Repo), filepath.Clean(c.Worktree)
	rel, err := filepath.Rel(repo, wt)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, nil, fmt.Errorf("confining the task: its worktree %s is not inside its repository %s", wt, repo)
	}
	real, err := filepath.EvalSymlinks(repo)
	if err != nil {
		return nil, nil, fmt.Errorf("confining the task: resolving its repository: %w", err)
	}
	wt = filepath.Join(real, rel)
	if writeCheckout {
		return []string{filepath.Join(real, ".git")}, []string{wt}, nil
	}
	return []string{real}, []string{wt}, nil
}
