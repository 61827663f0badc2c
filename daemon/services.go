package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/approvals/notify"
	"github.com/orchestrd/orchestrd/approvals/telegram"
	"github.com/orchestrd/orchestrd/chat"
	"github.com/orchestrd/orchestrd/clanker"
	"github.com/orchestrd/orchestrd/clanker/ipc"
	"github.com/orchestrd/orchestrd/daemon/control"
	"github.com/orchestrd/orchestrd/daemon/httpapi"
	"github.com/orchestrd/orchestrd/daemon/metrics"
	"github.com/orchestrd/orchestrd/daemon/ui"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/fleet"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/loops"
	"github.com/orchestrd/orchestrd/loops/gitwt"
	"github.com/orchestrd/orchestrd/platform/secrets"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The daemon's services: the root's ordered list (supervisor.Runner).
// Run makes the ground first (the home's lock, the configuration's
// files, the state store, the event log, the actor system), then starts
// the services in the order of the list and, when it stops, stops them
// in reverse; a service that fails to start stops those before it, in
// reverse, and Run returns its error. Each service is a small adapter
// over its domain or front-end, below; adding one is one line in
// services().
//
// The front-ends whose address another process may hold are bound
// before anything runs (*.listen: a port in use stops the daemon before
// any runner starts) and served once the domains take work.

// services is the list, in the order the services start; they stop in
// reverse.
func (r *root) services() []supervisor.Service {
	return []supervisor.Service{
		hookListen{r},    // vibe-reachout's hook socket, before anything starts a sandbox (each hides it)
		httpListen{r},    // the HTTP API's port, bound
		metricsListen{r}, // [metrics] listen, bound
		sandboxProbe{r},  // what jobs and agents run in; the front-ends on by default that are off, warned
		lanesService{r},  // the lanes and the fleet; the jobs a dead daemon left
		approvalsService{r},
		chatService{r}, // over the executors' task events: it hears them from before they start until they stopped
		executorsService{r},
		loopsService{r},   // over lanes, approvals and executors
		clankerService{r}, // clanker's repos; stopped first of the domains (their pods spool meanwhile)
		controlService{r}, // the control socket: the method table; closed last, once everything stopped
		httpService{r},    // Loopsy's HTTP API, the dashboard and /metrics on it
		metricsService{r},
		hookService{r}, // answered once its approvals can be
		pruningService{r},
	}
}

// root is what the services reach: the ground Run made before the list,
// and what each service made when it started, for those after it.
type root struct {
	opts    Options
	cfg     Config
	log     zerolog.Logger
	started time.Time
	st      *state.Store
	bus     *eventlog.Bus
	sys     *actors.System
	mx      *metrics.Metrics
	secrets *secrets.File
	fleetID *fleet.Identity
	runner  *supervisor.Runner

	hook      *hookFront
	httpFE    *httpFront
	metricsFE *metricsFront
	sandboxFE api.FrontEnd

	mgr       *lanes.Manager
	fl        *fleet.Fleet // [cluster]: nil when off
	recovered lanes.Recovery
	killed    int // runners killed at the lanes' stop

	notifier        *notify.Notifier
	approvalsMgr    *approvals.Manager
	telegram        *telegram.Bot // [approvals.telegram]: nil when off
	chatSaved       *chatSessions
	chatMgr         *chat.Manager
	execMgr         *executors.Manager
	loopsMgr        *loops.Manager
	stopLoopMetrics func()
	clankerMgr      *clanker.Manager

	srv         *control.Server
	serving     bool // Run serves srv: it closes it once every service stopped
	fronts      *frontEnds
	dash        *ui.Server
	stopPruning func()
}

// recoverBound bounds each service's recovery of what a dead daemon left.
const recoverBound = time.Minute

