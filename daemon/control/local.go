package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// Invoke calls a method a domain registered, in the daemon's own process,
// as a client of the control socket would, and waits for its answer: the
// dashboard's way to the same method table (one table, two front-ends).
// params is marshalled to JSON (nil: no params). push, when not nil, makes
// the call an api.StreamCall whose lines go to push, which must call taken
// once it has written the line (true) or cannot (false); nil push refuses
// streamed lines (taken(false)). When ctx ends before the answer, the
// call's OnClose functions run (the method cancels what it holds) and
// Invoke returns ctx's error. The protocol's own methods (ping, connect,
// events.subscribe) are not served: they belong to a connection.
//
// from is who calls (the dashboard: ui and the session), what the method
// reads with api.OriginOf. A method only a person may call (HandlePerson)
// runs from.Admit first, the front-end's check of who stands behind the
// call, and is refused (CodeUnauthorized) when it fails or is not set.
func (s *Server) Invoke(ctx context.Context, from api.Origin, method string, params any, push func(event string, data []byte, taken func(ok bool))) (json.RawMessage, error) {
	return s.invoke(ctx, from, method, params, push, nil)
}

// InvokeRaw is Invoke whose call is also an api.RawPusher: a line the
// method pushes with bytes as they are (job.stream with binary) goes to
// pushRaw, its bytes the call's own until taken runs (as the control
// socket's queue holds a line's).
func (s *Server) InvokeRaw(ctx context.Context, from api.Origin, method string, params any,
	push func(event string, data []byte, taken func(ok bool)),
	pushRaw func(event string, data, raw []byte, taken func(ok bool))) (json.RawMessage, error) {
	return s.invoke(ctx, from, method, params, push, pushRaw)
}

func (s *Server) invoke(ctx context.Context, from api.Origin, method string, params any,
	push func(event string, data []byte, taken func(ok bool)),
	pushRaw func(event string, data, raw []byte, taken func(ok bool))) (json.RawMessage, error) {
	s.mu.Lock()
	m, ok := s.methods[method]
	s.mu.Unlock()
	if !ok || m.domain == nil {
		return nil, api.Errorf(wire.CodeMethodNotFound, "method not found: %s", method)
	}
	if m.person {
		if from.Admit == nil {
			return nil, api.Errorf(api.CodeUnauthorized, "%s: only a person may call it, and this caller's front-end does not check who calls", method)
		}
		if err := from.Admit(); err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) {
				err = &api.Error{Code: api.CodeUnauthorized, Message: method + " refused: " + err.Error()}
			}
			return nil, err
		}
	}
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("encoding the params of %s: %w", method, err)
		}
		raw = b
	}
	from.Admit = nil
	c := &localCall{method: method, params: raw, push: push, pushRaw: pushRaw, origin: from, done: make(chan struct{})}
	m.domain(c)
	select {
	case <-c.done:
		return c.result, c.err
	case <-ctx.Done():
		c.close()
		return nil, fmt.Errorf("calling %s: %w", method, ctx.Err())
	}
}

// localCall is Invoke's api.StreamCall.
type localCall struct {
	method string
	params json.RawMessage
	origin api.Origin
	push   func(event string, data []byte, taken func(ok bool))
	// pushRaw: InvokeRaw's; nil, a raw line goes to push as a JSON piece.
	pushRaw func(event string, data, raw []byte, taken func(ok bool))

	answered atomic.Bool
	done     chan struct{}
	result   json.RawMessage // set before done closes
	err      error

	mu      sync.Mutex
	closed  bool
	onClose []func()
}

var (
	_ api.StreamCall = (*localCall)(nil)
	_ api.OriginCall = (*localCall)(nil)
	_ api.RawPusher  = (*localCall)(nil)
)

func (c *localCall) Method() string { return c.method }

func (c *localCall) Origin() api.Origin { return c.origin }

func (c *localCall) Decode(v any) error {
	if e := wire.DecodeParams(wire.Request{Method: c.method, Params: c.params}, v); e != nil {
		return &api.Error{Code: e.Code, Message: e.Message}
	}
	return nil
}

func (c *localCall) Respond(result any) {
	if !c.answered.CompareAndSwap(false, true) {
		return
	}
	var b []byte
	var err error
	if a, ok := result.(wire.JSONAppender); ok {
		// In one pass, as the socket writes it (json.Marshal would check
		// and compact a record's megabyte of output again).
		if sz, ok := result.(wire.JSONSizer); ok {
			b = make([]byte, 0, sz.JSONSize())
		}
		b = a.AppendJSON(b)
	} else {
		b, err = json.Marshal(result)
	}
	if err != nil {
		c.err = fmt.Errorf("encoding the answer of %s: %w", c.method, err)
	} else {
		c.result = b
	}
	close(c.done)
}

func (c *localCall) Fail(err error) {
	if !c.answered.CompareAndSwap(false, true) {
		return
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		err = &api.Error{Code: wire.CodeInternal, Message: "internal error: " + err.Error()}
	}
	c.err = err
	close(c.done)
}

func (c *localCall) Push(event string, data []byte, taken func(ok bool)) {
	if c.answered.Load() || c.push == nil {
		taken(false)
		return
	}
	c.push(event, data, taken)
}

// PushRaw is api.RawPusher's: to pushRaw as it is (raw stays the
// method's, unchanged until taken runs); without pushRaw, to push as the
// JSON piece it would be without binary.
func (c *localCall) PushRaw(event string, data, raw []byte, taken func(ok bool)) {
	if c.answered.Load() || (c.push == nil && c.pushRaw == nil) {
		taken(false)
		return
	}
	if c.pushRaw == nil {
		p, err := wire.DecodeStreamPiece(data)
		if err != nil {
			taken(false)
			return
		}
		p.Data = raw
		c.push(event, wire.AppendStreamPiece(nil, &p), taken)
		return
	}
	c.pushRaw(event, data, raw, taken)
}

func (c *localCall) OnClose(f func()) {
	c.mu.Lock()
	if !c.closed {
		c.onClose = append(c.onClose, f)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if !c.answered.Load() {
		f()
	}
}

// close is the caller gone: the OnClose functions run, once, unless the
// call was answered.
func (c *localCall) close() {
	c.mu.Lock()
	fs := c.onClose
	c.onClose, c.closed = nil, true
	c.mu.Unlock()
	if c.answered.Load() {
		return
	}
	for _, f := range fs {
		f()
	}
}
