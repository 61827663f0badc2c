package clanker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Options configures the clanker domain.
type Options struct {
	Config Config
	Store  Store
	// Listen serves a repo's socket (clanker/ipc).
	Listen Listener
	Bus    *eventlog.Bus
	System *actors.System
	Logger zerolog.Logger
	// Now is the clock; nil is time.Now. It is called from several
	// goroutines at once (a hello is timed on its connection's).
	Now func() time.Time
	// Sync also syncs the directory of every file replaced in .clanker
	// and every append (the store's power durability); without, a power
	// loss may lose the last renames and appends, which the store writes
	// again at the repo's start (task files; appended lines are not).
	Sync bool
}

// Manager is the clanker domain: one actor per repo, under a supervisor.
type Manager struct {
	opts   Options
	sys    *actors.System
	bus    *eventlog.Bus
	store  Store
	listen Listener
	log    zerolog.Logger
	now    func() time.Time
	root   actors.Ref
	// uid is the daemon's: what it reads and writes in a repo must be
	// its own (a root daemon does not serve another user's repo).
	uid int

	mu       sync.Mutex
	repos    map[string]*repoEntry // by path
	failed   map[string]RepoSocket // repos not served: why, by path (until served again)
	stopping bool

	// tallies are the repos' tasks by status and pause, as their actors
	// last published them (Tallies), by path.
	tmu     sync.Mutex
	tallies map[string]RepoTally
	// drains counts the sockets of stopped (or restarting) repos still
	// closing their connections, each on its own goroutine.
	drains sync.WaitGroup
}

// drainTimeout bounds Shutdown's wait for the repos' sockets to close
// (their grace, then their connections supervisors' stop): past it the
// daemon goes on stopping, as a supervisor's shutdown timeout.
const drainTimeout = 15 * time.Second

// draining counts a stopped repo's socket until drained is closed.
func (m *Manager) draining(drained <-chan struct{}) {
	if drained == nil {
		return
	}
	m.drains.Add(1)
	go func() {
		defer m.drains.Done()
		<-drained
	}()
}

// RepoTally is a repo's tasks by status and whether its fleet is paused,
// as its actor last published them (after each message that may change
// them): what the daemon's metrics read, asking no actor.
type RepoTally struct {
	Tasks  map[string]int // by status: one of clanker's (KnownTaskStatus)
	Paused bool
}

// KnownTaskStatus reports whether s is one of the task statuses clanker
// knows (a task record with another is refused).
func KnownTaskStatus(s string) bool { return taskStatuses[s] }

// Tallies returns every served repo's RepoTally, by path.
func (m *Manager) Tallies() map[string]RepoTally {
	m.tmu.Lock()
	defer m.tmu.Unlock()
	out := make(map[string]RepoTally, len(m.tallies))
	for p, t := range m.tallies {
		out[p] = t // each published map is never written again
	}
	return out
}

// setTally publishes a repo's tally; nil tasks drops the repo.
func (m *Manager) setTally(path string, t *RepoTally) {
	m.tmu.Lock()
	defer m.tmu.Unlock()
	if t == nil {
		delete(m.tallies, path)
		return
	}
	m.tallies[path] = *t
}

// repoEntry is a repo the manager runs.
type repoEntry struct {
	cfg     RepoConfig
	ref     actors.Ref
	ready   chan error // the start's outcome, once
	started bool
	conns   ConnLister // its socket's, once started (nil if the Listener's Closer lists none)
}

// supervisorActor is the parent of the repos' actors.
type supervisorActor struct{ m *Manager }

// spawnRepo asks the supervisor to start a repo's actor.
type spawnRepo struct {
	props actors.Props
	path  string
	reply chan<- error
}

func (s supervisorActor) Receive(c *actors.Context) {
	switch msg := c.Message().(type) {
	case spawnRepo:
		ref, err := c.Spawn(msg.props)
		if err == nil {
			s.m.mu.Lock()
			if e, ok := s.m.repos[msg.path]; ok {
				e.ref = ref
			}
			s.m.mu.Unlock()
		}
		msg.reply <- err
	case actors.Terminated:
		// A repo's actor stopped for good (past its restart intensity,
		// or a failed start): it is no longer served.
		s.m.mu.Lock()
		var gone []string
		for p, e := range s.m.repos {
			if e.ref.Equal(msg.Who) {
				if e.started {
					gone = append(gone, p)
					s.m.failed[p] = RepoSocket{Path: p, Socket: e.cfg.Socket, Error: "its actor failed past its restart intensity"}
				}
				delete(s.m.repos, p)
			}
		}
		stopping := s.m.stopping
		s.m.mu.Unlock()
		for _, p := range gone {
			if !stopping {
				s.m.log.Error().Str("repo", p).Msg("clanker: a repo's actor failed past its restart intensity; the repo is no longer served")
				if s.m.bus != nil {
					s.m.bus.Emit(RepoFailed{Repo: p, Error: "its actor failed past its restart intensity (5 in a minute); orchestrd clanker serve-repo starts it again"})
				}
			}
		}
	}
}

