package sockserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Defaults of Options fields left zero.
const (
	DefaultMaxConns = 1 << 16
	DefaultGrace    = 2 * time.Second
	refuseTimeout   = time.Second
)

// ListenOptions say where a socket is made.
type ListenOptions struct {
	// Dir, when not zero, is made if needed and forced to this mode
	// (0700 for the daemon's own sockets); zero leaves the directory alone.
	DirMode os.FileMode
	// DirFd, when >= 0 and not zero, is a directory opened without
	// following links (beneath.Dir): the socket is bound in it through
	// /proc/self/fd/N/NAME, so no link put on the path is followed.
	DirFd int
}

// Listen makes the socket at path as proc.ListenUnix does (0600 from the
// start; a stale socket replaced, a live one refused wrapping
// proc.ErrInUse, anything else refused, never removed).
func Listen(path string, o ListenOptions) (*net.UnixListener, error) {
	bind := path
	switch {
	case o.DirFd > 0:
		bind = "/proc/self/fd/" + strconv.Itoa(o.DirFd) + "/" + filepath.Base(path)
	case o.DirMode != 0:
		dir := filepath.Dir(path)
		if err := os.MkdirAll(dir, o.DirMode); err != nil {
			return nil, fmt.Errorf("making the directory of socket %s: %w", path, err)
		}
		if o.DirMode&0o077 == 0 {
			if err := os.Chmod(dir, o.DirMode); err != nil {
				return nil, fmt.Errorf("securing the directory of socket %s: %w", path, err)
			}
		}
	}
	return proc.ListenUnix(bind)
}

// Options configure a Server: what is generic here, and the front-end's
// protocol as functions.
type Options struct {
	// Path is the socket as its users name it (events, logs).
	Path string
	// Component prefixes log messages ("control", "clanker", "reachout").
	Component string
	// MaxConns bounds the connections open at once; one more is refused
	// (conn.refused); 0 is DefaultMaxConns.
	MaxConns int
	// Admit is the front-end's own check of a peer of the daemon's uid
	// (nil: every such peer is served); its error is the refusal's reason.
	Admit func(proc.Peer) error
	// Refusal is the line a refused peer hears (nil: none, it is closed).
	Refusal func(reason string) []byte
	// Serve runs the front-end's protocol on one connection, on a
	// goroutine of its own. Unless ServeCloses, the socket is closed when
	// it returns.
	Serve func(c *Conn)
	// ServeCloses: Serve closes the socket itself, possibly after it
	// returns (an outbound queue flushing its last lines, bounded), or
	// hands it on (a runner actor takes a runner's connection): a
	// connection's actor then stops without closing it, unless Serve
	// panicked.
	ServeCloses bool
	// Interrupt asks a connection to end when the server closes (nil:
	// its read deadline is set to now, so a Serve waiting for a line
	// returns). It must not block.
	Interrupt func(c *Conn)
	// Grace bounds how long Close waits, after Interrupt, for the
	// connections to end before it closes their sockets; 0 is DefaultGrace.
	Grace time.Duration
	// Bus hears conn.refused; nil: no events.
	Bus    *eventlog.Bus
	Logger zerolog.Logger

	// System, when set, makes each connection an actor (of Kind) under a
	// connections supervisor of the server's own (Supervisor, SupervisorID:
	// "hooks", "pods", "handshakes"), Serve its goroutine: see Supervisor.
	// Without one, Serve runs on a goroutine of the server's (the control
	// socket's admit, which hands each connection to its own conn actor).
	System       *actors.System
	Supervisor   string
	SupervisorID string
	Kind         string
	// Panicked, when set, tells the peer its connection ends on a panic
	// (an error line where the protocol has one), on the connection's
	// goroutine after the panic; it must not block long (a write with a
	// deadline).
	Panicked func(c *Conn)
	// Linked is called, from the connection's actor, when an actor linked
	// to it (actors.Link: an approval the hook waits on) stops. It must not
	// block.
	Linked func(c *Conn, gone actors.Ref)
}

// Conn is one admitted connection. NC is the front-end's to read and
// write (through Lines and OutQueue); the server only closes it (Close's
// grace over) and reads its peer.
type Conn struct {
	NC   *net.UnixConn
	Peer proc.Peer
	// Seq numbers the server's connections from 1 in the order admitted.
	Seq int64
	// Value is the front-end's state of the connection, set by Serve
	// before anything else may look at it (Interrupt).
	Value atomic.Value

	kind, id   string
	addr       string // a stream's peer
	since      time.Time
	queued     atomic.Int64
	handedOff  atomic.Bool // Serve returned under ServeCloses: the socket is not the server's to close
	srv        *Server     // nil for a stream
	sup        *Supervisor // nil without actors
	wg         *sync.WaitGroup
	cancel     func() // a stream's
	linked     func(c *Conn, gone actors.Ref)
	running    chan struct{} // closed once the actor runs (or never will)
	runOnce    sync.Once
	finishOnce sync.Once
	mu         sync.Mutex
	ref        actors.Ref
}

// Server is one unix socket served: its accept loops, its registry of
// connections and every goroutine it starts.
type Server struct {
	opts Options
	log  zerolog.Logger

	open, seen atomic.Int64

	mu     sync.Mutex
	closed bool
	lns    map[*net.UnixListener]struct{}
	conns  map[*Conn]struct{}
	wg     sync.WaitGroup
	sup    *Supervisor // with Options.System
}

// stopTimeout bounds Close's wait for the connections supervisor to stop.
const stopTimeout = 10 * time.Second

