package sockserve

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

// Supervisor is a front-end's connections supervisor: one actor (its
// kind: "hooks", "pods", "streams") whose children are the front-end's
// connection actors, one a connection, and the registry that lists them.
// A Server given a System makes its own; an HTTP front-end makes one for
// its long-lived streams (Stream).
//
// A connection actor owns its connection: its reads and writes run on one
// goroutine the actor starts (the front-end's Serve, or an HTTP handler
// for a stream), which tells the actor how it ended in a message; the
// actor never blocks. A panic on that goroutine is the actor's panic
// (actor.panicked, the actor stopped): it costs that connection alone.
// When the actor stops, for whatever cause, its socket is closed (a
// stream's context cancelled).
type Supervisor struct {
	sys *actors.System
	ref actors.Ref
	log zerolog.Logger

	mu     sync.Mutex
	conns  map[*Conn]struct{}
	closed bool
	// wg counts every stream's actor and goroutine (a Server's connections
	// count in the Server's own).
	wg sync.WaitGroup
}

// NewSupervisor spawns a connections supervisor, a top-level actor of
// kind and id (restarted on a panic: it holds nothing but its children).
func NewSupervisor(sys *actors.System, kind, id string, log zerolog.Logger) (*Supervisor, error) {
	if sys == nil {
		return nil, errors.New("sockserve: no actor system for the connections supervisor")
	}
	sup := &Supervisor{sys: sys, log: log, conns: map[*Conn]struct{}{}}
	ref, err := sys.Spawn(actors.Props{Kind: kind, ID: id, OnPanic: actors.Restart, ListMax: api.MaxListedConns,
		New: func() actors.Actor { return &supActor{sup: sup} }})
	if err != nil {
		return nil, fmt.Errorf("starting the %s connections supervisor: %w", kind, err)
	}
	sup.ref = ref
	return sup, nil
}

// Ref is the supervisor's actor.
func (sup *Supervisor) Ref() actors.Ref { return sup.ref }

// List returns at most max of the connections open now, the oldest
// first, and how many are open.
func (sup *Supervisor) List(max int) ([]api.ConnInfo, int) {
	sup.mu.Lock()
	all := make([]*Conn, 0, len(sup.conns))
	for c := range sup.conns {
		all = append(all, c)
	}
	sup.mu.Unlock()
	slices.SortFunc(all, func(a, b *Conn) int { return a.since.Compare(b.since) })
	n := len(all)
	if max >= 0 && len(all) > max {
		all = all[:max]
	}
	out := make([]api.ConnInfo, 0, len(all))
	for _, c := range all {
		out = append(out, c.Info())
	}
	return out, n
}

// Open counts the connections open now.
func (sup *Supervisor) Open() int {
	sup.mu.Lock()
	defer sup.mu.Unlock()
	return len(sup.conns)
}

// Stop stops the supervisor and every connection actor left (their
// sockets closed, their streams cancelled) and waits for the streams'
// goroutines, at most until ctx ends.
func (sup *Supervisor) Stop(ctx context.Context) error {
	sup.mu.Lock()
	sup.closed = true
	sup.mu.Unlock()
	err := sup.sys.Stop(ctx, sup.ref)
	// Connections whose actor never started (their spawn still queued
	// when the supervisor stopped) end here.
	sup.mu.Lock()
	left := make([]*Conn, 0, len(sup.conns))
	for c := range sup.conns {
		left = append(left, c)
	}
	sup.mu.Unlock()
	for _, c := range left {
		if !c.hasRef() {
			c.finish()
		}
	}
	done := make(chan struct{})
	go func() { sup.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("waiting for the streams to end: %w", ctx.Err())
		}
	}
	return err
}

func (sup *Supervisor) closing() bool {
	sup.mu.Lock()
	defer sup.mu.Unlock()
	return sup.closed
}

// start registers c and asks the supervisor actor for its actor. c.wg
// holds one token for it already; finish releases it.
func (sup *Supervisor) start(c *Conn) {
	sup.mu.Lock()
	closed := sup.closed
	if !closed {
		sup.conns[c] = struct{}{}
	}
	sup.mu.Unlock()
	if closed {
		c.finish()
		return
	}
	sup.sys.Send(sup.ref, spawnConn{c})
}