// Start starts the repos of the config. A repo that cannot start (its
// directory, its store records, its socket) is said (clanker.repo_failed)
// and left out; the others and the daemon go on.
func Start(opts Options) (*Manager, error) {
	if opts.Store == nil || opts.Listen == nil || opts.System == nil {
		return nil, errors.New("clanker: Start needs a Store, a Listen and a System")
	}
	m := &Manager{opts: opts, sys: opts.System, bus: opts.Bus, store: opts.Store, listen: opts.Listen,
		log: opts.Logger.With().Str("component", "clanker").Logger(), now: opts.Now, repos: map[string]*repoEntry{},
		failed: map[string]RepoSocket{}, uid: os.Geteuid(), tallies: map[string]RepoTally{}}
	if m.now == nil {
		m.now = time.Now
	}
	var err error
	m.root, err = opts.System.Spawn(actors.Props{Kind: "clanker", OnPanic: actors.Restart,
		New: func() actors.Actor { return supervisorActor{m: m} }})
	if err != nil {
		return nil, fmt.Errorf("starting the clanker supervisor: %w", err)
	}
	inConfig := map[string]bool{}
	for _, rc := range opts.Config.Repos {
		inConfig[rc.Normalize().Path] = true
		if _, err := m.addRepo(context.Background(), rc); err != nil {
			m.log.Warn().Err(err).Str("repo", rc.Path).Msg("clanker: going on without this repo")
		}
	}
	// The repos added at run time before the daemon stopped.
	recorded, err := opts.Store.Repos()
	if err != nil {
		m.log.Warn().Err(err).Msg("clanker: reading the repos added at run time; going on without them")
	}
	for path, st := range recorded {
		var rs repoState
		if json.Unmarshal(st, &rs) != nil || rs.Added == nil || inConfig[path] {
			continue
		}
		rc := *rs.Added
		rc.runtime = true
		if _, err := m.addRepo(context.Background(), rc); err != nil {
			m.log.Warn().Err(err).Str("repo", path).Msg("clanker: a repo added at run time cannot be served again; going on without it")
		}
	}
	return m, nil
}

// AddRepo starts serving a repo (clanker.repo_add, orchestrd clanker
// serve-repo) and returns once its socket is up; the daemon serves it
// again when it restarts. A repo already served is no error: its config
// is returned as it runs.
func (m *Manager) AddRepo(ctx context.Context, rc RepoConfig) (RepoConfig, error) {
	rc.runtime = true
	return m.addRepo(ctx, rc)
}

func (m *Manager) addRepo(ctx context.Context, rc RepoConfig) (RepoConfig, error) {
	if errs := ValidateRepo(rc); len(errs) > 0 {
		return rc, api.Errorf(api.CodeInvalidParams, "clanker repo %s: %v", rc.Path, errors.Join(errs...))
	}
	rc = rc.Normalize()
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		return rc, api.Errorf(api.CodeShuttingDown, "the daemon is stopping")
	}
	if e, ok := m.repos[rc.Path]; ok {
		m.mu.Unlock()
		select {
		case err := <-e.ready:
			e.ready <- err
			return e.cfg, err
		case <-ctx.Done():
			return e.cfg, ctx.Err()
		}
	}
	for _, e := range m.repos {
		if e.cfg.Socket == rc.Socket {
			m.mu.Unlock()
			return rc, api.Errorf(api.CodeInvalidParams, "clanker repo %s: socket %s is already repo %s's", rc.Path, rc.Socket, e.cfg.Path)
		}
	}
	e := &repoEntry{cfg: rc, ready: make(chan error, 1)}
	m.repos[rc.Path] = e
	m.mu.Unlock()
	spawned := make(chan error, 1)
	m.sys.Send(m.root, spawnRepo{path: rc.Path, reply: spawned, props: actors.Props{Kind: "repo", ID: repoID(rc.Path),
		OnPanic: actors.Restart, MaxRestarts: 5, Within: time.Minute,
		New: func() actors.Actor {
			return &repo{m: m, cfg: rc, name: rc.Path, dir: filepath.Join(rc.Path, ".clanker")}
		}}})
	select {
	case err := <-spawned:
		if err != nil {
			m.repoFailed(rc.Path, err)
		}
	case <-ctx.Done():
		return rc, ctx.Err()
	}
	select {
	case err := <-e.ready:
		e.ready <- err
		return rc, err
	case <-ctx.Done():
		return rc, ctx.Err()
	}
}

