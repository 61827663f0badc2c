package control

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

	"github.com/orchestrd/orchestrd/api"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/proc"
	"github.com/orchestrd/orchestrd/supervisor/sockserve"
	"github.com/orchestrd/orchestrd/wire"
)

// Overflow policies for subscribers that fall behind.
const (
	OverflowDropOldest = "drop_oldest"
	OverflowDisconnect = "disconnect"
)

// Defaults for Options fields left zero.
const (
	DefaultSubscriberQueue = 1024
)

// Tunables that are not options.
const (
	// maxInFlight bounds the lines a connection's reader has handed to the
	// conn actor that the actor has not handled yet (at most half of
	// SubscriberQueue).
	maxInFlight = 32
	// refuseTimeout bounds writing the refusal line to a refused peer.
	refuseTimeout = time.Second
)

// Close reasons reported in conn.closed.
const (
	ReasonClientDisconnect   = "client_disconnect"                // the disconnect method
	ReasonClientClosed       = "client_closed"                    // EOF from the client
	ReasonReadError          = "read_error"                       // reading failed (reset, ...)
	ReasonWriteError         = sockserve.ReasonWriteError         // writing failed (client gone, flush timeout)
	ReasonLineTooLong        = "line_too_long"                    // a line over MaxLine
	ReasonResponseQueueFull  = sockserve.ReasonResponseQueueFull  // unread responses alone exceeded the bound
	ReasonSubscriberOverflow = sockserve.ReasonSubscriberOverflow // Overflow "disconnect"
	ReasonDaemonStopping     = "daemon_stopping"                  // Server.Close
	ReasonActorStopped       = "actor_stopped"                    // the conn actor stopped for another cause (panic)
)

// Options configures New.
type Options struct {
	// Path is the socket path. Its directory is created if needed and forced
	// to mode 0700; the socket is made as proc.ListenUnix makes it (0600
	// from the start; a stale socket file is replaced, a live one or
	// anything that is not a socket is an error).
	Path string
	// MaxLine bounds one request line; default wire.DefaultMaxLine.
	MaxLine int
	// SubscriberQueue bounds the lines queued for one connection (responses
	// and events); default 1024.
	SubscriberQueue int
	// Overflow says what happens to a connection whose queued events exceed
	// SubscriberQueue: "drop_oldest" (default) or "disconnect".
	Overflow string
	Version  string
	// Bus is where conn.* and subscriber.* events go and where
	// events.subscribe subscribes. Nil disables both.
	Bus *eventlog.Bus
	// System hosts the "conns" supervisor actor and one "conn" actor per
	// connection.
	System *actors.System
	Logger zerolog.Logger
}

// Server is the control socket.
type Server struct {
	opts     Options
	inFlight int          // lines a reader may hand over unhandled
	qopts    QueueOptions // every connection's outbound queue
	ln       *net.UnixListener
	sys      *actors.System
	bus      *eventlog.Bus
	log      zerolog.Logger
	connsRef actors.Ref
	// methods is the method table: read without a lock once Serve runs,
	// written (Handle) only before.
	methods map[string]method

	open, seen atomic.Int64
	sessions   atomic.Uint64

	mu         sync.Mutex
	closed     bool
	serving    bool
	acceptDone chan struct{} // closed when Serve's accept loop has returned
	conns      map[*conn]struct{}

	// wg counts every goroutine the server starts: one token per admitted
	// connection, held until its reader and writer goroutines have ended.
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New validates opts, listens on opts.Path and spawns the conns supervisor.
func New(opts Options) (*Server, error) {
	if opts.Path == "" {
		return nil, errors.New("control: Options.Path is empty")
	}
	if opts.System == nil {
		return nil, errors.New("control: Options.System is nil")
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = wire.DefaultMaxLine
	}
	if opts.SubscriberQueue <= 0 {
		opts.SubscriberQueue = DefaultSubscriberQueue
	}
	switch opts.Overflow {
	case "":
		opts.Overflow = OverflowDropOldest
	case OverflowDropOldest, OverflowDisconnect:
	default:
		return nil, fmt.Errorf("control: overflow policy %q: want %q or %q", opts.Overflow, OverflowDropOldest, OverflowDisconnect)
	}
	ln, err := listen(opts.Path)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:    opts,
		ln:      ln,
		sys:     opts.System,
		bus:     opts.Bus,
		log:     opts.Logger.With().Str("component", "control").Logger(),
		conns:   map[*conn]struct{}{},
		methods: make(map[string]method, len(ownMethods)),
	}
	for name, f := range ownMethods {
		s.methods[name] = method{own: f}
	}
	// Requests answered at once can't overflow the queue: a reader hands
	// over a line only while fewer than RespHigh responses are queued, and
	// at most inFlight lines are unhandled.
	s.inFlight = min(maxInFlight, max(1, opts.SubscriberQueue/2))
	s.qopts = QueueOptions{Lines: opts.SubscriberQueue, DropOldest: opts.Overflow == OverflowDropOldest,
		RespHigh: max(1, opts.SubscriberQueue-s.inFlight)}
	ref, err := s.sys.Spawn(actors.Props{Kind: "conns", New: func() actors.Actor { return &connsActor{s: s} }})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	s.connsRef = ref
	return s, nil
}

// listen prepares the socket's directory, clears a stale socket and listens.
func listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control: creating socket directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control: securing socket directory: %w", err)
	}
	ln, err := proc.ListenUnix(path)
	if errors.Is(err, proc.ErrInUse) {
		return nil, fmt.Errorf("control: another daemon is listening on %s", path)
	}
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	return ln, nil
}