// Stream makes a connection actor for a long-lived HTTP stream of kind
// from address (its peer). The handler serving the stream is the
// connection's goroutine: it runs the stream in ctx (cancelled when the
// actor stops: the supervisor stopping, the daemon closing) and ends with
// Stream.End, in a defer, which also carries a panic of the handler to
// the actor.
func (sup *Supervisor) Stream(ctx context.Context, kind, address string) (*Stream, context.Context, error) {
	ctx, cancel := context.WithCancel(ctx)
	c := &Conn{Seq: seqs.next(), kind: kind, addr: address, since: time.Now(), cancel: cancel,
		sup: sup, wg: &sup.wg, running: make(chan struct{})}
	c.id = "s" + strconv.FormatInt(c.Seq, 10)
	sup.wg.Add(2) // the actor's token and the handler's
	sup.start(c)
	return &Stream{c: c}, ctx, nil
}

// Stream is one long-lived HTTP stream's hold on its actor.
type Stream struct {
	c    *Conn
	once sync.Once
}

// Conn is the stream's connection (its queued bytes, its info).
func (s *Stream) Conn() *Conn { return s.c }

// End tells the stream's actor its handler is done: recovered is what
// the handler recovered (nil: it returned). A panic is the actor's
// (actor.panicked) and End then aborts the response (http.ErrAbortHandler
// is the caller's to panic with: End returns true).
func (s *Stream) End(recovered any) (panicked bool) {
	s.once.Do(func() {
		c := s.c
		var msg any = served{}
		if recovered != nil {
			c.sup.log.Error().Str("stack", string(debug.Stack())).Str("conn", c.kind+"/"+c.id).
				Msg("sockserve: a stream's handler panicked; the stream alone ends")
			msg, panicked = panickedMsg{v: recovered}, true
		}
		c.tell(msg)
		c.wg.Done()
	})
	return panicked
}

// seqs numbers streams (a Server numbers its own connections).
var seqs seqCounter

type seqCounter struct {
	mu sync.Mutex
	n  int64
}

func (s *seqCounter) next() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.n
}

// Activate is the first message of a connection actor a front-end's own
// (Adopt), sent once its spawn is recorded: nothing that may stop it
// should start before.
type Activate struct{}

// Adopt asks the supervisor to spawn p, a front-end's own connection
// actor (the control socket's conn, whose Receive reads its lines), as
// one of its connections, and then to send it Activate. failed is called,
// from the supervisor's goroutine, when it cannot be spawned. The
// front-end lists such connections itself.
func (sup *Supervisor) Adopt(p actors.Props, failed func(error)) {
	sup.sys.Send(sup.ref, adopt{p, failed})
}

// Messages of the supervisor and connection actors.
type (
	adopt struct {
		p      actors.Props
		failed func(error)
	}
	spawnConn   struct{ c *Conn }
	activate    struct{}
	served      struct{}
	panickedMsg struct{ v any }
)

// supActor is the supervisor actor.
type supActor struct{ sup *Supervisor }

func (a *supActor) Receive(cx *actors.Context) {
	if m, ok := cx.Message().(adopt); ok {
		ref, err := cx.Spawn(m.p)
		if err != nil {
			m.failed(err)
			return
		}
		cx.Send(ref, Activate{})
		return
	}
	m, ok := cx.Message().(spawnConn)
	if !ok {
		return
	}
	c := m.c
	ref, err := cx.Spawn(actors.Props{Kind: c.kind, ID: c.id, OnPanic: actors.Stop,
		Info: func() any { return c.Info() }, New: func() actors.Actor { return &connActor{c: c} }})
	if err != nil {
		a.sup.log.Error().Err(err).Str("conn", c.kind+"/"+c.id).Msg("sockserve: spawning a connection actor")
		c.finish()
		return
	}
	// Activated only once Spawn has returned: an actor stopping while its
	// spawn is still being recorded confuses the registry (as control's).
	cx.Send(ref, activate{})
}

// connActor is one connection.
type connActor struct {
	c     *Conn
	links []actors.Ref
}

