package clanker

import (
	"context"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Register registers the clanker methods with mux: clanker.repos,
// clanker.repo_add and clanker.resume. Each answers from a goroutine of
// its own (a repo's start opens its socket and reads its directory).
func (m *Manager) Register(mux api.Mux) {
	mux.Handle("clanker.repos", m.reposMethod)
	mux.Handle("clanker.repo_add", m.repoAddMethod)
	mux.Handle("clanker.resume", m.resumeMethod)
}

// methodTimeout bounds a method's wait for a repo.
const methodTimeout = 30 * time.Second

type pathParams struct {
	Path string `json:"path"`
}

// RepoAddParams are clanker.repo_add's params: a [[clanker.repos]] entry.
type RepoAddParams = RepoConfig

func (m *Manager) reposMethod(call api.Call) {
	var p api.NoParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	answerLater(call, func(ctx context.Context) (any, error) {
		return map[string]any{"repos": m.Status(ctx)}, nil
	})
}

func (m *Manager) repoAddMethod(call api.Call) {
	var p RepoAddParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	answerLater(call, func(ctx context.Context) (any, error) {
		rc, err := m.AddRepo(ctx, p)
		if err != nil {
			return nil, err
		}
		return map[string]any{"path": rc.Path, "socket": rc.Socket}, nil
	})
}

func (m *Manager) resumeMethod(call api.Call) {
	var p pathParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	if p.Path == "" {
		call.Fail(api.Errorf(api.CodeInvalidParams, "clanker.resume: path is required (the repo's root)"))
		return
	}
	answerLater(call, func(ctx context.Context) (any, error) {
		ok, err := m.Resume(ctx, p.Path)
		if err != nil {
			return nil, err
		}
		return map[string]any{"path": p.Path, "resumed": ok}, nil
	})
}

// answerLater answers call from a goroutine of its own with what f
// returns (its error as the call's failure); f's context is bounded by
// methodTimeout.
func answerLater(call api.Call, f func(ctx context.Context) (any, error)) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), methodTimeout)
		defer cancel()
		res, err := f(ctx)
		if err != nil {
			call.Fail(err)
			return
		}
		call.Respond(res)
	}()
}