// Metrics counts the connections open now and ever admitted.
func (s *Server) Metrics() api.ConnMetrics {
	return api.ConnMetrics{Connections: s.open.Load(), ConnectionsSeen: s.seen.Load()}
}

// Serve accepts connections until ctx is done or Close is called, and then
// returns nil. Once ctx is done no more connections are accepted; the open
// ones stay until Close.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if s.serving {
		s.mu.Unlock()
		return errors.New("control: Serve called twice")
	}
	s.serving = true
	done := make(chan struct{})
	s.acceptDone = done
	s.mu.Unlock()
	defer close(done)

	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	var backoff time.Duration
	for {
		nc, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || s.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if isTemporary(err) {
				// Out of file descriptors and the like: back off rather than spin.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn().Err(err).Dur("retry_in", backoff).Msg("control: accept failed")
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
				continue
			}
			return fmt.Errorf("control: accept: %w", err)
		}
		backoff = 0
		s.admit(nc)
	}
}

func isTemporary(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) ||
		errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EINTR)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// admit checks the peer and hands an accepted connection to the conns actor.
func (s *Server) admit(nc *net.UnixConn) {
	peer, err := proc.CheckSameUID(nc)
	if err != nil {
		s.refuse(nc, peer.Pid, peer.UID, "refused: "+err.Error())
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	n := s.seen.Add(1)
	cn := newConn(s, nc, "c"+strconv.FormatInt(n, 10))
	s.conns[cn] = struct{}{}
	s.open.Add(1)
	s.wg.Add(1) // the conn's token; see conn.release
	s.mu.Unlock()
	s.emit(ConnOpened{ConnID: cn.id, Socket: s.opts.Path, Pid: peer.Pid, UID: peer.UID})
	s.sys.Send(s.connsRef, spawnConn{cn})
}

// refuse answers a refused peer with one error line and closes it.
func (s *Server) refuse(nc *net.UnixConn, pid int32, uid uint32, msg string) {
	line, _ := wire.AppendResponse(nil, 0, nil, &wire.Error{Code: wire.CodeUnauthorized, Message: msg})
	nc.SetWriteDeadline(time.Now().Add(refuseTimeout))
	nc.Write(line)
	nc.Close()
	s.log.Warn().Int32("pid", pid).Uint32("uid", uid).Msg("control: " + msg)
	s.emit(eventlog.ConnRefused{Socket: s.opts.Path, Pid: pid, UID: uid, Reason: msg})
}

func (s *Server) emit(ev eventlog.Event) {
	if s.bus != nil {
		s.bus.Emit(ev)
	}
}

func (s *Server) forget(cn *conn) {
	s.mu.Lock()
	delete(s.conns, cn)
	s.mu.Unlock()
	s.open.Add(-1)
}

// Close stops accepting, closes every connection (conn.closed reason
// "daemon_stopping"; calls still unanswered are answered with
// CodeShuttingDown), stops the conn actors and waits for every goroutine the
// server started. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.ln.Close()
	s.mu.Lock()
	done := s.acceptDone
	s.mu.Unlock()
	if done != nil {
		<-done // no admit runs after this
	}

	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for cn := range s.conns {
		conns = append(conns, cn)
	}
	s.mu.Unlock()
	for _, cn := range conns {
		cn.setReason(ReasonDaemonStopping)
		cn.unsubscribe() // no more events from now on
	}
	all := append([]*conn(nil), conns...)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := s.sys.Stop(ctx, s.connsRef)
	cancel()
	if err != nil {
		err = fmt.Errorf("control: %w", err)
	}

	// Connections whose actor never started (their spawn request was still
	// queued when the conns actor stopped) are finished here.
	s.mu.Lock()
	conns = conns[:0]
	for cn := range s.conns {
		conns = append(conns, cn)
	}
	s.mu.Unlock()
	for _, cn := range conns {
		cn.finish(nil)
	}
	// Whatever happened above (an actor that did not stop in time
	// included), every socket is closed now, so no reader or writer
	// goroutine can stay blocked and the wait below always ends.
	if err != nil {
		s.log.Error().Err(err).Msg("control: connection actors did not stop in time; closing their sockets")
		s.mu.Lock()
		for cn := range s.conns {
			cn.nc.Close()
		}
		s.mu.Unlock()
		for _, cn := range all {
			cn.nc.Close()
		}
	}
	s.wg.Wait()
	return err
}

// connsActor supervises the conn actors.
type connsActor struct{ s *Server }

type spawnConn struct{ cn *conn }

func (a *connsActor) Receive(c *actors.Context) {
	m, ok := c.Message().(spawnConn)
	if !ok {
		return
	}
	cn := m.cn
	// Inline: the conn actor runs on the goroutine that sends to it, nearly
	// always its own reader, which saves a goroutine hand-off per request;
	// its handlers never block.
	ref, err := c.Spawn(actors.Props{Kind: "conn", ID: cn.id, OnPanic: actors.Stop, Inline: true,
		New: func() actors.Actor { return &connActor{cn: cn} }})
	if err != nil {
		a.s.log.Error().Err(err).Str("conn_id", cn.id).Msg("control: spawning conn actor")
		cn.setReason(ReasonActorStopped)
		cn.finish(nil)
		return
	}
	c.Send(ref, activate{})
}
