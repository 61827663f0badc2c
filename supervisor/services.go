package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The root's ordered list of services, in the manner of an OTP supervisor
// with the one_for_all strategy at start: the services start one after the
// other in the list's order; when one fails to start, those started stop
// in reverse and the daemon does not run; at shutdown every service
// started stops in reverse, each within its shutdown timeout, after which
// the runner goes on without it (OTP kills the child; a goroutine cannot
// be killed, so the runner abandons it and says so). Each start and stop
// is an event (service.started, service.start_failed, service.stopped).

// Service is one part of the daemon the root starts and stops: a domain
// (lanes, approvals, ...) or a front-end (the control socket, the HTTP
// API, ...).
type Service interface {
	// Name is the service's name in status and in its events.
	Name() string
	// Start starts it. When it fails it has undone what it started.
	Start(ctx context.Context) error
	// Stop stops it, within ctx's deadline (its StopTimeout).
	Stop(ctx context.Context) error
}

// Recoverer is a service that takes up what a dead daemon left (its
// unfinished jobs, approvals, tasks, loops) right after its start, before
// the next service starts. A service whose recovery fails is stopped.
type Recoverer interface {
	Recover(ctx context.Context) error
}

// Registrar is a service with methods on the method table: registered
// once the table is given (Runner.Register), or at its start when it
// starts later.
type Registrar interface {
	Register(mux api.Mux)
}

// Switchable is a service the configuration may leave off (a listener
// with no address set): once started, Off says why it is off, "" when it
// is on. Status shows it off, with that reason, not running.
type Switchable interface {
	Off() string
}

// StopBounded is a service with a shutdown timeout of its own; the others
// have RunnerOptions.StopTimeout.
type StopBounded interface {
	StopTimeout() time.Duration
}

// RunnerOptions configures a Runner.
type RunnerOptions struct {
	// Emit records the service events (the event log's Emit); nil: none.
	Emit func(eventlog.Event)
	// StopTimeout bounds the stop of a service that does not bound its
	// own (StopBounded); default DefaultStopTimeout.
	StopTimeout time.Duration
	// Grace is how long past its timeout the runner still waits for a
	// Stop that ignores its context before going on without it; default
	// DefaultStopGrace.
	Grace time.Duration
}

// Defaults of RunnerOptions.
const (
	DefaultStopTimeout = 10 * time.Second
	DefaultStopGrace   = 5 * time.Second
)

// Runner starts an ordered list of services and stops them in reverse.
// Status may be called at any time, from any goroutine.
type Runner struct {
	opts     RunnerOptions
	services []Service

	// startMu serialises Start, Stop and Register.
	startMu sync.Mutex
	started int // services[:started] were started and not yet stopped
	stopped bool
	mux     api.Mux

	mu     sync.Mutex // guards states
	states []api.ServiceStatus
}

// NewRunner makes a runner of services, in the order they start. Two
// services of the same name are a programming error: it panics.
func NewRunner(opts RunnerOptions, services ...Service) *Runner {
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultStopGrace
	}
	if opts.Emit == nil {
		opts.Emit = func(eventlog.Event) {}
	}
	r := &Runner{opts: opts, services: services, states: make([]api.ServiceStatus, len(services))}
	for i, s := range services {
		if slices.ContainsFunc(services[:i], func(o Service) bool { return o.Name() == s.Name() }) {
			panic(fmt.Sprintf("supervisor.NewRunner: two services named %q", s.Name()))
		}
		r.states[i] = api.ServiceStatus{Name: s.Name(), State: api.ServicePending}
	}
	return r
}

