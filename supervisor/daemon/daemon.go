// Package daemon is the root of orchestrd's supervision tree: Run owns the
// event log, the actor system, the lanes and the control socket, and tears
// them down in reverse order.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/supervisor/control"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Options configures a daemon.
type Options struct {
	Home         string
	Config       lanes.Config
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
	if err := prepareHome(opts.Home); err != nil {
		return err
	}
	cfg := opts.Config
	bus, err := eventlog.Open(eventlog.Options{Path: filepath.Join(opts.Home, "events.ndjson"),
		MaxBytes: cfg.Daemon.EventLogMaxBytes, MaxFiles: cfg.Daemon.EventLogFiles, Logger: opts.Logger})
	if err != nil {
		return fmt.Errorf("opening the event log: %w", err)
	}
	defer bus.Close()
	sys := actors.NewSystem(actors.Options{
		Logger: opts.Logger,
		OnPanic: func(p actors.PanicInfo) {
			bus.Emit(eventlog.ActorPanicked{Actor: p.Kind + "/" + p.ID, Panic: fmt.Sprint(p.Value),
				Stack: p.Stack, Directive: p.Directive.String()})
		},
		OnRestart: func(kind, id string, n int) {
			bus.Emit(eventlog.ActorRestarted{Actor: kind + "/" + id, Restarts: n})
		},
	})
	defer sys.Shutdown()

	mgr, err := lanes.Start(lanes.Options{Config: cfg, Home: opts.Home, Exe: opts.Exe,
		RunnerStderr: opts.RunnerStderr, Bus: bus, System: sys, Logger: opts.Logger})
	if err != nil {
		return fmt.Errorf("starting lanes: %w", err)
	}
	killed := 0
	shutdownLanes := func(reason string) {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.Daemon.ShutdownTimeout.Duration+10*time.Second)
		defer cancel()
		n, err := mgr.Shutdown(sctx)
		killed = n
		if err != nil {
			opts.Logger.Error().Err(err).Str("reason", reason).Msg("lanes did not stop cleanly")
		}
	}
	srv, err := control.New(control.Options{Path: filepath.Join(opts.Home, "daemon.sock"),
		MaxLine: cfg.Daemon.MaxLineBytes, SubscriberQueue: cfg.Daemon.SubscriberQueue,
		Overflow: cfg.Daemon.SubscriberOverflow, Version: opts.Version, Backend: mgr, Bus: bus,
		System: sys, Logger: opts.Logger})
	if err != nil {
		shutdownLanes("control socket failed")
		return fmt.Errorf("starting the control socket: %w", err)
	}
	bus.Emit(eventlog.DaemonStarted{Pid: os.Getpid(), Version: opts.Version, Home: opts.Home, Lanes: mgr.LaneNames()})
	opts.Logger.Info().Str("home", opts.Home).Strs("lanes", mgr.LaneNames()).Msg("orchestrd serving")

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
	{
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case s := <-sigCh:
				bus.Emit(eventlog.DaemonStopping{Signal: s.String(), Reason: "signal"})
			case <-ctx.Done():
				bus.Emit(eventlog.DaemonStopping{Reason: "context done"})
			case <-stop:
			}
			go func() {
				select {
				case s := <-sigCh:
					bus.Emit(eventlog.DaemonStopping{Signal: s.String(), Reason: "signal while stopping: killing runners now"})
					mgr.Force()
				case <-stopped:
				}
			}()
			return nil
		}, func(error) { close(stop) })
	}
	{
		sctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			err := srv.Serve(sctx)
			if err != nil {
				bus.Emit(eventlog.DaemonStopping{Reason: "control socket failed: " + err.Error()})
			}
			return err
		}, func(error) {
			// Lanes first, while clients are still connected and hear their
			// jobs end; then the control socket.
			shutdownLanes("stopping")
			cancel()
			_ = srv.Close()
		})
	}
	err = g.Run()
	bus.Emit(eventlog.DaemonStopped{UptimeMs: time.Since(started).Milliseconds(), Killed: killed})
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// prepareHome creates the home directory 0700, or tightens it to 0700, and
// refuses one owned by another user.
func prepareHome(home string) error {
	if home == "" {
		return errors.New("no home directory given")
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("creating home %s: %w", home, err)
	}
	fi, err := os.Stat(home)
	if err != nil {
		return fmt.Errorf("checking home %s: %w", home, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("home %s is owned by uid %d, not by this user (uid %d)", home, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(home, 0o700); err != nil {
			return fmt.Errorf("making home %s private (0700): %w", home, err)
		}
	}
	return nil
}
