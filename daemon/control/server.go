package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orchestrd/orchestrd/api"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/platform/sockserve"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
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
	connsSup *sockserve.Supervisor // "conns": the conn actors' supervisor
	// methods is the method table: read without a lock once Serve runs,
	// written (Handle) only before.
	methods map[string]method

	open, seen atomic.Int64
	sessions   atomic.Uint64

	mu         sync.Mutex
	closed     bool
	serving    bool
	acceptDone chan struct{} // closed by Close: Serve returns
	ss         *sockserve.Server
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
	// Without a System, sockserve only accepts and checks here (New cannot
	// fail): admit hands each connection to the conns actor below, which
	// spawns its conn actor, as sockserve's supervisors do for the others.
	s.ss, _ = sockserve.New(sockserve.Options{Path: opts.Path, Component: "control", Refusal: refusal,
		Serve: s.admit, ServeCloses: true, Bus: opts.Bus, Logger: s.log})
	for name, f := range ownMethods {
		s.methods[name] = method{own: f}
	}
	// Requests answered at once can't overflow the queue: a reader hands
	// over a line only while fewer than RespHigh responses are queued, and
	// at most inFlight lines are unhandled.
	s.inFlight = min(maxInFlight, max(1, opts.SubscriberQueue/2))
	s.qopts = QueueOptions{Lines: opts.SubscriberQueue, DropOldest: opts.Overflow == OverflowDropOldest,
		RespHigh: max(1, opts.SubscriberQueue-s.inFlight)}
	sup, err := sockserve.NewSupervisor(s.sys, "conns", "", s.log)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	s.connsSup = sup
	return s, nil
}

// listen prepares the socket's directory (0700), clears a stale socket
// and listens.
func listen(path string) (*net.UnixListener, error) {
	ln, err := sockserve.Listen(path, sockserve.ListenOptions{DirMode: 0o700})
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
// ones stay until Close. Accepting, its backoff and the peer check are
// platform/sockserve's; admit makes each connection.
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
	s.acceptDone = make(chan struct{})
	s.mu.Unlock()
	s.ss.Serve(s.ln)
	select {
	case <-ctx.Done():
		s.ln.Close()
	case <-s.acceptDone:
	}
	return nil
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// admit hands a connection sockserve accepted and checked to the conns
// actor. It runs on the connection's own sockserve goroutine, which ends
// here: the conn's reader and writer goroutines are the server's own.
func (s *Server) admit(c *sockserve.Conn) {
	nc := c.NC
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	n := s.seen.Add(1)
	cn := newConn(s, nc, "c"+strconv.FormatInt(n, 10))
	cn.peer, cn.since = c.Peer, time.Now()
	s.conns[cn] = struct{}{}
	s.open.Add(1)
	s.wg.Add(1) // the conn's token; see conn.release
	s.mu.Unlock()
	s.emit(ConnOpened{ConnID: cn.id, Socket: s.opts.Path, Pid: c.Peer.Pid, UID: c.Peer.UID})
	// Inline: the conn actor runs on the goroutine that sends to it, nearly
	// always its own reader, which saves a goroutine hand-off per request;
	// its handlers never block.
	s.connsSup.Adopt(actors.Props{Kind: "conn", ID: cn.id, OnPanic: actors.Stop, Inline: true,
		Info: func() any { return cn.info() }, New: func() actors.Actor { return &connActor{cn: cn} }},
		func(err error) {
			s.log.Error().Err(err).Str("conn_id", cn.id).Msg("control: spawning conn actor")
			cn.setReason(ReasonActorStopped)
			cn.finish(nil)
		})
}

// Conns lists at most max of the control connections open now, the
// oldest first, and how many are open.
func (s *Server) Conns(max int) ([]api.ConnInfo, int) {
	s.mu.Lock()
	all := make([]*conn, 0, len(s.conns))
	for cn := range s.conns {
		all = append(all, cn)
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b *conn) int { return a.since.Compare(b.since) })
	n := len(all)
	if len(all) > max {
		all = all[:max]
	}
	out := make([]api.ConnInfo, 0, len(all))
	for _, cn := range all {
		out = append(out, cn.info())
	}
	return out, n
}

// refusal is the line a refused peer hears.
func refusal(msg string) []byte {
	line, _ := wire.AppendResponse(nil, 0, nil, &wire.Error{Code: wire.CodeUnauthorized, Message: msg})
	return line
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
	s.closed = true // no connection registers after this
	conns := make([]*conn, 0, len(s.conns))
	for cn := range s.conns {
		conns = append(conns, cn)
	}
	s.mu.Unlock()
	// Their reason before the interrupt below ends their reads, which
	// would else read as read errors first (seen under load).
	for _, cn := range conns {
		cn.setReason(ReasonDaemonStopping)
	}
	s.ln.Close()
	s.ss.Close() // no admit runs after this
	s.mu.Lock()
	if s.acceptDone != nil {
		close(s.acceptDone) // Serve returns
	}
	s.mu.Unlock()

	for _, cn := range conns {
		cn.unsubscribe() // no more events from now on
	}
	all := append([]*conn(nil), conns...)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := s.connsSup.Stop(ctx)
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
