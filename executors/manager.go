package executors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/executors/agent"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Options configures the executors domain.
type Options struct {
	Pools map[string]PoolConfig
	Home  string // the daemon's home: hidden from sandboxed executors
	// Sandbox starts each executor through `Exe sandbox-exec` in user,
	// mount and pid namespaces of its own with Home hidden (but for its
	// own socket directory), so that the agent cannot reach the daemon's
	// sockets, store, logs, secrets file, or another executor's socket.
	Sandbox bool
	Exe     string // the orchestrd binary (for sandbox-exec); default os.Executable()
	// Hide are more paths a sandboxed executor may not see, reach or
	// replace: vibe-reachout's hook socket.
	Hide        []string
	Bus         *eventlog.Bus
	System      *actors.System
	Logger      zerolog.Logger
	Reaper      *proc.Reaper // may be nil
	Log         Log
	Secrets     Secrets     // nil: every get_api_key is refused
	Permissions Permissions // nil: every asked permission is denied
	// Environ is the environment executors' variables are taken from
	// (nil: this process's): only what proc.CleanEnv keeps of it with the
	// pool's inherit_env (PATH, HOME, USER, LANG...), never the whole of
	// it, so the daemon's own secrets stay its own.
	Environ []string
	// Stderr receives the executors' stderr; nil discards it.
	Stderr io.Writer
	// UsageSampleEvery is how often a running task's executor tree is
	// sampled (usage.go); 0: never.
	UsageSampleEvery time.Duration
}

// Manager is the executors domain: its pools, the live tasks, the
// control-socket methods.
type Manager struct {
	opts  Options
	sys   *actors.System
	bus   *eventlog.Bus
	log   Log
	dir   string   // HOME/executors (its real path): one directory per executor socket
	hide  string   // the home as the kernel resolves it, hidden from sandboxed executors
	env   []string // where executors' variables are taken from (proc.CleanEnv)
	idPre string
	seq   atomic.Int64
	pools map[string]*poolHandle
	// stateDirs are the built-in agent pools' state directories (real
	// paths), by pool.
	stateDirs map[string]string

	mu       sync.Mutex
	stopping bool
	forced   bool                      // Force was called: executors are killed, not asked
	live     map[string]api.TaskRecord // tasks not finished, or finished and not yet committed
	waiters  map[string][]func(api.TaskRecord)
	// committing: tasks whose end is being written to the store; their
	// waiters hear of it once it is (what they read next, a session's
	// agent session and tokens, is the store's).
	committing map[string]bool
	// sdk is the agent session id each session's last task ended in,
	// while a task of that session is live or its end was committed
	// less than sdkKeep ago (the store has it after): the next task
	// resumes it.
	sdk     map[string]sdkEntry
	terms   map[string]*terminal // open, and closed for termKeep
	termSeq atomic.Int64
	// usage samples running tasks' executor trees (usage.go).
	usage usageSampler
}

// sdkEntry is the agent session a session's last task ended in, and
// when.
type sdkEntry struct {
	id string
	at time.Time
}

// poolHandle is what the Manager knows of one pool actor.
type poolHandle struct {
	name   string
	cfg    PoolConfig
	ref    actors.Ref
	queued atomic.Int64 // tasks waiting in its queue
	// messages counts the report_messages its executors published
	// (committed, then task.message), since the daemon started.
	messages atomic.Int64
	done     chan struct{}

	mu    sync.Mutex
	execs map[string]api.ExecutorStatus // each executor actor's own line
}

// setExec records (nil: drops) an executor's line of executor.list.
func (h *poolHandle) setExec(id string, st *api.ExecutorStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st == nil {
		delete(h.execs, id)
		return
	}
	h.execs[id] = *st
}

// clearExecs forgets every executor's line.
func (h *poolHandle) clearExecs() {
	h.mu.Lock()
	clear(h.execs)
	h.mu.Unlock()
}

