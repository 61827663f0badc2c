package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

func TestServiceKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		ServiceStarted{Service: "lanes", Position: 4, DurationMs: 12},
		ServiceStartFailed{Service: "control", Position: 11, Error: "control: listen unix /h/daemon.sock: bind: address in use", Recovering: true},
		ServiceStopped{Service: "lanes", Position: 4, DurationMs: 310, TimeoutMs: 40000, Error: ErrAbandoned.Error(), Abandoned: true},
	)
}

// fake is a service that writes what is done to it in a shared journal.
type fake struct {
	name       string
	startErr   error
	recoverErr error
	stopErr    error
	recovers   bool
	hang       chan struct{} // Stop ignores its context until closed
	bound      time.Duration
	journal    *journal
}

type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(s string) { j.mu.Lock(); j.lines = append(j.lines, s); j.mu.Unlock() }
func (j *journal) all() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.lines)
}

func (f *fake) Name() string { return f.name }
func (f *fake) Start(context.Context) error {
	f.journal.add("start " + f.name)
	return f.startErr
}
func (f *fake) Stop(ctx context.Context) error {
	f.journal.add("stop " + f.name)
	if f.hang != nil {
		<-f.hang
	}
	return f.stopErr
}

// recovering is a fake that recovers.
type recovering struct{ *fake }

func (r recovering) Recover(context.Context) error {
	r.journal.add("recover " + r.name)
	return r.recoverErr
}

// bounded is a fake with a stop timeout of its own.
type bounded struct{ *fake }

func (b bounded) StopTimeout() time.Duration { return b.bound }

// registering is a fake with methods.
type registering struct{ *fake }

// switchable is a fake the configuration leaves off when off is set.
type switchable struct {
	*fake
	off string
}

func (s switchable) Off() string { return s.off }

func (r registering) Register(mux api.Mux) {
	r.journal.add("register " + r.name)
	mux.Handle(r.name+".get", nil)
}

// muxStarter is a fake whose start gives the runner its method table.
type muxStarter struct {
	*fake
	runner **Runner
	mux    *recordingMux
}

func (m muxStarter) Start(ctx context.Context) error {
	if err := m.fake.Start(ctx); err != nil {
		return err
	}
	(*m.runner).Register(m.mux)
	return nil
}

type recordingMux struct{ methods []string }

func (m *recordingMux) Handle(method string, _ api.Handler) { m.methods = append(m.methods, method) }

// events collects what the runner emits, as "kind service" lines.
type events struct {
	mu  sync.Mutex
	evs []eventlog.Event
}

func (e *events) emit(ev eventlog.Event) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }
func (e *events) lines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.evs {
		switch ev := ev.(type) {
		case ServiceStarted:
			s := fmt.Sprintf("%s %s#%d", ev.Kind(), ev.Service, ev.Position)
			if ev.Off != "" {
				s += " off=" + ev.Off
			}
			out = append(out, s)
		case ServiceStartFailed:
			out = append(out, fmt.Sprintf("%s %s#%d recovering=%v", ev.Kind(), ev.Service, ev.Position, ev.Recovering))
		case ServiceStopped:
			s := fmt.Sprintf("%s %s#%d", ev.Kind(), ev.Service, ev.Position)
			if ev.Error != "" {
				s += " error=" + ev.Error
			}
			if ev.Abandoned {
				s += " abandoned"
			}
			out = append(out, s)
		}
	}
	return out
}

var errBoom = errors.New("boom")