// New readies a server; Serve gives it a listener. With Options.System it
// spawns the connections supervisor.
func New(opts Options) (*Server, error) {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	s := &Server{opts: opts, log: opts.Logger, lns: map[*net.UnixListener]struct{}{}, conns: map[*Conn]struct{}{}}
	if opts.System != nil {
		if opts.Kind == "" || opts.Supervisor == "" {
			return nil, errors.New("sockserve: Options.System without Kind and Supervisor")
		}
		sup, err := NewSupervisor(opts.System, opts.Supervisor, opts.SupervisorID, opts.Logger)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", opts.Component, err)
		}
		s.sup = sup
	}
	return s, nil
}

// Supervisor is the connections supervisor (nil without Options.System).
func (s *Server) Supervisor() *Supervisor { return s.sup }

// List returns at most max of the connections open now, the oldest
// first, and how many are open.
func (s *Server) List(max int) ([]api.ConnInfo, int) {
	if s.sup != nil {
		return s.sup.List(max)
	}
	return nil, int(s.open.Load())
}

// Open and Seen count the connections open now and ever admitted.
func (s *Server) Open() int64 { return s.open.Load() }
func (s *Server) Seen() int64 { return s.seen.Load() }

// Closing reports whether Close has begun.
func (s *Server) Closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Serve accepts on ln, on a goroutine of the server's, until ln is closed
// (by Close, or by its owner replacing it). A server may serve several
// listeners, one after another or at once. After Close it closes ln.
func (s *Server) Serve(ln *net.UnixListener) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return
	}
	s.lns[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go s.accept(ln)
}

func (s *Server) accept(ln *net.UnixListener) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.Closing() {
				return
			}
			if !temporary(err) {
				s.log.Error().Err(err).Str("socket", s.opts.Path).Msg(s.opts.Component + ": accept failed; no more connections on this socket")
				return
			}
			// Out of file descriptors and the like: back off rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn().Err(err).Dur("retry_in", backoff).Msg(s.opts.Component + ": accept failed")
			t := time.NewTimer(backoff)
			<-t.C
			continue
		}
		backoff = 0
		s.admit(nc)
	}
}

func temporary(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) ||
		errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EINTR) ||
		errors.Is(err, unix.EPROTO) || errors.Is(err, unix.EPERM)
}

// admit checks the peer, registers the connection and starts its
// goroutine.
func (s *Server) admit(nc *net.UnixConn) {
	peer, err := proc.CheckSameUID(nc)
	if err == nil && s.opts.Admit != nil {
		err = s.opts.Admit(peer)
	}
	if err != nil {
		s.refuse(nc, peer, "refused: "+err.Error())
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= s.opts.MaxConns {
		s.mu.Unlock()
		s.refuse(nc, peer, fmt.Sprintf("refused: %d connections are open, the most this socket serves", s.opts.MaxConns))
		return
	}
	c := &Conn{NC: nc, Peer: peer, Seq: s.seen.Add(1), kind: s.opts.Kind, since: time.Now(), srv: s}
	s.conns[c] = struct{}{}
	s.open.Add(1)
	s.wg.Add(1)
	s.mu.Unlock()
	if s.sup == nil {
		go s.run(c)
		return
	}
	c.id = "c" + strconv.FormatInt(c.Seq, 10)
	c.sup, c.wg, c.linked, c.running = s.sup, &s.wg, s.opts.Linked, make(chan struct{})
	s.sup.start(c)
}

// forget unregisters an actor's connection (its finish).
func (s *Server) forget(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.open.Add(-1)
}

func (s *Server) run(c *Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.open.Add(-1)
		if !s.opts.ServeCloses {
			c.NC.Close()
		}
	}()
	s.opts.Serve(c)
}

// refuse answers a refused peer with the front-end's line and closes it.
func (s *Server) refuse(nc *net.UnixConn, p proc.Peer, msg string) {
	if s.opts.Refusal != nil {
		nc.SetWriteDeadline(time.Now().Add(refuseTimeout))
		nc.Write(s.opts.Refusal(msg))
	}
	nc.Close()
	s.log.Warn().Int32("pid", p.Pid).Uint32("uid", p.UID).Msg(s.opts.Component + ": " + msg)
	if s.opts.Bus != nil {
		s.opts.Bus.Emit(eventlog.ConnRefused{Socket: s.opts.Path, Pid: p.Pid, UID: p.UID, Reason: msg})
	}
}

// Conns returns the connections open now.
func (s *Server) Conns() []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

// Close stops accepting (closing every listener still served), asks every
// connection to end (Options.Interrupt), waits at most Options.Grace for
// them, closes the sockets of those left and waits for every goroutine
// the server started. It is idempotent; a second call waits as well.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return
	}
	s.closed = true
	lns := make([]*net.UnixListener, 0, len(s.lns))
	for ln := range s.lns {
		lns = append(lns, ln)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range s.Conns() {
		if s.opts.Interrupt != nil {
			s.opts.Interrupt(c)
		} else {
			c.NC.SetReadDeadline(time.Now())
		}
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(s.opts.Grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		for _, c := range s.Conns() {
			if !c.handedOff.Load() {
				c.NC.Close()
			}
		}
		if s.sup == nil {
			<-done
		}
	}
	if s.sup != nil {
		// Every socket is closed or its Serve returned: the actors stop
		// (and stopping the supervisor ends any that have not yet).
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		if err := s.sup.Stop(ctx); err != nil {
			s.log.Error().Err(err).Msg(s.opts.Component + ": stopping the connections supervisor")
		}
		cancel()
		<-done
	}
}
