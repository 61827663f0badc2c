// Package daemon is the root of orchestrd's supervision tree: Run owns the
// state store, the event log and the actor system, starts the daemon's
// services in the order of one list (services.go) and stops them in
// reverse.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/fleet"
	"github.com/orchestrd/orchestrd/lanes/runner"
	"github.com/orchestrd/orchestrd/platform/secrets"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// SecretsFile is the secrets file in the home (platform/secrets): read
// at start, refused if others can read it.
const SecretsFile = "secrets.toml"

// maxShutdownTimeout is the longest shutdown_timeout of the pools.
func maxShutdownTimeout(pools map[string]executors.PoolConfig) time.Duration {
	var d time.Duration
	for _, p := range pools {
		d = max(d, p.ShutdownTimeout.Duration)
	}
	return d
}

// StateFile is the durable store's file in the home.
const StateFile = "state.db"

// StateError is Run's error when the state store cannot be opened (a
// corrupt or unreadable file, a read-only home, a full disk, a schema
// newer than this build): one line naming the file and the problem.
type StateError struct{ Err error }

func (e *StateError) Error() string { return e.Err.Error() }
func (e *StateError) Unwrap() error { return e.Err }

// ConfigError is Run's error when a file of the configuration it reads
// at start is refused (secrets.toml readable by others, or not TOML): one
// line naming it; serve exits 2, as for a bad config.toml.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// stateQueue bounds the writes waiting for the store's writer: room for a
// burst of submissions, each a record that must be committed before it is
// acknowledged (a full queue refuses them: store_unavailable).
const stateQueue = 1 << 16

// Options configures a daemon.
type Options struct {
	Home         string
	Config       Config
	Logger       zerolog.Logger
	Version      string
	Exe          string    // binary spawned for runners; default os.Executable()
	RunnerStderr io.Writer // default os.Stderr
	// Signals that stop the daemon; default SIGTERM and SIGINT.
	Signals []os.Signal
}