// recoverWithin runs a domain's Recover within recoverBound; what it
// recovers names it in the error.
func recoverWithin[T any](ctx context.Context, recover func(context.Context) (T, error), what string) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, recoverBound)
	defer cancel()
	v, err := recover(ctx)
	if err != nil {
		return v, fmt.Errorf("recovering %s: %w", what, err)
	}
	return v, nil
}

// shutdownWithin runs a domain's Shutdown within d, logging "WHAT did not
// stop cleanly" when it fails.
func shutdownWithin(d time.Duration, shutdown func(context.Context) error, log zerolog.Logger, what string) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := shutdown(ctx)
	if err != nil {
		log.Error().Err(err).Msg(what + " did not stop cleanly")
	}
	return err
}

// ---- the front-ends' addresses, bound before anything runs ----

type hookListen struct{ *root }

func (hookListen) Name() string { return "hook.listen" }

// Off: [approvals.reachout] leaves the hook socket off, or it could not be bound.
func (s hookListen) Off() string { return s.hook.fe.Off }
func (s hookListen) Start(context.Context) error {
	var err error
	s.hook, err = listenReachout(s.cfg, s.bus, s.sys, s.log)
	return err
}

// Stop closes the socket when the approvals did not (a start failed).
func (s hookListen) Stop(context.Context) error { s.hook.close(s.log); return nil }

type httpListen struct{ *root }

func (httpListen) Name() string { return "http.listen" }

// Off: [http] leaves the HTTP API off, or its address could not be bound.
func (s httpListen) Off() string { return s.httpFE.fe.Off }
func (s httpListen) Start(context.Context) error {
	var err error
	s.httpFE, err = bindHTTP(s.cfg, s.opts.Home, s.bus)
	return err
}

// Stop closes the address bound and never served (a start failed).
func (s httpListen) Stop(context.Context) error { s.httpFE.closeListener(); return nil }

type metricsListen struct{ *root }

func (metricsListen) Name() string { return "metrics.listen" }

// Off: [metrics] listen is not set, or could not be bound.
func (s metricsListen) Off() string { return s.metricsFE.fe.Off }
func (s metricsListen) Start(context.Context) error {
	var err error
	s.metricsFE, err = bindMetrics(s.cfg)
	return err
}
func (s metricsListen) Stop(context.Context) error { s.metricsFE.close(s.log); return nil }

type sandboxProbe struct{ *root }

func (sandboxProbe) Name() string { return "sandbox" }
func (s sandboxProbe) Start(context.Context) error {
	s.hook.warn(s.log)
	s.sandboxFE = probeSandbox(s.cfg.Daemon.Sandbox, s.opts.Home, s.opts.Exe, s.log)
	s.httpFE.warn(s.log)
	return nil
}
func (sandboxProbe) Stop(context.Context) error { return nil }

// ---- the domains ----

// lanesService is the lanes and, with [cluster], the fleet: started after
// them and before their recovery (a cluster job the dead daemon left is
// the fleet's: lanes.Recover never runs it again); stopped in two steps
// around them: it takes no more jobs, the lanes end theirs (their ends
// still recorded in the fleet), then it leaves.
type lanesService struct{ *root }