// status is the pool as executor.list shows it.
func (h *poolHandle) status() api.PoolStatus {
	st := api.PoolStatus{Name: h.name, Instances: h.cfg.Instances, MaxInstances: h.cfg.MaxInstances,
		Queued: int(h.queued.Load()), Executors: []api.ExecutorStatus{}}
	h.mu.Lock()
	for _, e := range h.execs {
		st.Executors = append(st.Executors, e)
	}
	h.mu.Unlock()
	slices.SortFunc(st.Executors, func(a, b api.ExecutorStatus) int { return strings.Compare(a.ID, b.ID) })
	return st
}

// PoolMetrics is what a pool holds now and has done since the daemon
// started, for the daemon's metrics (daemon/metrics).
type PoolMetrics struct {
	Name string
	// Tasks are its live tasks by state (queued, running; a finished
	// task until its end is committed).
	Tasks map[api.TaskState]int
	// Executors are its executor processes by state (starting, idle,
	// busy, stopping); Paused of them have pause_notifications in force.
	Executors map[string]int
	Paused    int
	// Messages is how many report_messages its executors published.
	Messages int64
}

// Metrics returns every pool's PoolMetrics, by name, from memory: it asks
// no actor and reads no store.
func (m *Manager) Metrics() []PoolMetrics {
	out := make([]PoolMetrics, 0, len(m.pools))
	idx := make(map[string]int, len(m.pools))
	for _, name := range m.PoolNames() {
		h := m.pools[name]
		pm := PoolMetrics{Name: name, Tasks: map[api.TaskState]int{}, Executors: map[string]int{},
			Messages: h.messages.Load()}
		h.mu.Lock()
		for _, e := range h.execs {
			pm.Executors[e.State]++
			if e.Paused {
				pm.Paused++
			}
		}
		h.mu.Unlock()
		idx[name] = len(out)
		out = append(out, pm)
	}
	m.mu.Lock()
	for _, rec := range m.live {
		if i, ok := idx[rec.Executor]; ok {
			out[i].Tasks[rec.State]++
		}
	}
	m.mu.Unlock()
	return out
}

// Start starts one pool actor per [executors.NAME] and the warm instances.
func Start(opts Options) (*Manager, error) {
	if opts.Bus == nil || opts.System == nil || opts.Log == nil {
		return nil, errors.New("executors: Bus, System and Log are required")
	}
	m := &Manager{opts: opts, sys: opts.System, bus: opts.Bus, log: opts.Log, pools: map[string]*poolHandle{},
		live: map[string]api.TaskRecord{}, sdk: map[string]sdkEntry{}, waiters: map[string][]func(api.TaskRecord){}, terms: map[string]*terminal{},
		committing: map[string]bool{},
		env:        opts.Environ, usage: newUsageSampler(opts.UsageSampleEvery)}
	m.idPre = api.RandomHex(3) + "-"
	if m.env == nil {
		m.env = os.Environ()
	}
	if len(opts.Pools) > 0 {
		if err := m.prepareSandbox(); err != nil {
			return nil, err
		}
		var err error
		if m.stateDirs, err = prepareStateDirs(m.hide, opts.Pools); err != nil {
			return nil, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Pools)) {
		h := &poolHandle{name: name, cfg: opts.Pools[name], done: make(chan struct{}), execs: map[string]api.ExecutorStatus{}}
		ref, err := m.sys.Spawn(actors.Props{Kind: "executor-pool", ID: name, OnPanic: actors.Restart,
			MaxRestarts: 3, Within: time.Minute,
			New: func() actors.Actor { return newPool(m, h) }})
		if err != nil {
			_ = m.Shutdown(context.Background())
			return nil, fmt.Errorf("starting executor pool %s: %w", name, err)
		}
		h.ref = ref
		m.pools[name] = h
	}
	return m, nil
}

// socketName is an executor's socket in its directory.
const socketName = "executor.sock"