// Run runs the daemon until ctx ends or a stop signal arrives, then shuts
// everything down: no runner or job process survives it.
func Run(ctx context.Context, opts Options) error {
	started := time.Now()
	// Before anything can start a process: no runner or job inherits
	// $NOTIFY_SOCKET.
	sd := newNotifier(opts.Logger)
	// The home's lock comes before anything else but making sure there is
	// a home: a second daemon on a live home must leave it as it is (no
	// socket replaced, no line in its event log).
	if err := prepareHome(opts.Home); err != nil {
		return err
	}
	lock, err := lockHome(opts.Home)
	if err != nil {
		return err
	}
	defer lock.Close() // last: everything below is torn down first
	cfg := opts.Config
	// The secrets file before anything starts: one that others can read,
	// or a bad one, stops the daemon with one line naming it.
	secretsFile, err := secrets.Load(filepath.Join(opts.Home, SecretsFile))
	if err != nil {
		return &ConfigError{Err: err}
	}
	// The Telegram bot's token too: a name the file does not hold stops
	// it here, with exit 2 (the entry named, never a value).
	if tg := cfg.Approvals.Telegram; tg != nil {
		if _, err := telegramToken(*tg, secretsFile); err != nil {
			return &ConfigError{Err: err}
		}
	}
	// The fleet's credentials too ([cluster]): missing, readable by
	// others, another node's, or not letting this node serve its shared
	// lanes, they stop it here, before NATS or any lane starts.
	fleetID, err := fleet.Check(cfg.Cluster, opts.Home, sharedLanes(cfg.Lanes))
	if err != nil {
		return &ConfigError{Err: fmt.Errorf("[cluster]: %w", err)}
	}
	// The metrics' registry before the store: its commits are observed
	// (metricsfront.go).
	mx := newMetrics(cfg, opts.Version, opts.Home)
	// The state store next: after the lock (one daemon per file), before
	// anything else, so a store that cannot be opened stops the daemon
	// before it touches the home. Closed last but the lock (see below).
	st, err := state.Open(filepath.Join(opts.Home, StateFile), state.Options{
		Durability: state.Durability(cfg.State.Durability), QueueSize: stateQueue, OnCommit: mx.ObserveCommit})
	if err != nil {
		return &StateError{Err: err}
	}
	defer func() {
		if err := st.Close(); err != nil {
			opts.Logger.Error().Err(err).Msg("closing the state store")
		}
	}()
	// The event log after the store: its seq numbers are reserved in it.
	evOpts := eventlog.Options{Path: filepath.Join(opts.Home, "events.ndjson"),
		MaxBytes: cfg.Daemon.EventLogMaxBytes, MaxFiles: cfg.Daemon.EventLogFiles, Logger: opts.Logger}
	if err := reserveSeq(ctx, st, &evOpts); err != nil {
		return err
	}
	bus, err := eventlog.Open(evOpts)
	if err != nil {
		return fmt.Errorf("opening the event log: %w", err)
	}
	defer releaseSeq(st, bus, opts.Logger) // after bus.Close
	defer bus.Close()
	// The metrics count the bus's events from the first (exact kinds).
	defer mx.Subscribe(bus)()
	// protoactor's own info lines ("actor system started") are noise on
	// the daemon's stderr; its warnings are not.
	actorLog := opts.Logger
	if actorLog.GetLevel() < zerolog.WarnLevel {
		actorLog = actorLog.Level(zerolog.WarnLevel)
	}
	sys := actors.NewSystem(actors.Options{
		Logger: actorLog,
		OnPanic: func(p actors.PanicInfo) {
			mx.ActorPanicked(p.Kind)
			bus.Emit(ActorPanicked{Actor: p.Kind + "/" + p.ID, Panic: fmt.Sprint(p.Value),
				Stack: p.Stack, Directive: p.Directive.String()})
		},
		OnRestart: func(kind, id string, n int) {
			bus.Emit(ActorRestarted{Actor: kind + "/" + id, Restarts: n})
		},
	})
	defer sys.Shutdown()

	// The services, in order (services.go): on a failed start those
	// started stop in reverse, and Run returns its error.
	r := &root{opts: opts, cfg: cfg, log: opts.Logger, started: started, st: st, bus: bus, sys: sys, mx: mx,
		secrets: secretsFile, fleetID: fleetID}
	r.runner = supervisor.NewRunner(supervisor.RunnerOptions{Emit: func(ev eventlog.Event) { bus.Emit(ev) }}, r.services()...)
	if err := r.runner.Start(context.Background()); err != nil {
		return err
	}
	mgr, fronts, srv, fl := r.mgr, r.fronts, r.srv, r.fl
	recovered := r.recovered
	sockPath := fronts.control.Address
	bus.Emit(DaemonStarted{Pid: os.Getpid(), Version: opts.Version, Home: opts.Home, Lanes: mgr.LaneNames(),
		Recovered: recovered.Requeued+recovered.Failed > 0, Requeued: recovered.Requeued, Failed: recovered.Failed,
		SeqSkipped: bus.SeqSkipped()})
	// Every front-end: its address, or off: why.
	ready := opts.Logger.Info().Str("socket", sockPath).Strs("lanes", mgr.LaneNames()).Int("pid", os.Getpid()).
		Str("http", readyValue(fronts.http)).Str("ui", readyValue(fronts.ui)).Str("hook", readyValue(fronts.hook)).
		Str("metrics", readyValue(fronts.metrics))
	if socks := fronts.clankerSockets(); len(socks) > 0 {
		ready = ready.Strs("clanker", socks)
	}
	if fl != nil { // in a fleet: which one, as which node
		ready = ready.Str("cluster", fl.Cluster()).Str("node", fl.Name())
	}
	ready.Msg("orchestrd ready")
	sd.notify("READY=1", servingStatus(mgr.LaneNames(), cfg.Lanes)+fronts.failedStatus())

	sigs := opts.Signals
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	}
	// Signals are heard for the whole run: the first one stops the daemon;
	// one more while it stops hurries it (runners still running are
	// killed now rather than at shutdown_timeout), and the event log is
	// still flushed. Without this a second SIGTERM would kill the process
	// outright and lose the log's tail.
	sigCh := make(chan os.Signal, 2)
	signal.Notify(sigCh, sigs...)
	defer signal.Stop(sigCh)
	stopped := make(chan struct{})
	defer close(stopped)
	var g run.Group
	why := "control socket" // what stopped the daemon, for the last line of its log
	var stopSig os.Signal   // the signal that stopped it, if one did
	{
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case s := <-sigCh:
				why, stopSig = s.String(), s
				bus.Emit(DaemonStopping{Signal: s.String(), Reason: "signal"})
			case <-ctx.Done():
				why = "context done"
				bus.Emit(DaemonStopping{Reason: "context done"})
			case <-stop:
			}
			sd.notify("STOPPING=1", stoppingStatus(stopSig, why))
			go func() {
				select {
				case s := <-sigCh:
					bus.Emit(DaemonStopping{Signal: s.String(), Reason: "signal while stopping: killing runners now"})
					sd.notify(stoppingStatus(s, "") + ", killing runners now")
					r.execMgr.Force()
					mgr.Force()
				case <-stopped:
				}
			}()
			return nil
		}, func(error) { close(stop) })
	}
	// recordStop writes stopped_at once the lanes have stopped: their last
	// terminal records are queued before it, so it returns once they are
	// committed and published (job.finished) while the event log is open.
	recordStop := sync.OnceFunc(func() {
		fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer fcancel()
		if ferr := st.Meta().Set(fctx, "stopped_at", time.Now().UTC().Format(time.RFC3339Nano)); ferr != nil {
			opts.Logger.Error().Err(ferr).Msg("recording the stop in the state store")
		}
	})
	{
		sctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			err := srv.Serve(sctx)
			if err != nil {
				bus.Emit(DaemonStopping{Reason: "control socket failed: " + err.Error()})
			}
			return err
		}, func(error) {
			// Every service in reverse (services.go): the front-ends
			// first (Loopsy's executions are cancelled while the lanes
			// still run them), then clanker's repos, loops, executors,
			// approvals and lanes, while clients are still connected and
			// hear their tasks, approvals and jobs end. Their stop errors
			// are logged and in service.stopped.
			if err := r.runner.Stop(); errors.Is(err, supervisor.ErrAbandoned) {
				opts.Logger.Error().Err(err).Msg("a service did not stop in time: stopping without it")
			}
			// The last ends (job.finished) reach the clients still
			// connected before the socket closes.
			recordStop()
			cancel()
			_ = srv.Close()
		})
	}
	r.serving = true // from now on Run closes the control socket, once every service stopped
	err = g.Run()
	recordStop() // if the control socket's interrupt did not
	uptime := time.Since(started)
	bus.Emit(DaemonStopped{UptimeMs: uptime.Milliseconds(), Killed: r.killed})
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if err == nil { // an error is the caller's to report
		opts.Logger.Info().Str("by", why).Str("uptime", uptime.Round(time.Second).String()).
			Int("killed_runners", r.killed).Msg("orchestrd stopped")
	}
	return err
}