func (lanesService) Name() string { return "lanes" }
func (s lanesService) Start(context.Context) error {
	d := s.cfg.Daemon
	mgr, err := lanes.Start(lanes.Options{Lanes: s.cfg.Lanes, ShutdownTimeout: d.ShutdownTimeout.Duration,
		MaxFrameBytes: d.MaxFrameBytes, FinishedJobs: d.FinishedJobs, FinishedOutputBytes: d.FinishedOutputBytes,
		Sandbox: d.Sandbox, Home: s.opts.Home, Exe: s.opts.Exe, Hide: hookHide(s.hook.srv),
		RunnerStderr: s.opts.RunnerStderr, RunnerEnv: runnerLogEnv(), Bus: s.bus, System: s.sys, Logger: s.log,
		Jobs: jobLog{s.st}, Secrets: s.secrets,
		UsageSampleEvery: d.UsageSampleInterval.Duration})
	if err != nil {
		return fmt.Errorf("starting lanes: %w", err)
	}
	s.mgr = mgr
	if s.fl, err = startFleet(s.cfg.Cluster, s.fleetID, s.opts.Home, mgr, s.bus, s.log); err != nil {
		_ = s.Stop(context.Background())
		return err
	}
	return nil
}
func (s lanesService) Recover(ctx context.Context) error {
	var err error
	s.recovered, err = recoverWithin(ctx, s.mgr.Recover, "jobs")
	return err
}
func (s lanesService) lanesBound() time.Duration {
	return s.cfg.Daemon.ShutdownTimeout.Duration + 10*time.Second
}
func (s lanesService) StopTimeout() time.Duration {
	return s.lanesBound() + 2*fleetLeaveBound + supervisor.DefaultStopGrace
}
func (s lanesService) Stop(context.Context) error {
	if s.fl != nil {
		stopTaking(s.fl, s.log) // then the lanes end the fleet's jobs here, recorded in it
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.lanesBound())
	defer cancel()
	n, err := s.mgr.Shutdown(ctx)
	s.killed = n
	if err != nil {
		s.log.Error().Err(err).Msg("lanes did not stop cleanly")
	}
	closeFleet(s.fl, s.log)
	return err
}
func (s lanesService) Register(mux api.Mux) {
	s.mgr.Register(mux)
	registerFleet(mux, s.fl)
}

// approvalsService: after the lanes (their notify_command runs under the
// lanes' subreaper); the approvals a dead daemon left, before any
// front-end takes requests. Stopped before the lanes, while the sockets
// are up: a waiting hook hears Timeout; then the hook socket closes.
type approvalsService struct{ *root }

func (approvalsService) Name() string { return "approvals" }
func (s approvalsService) Start(context.Context) error {
	var tgToken string
	cfg := s.cfg.Approvals
	if tg := cfg.Telegram; tg != nil {
		var err error
		if tgToken, err = telegramToken(*tg, s.secrets); err != nil {
			return err
		}
		if tg.Timeout.Duration > 0 && !s.cfg.Set("approvals.timeout") {
			cfg.Timeout = tg.Timeout
		}
	}
	s.notifier = startNotifier(cfg, s.mgr.Reaper(), s.bus, s.log)
	w := &approvalWatchers{notify: s.notifier.Notify, ended: s.mx.ApprovalEnded}
	m, err := approvals.Start(approvals.Options{Config: cfg, Bus: s.bus, System: s.sys,
		Logger: s.log, Reaper: s.mgr.Reaper(), Log: approvalLog{s.st}, OnPending: w.pending, OnEnded: w.end})
	if err != nil {
		s.notifier.Close()
		return fmt.Errorf("starting approvals: %w", err)
	}
	s.approvalsMgr = m
	// Before any approval is asked (the front-ends start later), so w.bot
	// is read without a lock.
	if w.bot, err = startTelegram(cfg.Telegram, tgToken, m, s.st, s.bus, s.sys, s.log); err != nil {
		return err
	}
	s.telegram = w.bot
	return nil
}
func (s approvalsService) Recover(ctx context.Context) error {
	_, err := recoverWithin(ctx, s.approvalsMgr.Recover, "approvals")
	s.telegram.Resync() // the approvals recovered: sent unless they were
	return err
}
func (s approvalsService) StopTimeout() time.Duration {
	return 10*time.Second + supervisor.DefaultStopGrace
}
func (s approvalsService) Stop(context.Context) error {
	err := shutdownWithin(10*time.Second, s.approvalsMgr.Shutdown, s.log, "approvals")
	s.notifier.Close()
	s.hook.close(s.log) // its waiting hooks were answered by the approvals' Shutdown
	return err
}
func (s approvalsService) Register(mux api.Mux) { s.approvalsMgr.Register(mux) }