// prepareSandbox makes HOME/executors (0700), where each executor listening
// on a path gets a directory of its own, and empties it: what a daemon
// killed with -9 left there is gone. The home is hidden from every
// sandbox (runners' and executors'), and a sandboxed executor is shown its
// own directory alone (sandbox-exec --expose), so no job and no other
// executor can reach, replace or listen at another's socket.
func (m *Manager) prepareSandbox() error {
	abs, err := filepath.Abs(m.opts.Home)
	if err == nil {
		m.hide, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return fmt.Errorf("resolving the home to hide it from executors: %w", err)
	}
	m.dir = filepath.Join(m.hide, "executors")
	if err := os.RemoveAll(m.dir); err != nil {
		return fmt.Errorf("removing what a dead daemon left in %s: %w", m.dir, err)
	}
	if err := os.Mkdir(m.dir, 0o700); err != nil {
		return fmt.Errorf("creating the executor socket directory: %w", err)
	}
	if !m.opts.Sandbox && !m.anyAgent() {
		return nil
	}
	if m.opts.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding the orchestrd binary for sandbox-exec and agent executors: %w", err)
		}
		m.opts.Exe = exe
	}
	return nil
}

// anyAgent reports whether a pool runs a built-in agent kind.
func (m *Manager) anyAgent() bool {
	for _, p := range m.opts.Pools {
		if p.Agent != "" && p.Agent != agent.KindCommand {
			return true
		}
	}
	return false
}

// prepareStateDirs makes each built-in agent pool's state directory:
// HOME/agents/POOL by default, made beneath the home without following a
// link (0700, the daemon's user's), or the directory the pool names
// (made 0700 when missing; it must be a directory the daemon's user
// owns). It returns each one's real path, by pool: what the executor is
// given as --state-dir and what its sandbox shows read-write.
func prepareStateDirs(home string, pools map[string]PoolConfig) (map[string]string, error) {
	out := map[string]string{}
	uid := os.Getuid()
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		p := pools[name]
		if p.Agent == "" || p.Agent == agent.KindCommand {
			continue
		}
		dir := expandHome(p.StateDir)
		if p.StateDir == "" {
			root, err := beneath.OpenRoot(home, beneath.Options{Owners: []int{uid}})
			if err != nil {
				return nil, fmt.Errorf("executor pool %s: opening the home to make its state directory: %w", name, err)
			}
			d, err := root.MkdirAll(filepath.Join("agents", name), 0o700)
			root.Close()
			if err != nil {
				return nil, fmt.Errorf("executor pool %s: making its state directory %s: %w", name, filepath.Join(home, "agents", name), err)
			}
			// Its mode whatever the umask or an older daemon left.
			err = unix.Fchmod(d.Fd(), 0o700)
			d.Close()
			if err != nil {
				return nil, fmt.Errorf("executor pool %s: setting its state directory's mode: %w", name, err)
			}
			dir = filepath.Join(home, "agents", name)
		} else if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("executor pool %s: making its state_dir %s: %w", name, dir, err)
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, fmt.Errorf("executor pool %s: resolving its state directory %s: %w", name, dir, err)
		}
		d, err := beneath.OpenRoot(real, beneath.Options{Owners: []int{uid}})
		if err != nil {
			return nil, fmt.Errorf("executor pool %s: its state directory %s: %w", name, real, err)
		}
		d.Close()
		out[name] = real
	}
	return out, nil
}

// socketDir makes executor id's socket directory, HOME/executors/ID
// (0700), afresh.
func (m *Manager) socketDir(id string) (string, error) {
	dir := filepath.Join(m.dir, id)
	if n := len(filepath.Join(dir, socketName)); n > maxSocketPath {
		return "", fmt.Errorf("the executor's socket path %s is %d bytes, over the %d a unix socket's path may hold: "+
			"use a shorter home, or transport = \"fd\"", filepath.Join(dir, socketName), n, maxSocketPath)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("removing the executor's old socket directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating the executor's socket directory: %w", err)
	}
	return dir, nil
}

// maxSocketPath is the longest path a unix socket can be bound at
// (sun_path holds 108 bytes with its NUL).
const maxSocketPath = 107

// PoolNames lists the pools, sorted.
func (m *Manager) PoolNames() []string { return slices.Sorted(maps.Keys(m.pools)) }