// repoID names a repo's actor: its path, its slashes made dashes.
func repoID(path string) string {
	return strings.ReplaceAll(strings.Trim(path, "/"), "/", "-")
}

// repoStarted and repoFailed are called by a repo's actor once its start
// is done.
func (m *Manager) repoStarted(path string, sock Closer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.repos[path]; ok && !e.started {
		e.started = true
		e.conns, _ = sock.(ConnLister)
		delete(m.failed, path)
		select {
		case e.ready <- nil:
		default:
		}
	}
}

func (m *Manager) repoFailed(path string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.repos[path]
	if !ok {
		return
	}
	if !e.started {
		delete(m.repos, path)
		m.failed[path] = RepoSocket{Path: path, Socket: e.cfg.Socket, Error: err.Error()}
		select {
		case e.ready <- fmt.Errorf("starting clanker repo %s: %w", path, err):
		default:
		}
	}
}

// entry returns a started repo.
func (m *Manager) entry(path string) (*repoEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.repos[filepath.Clean(path)]
	if !ok || !e.started {
		return nil, api.Errorf(api.CodeNotFound, "no clanker repo %s (orchestrd clanker serve-repo PATH adds one)", path)
	}
	return e, nil
}

// Resume hands a paused repo's fleet work again; false when it was not
// paused.
func (m *Manager) Resume(ctx context.Context, path string) (bool, error) {
	e, err := m.entry(path)
	if err != nil {
		return false, err
	}
	type res struct {
		ok  bool
		err error
	}
	ch := make(chan res, 1)
	m.sys.Send(e.ref, resumeReq{reply: func(ok bool, err error) { ch <- res{ok, err} }})
	select {
	case r := <-ch:
		return r.ok, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Status returns every repo's status, by path.
func (m *Manager) Status(ctx context.Context) []RepoStatus {
	m.mu.Lock()
	var refs []actors.Ref
	for _, e := range m.repos {
		if e.started {
			refs = append(refs, e.ref)
		}
	}
	m.mu.Unlock()
	ch := make(chan RepoStatus, len(refs))
	for _, ref := range refs {
		m.sys.Send(ref, statusReq{reply: func(s RepoStatus) { ch <- s }})
	}
	out := []RepoStatus{}
	// A repo busy writing for 5 s is left out; the others are shown.
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
wait:
	for range refs {
		select {
		case s := <-ch:
			out = append(out, s)
		case <-ctx.Done():
			break wait
		case <-t.C:
			break wait
		}
	}
	slices.SortFunc(out, func(a, b RepoStatus) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return out
}

// RepoSocket is a repo's socket, or why the repo is not served.
type RepoSocket struct {
	Path   string
	Socket string
	Error  string     // "": served
	Conns  ConnLister // the pods' connections; nil when none are listed
}

// Sockets returns the repos' sockets, by path: those served, and those
// whose start failed with why (until one is served again). It asks no
// actor.
func (m *Manager) Sockets() []RepoSocket {
	m.mu.Lock()
	out := make([]RepoSocket, 0, len(m.repos)+len(m.failed))
	for p, e := range m.repos {
		if e.started {
			out = append(out, RepoSocket{Path: p, Socket: e.cfg.Socket, Conns: e.conns})
		}
	}
	for _, f := range m.failed {
		out = append(out, f)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b RepoSocket) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Shutdown stops every repo: their sockets close (a pod's next request
// spools), what they committed is written out. It waits for the sockets'
// connections to end at most drainTimeout (and until ctx ends), then goes
// on.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	err := m.sys.Stop(ctx, m.root)
	done := make(chan struct{})
	go func() {
		m.drains.Wait()
		close(done)
	}()
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		m.log.Warn().Dur("waited", drainTimeout).Msg("clanker: the repos' sockets are still closing; going on without them")
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("waiting for the repos' sockets to close: %w", ctx.Err())
		}
	}
	return err
}