// chatService: the chat follows the executors' task events, from before
// they start until they have stopped (the last replies' ends are
// streamed); it asks them for tasks only on chat.send.
type chatService struct{ *root }

func (chatService) Name() string { return "chat" }
func (s chatService) Start(context.Context) error {
	s.chatSaved = startChatSessions(s.st, s.log)
	m, err := chat.Start(chat.Options{Executor: s.cfg.Loops.ChatExecutor, Tasks: chatTasks{s.root},
		Events: chatEvents{s.bus}, Bus: s.bus, Logger: s.log,
		Session: loadChatSession(s.st, s.cfg.Loops.ChatExecutor, s.log), SaveSession: s.chatSaved.Save})
	if err != nil {
		s.chatSaved.Close()
		return fmt.Errorf("starting the chat: %w", err)
	}
	s.chatMgr = m
	return nil
}
func (s chatService) Stop(context.Context) error {
	s.chatMgr.Close()
	s.chatSaved.Close()
	return nil
}
func (s chatService) Register(mux api.Mux) { s.chatMgr.Register(mux) }

// executorsService: after the approvals (their permissions are
// approvals).
type executorsService struct{ *root }

func (executorsService) Name() string { return "executors" }
func (s executorsService) Start(context.Context) error {
	m, err := executors.Start(executors.Options{Pools: s.cfg.Executors, Home: s.opts.Home, Bus: s.bus, System: s.sys,
		Logger: s.log, Reaper: s.mgr.Reaper(), Log: executorLog{s.st}, Secrets: s.secrets,
		Permissions: executorPermissions{s.approvalsMgr}, Stderr: s.opts.RunnerStderr,
		Sandbox: s.cfg.Daemon.Sandbox, Exe: s.opts.Exe, Hide: hookHide(s.hook.srv),
		UsageSampleEvery: s.cfg.Daemon.UsageSampleInterval.Duration})
	if err != nil {
		return fmt.Errorf("starting executors: %w", err)
	}
	s.execMgr = m
	return nil
}
func (s executorsService) Recover(ctx context.Context) error {
	_, err := recoverWithin(ctx, s.execMgr.Recover, "executor tasks")
	return err
}
func (s executorsService) execBound() time.Duration {
	return maxShutdownTimeout(s.cfg.Executors) + 10*time.Second
}
func (s executorsService) StopTimeout() time.Duration {
	return s.execBound() + supervisor.DefaultStopGrace
}
func (s executorsService) Stop(context.Context) error {
	return shutdownWithin(s.execBound(), s.execMgr.Shutdown, s.log, "executors")
}
func (s executorsService) Register(mux api.Mux) { s.execMgr.Register(mux) }

// loopsService: after lanes, approvals and executors (their validation
// jobs, plan gates and agents); metrics.update counts its loops.
type loopsService struct{ *root }

func (loopsService) Name() string { return "loops" }
func (s loopsService) Start(context.Context) error {
	if rp := s.mgr.Reaper(); rp != nil {
		gitwt.SetStarter(rp) // git is the daemon's child: registered, never taken for an orphan
	}
	if err := sandboxGit(s.cfg.Daemon.Sandbox, s.opts.Home, s.opts.Exe, hookHide(s.hook.srv)); err != nil {
		return err
	}
	m, err := loops.Start(loops.Options{Config: s.cfg.Loops, Agents: loopAgents{s.execMgr, s.log},
		Jobs: loopJobs{s.mgr, s.log}, Gate: loopGate{s.approvalsMgr}, Store: loopStore{s.st}, Git: loops.GitWT{},
		Bus: s.bus, System: s.sys, Logger: s.log})
	if err != nil {
		return fmt.Errorf("starting loops: %w", err)
	}
	s.loopsMgr = m
	s.approvalsMgr.SetPlanID(m.PlanApproval)
	s.stopLoopMetrics = loopMetrics(s.bus, m)
	return nil
}
func (s loopsService) Recover(ctx context.Context) error {
	_, err := recoverWithin(ctx, s.loopsMgr.Recover, "loops")
	return err
}
func (s loopsService) StopTimeout() time.Duration {
	return 10*time.Second + supervisor.DefaultStopGrace
}
func (s loopsService) Stop(context.Context) error {
	defer s.stopLoopMetrics()
	return shutdownWithin(10*time.Second, s.loopsMgr.Shutdown, s.log, "loops")
}
func (s loopsService) Register(mux api.Mux) { s.loopsMgr.Register(mux) }