func (a *connActor) Receive(cx *actors.Context) {
	c := a.c
	switch m := cx.Message().(type) {
	case activate:
		c.setRef(cx.Self())
		c.markRunning()
		if c.cancel != nil {
			return // a stream: its handler runs already
		}
		if c.srv.Closing() {
			cx.StopSelf()
			return
		}
		c.wg.Add(1)
		go c.loop(cx.System(), cx.Self())
	case served:
		cx.StopSelf()
	case panickedMsg:
		panic(m.v)
	case actors.Link:
		cx.Watch(m.Ref)
		a.links = append(a.links, m.Ref)
	case actors.Terminated:
		for _, l := range a.links {
			if l.Equal(m.Who) && c.linked != nil {
				c.linked(c, m.Who)
			}
		}
	case actors.Stopped:
		c.finish()
	}
}

// loop is a socket connection's goroutine: the front-end's Serve, whose
// end or panic it tells the actor.
func (c *Conn) loop(sys *actors.System, self actors.Ref) {
	defer c.wg.Done()
	var msg any = served{}
	defer func() { sys.Send(self, msg) }()
	defer func() {
		r := recover()
		if r == nil {
			if c.srv.opts.ServeCloses {
				// Serve handed the socket on (a runner actor took it):
				// the actor stops without closing it.
				c.handedOff.Store(true)
			}
			return
		}
		msg = panickedMsg{v: r}
		c.srv.log.Error().Str("stack", string(debug.Stack())).Str("conn", c.kind+"/"+c.id).
			Msg(c.srv.opts.Component + ": a connection's goroutine panicked; the connection alone ends")
		if c.srv.opts.Panicked != nil {
			func() {
				defer func() { recover() }()
				c.srv.opts.Panicked(c)
			}()
		}
	}()
	c.srv.opts.Serve(c)
}

// tell sends msg to the connection's actor once it has one.
func (c *Conn) tell(msg any) {
	<-c.running
	c.sup.sys.Send(c.actorRef(), msg)
}

func (c *Conn) markRunning() { c.runOnce.Do(func() { close(c.running) }) }

func (c *Conn) setRef(r actors.Ref) {
	c.mu.Lock()
	c.ref = r
	c.mu.Unlock()
}

func (c *Conn) hasRef() bool { return !c.actorRef().IsZero() }

func (c *Conn) actorRef() actors.Ref {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ref
}

// Ref is the connection's actor (zero before it runs, and for a Server
// without a System).
func (c *Conn) Ref() actors.Ref { return c.actorRef() }

// Info is what frontend.list and the tree show of the connection.
func (c *Conn) Info() api.ConnInfo {
	return api.ConnInfo{Kind: c.kind, ID: c.id, Pid: c.Peer.Pid, Address: c.addr, Since: c.since,
		AgeMs: time.Since(c.since).Milliseconds(), QueuedBytes: c.queued.Load()}
}

// Write writes b within timeout, counting it queued until the socket has
// taken it.
func (c *Conn) Write(b []byte, timeout time.Duration) (int, error) {
	n := int64(len(b))
	c.queued.Add(n)
	c.NC.SetWriteDeadline(time.Now().Add(timeout))
	k, err := c.NC.Write(b)
	c.queued.Add(-n)
	return k, err
}

// Queued counts bytes as queued (negative: taken), for a stream whose
// writes are the handler's.
func (c *Conn) Queued(n int64) { c.queued.Add(n) }

// finish is the end of a connection with an actor, run once: its socket
// closed (a stream cancelled), unregistered, its token released.
func (c *Conn) finish() {
	c.finishOnce.Do(func() {
		// Unlisted before its peer sees it closed.
		if c.sup != nil {
			c.sup.mu.Lock()
			delete(c.sup.conns, c)
			c.sup.mu.Unlock()
		}
		if c.srv != nil {
			c.srv.forget(c)
		}
		if c.cancel != nil {
			c.cancel()
		}
		if c.NC != nil && !c.handedOff.Load() {
			c.NC.Close()
		}
		c.markRunning() // never ran: a stream's End must not wait
		c.wg.Done()
	})
}
