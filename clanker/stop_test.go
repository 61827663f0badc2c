package clanker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/clanker"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/state"
)

// emptyStore has no records and commits everything at once.
type emptyStore struct{}

func (emptyStore) Load(string) (state.ClankerSnapshot, error) { return state.ClankerSnapshot{}, nil }
func (emptyStore) Repos() (map[string][]byte, error)          { return nil, nil }
func (emptyStore) Commit(_ state.ClankerCommit, done func(error)) error {
	go done(nil)
	return nil
}

// slowSocket is a repo's socket whose connections take until release is
// closed to end; closing says Close was called.
type slowSocket struct {
	closing, release chan struct{}
}

func (s *slowSocket) Close() (<-chan struct{}, error) {
	close(s.closing)
	return s.release, nil
}

func hasKind(nodes []actors.TreeNode, kind string) bool {
	for _, n := range nodes {
		if n.Kind == kind || hasKind(n.Children, kind) {
			return true
		}
	}
	return false
}

// A repo's actor never waits inside Receive for its socket's connections
// to end: stopped while they are still ending, it is gone from the tree at
// once; Shutdown waits for them (bounded) and returns once they have.
func TestRepoStopDoesNotWaitForItsSocket(t *testing.T) {
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	repo := t.TempDir()
	if err := os.Mkdir(filepath.Join(repo, ".clanker"), 0o700); err != nil {
		t.Fatal(err)
	}
	sock := &slowSocket{closing: make(chan struct{}), release: make(chan struct{})}
	listen := func(_ string, dir *beneath.Dir, _ string, _ clanker.Handler) (clanker.Closer, error) {
		if dir != nil {
			dir.Close()
		}
		return sock, nil
	}
	m, err := clanker.Start(clanker.Options{Config: clanker.Config{Repos: []clanker.RepoConfig{{Path: repo}}},
		Store: emptyStore{}, Listen: listen, System: sys, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Sockets(); len(s) != 1 || s[0].Error != "" {
		t.Fatalf("sockets %+v, want the repo served", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- m.Shutdown(ctx) }()
	select {
	case <-sock.closing:
	case <-time.After(20 * time.Second):
		t.Fatal("the repo's socket was not closed")
	}
	deadline := time.Now().Add(20 * time.Second)
	for hasKind(sys.Tree(), "repo") {
		if time.Now().After(deadline) {
			close(sock.release) // let the old code's actor go, for goleak
			t.Fatal("the repo's actor is still there while its socket's connections end: it waits for them in Receive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(sock.release)
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return once the socket's connections ended")
	}
}