// clankerService is clanker's repos.
type clankerService struct{ *root }

func (clankerService) Name() string { return "clanker" }
func (s clankerService) Start(context.Context) error {
	m, err := clanker.Start(clanker.Options{Config: s.cfg.Clanker, Store: clankerStore{s.st},
		Listen: ipc.Listener(s.bus, s.sys, s.log), Bus: s.bus, System: s.sys, Logger: s.log,
		Sync: s.cfg.State.Durability == string(state.DurabilityPower)})
	if err != nil {
		return fmt.Errorf("starting clanker's repos: %w", err)
	}
	s.clankerMgr = m
	return nil
}
func (s clankerService) StopTimeout() time.Duration {
	return 30*time.Second + supervisor.DefaultStopGrace
}
func (s clankerService) Stop(context.Context) error {
	return shutdownWithin(30*time.Second, s.clankerMgr.Shutdown, s.log, "clanker's repos")
}
func (s clankerService) Register(mux api.Mux) { s.clankerMgr.Register(mux) }

// ---- the front-ends ----

// controlService is the control socket and its method table: every
// service's methods, the daemon's own. Once Run serves it, it outlives
// the services: Run closes it after they stopped, so that the clients
// still connected hear the last ends (job.finished).
type controlService struct{ *root }

func (controlService) Name() string { return "control" }
func (s controlService) Start(context.Context) error {
	sockPath := filepath.Join(s.opts.Home, "daemon.sock")
	srv, err := control.New(control.Options{Path: sockPath,
		MaxLine: s.cfg.Daemon.MaxLineBytes, SubscriberQueue: s.cfg.Daemon.SubscriberQueue,
		Overflow: s.cfg.Daemon.SubscriberOverflow, Version: s.opts.Version, Bus: s.bus,
		System: s.sys, Logger: s.log})
	if err != nil {
		return fmt.Errorf("starting the control socket: %w", err)
	}
	s.srv = srv
	// The gauges read the domains' counters at each scrape, from now on.
	s.mx.Attach(metrics.Sources{Lanes: s.mgr, Approvals: s.approvalsMgr, Executors: s.execMgr, Loops: s.loopsMgr,
		Clanker: s.clankerMgr, Store: s.st, Bus: s.bus, Control: srv})
	s.fronts = &frontEnds{control: api.FrontEnd{Name: "control", Address: sockPath}, http: s.httpFE.fe, hook: s.hook.fe,
		metrics: s.metricsFE.fe, lanes: laneFrontEnds(s.opts.Home, s.mgr.LaneNames(), s.cfg.Lanes), clanker: s.clankerMgr,
		laneConns: s.mgr.Conns,
		sandbox:   s.sandboxFE, controlConns: srv.Conns}
	if s.hook.srv != nil {
		s.fronts.hookConns = s.hook.srv.Conns
	}
	registerMethods(srv, s.root)
	registerHTTPInfo(srv, s.httpFE, s.st.NodeID())
	s.runner.Register(srv)
	return nil
}

// Stop closes the socket when Run never served it (a start failed).
func (s controlService) Stop(context.Context) error {
	if !s.serving {
		return s.srv.Close()
	}
	return nil
}

