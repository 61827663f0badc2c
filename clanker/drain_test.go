package clanker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/clanker"
	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/state"
)

// slowStore commits in order, each commit taking a while, as the
// daemon's store does on a disk another process keeps busy: a repo's
// commits are still under way when its next ticks come.
type slowStore struct {
	emptyStore
	once  sync.Once
	queue chan func(error)
	done  chan struct{}
}

func newSlowStore() *slowStore {
	s := &slowStore{queue: make(chan func(error), 1024), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for done := range s.queue {
			time.Sleep(15 * time.Millisecond) // the disk's latency, not a wait for anything
			done(nil)
		}
	}()
	return s
}

func (s *slowStore) Commit(_ state.ClankerCommit, done func(error)) error {
	s.queue <- done
	return nil
}

func (s *slowStore) close() {
	s.once.Do(func() { close(s.queue) })
	<-s.done
}

type noSocket struct{}

func (noSocket) Close() (<-chan struct{}, error) {
	c := make(chan struct{})
	close(c)
	return c, nil
}

// startDrainRepo serves a new repo (its .clanker made, no socket, a tick of
// 10 ms) with store, in an actor system of its own, and returns its path.
// At the test's end release (when not nil) is called, then the repo and
// the system are shut down, before the cleanups registered earlier run.
func startDrainRepo(t *testing.T, store clanker.Store, release func()) string {
	t.Helper()
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	t.Cleanup(sys.Shutdown)
	repo := t.TempDir()
	if err := os.Mkdir(filepath.Join(repo, ".clanker"), 0o700); err != nil {
		t.Fatal(err)
	}
	listen := func(_ string, dir *beneath.Dir, _ string, _ clanker.Handler) (clanker.Closer, error) {
		if dir != nil {
			dir.Close()
		}
		return noSocket{}, nil
	}
	m, err := clanker.Start(clanker.Options{Config: clanker.Config{Repos: []clanker.RepoConfig{{Path: repo,
		Tick: api.Duration{Duration: 10 * time.Millisecond}}}}, Store: store, Listen: listen, System: sys, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if release != nil {
			release()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return repo
}

// Spools taken one after another while the store is slow to commit: the
// end of one taken file's drain, committed late, does not remove the next
// taken file (of the same name) with its lines unread. Every line of every
// spool is applied, once. (Before, the commit that forgot a finished file
// let the next spool be taken at once, a second drain commit under way
// beside it; a stale removal then took a later spool's lines with it, and
// TestClankerSpoolDrain stopped short of its last tasks.)
func TestSpoolsTakenWhileCommitsAreSlow(t *testing.T) {
	store := newSlowStore()
	t.Cleanup(store.close)
	repo := startDrainRepo(t, store, nil)
	// Rounds of lines, each appended once the last spool was taken: more
	// than a tick's batch each, so that a taken file has lines left to
	// read when the one before it is done.
	spool := filepath.Join(repo, ".clanker", "ipc-spool.ndjson")
	ids := map[string]bool{}
	for round := range 6 {
		var b strings.Builder
		for i := range 250 {
			id := fmt.Sprintf("r%d-%d", round, i)
			ids[id] = true
			b.WriteString(daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": id, "prompt": "p"}}))
		}
		if err := os.WriteFile(spool, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		daemontest.Eventually(t, 20*time.Second, "the spool taken", func() bool {
			_, err := os.Stat(spool)
			return os.IsNotExist(err)
		}, nil)
	}
	daemontest.WhileProgressing(t, 20*time.Second, "every spooled task created", func() int { return daemontest.TaskFiles(repo) }, len(ids),
		func() string {
			ents, _ := os.ReadDir(filepath.Join(repo, ".clanker"))
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			return ".clanker: " + strings.Join(names, " ")
		})
	daemontest.Eventually(t, 20*time.Second, "the taken spool removed", func() bool {
		_, err := os.Stat(filepath.Join(repo, ".clanker", "ipc-spool.draining.ndjson"))
		return os.IsNotExist(err)
	}, nil)
	daemontest.CreatedOnce(t, repo, ids)
}

// gateStore commits at once, except a commit hold picks: that one waits
// (its ClankerCommit sent on held) until release is closed.
type gateStore struct {
	emptyStore
	hold    func(state.ClankerCommit) bool
	held    chan state.ClankerCommit
	release chan struct{}
	wg      sync.WaitGroup
}

func (s *gateStore) Commit(c state.ClankerCommit, done func(error)) error {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if s.hold(c) {
			s.held <- c
			<-s.release
		}
		done(nil)
	}()
	return nil
}

// A writer that opened the spool before the drain took it, and that the
// drain did not see holding it (spool.Writing reads /proc, where a
// process inside open() has no descriptor yet), appends its line after
// the taken file was read to its end, while that end is being committed:
// the file is not removed with the line in it; the next tick applies it.
func TestTakenSpoolAppendedToAfterItsEnd(t *testing.T) {
	store := &gateStore{held: make(chan state.ClankerCommit, 1), release: make(chan struct{})}
	var holding atomic.Bool // the first commit of task "first" only
	store.hold = func(c state.ClankerCommit) bool {
		return len(c.Tasks) > 0 && c.Tasks[0].ID == "first" && holding.CompareAndSwap(false, true)
	}
	t.Cleanup(store.wg.Wait)
	var once sync.Once
	open := func() { once.Do(func() { close(store.release) }) }
	repo := startDrainRepo(t, store, open)
	line := func(id string) []byte {
		return []byte(daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": id, "prompt": "p"}}))
	}
	if err := os.WriteFile(filepath.Join(repo, ".clanker", "ipc-spool.ndjson"), line("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-store.held: // the taken file read to its end, its commit under way
	case <-time.After(20 * time.Second):
		t.Fatal("the spool's line was not drained")
	}
	f, err := os.OpenFile(filepath.Join(repo, ".clanker", "ipc-spool.draining.ndjson"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(line("late")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	open()
	daemontest.Eventually(t, 20*time.Second, "both lines applied", func() bool { return daemontest.TaskFiles(repo) == 2 }, nil)
	daemontest.Eventually(t, 20*time.Second, "the taken spool removed", func() bool {
		_, err := os.Stat(filepath.Join(repo, ".clanker", "ipc-spool.draining.ndjson"))
		return os.IsNotExist(err)
	}, nil)
	daemontest.CreatedOnce(t, repo, map[string]bool{"first": true, "late": true})
}
