package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Every test ends with no goroutine of its own left.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle timer ends by itself a second
		// after it starts.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// harness is a Manager on its own actor system and bus, with every event
// it emits.
type harness struct {
	t   *testing.T
	m   *Manager
	mux apitest.Mux
	ev  chan *eventlog.Record
}

type sink chan *eventlog.Record

func (s sink) Deliver(r *eventlog.Record) {
	select {
	case s <- r:
	default:
	}
}

func newHarness(t *testing.T, cfg Config, lg Log, with ...func(*Options)) *harness {
	t.Helper()
	bus, err := eventlog.Open(eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev := make(chan *eventlog.Record, 4096)
	unsub := bus.Subscribe([]string{"approval.*", "plan.*"}, sink(ev))
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop(), OnPanic: func(p actors.PanicInfo) { t.Errorf("actor %s/%s panicked: %v\n%s", p.Kind, p.ID, p.Value, p.Stack) }})
	opts := Options{Config: cfg, Bus: bus, System: sys, Logger: zerolog.Nop(), Log: lg}
	for _, f := range with {
		f(&opts)
	}
	m, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, m: m, mux: apitest.Mux{}, ev: ev}
	m.Register(h.mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		sys.Shutdown()
		unsub()
		bus.Close()
	})
	return h
}

// waitEvent waits for the next event of kind (others are skipped).
func (h *harness) waitEvent(kind string) *eventlog.Record {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-h.ev:
			if r.Kind == kind {
				return r
			}
		case <-deadline:
			h.t.Fatalf("no %s event within 10s", kind)
			return nil
		}
	}
}

// answers collects what Ask's answer func is called with, and fails the
// test if it is called twice.
type answers struct {
	t  *testing.T
	mu sync.Mutex
	n  int
	ch chan api.Approval
}

func newAnswers(t *testing.T) *answers { return &answers{t: t, ch: make(chan api.Approval, 1)} }

func (a *answers) answer(ap api.Approval) {
	a.mu.Lock()
	a.n++
	n := a.n
	a.mu.Unlock()
	if n > 1 {
		a.t.Errorf("answer called %d times (approval %s %s)", n, ap.ID, ap.State)
		return
	}
	a.ch <- ap
}

func (a *answers) wait() api.Approval {
	a.t.Helper()
	select {
	case ap := <-a.ch:
		return ap
	case <-time.After(10 * time.Second):
		a.t.Fatal("no answer within 10s")
		return api.Approval{}
	}
}

// start hands a call to its handler without waiting for the answer.
func (h *harness) start(method string, params any) *apitest.Call {
	h.t.Helper()
	return h.mux.Start(h.t, method, params)
}

// call calls method and waits for its answer: the result decoded into out
// (if not nil), or the error.
func (h *harness) call(method string, params, out any) *api.Error {
	h.t.Helper()
	res, err := h.start(method, params).Wait(h.t, 10*time.Second)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			h.t.Fatalf("%s: decoding %s: %v", method, res, err)
		}
	}
	return nil
}

// memLog is a Log in memory; gate, if set, holds every RecordResolved
// until it is closed.
type memLog struct {
	mu        sync.Mutex
	approvals map[string]api.Approval
	rules     []api.ApprovalRule
	resolved  []string // ids, in commit order
	gate      chan struct{}
	failAll   error
}

func newMemLog() *memLog { return &memLog{approvals: map[string]api.Approval{}} }

func (l *memLog) RecordRequested(a api.Approval, done func(error)) {
	l.mu.Lock()
	err := l.failAll
	if err == nil {
		l.approvals[a.ID] = a
	}
	l.mu.Unlock()
	go done(err)
}

func (l *memLog) RecordResolved(a api.Approval, rules []api.ApprovalRule, done func(error)) {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	go func() {
		if gate != nil {
			<-gate
		}
		l.mu.Lock()
		err := l.failAll
		if err == nil {
			l.approvals[a.ID] = a
			l.rules = append(l.rules, rules...)
			l.resolved = append(l.resolved, a.ID)
		}
		l.mu.Unlock()
		done(err)
	}()
}

func (l *memLog) DeleteRule(id string, done func(error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range l.rules {
		if r.ID == id {
			l.rules = append(l.rules[:i], l.rules[i+1:]...)
			done(nil)
			return
		}
	}
	done(errors.New("not found"))
}

func (l *memLog) Pending() ([]api.Approval, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []api.Approval
	for _, a := range l.approvals {
		if a.State == api.ApprovalPending {
			out = append(out, a)
		}
	}
	return out, nil
}

func (l *memLog) Get(id string) (api.Approval, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.approvals[id]
	return a, ok, nil
}

func (l *memLog) List(q Query) ([]api.Approval, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []api.Approval
	for _, a := range l.approvals {
		if (q.State == "" || string(a.State) == q.State) && (q.Source == "" || a.Source == q.Source) {
			out = append(out, a)
		}
	}
	return out, nil
}

func (l *memLog) Rules() ([]api.ApprovalRule, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]api.ApprovalRule(nil), l.rules...), nil
}

func (l *memLog) get(id string) api.Approval {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.approvals[id]
}