// httpService is Loopsy's HTTP API, served once the lanes take jobs and
// every method is registered, with the dashboard (through the same
// method table as the control socket) and GET /metrics on its listener.
// The dashboard closes first: its streams would hold the API's shutdown.
type httpService struct{ *root }

func (httpService) Name() string  { return "http" }
func (s httpService) Off() string { return s.httpFE.fe.Off }
func (s httpService) Start(context.Context) error {
	var mounts []httpapi.Mount
	if s.httpFE.ln != nil && s.cfg.UI.Enabled {
		dash, err := ui.New(ui.Options{Config: s.cfg.UI, Caller: s.srv, Bus: s.bus, Key: s.httpFE.key, Home: s.opts.Home,
			Version: s.opts.Version, Logger: s.log, Loopback: isLoopback(s.httpFE.ln.Addr()), TLS: s.cfg.HTTP.Cert != "", Store: s.st,
			System: s.sys})
		if err != nil {
			return fmt.Errorf("starting the dashboard: %w", err)
		}
		s.dash = dash
		dash.Register(s.srv)
		mounts = append(mounts, httpapi.Mount{Pattern: "/ui/", Handler: dash}, httpapi.Mount{Pattern: "GET /ui", Handler: dash})
	}
	s.httpFE.sys = s.sys
	// GET /metrics behind the API's key; every request observed.
	mounts = append(mounts, httpapi.Mount{Pattern: "GET /metrics", Handler: s.mx.Handler(), Bearer: true})
	if err := s.httpFE.start(s.opts.Home, s.st, s.opts.Version, s.srv, s.bus, s.started, s.log, mounts, s.mx.ObserveHTTP); err != nil {
		if s.dash != nil {
			s.dash.Close()
		}
		return err
	}
	s.fronts.http = s.httpFE.fe
	s.fronts.ui = uiFrontEnd(s.cfg, s.httpFE, s.dash)
	if s.httpFE.srv != nil {
		s.fronts.httpConns = s.httpFE.srv.Conns
	}
	if s.dash != nil {
		s.fronts.uiConns = s.dash.Conns
	}
	return nil
}
func (s httpService) StopTimeout() time.Duration { return 10*time.Second + supervisor.DefaultStopGrace }
func (s httpService) Stop(context.Context) error {
	if s.dash != nil {
		s.dash.Close() // its streams end first: they would hold the server's shutdown
	}
	if s.httpFE.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.httpFE.srv.Close(ctx)
	if err != nil {
		s.log.Error().Err(err).Msg("closing the HTTP API")
	}
	return err
}

// metricsService serves [metrics] listen; closed first of all, as a
// scrape reads the domains.
type metricsService struct{ *root }

func (metricsService) Name() string                  { return "metrics" }
func (s metricsService) Off() string                 { return s.metricsFE.fe.Off }
func (s metricsService) Start(context.Context) error { s.metricsFE.start(s.mx, s.log); return nil }
func (s metricsService) Stop(context.Context) error  { s.metricsFE.close(s.log); return nil }

// hookService answers vibe-reachout's hook socket once its approvals can
// be; the approvals close it at their stop, after answering its waiting
// hooks.
type hookService struct{ *root }

func (hookService) Name() string  { return "hook" }
func (s hookService) Off() string { return s.hook.fe.Off }
func (s hookService) Start(context.Context) error {
	if s.hook.srv != nil {
		s.hook.srv.Serve(s.approvalsMgr)
	}
	return nil
}
func (hookService) Stop(context.Context) error { return nil }

// pruningService deletes finished jobs and approvals past [state]
// retain_jobs and retain_for.
type pruningService struct{ *root }

func (pruningService) Name() string { return "pruning" }
func (s pruningService) Start(context.Context) error {
	s.stopPruning = startPruning(s.st, s.cfg.State, s.bus, s.log)
	return nil
}
func (s pruningService) Stop(context.Context) error { s.stopPruning(); return nil }