func (m *Manager) newTaskID() string { return "t-" + m.idPre + fmt.Sprint(m.seq.Add(1)) }

func (m *Manager) newTerminalID() string { return "term-" + m.idPre + fmt.Sprint(m.termSeq.Add(1)) }

// update records a live task's latest state.
func (m *Manager) update(rec api.TaskRecord) {
	m.mu.Lock()
	m.live[rec.ID] = rec
	m.mu.Unlock()
}

// sampled keeps a running task's usage so far in its live record.
func (m *Manager) sampled(id string, u api.Usage) {
	m.mu.Lock()
	if rec, ok := m.live[id]; ok && !rec.State.Terminal() {
		rec.Usage = &u
		m.live[id] = rec
	}
	m.mu.Unlock()
}

// counted records how many of a running task's messages are committed,
// so that its live record says so before it ends (one map write a
// committed batch).
func (m *Manager) counted(id string, n int64) {
	m.mu.Lock()
	if rec, ok := m.live[id]; ok && !rec.State.Terminal() {
		rec.MessageCount = n
		m.live[id] = rec
	}
	m.mu.Unlock()
}

// finished records a task's end and answers its waiters.
func (m *Manager) finished(rec api.TaskRecord) {
	m.mu.Lock()
	m.live[rec.ID] = rec
	ws := m.waiters[rec.ID]
	delete(m.waiters, rec.ID)
	delete(m.committing, rec.ID)
	m.mu.Unlock()
	for _, w := range ws {
		w(rec)
	}
}

// ending keeps a task's end in memory while the store commits it: its
// record is the ended one, its waiters wait for finished.
func (m *Manager) ending(rec api.TaskRecord) {
	m.mu.Lock()
	m.live[rec.ID] = rec
	m.committing[rec.ID] = true
	m.mu.Unlock()
}

// recordEnd writes the end of a task the daemon ended itself (its actor
// failed, or could not start): its waiters hear of it once it is
// committed, as of a task's own end (taskActor.finish).
func (m *Manager) recordEnd(rec api.TaskRecord) {
	m.ending(rec)
	committed := func(error) {
		m.finished(rec)
		m.forget(rec.ID)
	}
	if err := m.log.TaskFinished(rec, committed); err != nil {
		m.opts.Logger.Error().Err(err).Str("task", rec.ID).Msg("recording the task finished")
		committed(err)
	}
}

// ended reports whether rec, a task's record as read, is its end as the
// store has it (or will have it without a wait): a waiter is answered at
// once only then.
func (m *Manager) ended(rec api.TaskRecord) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.endedLocked(rec)
}

// endedLocked is ended with m.mu held.
func (m *Manager) endedLocked(rec api.TaskRecord) bool {
	return rec.State.Terminal() && !m.committing[rec.ID]
}

// sdkEnded records the agent session a task of session ended in.
func (m *Manager) sdkEnded(session, sdk string) {
	m.mu.Lock()
	m.sdk[session] = sdkEntry{id: sdk, at: time.Now()}
	m.mu.Unlock()
}

// sdkKeep is how long an agent session stays in memory after its task's
// end was committed: a task.execute that read the session from the store
// just before that commit still finds the newer one here.
const sdkKeep = time.Minute

// sdkCommitted drops from memory the agent sessions of sessions with no
// live task whose end was committed sdkKeep ago: the store has them.
func (m *Manager) sdkCommitted() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sdk) == 0 {
		return
	}
	live := make(map[string]bool, len(m.live))
	for _, rec := range m.live {
		live[rec.SessionID] = true
	}
	now := time.Now()
	for s, e := range m.sdk {
		if !live[s] && now.Sub(e.at) > sdkKeep {
			delete(m.sdk, s)
		}
	}
}

// resumeOf is the agent session a task of session continues: the one its
// latest task ended in, else stored (what the store had when it was
// queued).
func (m *Manager) resumeOf(session, stored string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sdk[session]; ok {
		return e.id
	}
	return stored
}

// forget drops a finished task from memory once its record is committed.
func (m *Manager) forget(id string) {
	m.mu.Lock()
	if rec, ok := m.live[id]; ok && rec.State.Terminal() {
		delete(m.live, id)
	}
	m.mu.Unlock()
}

