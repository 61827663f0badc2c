package loops

import (
	"context"
	"time"

	"github.com/orchestrd/orchestrd/loops/gitwt"
)

// GitWT is the Git the daemon gives the loops: loops/gitwt's hardened git
// (the repository's hooks and the agent's config never run), each call
// bounded by gitTimeout.
type GitWT struct{}

var _ Git = GitWT{}

// gitTimeout bounds one git operation of a loop.
const gitTimeout = 5 * time.Minute

func withRepo[T any](repo string, f func(ctx context.Context, r *gitwt.Repo) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), gitTimeout)
	defer cancel()
	r, err := gitwt.Open(ctx, repo)
	if err != nil {
		var zero T
		return zero, err
	}
	return f(ctx, r)
}

func (GitWT) CurrentBranch(repo string) (string, error) {
	return withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (string, error) { return r.CurrentBranch(ctx) })
}

func (GitWT) AddWorktree(repo, dir, branch, from string) error {
	_, err := withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (struct{}, error) {
		return struct{}{}, r.AddWorktree(ctx, dir, branch, from)
	})
	return err
}

func (GitWT) CommitAll(repo, dir, msg string) (string, error) {
	return withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (string, error) {
		c, _, err := r.CommitAll(ctx, dir, msg)
		return c, err
	})
}

func (GitWT) RecoverWIP(repo, dir string) (string, error) {
	return withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (string, error) {
		c, changed, err := r.RecoverWIP(ctx, dir)
		if !changed {
			c = ""
		}
		return c, err
	})
}

func (GitWT) Merge(repo, into, branch, msg string) (bool, error) {
	return withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (bool, error) {
		res, err := r.Merge(ctx, into, branch, msg)
		return res.Conflict, err
	})
}

func (GitWT) Rebase(repo, dir, onto, msg string) (RebaseOutcome, error) {
	return withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (RebaseOutcome, error) {
		return r.Rebase(ctx, dir, onto, msg)
	})
}

type resolved struct {
	commit     string
	unresolved []string
}

func (GitWT) ResolveRebase(repo, dir, msg string) (string, []string, error) {
	res, err := withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (resolved, error) {
		c, u, err := r.ResolveRebase(ctx, dir, msg)
		return resolved{c, u}, err
	})
	return res.commit, res.unresolved, err
}

func (GitWT) RecoverRebase(repo, dir string) (string, bool, error) {
	type rec struct {
		commit  string
		merging bool
	}
	res, err := withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (rec, error) {
		c, changed, merging, err := r.RecoverRebase(ctx, dir)
		if !changed {
			c = ""
		}
		return rec{c, merging}, err
	})
	return res.commit, res.merging, err
}

func (GitWT) RemoveWorktree(repo, dir string) error {
	_, err := withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (struct{}, error) {
		return struct{}{}, r.RemoveWorktree(ctx, dir)
	})
	return err
}

func (GitWT) Guard(repo string) (func() ([]string, error), error) {
	return withRepo(repo, func(_ context.Context, r *gitwt.Repo) (func() ([]string, error), error) {
		g, err := r.Guard()
		if err != nil {
			return nil, err
		}
		return g.Restore, nil
	})
}

func (GitWT) DeleteBranch(repo, branch string) (bool, error) {
	return withRepo(repo, func(ctx context.Context, r *gitwt.Repo) (bool, error) {
		if ok, err := r.BranchExists(ctx, branch); err != nil || !ok {
			return false, err
		}
		return true, r.DeleteBranch(ctx, branch)
	})
}
