package control

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// method is one entry of the method table: one of the protocol's own
// methods, served with the connection's actor at hand, or one a domain
// registered with Handle.
type method struct {
	own    func(c *actors.Context, call *Call)
	domain api.Handler
	// person: only a person may call it (HandlePerson): refused to a
	// process the daemon started.
	person bool
}

// ownMethods are the protocol's own methods: the session and the event
// subscription of the connection. They answer before they return and keep
// no reference to their call.
var ownMethods = map[string]func(c *actors.Context, call *Call){
	"connect":            connect,
	"ping":               ping,
	"disconnect":         disconnect,
	"events.subscribe":   subscribe,
	"events.unsubscribe": unsubscribe,
	// Loopr's real client (loopr.go): its handshake and its subscription.
	"initialize": initialize,
	"subscribe":  looprSubscribe,
}

// ownCalls recycles the calls of the protocol's own methods.
var ownCalls = sync.Pool{New: func() any { return new(Call) }}

var _ api.PersonMux = (*Server)(nil)

// Handle registers h to serve method on every connection. Methods are
// registered before Serve; registering one twice (the protocol's own
// included) or after Serve is a programming error and panics.
func (s *Server) Handle(name string, h api.Handler) { s.handle(name, h, false) }

// HandlePerson registers h as Handle does, as a method only a person may
// call: a peer that is a process the daemon started (proc.StartedRefusal
// on its SO_PEERCRED pid) is refused it, CodeUnauthorized, with
// conn.refused naming the method; Invoke runs its caller's Origin.Admit
// first and refuses it without one.
func (s *Server) HandlePerson(name string, h api.Handler) { s.handle(name, h, true) }

func (s *Server) handle(name string, h api.Handler, person bool) {
	if name == "" || h == nil {
		panic("control: Handle needs a method name and a handler")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving || s.closed {
		panic(fmt.Sprintf("control: Handle(%q) called after Serve", name))
	}
	if _, dup := s.methods[name]; dup {
		panic(fmt.Sprintf("control: method %q registered twice", name))
	}
	s.methods[name] = method{domain: h, person: person}
}

// Result and param shapes of the protocol's own methods.
type (
	connectParams struct {
		Version string `json:"version"`
	}
	connectResult struct {
		SessionID string `json:"session_id"`
		State     string `json:"state"`
		Version   string `json:"version,omitempty"` // the daemon's
	}
	pongResult struct {
		Pong bool `json:"pong"`
	}
	subscribeParams struct {
		Kinds []string `json:"kinds,omitempty"`
	}
)

// rawResult is a result already encoded as JSON (the protocol's own
// constant answers), written as it is.
type rawResult []byte

var (
	emptyResult = rawResult(`{}`)
	pongJSON    = rawResult(`{"pong":true}`)
)

// handle parses one request line and hands it to its method.
func (a *connActor) handle(c *actors.Context, line []byte) {
	cn := a.cn
	req, perr := wire.ParseRequest(line)
	if perr != nil {
		if perr.Code == wire.CodeParseError || perr.Code == wire.CodeInvalidRequest {
			a.protocolError(perr)
		}
		cn.respond(req.ID, nil, perr)
		return
	}
	m, ok := cn.srv.methods[req.Method]
	switch {
	case !ok:
		cn.respond(req.ID, nil, wire.Errorf(wire.CodeMethodNotFound, "method not found: %s", req.Method))
	case m.own != nil:
		// They never keep their call: it goes back to the pool.
		call := ownCalls.Get().(*Call)
		call.reset(cn, req)
		m.own(c, call)
		call.reset(nil, wire.Request{})
		ownCalls.Put(call)
	case m.person && cn.refusedPerson(req.Method):
		cn.respond(req.ID, nil, wire.Errorf(wire.CodeUnauthorized, "%s is refused to this connection: only a person may answer an approval, and its peer is a process this daemon started", req.Method))
	default:
		call := &Call{}
		call.reset(cn, req)
		callDomain(m.domain, call)
		if !call.answered.Load() {
			cn.track(call) // it answers later
		}
	}
}

// callDomain runs a domain's method. A panic in it first answers the call
// (an internal error: the client is told), then is this conn actor's:
// actor.panicked, and the connection alone ends.
func callDomain(f func(api.Call), call *Call) {
	defer func() {
		if r := recover(); r != nil {
			call.Fail(wire.Errorf(wire.CodeInternal, "internal error: the method failed; the connection ends"))
			panic(r)
		}
	}()
	f(call)
}

func connect(_ *actors.Context, call *Call) {
	var p connectParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	cn := call.cn
	cn.ensureSession()
	call.Respond(connectResult{SessionID: cn.session, State: "ready", Version: cn.srv.opts.Version})
}

// ensureSession gives the connection its session id (connect, initialize)
// if it has none yet. Actor only.
func (cn *conn) ensureSession() {
	if cn.session == "" {
		cn.session = "s-" + strconv.FormatUint(cn.srv.sessions.Add(1), 10) + "-" + api.RandomHex(4)
	}
}

func ping(_ *actors.Context, call *Call) {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return
	}
	call.Respond(pongJSON)
}

func disconnect(c *actors.Context, call *Call) {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return
	}
	call.Respond(emptyResult)
	call.cn.setReason(ReasonClientDisconnect)
	c.StopSelf()
}

func subscribe(_ *actors.Context, call *Call) {
	var p subscribeParams
	if err := call.Decode(&p); err != nil {
		call.Fail(err)
		return
	}
	for _, k := range p.Kinds {
		if k == "" {
			call.Fail(api.Errorf(api.CodeInvalidParams, "invalid params for events.subscribe: empty kind"))
			return
		}
	}
	cn := call.cn
	if cn.srv.bus == nil {
		call.Fail(api.Errorf(api.CodeInternal, "events are not available"))
		return
	}
	// Subscribe while the answer is being queued: no event can be queued
	// between them, so the client gets {} and then every matching event
	// emitted after it.
	call.respondThen(emptyResult, func() { cn.subscribe(p.Kinds) })
}

func unsubscribe(_ *actors.Context, call *Call) {
	if err := call.Decode(&api.NoParams{}); err != nil {
		call.Fail(err)
		return
	}
	call.cn.unsubscribe()
	call.Respond(emptyResult)
}

// refusedPerson says the connection's peer may not call method, one only
// a person may call: it is a process the daemon started. conn.refused
// says so; the connection stays.
func (cn *conn) refusedPerson(method string) bool {
	err := proc.StartedRefusal(cn.peer.Pid)
	if err == nil {
		return false
	}
	cn.srv.emit(eventlog.ConnRefused{Socket: cn.srv.opts.Path, Pid: cn.peer.Pid, UID: cn.peer.UID, Reason: err.Error(),
		Method: method})
	return true
}