// Start starts the services in order, each recovered (Recoverer) before
// the next starts. On the first failure it stops those started, in
// reverse, and returns that failure as the service returned it.
func (r *Runner) Start(ctx context.Context) error {
	r.startMu.Lock()
	defer r.startMu.Unlock()
	if r.stopped || r.started > 0 {
		return errors.New("supervisor: the runner was started already")
	}
	for i, s := range r.services {
		r.set(i, api.ServiceStarting, "")
		began := time.Now()
		err := s.Start(ctx)
		if err != nil {
			r.set(i, api.ServiceStartFailed, err.Error())
			r.opts.Emit(ServiceStartFailed{Service: s.Name(), Position: i + 1, Error: err.Error()})
			r.stopStarted()
			return err
		}
		r.started = i + 1
		if rc, ok := s.(Recoverer); ok {
			if err = rc.Recover(ctx); err != nil {
				r.set(i, api.ServiceStartFailed, err.Error())
				r.opts.Emit(ServiceStartFailed{Service: s.Name(), Position: i + 1, Error: err.Error(), Recovering: true})
				r.stopStarted()
				return err
			}
		}
		if rg, ok := s.(Registrar); ok && r.mux != nil {
			rg.Register(r.mux)
		}
		ev := ServiceStarted{Service: s.Name(), Position: i + 1, DurationMs: time.Since(began).Milliseconds()}
		if sw, ok := s.(Switchable); ok {
			ev.Off = sw.Off()
		}
		r.setOn(i, ev.Off)
		r.opts.Emit(ev)
	}
	return nil
}

// Register registers on mux the methods of every service started so far
// that has any (Registrar), in order; those that start later register
// theirs at their start. A service calls it from its Start (the control
// socket's, once its table is made).
func (r *Runner) Register(mux api.Mux) {
	// Called from a service's Start, under startMu: no lock here.
	r.mux = mux
	for _, s := range r.services[:r.started] {
		if rg, ok := s.(Registrar); ok {
			rg.Register(mux)
		}
	}
}

// Stop stops every service started, in reverse, each within its timeout.
// Only the first call stops them; it returns the stops that failed.
func (r *Runner) Stop() error {
	r.startMu.Lock()
	defer r.startMu.Unlock()
	r.stopped = true
	return r.stopStarted()
}

// stopStarted stops services[:started] in reverse. Under startMu.
func (r *Runner) stopStarted() error {
	var errs []error
	for ; r.started > 0; r.started-- {
		i := r.started - 1
		if err := r.stopOne(i, r.services[i]); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", r.services[i].Name(), err))
		}
	}
	return errors.Join(errs...)
}

// ErrAbandoned is a stop that did not return within its timeout and the
// runner's grace: the runner went on without it.
var ErrAbandoned = errors.New("did not stop within its timeout: going on without it")

// stopOne stops one service within its bound, and records it.
func (r *Runner) stopOne(i int, s Service) error {
	bound := r.opts.StopTimeout
	if b, ok := s.(StopBounded); ok && b.StopTimeout() > 0 {
		bound = b.StopTimeout()
	}
	failed := r.get(i).State == api.ServiceStartFailed
	if !failed {
		r.set(i, api.ServiceStopping, "")
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Stop(ctx) }()
	grace := time.NewTimer(bound + r.opts.Grace)
	defer grace.Stop()
	var err error
	select {
	case err = <-done:
	case <-grace.C:
		err = ErrAbandoned
	}
	ev := ServiceStopped{Service: s.Name(), Position: i + 1, DurationMs: time.Since(began).Milliseconds(),
		TimeoutMs: bound.Milliseconds()}
	if err != nil {
		ev.Error = err.Error()
		ev.Abandoned = errors.Is(err, ErrAbandoned)
	}
	if failed { // keep why it failed to start
		r.set(i, api.ServiceStartFailed, r.get(i).Error)
	} else {
		r.set(i, api.ServiceStopped, ev.Error)
	}
	r.opts.Emit(ev)
	return err
}

// Status is every service in order, with its state.
func (r *Runner) Status() []api.ServiceStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

func (r *Runner) set(i int, state, err string) {
	r.mu.Lock()
	r.states[i].State, r.states[i].Error = state, err
	r.mu.Unlock()
}

// setOn records service i started: running, or off for the reason given.
func (r *Runner) setOn(i int, off string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states[i] = api.ServiceStatus{Name: r.states[i].Name, State: api.ServiceRunning}
	if off != "" {
		r.states[i].State, r.states[i].Off = api.ServiceOff, off
	}
}

func (r *Runner) get(i int) api.ServiceStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[i]
}