func TestRunner(t *testing.T) {
	tests := []struct {
		name string
		// mk makes the services on j (a, b, c, ... in order).
		mk        func(j *journal) []Service
		stop      bool // call Stop after a successful Start
		wantErr   error
		journal   []string
		events    []string
		states    []string // "name state[ error]" after all
		wantStopE string   // substring of Stop's error; "" none
	}{{
		name: "start in order, stop in reverse",
		mk: func(j *journal) []Service {
			return []Service{&fake{name: "a", journal: j}, recovering{&fake{name: "b", journal: j}}, &fake{name: "c", journal: j}}
		},
		stop:    true,
		journal: []string{"start a", "start b", "recover b", "start c", "stop c", "stop b", "stop a"},
		events: []string{"service.started a#1", "service.started b#2", "service.started c#3",
			"service.stopped c#3", "service.stopped b#2", "service.stopped a#1"},
		states: []string{"a stopped", "b stopped", "c stopped"},
	}, {
		name: "running until stopped",
		mk: func(j *journal) []Service {
			return []Service{&fake{name: "a", journal: j}, &fake{name: "b", journal: j}}
		},
		journal: []string{"start a", "start b"},
		events:  []string{"service.started a#1", "service.started b#2"},
		states:  []string{"a running", "b running"},
	}, {
		name: "a failed start stops those started in reverse, not itself, not those after",
		mk: func(j *journal) []Service {
			return []Service{&fake{name: "a", journal: j}, &fake{name: "b", journal: j},
				&fake{name: "c", journal: j, startErr: errBoom}, &fake{name: "d", journal: j}}
		},
		wantErr: errBoom,
		journal: []string{"start a", "start b", "start c", "stop b", "stop a"},
		events: []string{"service.started a#1", "service.started b#2", "service.start_failed c#3 recovering=false",
			"service.stopped b#2", "service.stopped a#1"},
		states: []string{"a stopped", "b stopped", "c start_failed boom", "d pending"},
	}, {
		name: "a service the configuration leaves off is off, and says why",
		mk: func(j *journal) []Service {
			return []Service{switchable{&fake{name: "a", journal: j}, "no address set"}, switchable{&fake{name: "b", journal: j}, ""}}
		},
		journal: []string{"start a", "start b"},
		events:  []string{"service.started a#1 off=no address set", "service.started b#2"},
		states:  []string{"a off no address set", "b running"},
	}, {
		name: "the first fails: nothing to stop",
		mk: func(j *journal) []Service {
			return []Service{&fake{name: "a", journal: j, startErr: errBoom}, &fake{name: "b", journal: j}}
		},
		wantErr: errBoom,
		journal: []string{"start a"},
		events:  []string{"service.start_failed a#1 recovering=false"},
		states:  []string{"a start_failed boom", "b pending"},
	}, {
		name: "a failed recovery stops the service itself too",
		mk: func(j *journal) []Service {
			return []Service{&fake{name: "a", journal: j}, recovering{&fake{name: "b", journal: j, recoverErr: errBoom}},
				&fake{name: "c", journal: j}}
		},
		wantErr: errBoom,
		journal: []string{"start a", "start b", "recover b", "stop b", "stop a"},
		events: []string{"service.started a#1", "service.start_failed b#2 recovering=true",
			"service.stopped b#2", "service.stopped a#1"},
		states: []string{"a stopped", "b start_failed boom", "c pending"},
	}, {
		name: "a failed stop is recorded and the others still stop",
		mk: func(j *journal) []Service {
			return []Service{&fake{name: "a", journal: j}, &fake{name: "b", journal: j, stopErr: errBoom}, &fake{name: "c", journal: j}}
		},
		stop:      true,
		journal:   []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"},
		events:    []string{"service.started a#1", "service.started b#2", "service.started c#3", "service.stopped c#3", "service.stopped b#2 error=boom", "service.stopped a#1"},
		states:    []string{"a stopped", "b stopped boom", "c stopped"},
		wantStopE: "stopping b: boom",
	}, {
		name: "a stop past its timeout is abandoned and the others still stop",
		mk: func(j *journal) []Service {
			return []Service{&fake{name: "a", journal: j}, bounded{&fake{name: "b", journal: j, bound: time.Millisecond, hang: make(chan struct{})}}}
		},
		stop:    true,
		journal: []string{"start a", "start b", "stop b", "stop a"},
		events: []string{"service.started a#1", "service.started b#2",
			"service.stopped b#2 error=" + ErrAbandoned.Error() + " abandoned", "service.stopped a#1"},
		states:    []string{"a stopped", "b stopped " + ErrAbandoned.Error()},
		wantStopE: "stopping b: did not stop",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &journal{}
			var ev events
			svcs := tt.mk(j)
			r := NewRunner(RunnerOptions{Emit: ev.emit, Grace: time.Millisecond}, svcs...)
			err := r.Start(context.Background())
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Start = %v, want %v", err, tt.wantErr)
			}
			if err != nil && err != tt.wantErr {
				t.Errorf("Start's error %q is not the service's own", err)
			}
			if tt.stop {
				serr := r.Stop()
				if tt.wantStopE == "" && serr != nil || tt.wantStopE != "" && (serr == nil || !strings.Contains(serr.Error(), tt.wantStopE)) {
					t.Errorf("Stop = %v, want %q", serr, tt.wantStopE)
				}
				if again := r.Stop(); again != nil {
					t.Errorf("a second Stop = %v, want nil", again)
				}
			}
			for _, s := range svcs { // release a hung Stop
				if h := unwrap(s).hang; h != nil {
					close(h)
				}
			}
			if got := j.all(); !slices.Equal(got, tt.journal) {
				t.Errorf("journal:\n got  %q\n want %q", got, tt.journal)
			}
			if got := ev.lines(); !slices.Equal(got, tt.events) {
				t.Errorf("events:\n got  %q\n want %q", got, tt.events)
			}
			var states []string
			for _, s := range r.Status() {
				states = append(states, strings.TrimSpace(s.Name+" "+s.State+" "+s.Error+s.Off))
			}
			if !slices.Equal(states, tt.states) {
				t.Errorf("status:\n got  %q\n want %q", states, tt.states)
			}
		})
	}
}

func unwrap(s Service) *fake {
	switch s := s.(type) {
	case *fake:
		return s
	case recovering:
		return s.fake
	case bounded:
		return s.fake
	case registering:
		return s.fake
	case switchable:
		return s.fake
	case muxStarter:
		return s.fake
	}
	panic("unknown fake")
}

// The methods of the services started before the table is given are
// registered then, in order; those after, at their start.
func TestRunnerRegister(t *testing.T) {
	j := &journal{}
	var r *Runner
	mux := &recordingMux{}
	r = NewRunner(RunnerOptions{},
		registering{&fake{name: "a", journal: j}}, &fake{name: "b", journal: j},
		registering{&fake{name: "c", journal: j}},
		muxStarter{fake: &fake{name: "control", journal: j}, runner: &r, mux: mux},
		registering{&fake{name: "d", journal: j}})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	want := []string{"start a", "start b", "start c", "start control", "register a", "register c", "start d", "register d"}
	if got := j.all(); !slices.Equal(got, want) {
		t.Errorf("journal:\n got  %q\n want %q", got, want)
	}
	if want := []string{"a.get", "c.get", "d.get"}; !slices.Equal(mux.methods, want) {
		t.Errorf("methods %q, want %q", mux.methods, want)
	}
}

func TestRunnerDuplicateNames(t *testing.T) {
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), `two services named "a"`) {
			t.Errorf("panic %v, want two services named \"a\"", p)
		}
	}()
	NewRunner(RunnerOptions{}, &fake{name: "a"}, &fake{name: "a"})
}

func TestRunnerStartTwice(t *testing.T) {
	r := NewRunner(RunnerOptions{}, &fake{name: "a", journal: &journal{}})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	r.Stop()
	if err := r.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}