// Recover fails the tasks a dead daemon left queued or running (they may
// have run: never run again) and returns how many.
func (m *Manager) Recover(ctx context.Context) (int, error) {
	un, err := m.log.Unfinished(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing the tasks a dead daemon left: %w", err)
	}
	now := time.Now().UTC()
	for _, rec := range un {
		prev := rec.State
		rec.State = api.TaskFailed
		rec.Error = &api.TaskError{Code: api.TaskErrDaemonLost,
			Message: "the daemon stopped without finishing this task (it may have run part way); not run again"}
		rec.FinishedAt = &now
		done := make(chan error, 1)
		if err := m.log.TaskFinished(rec, func(err error) { done <- err }); err != nil {
			return 0, fmt.Errorf("recording task %s failed: %w", rec.ID, err)
		}
		select {
		case err := <-done:
			if err != nil {
				return 0, fmt.Errorf("recording task %s failed: %w", rec.ID, err)
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("recording task %s failed: %w", rec.ID, ctx.Err())
		}
		m.bus.Emit(TaskRecovered{TaskID: rec.ID, PreviousState: prev})
	}
	return len(un), nil
}

// stopAll is the message that starts a pool's shutdown.
type stopAll struct{}

// Shutdown refuses new tasks, ends the running and queued ones cancelled
// (daemon_shutdown), asks every executor to shut down and kills the groups
// of those still running after their shutdown_timeout. It returns once
// every executor process is reaped, or with ctx's error (after killing
// what is left).
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	forced := m.forced
	m.mu.Unlock()
	for _, h := range m.pools {
		m.sys.Send(h.ref, stopAll{})
		if forced {
			m.sys.Send(h.ref, killAll{reason: "shutdown_forced"})
		}
	}
	var errs []error
	for _, name := range m.PoolNames() {
		h := m.pools[name]
		select {
		case <-h.done:
		case <-ctx.Done():
			m.sys.Send(h.ref, killAll{reason: "daemon shutdown: " + ctx.Err().Error()})
			select {
			case <-h.done:
			case <-time.After(5 * time.Second):
				errs = append(errs, fmt.Errorf("executor pool %s: executors still running after the kill", name))
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := m.sys.Stop(sctx, h.ref); err != nil {
			errs = append(errs, fmt.Errorf("stopping executor pool %s: %w", name, err))
		}
		cancel()
	}
	if m.dir != "" {
		if err := os.RemoveAll(m.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing the executor socket directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Force hurries a Shutdown under way, or the one to come: executors still
// running are killed now (executor.killed {reason: shutdown_forced})
// instead of at their shutdown_timeout. Call it only once the daemon is
// stopping.
func (m *Manager) Force() {
	m.mu.Lock()
	m.forced = true
	stopping := m.stopping
	m.mu.Unlock()
	if !stopping {
		return // Shutdown kills them when it starts
	}
	for _, h := range m.pools {
		m.sys.Send(h.ref, killAll{reason: "shutdown_forced"})
	}
}

// pool resolves task.execute's executor: the pool named, else the only
// pool, else "default".
func (m *Manager) pool(name string) (*poolHandle, error) {
	if name == "" {
		switch {
		case len(m.pools) == 1:
			for _, h := range m.pools {
				return h, nil
			}
		case m.pools["default"] != nil:
			return m.pools["default"], nil
		}
	}
	if h := m.pools[name]; h != nil {
		return h, nil
	}
	if len(m.pools) == 0 {
		return nil, api.Errorf(api.CodeNotFound, "no executor pools are configured: add an [executors.NAME] table to the config file")
	}
	if name == "" {
		return nil, api.Errorf(api.CodeInvalidParams, "task.execute: name an executor pool (have %s)", strings.Join(m.PoolNames(), ", "))
	}
	return nil, api.Errorf(api.CodeNotFound, "no executor pool %q (have %s)", name, strings.Join(m.PoolNames(), ", "))
}