// runnerLogEnv is what a runner takes of the daemon's environment beside
// what its lane lets its jobs have: its log settings (ORCHESTRD_LOG_*),
// which it never passes on to a job.
func runnerLogEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ORCHESTRD_LOG_") || strings.HasPrefix(kv, runner.EnvCPUProfile+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// HomeError is Run's error when the home cannot be used: it cannot be
// created, is not a directory, is another user's, cannot be made private
// or written. No restart fixes it: serve says it in one line and exits 2.
type HomeError struct {
	Home string
	Err  error // what is wrong: "is not a directory", "cannot be created: ..."
}

func (e *HomeError) Error() string { return "home " + e.Home + " " + e.Err.Error() }
func (e *HomeError) Unwrap() error { return e.Err }

// prepareHome creates the home directory 0700, or tightens it to 0700, and
// refuses one that is not a directory or is owned by another user.
func prepareHome(home string) error {
	if home == "" {
		return &HomeError{Err: errors.New("is not given")}
	}
	fi, err := os.Stat(home)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		if err := os.MkdirAll(home, 0o700); err != nil {
			return &HomeError{Home: home, Err: fmt.Errorf("cannot be created: %w", err)}
		}
		fi, err = os.Stat(home)
	}
	if err != nil {
		return &HomeError{Home: home, Err: fmt.Errorf("cannot be read: %w", err)}
	}
	if !fi.IsDir() {
		return &HomeError{Home: home, Err: errors.New("is not a directory")}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return &HomeError{Home: home, Err: fmt.Errorf("is owned by uid %d, not by this user (uid %d)", st.Uid, os.Getuid())}
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(home, 0o700); err != nil {
			return &HomeError{Home: home, Err: fmt.Errorf("cannot be made private (0700): %w", err)}
		}
	}
	return nil
}

// LockFile is the file in the home a running daemon holds an exclusive
// flock on; it holds that daemon's pid.
const LockFile = "daemon.lock"

// AlreadyRunningError is Run's error when another daemon holds the home.
type AlreadyRunningError struct {
	Home string
	Pid  int // 0 if the other daemon has not written its pid yet
}

func (e *AlreadyRunningError) Error() string {
	if e.Pid > 0 {
		return fmt.Sprintf("a daemon (pid %d) is already running on %s", e.Pid, e.Home)
	}
	return fmt.Sprintf("a daemon is already running on %s", e.Home)
}

// lockHome takes the home's lock: an exclusive, non-blocking flock on
// <home>/daemon.lock, then writes our pid in it. The kernel releases the
// lock when the process ends however it ends, so the file a dead daemon
// left is simply locked again; it is never removed (removing it would let
// two daemons lock two different files). The descriptor is close-on-exec:
// runners do not inherit the lock.
func lockHome(home string) (*os.File, error) {
	path := filepath.Join(home, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, &HomeError{Home: home, Err: fmt.Errorf("cannot be written: %w", err)}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &AlreadyRunningError{Home: home, Pid: lockHolder(path)}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close()
		return nil, &HomeError{Home: home, Err: fmt.Errorf("cannot be written: writing our pid to %s: %w", path, err)}
	}
	return f, nil
}

// lockHolder reads the pid the daemon holding the lock wrote, giving it a
// moment when it has only just taken the lock; 0 if there is none.
func lockHolder(path string) int {
	for i := 0; ; i++ {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
		if i == 20 {
			return 0
		}
		time.Sleep(10 * time.Millisecond)
	}
}
