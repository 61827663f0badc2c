// Package apitest holds test doubles of the method-table contract of
// api/call.go: a Mux that collects the methods a domain registers, and a
// Call that keeps its first answer, as a front-end would hand it to a
// handler. Decode is the control socket's (wire.DecodeParams), so the
// messages a test sees are those a client would.
//
// It is test support: only tests import it.
package apitest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// Mux collects the methods registered with it; registering one twice
// panics, as a front-end does.
type Mux map[string]api.Handler

var _ api.PersonMux = Mux(nil)

// Handle registers h for method.
func (mx Mux) Handle(method string, h api.Handler) {
	if _, dup := mx[method]; dup {
		panic("registered twice: " + method)
	}
	mx[method] = h
}

// persons are the methods registered with HandlePerson, by any Mux.
var persons sync.Map

// HandlePerson registers h for method, one only a person may call
// (Person says so).
func (mx Mux) HandlePerson(method string, h api.Handler) {
	mx.Handle(method, h)
	persons.Store(method, true)
}

// Person says method was registered as one only a person may call.
func Person(method string) bool {
	_, ok := persons.Load(method)
	return ok
}

// Start hands a call of method with params (encoded as JSON unless nil)
// to its handler and returns it, answered or not. The test fails if method
// is not registered.
func (mx Mux) Start(t testing.TB, method string, params any) *Call {
	t.Helper()
	return mx.StartAs(t, api.Origin{By: api.ByControl}, method, params)
}

// StartAs is Start for a call whose front-end says it came from o.
func (mx Mux) StartAs(t testing.TB, o api.Origin, method string, params any) *Call {
	t.Helper()
	h, ok := mx[method]
	if !ok {
		t.Fatalf("%s is not registered", method)
	}
	c := NewCall(method, nil)
	c.origin = o
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			t.Fatalf("encoding the params of %s: %v", method, err)
		}
		c.params = b
	}
	h(c)
	return c
}

// Call is an api.Call that keeps its first answer; later answers are
// ignored. Close is its client going away.
type Call struct {
	method   string
	params   json.RawMessage
	origin   api.Origin
	once     sync.Once
	answered chan struct{} // closed by the first answer
	result   json.RawMessage
	err      *api.Error

	mu      sync.Mutex
	onClose []func()
	closed  bool
	pushed  []Pushed
	// Hold, when set, holds every pushed line's taken until Release: a
	// client that does not read.
	Hold     bool
	heldBack []func(bool)
}

// Pushed is one line a StreamCall pushed.
type Pushed struct {
	Event string
	Data  json.RawMessage
}

var (
	_ api.Call       = (*Call)(nil)
	_ api.StreamCall = (*Call)(nil)
	_ api.OriginCall = (*Call)(nil)
)

// Push keeps the line; it is taken at once (true) unless Hold is set or
// the client is gone (false).
func (c *Call) Push(event string, data []byte, taken func(bool)) {
	c.mu.Lock()
	if c.closed || c.Answered() {
		c.mu.Unlock()
		taken(false)
		return
	}
	c.pushed = append(c.pushed, Pushed{Event: event, Data: append(json.RawMessage(nil), data...)})
	if c.Hold {
		c.heldBack = append(c.heldBack, taken)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	taken(true)
}

// Release takes the lines held back (Hold), and stops holding.
func (c *Call) Release() {
	c.mu.Lock()
	fs := c.heldBack
	c.heldBack, c.Hold = nil, false
	c.mu.Unlock()
	for _, f := range fs {
		f(true)
	}
}

// Lines returns the lines pushed so far.
func (c *Call) Lines() []Pushed {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Pushed(nil), c.pushed...)
}

// NewCall is an unanswered call of method with params as they came on the
// wire (nil: none); its client is there, a control client of no known pid
// (SetOrigin says otherwise).
func NewCall(method string, params json.RawMessage) *Call {
	return &Call{method: method, params: params, origin: api.Origin{By: api.ByControl}, answered: make(chan struct{})}
}

// SetOrigin makes o the call's origin (before its handler has it).
func (c *Call) SetOrigin(o api.Origin) { c.origin = o }

// Origin is what SetOrigin set.
func (c *Call) Origin() api.Origin { return c.origin }

// NewClosedCall is NewCall for a call whose client has already gone: what
// it registers with OnClose runs at once.
func NewClosedCall(method string, params json.RawMessage) *Call {
	c := NewCall(method, params)
	c.closed = true
	return c
}

// Method is the method called.
func (c *Call) Method() string { return c.method }

// Decode is the control socket's: the same messages.
func (c *Call) Decode(v any) error {
	if e := wire.DecodeParams(wire.Request{Method: c.method, Params: c.params}, v); e != nil {
		return &api.Error{Code: e.Code, Message: e.Message}
	}
	return nil
}

// Respond answers with result, unless the call is answered already.
func (c *Call) Respond(result any) {
	c.once.Do(func() {
		b, err := json.Marshal(result)
		if err != nil {
			c.err = api.Errorf(api.CodeInternal, "encoding the result: %v", err)
		}
		c.result = b
		close(c.answered)
	})
}

// Fail answers with err, unless the call is answered already; an error
// that is no *api.Error becomes CodeInternal.
func (c *Call) Fail(err error) {
	c.once.Do(func() {
		if !errors.As(err, &c.err) {
			c.err = api.Errorf(api.CodeInternal, "not an *api.Error: %v", err)
		}
		close(c.answered)
	})
}

// OnClose registers f to run when the client goes away (Close) while the
// call is unanswered; once the client is gone, f runs at once.
func (c *Call) OnClose(f func()) {
	c.mu.Lock()
	if !c.closed {
		c.onClose = append(c.onClose, f)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	f()
}

// Close is the client going away: the funcs registered with OnClose run,
// on the caller's goroutine, unless the call is answered.
func (c *Call) Close() {
	c.mu.Lock()
	c.closed = true
	fs := c.onClose
	c.onClose = nil
	held := c.heldBack
	c.heldBack = nil
	c.mu.Unlock()
	for _, f := range held {
		f(false)
	}
	if !c.Answered() {
		for _, f := range fs {
			f()
		}
	}
}

// Done is closed by the call's first answer.
func (c *Call) Done() <-chan struct{} { return c.answered }

// Answered says whether the call is answered.
func (c *Call) Answered() bool {
	select {
	case <-c.answered:
		return true
	default:
		return false
	}
}

// Result is the answer's result as JSON: nil while the call is unanswered
// or if it failed.
func (c *Call) Result() json.RawMessage {
	if !c.Answered() {
		return nil
	}
	return c.result
}

// Err is the answer's error: nil while the call is unanswered or if it
// succeeded.
func (c *Call) Err() *api.Error {
	if !c.Answered() {
		return nil
	}
	return c.err
}

// Wait waits up to timeout for the call's answer and returns it; the test
// fails if none comes.
func (c *Call) Wait(t testing.TB, timeout time.Duration) (json.RawMessage, *api.Error) {
	t.Helper()
	select {
	case <-c.answered:
		return c.result, c.err
	case <-time.After(timeout):
		t.Fatalf("%s not answered after %v", c.method, timeout)
		return nil, nil
	}
}
