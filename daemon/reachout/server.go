// Package reachout is the daemon's vibe-reachout front-end: it serves the
// hook's unix socket (spec 002) in place of the vibe-reachout bot, so that
// Claude Code's PermissionRequest hook asks orchestrd's approvals. Each
// connection is one request line and one answer line.
package reachout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/platform/sockserve"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// Asker puts a question to the approvals (approvals.Manager).
type Asker interface {
	Ask(approvals.Request, func(api.Approval)) (approvals.Pending, error)
}

// DefaultLineTimeout bounds how long a connection may take to send its
// request line.
const DefaultLineTimeout = time.Minute

// writeTimeout bounds writing the answer line (a few hundred bytes).
const writeTimeout = 10 * time.Second

// closeGrace is how long Close lets connections still waiting hear the
// cancellation's answer before it closes them.
const closeGrace = 2 * time.Second

// Options configures a Server.
type Options struct {
	Path  string // the socket
	Asker Asker
	// Timeout is how long an approval asked through the socket stays
	// pending (the [approvals] timeout capped by the hook's
	// timeout_seconds); 0 is the Asker's default.
	Timeout time.Duration
	// LineTimeout bounds the wait for the request line; 0 is
	// DefaultLineTimeout.
	LineTimeout time.Duration
	Bus         *eventlog.Bus // nil: no events
	Logger      zerolog.Logger
	// CheckEvery is how often the server checks that the socket at Path
	// is still its own (see guard); 0 is DefaultCheckEvery.
	CheckEvery time.Duration
	// System hosts the "hooks" supervisor and one "hook" actor per
	// connection (sockserve), linked to the approval it waits on.
	System *actors.System
}

// DefaultCheckEvery is how often, by default, the server checks that the
// socket at its path is its own.
const DefaultCheckEvery = time.Second

// maxConns bounds the hook connections open at once (each one is a
// pending approval or a request on its way).
const maxConns = 1024

// Server serves the hook socket.
type Server struct {
	opts Options
	log  zerolog.Logger
	wg   sync.WaitGroup // the guard
	stop chan struct{}  // closed by Close: the guard ends
	srv  *sockserve.Server

	mu      sync.Mutex
	ln      *net.UnixListener
	dev     uint64 // the socket file's device and inode, as made
	ino     uint64
	lost    string // what was found at the path and could not be taken back ("": nothing)
	closed  bool
	serving bool
}

// conn is one hook connection.
type conn struct {
	nc      *net.UnixConn
	sc      *sockserve.Conn
	mu      sync.Mutex
	pending approvals.Pending // set once asked
	// answered: the approval's answer came; lost: the approval's actor
	// stopped before it (a panic past its restarts).
	answered, lost atomic.Bool
}

// Start is Listen, then Serve.
func Start(opts Options) (*Server, error) {
	if opts.Asker == nil {
		return nil, errors.New("reachout: no Asker")
	}
	s, err := Listen(opts)
	if err != nil {
		return nil, err
	}
	s.Serve(opts.Asker)
	return s, nil
}

// Listen makes the socket at opts.Path (0600; a stale socket is replaced,
// a live one is left alone) without answering it yet: a hook that
// connects waits until Serve. The daemon listens before it starts any
// sandbox, so that every sandbox can hide the socket (a job or an executor
// can then neither reach it nor replace it). When the socket cannot be
// made it emits reachout.unavailable and returns the error: the caller
// says it (the daemon goes on without the socket, or stops when its
// config asked for it).
func Listen(opts Options) (*Server, error) {
	if opts.LineTimeout <= 0 {
		opts.LineTimeout = DefaultLineTimeout
	}
	if opts.CheckEvery <= 0 {
		opts.CheckEvery = DefaultCheckEvery
	}
	s := &Server{opts: opts, log: opts.Logger.With().Str("component", "reachout").Logger(), stop: make(chan struct{})}
	if opts.System == nil {
		return nil, errors.New("reachout: no actor system")
	}
	srv, err := sockserve.New(sockserve.Options{Path: opts.Path, Component: "reachout", MaxConns: maxConns,
		Admit: refusedPeer, Serve: s.serveConn, Interrupt: s.interrupt, Grace: closeGrace, Bus: opts.Bus, Logger: s.log,
		System: opts.System, Supervisor: "hooks", Kind: "hook", Linked: s.linked})
	if err != nil {
		return nil, fmt.Errorf("reachout: %w", err)
	}
	s.srv = srv
	if err := s.listen(); err != nil {
		s.srv.Close()
		err = fmt.Errorf("making vibe-reachout's hook socket: %w", err)
		s.emit(Unavailable{Socket: opts.Path, Error: err.Error()})
		return nil, err
	}
	s.emit(Listening{Socket: opts.Path, TimeoutMs: opts.Timeout.Milliseconds()})
	return s, nil
}

// listen makes the socket and records its file's identity (under mu, or
// before the server is shared).
func (s *Server) listen() error {
	ln, err := sockserve.Listen(s.opts.Path, sockserve.ListenOptions{})
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(s.opts.Path, &st); err != nil {
		ln.Close()
		return fmt.Errorf("checking %s: %w", s.opts.Path, err)
	}
	s.ln, s.dev, s.ino = ln, uint64(st.Dev), st.Ino
	return nil
}

// Serve answers the socket through asker, and guards it, until Close.
func (s *Server) Serve(asker Asker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving || s.closed {
		return
	}
	s.serving = true
	s.opts.Asker = asker
	s.wg.Add(1)
	s.srv.Serve(s.ln)
	go s.guard()
}

// guard checks every CheckEvery that the file at the socket's path is
// still the socket this server made (by device and inode). Anything else
// there (removed, replaced by another process's socket, a link, a file:
// someone who could write the directory, such as a process of this uid in
// /tmp, wants the hook to ask it) is removed and the socket made again:
// reachout.socket_replaced says what was found and whether the path was
// taken back. A directory cannot be taken back; that is said once.
func (s *Server) guard() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.check()
		}
	}
}

func (s *Server) check() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	path := s.opts.Path
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if err == nil && uint64(st.Dev) == s.dev && st.Ino == s.ino {
		return
	}
	found := "nothing"
	if err == nil {
		found = fileType(st.Mode)
	}
	ev := SocketReplaced{Socket: path, Found: found}
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		ev.Error = "a directory is at the socket's path: not removed"
	} else {
		if err == nil {
			if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				ev.Error = "removing it: " + rerr.Error()
			}
		}
		if ev.Error == "" {
			old := s.ln
			if lerr := s.listen(); lerr != nil {
				ev.Error = "making the socket again: " + lerr.Error()
			} else {
				// The old listener's file is gone: closing it must not
				// remove the new one by name.
				old.SetUnlinkOnClose(false)
				old.Close()
				ev.TookBack = true
				if s.serving {
					s.srv.Serve(s.ln)
				}
			}
		}
	}
	if !ev.TookBack && s.lost == found+ev.Error {
		return // said already
	}
	s.lost = ""
	if !ev.TookBack {
		s.lost = found + ev.Error
	}
	s.log.Warn().Str("socket", path).Str("found", found).Bool("took_back", ev.TookBack).Str("error", ev.Error).
		Msg("reachout: the hook socket's path no longer held this daemon's socket")
	s.emit(ev)
}

// fileType names a file's type for reachout.socket_replaced.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFREG:
		return "file"
	case unix.S_IFIFO:
		return "fifo"
	}
	return "other"
}

// Path is the socket's path.
func (s *Server) Path() string { return s.opts.Path }

func (s *Server) emit(ev eventlog.Event) {
	if s.opts.Bus != nil {
		s.opts.Bus.Emit(ev)
	}
}

func (s *Server) isClosed() bool { return s.srv.Closing() }

// Close stops accepting, cancels (daemon_stopping) what connections still
// wait (normally none: the approvals' Shutdown has answered them), which
// answers them Timeout, cuts short the reading of requests, closes the
// connections left after a short grace, and waits for every goroutine
// of the server. The socket file is removed.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.srv.Close()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.stop)
	ln := s.ln
	s.mu.Unlock()
	err := ln.Close()
	s.srv.Close()
	s.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("closing vibe-reachout's hook socket: %w", err)
	}
	return nil
}

// interrupt is Close asking a connection to end: a pending approval is
// cancelled (which answers it), a read is cut short.
func (s *Server) interrupt(sc *sockserve.Conn) {
	c, _ := sc.Value.Load().(*conn)
	if c == nil {
		sc.NC.SetReadDeadline(time.Now())
		return
	}
	c.mu.Lock()
	p := c.pending
	c.mu.Unlock()
	if p != nil {
		p.Cancel(api.CancelDaemonStopped)
	} else {
		// Still reading its request (a line read is cut short), or
		// asking right now: serve then sees closed and cancels.
		c.nc.SetReadDeadline(time.Now())
	}
}

// Conns lists at most max of the hook connections open now, the oldest
// first, and how many are open.
func (s *Server) Conns(max int) ([]api.ConnInfo, int) { return s.srv.List(max) }

// linked is the hook connection's actor hearing that the approval it
// waits on stopped: without its answer (the approval's actor gave up
// after panics), the wait ends and the hook is closed unanswered.
func (s *Server) linked(sc *sockserve.Conn, _ actors.Ref) {
	c, _ := sc.Value.Load().(*conn)
	if c == nil || c.answered.Load() {
		return
	}
	c.lost.Store(true)
	c.nc.SetReadDeadline(time.Now())
}

func (s *Server) serveConn(sc *sockserve.Conn) {
	c := &conn{nc: sc.NC, sc: sc}
	sc.Value.Store(c)
	if s.isClosed() {
		return
	}
	s.serve(c)
}

func (s *Server) serve(c *conn) {
	c.nc.SetReadDeadline(time.Now().Add(s.opts.LineTimeout))
	rc, err := c.nc.SyscallConn()
	if err != nil {
		return
	}
	lr := sockserve.NewLines(rc, wire.MaxReachoutLine, "reachout request line")
	defer lr.Close()
	line, err := lr.Next()
	switch {
	case errors.Is(err, io.EOF):
		// Closed before sending a byte: a liveness probe (another
		// daemon's, or a bot's, before it takes the socket over).
		s.log.Debug().Msg("reachout: a connection closed without a request")
		return
	case errors.Is(err, os.ErrDeadlineExceeded) && s.isClosed():
		return
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.refuse(fmt.Sprintf("no request line within %s", s.opts.LineTimeout), "")
		return
	case errors.Is(err, wire.ErrLineTooLong):
		s.refuse(err.Error(), "")
		return
	case err != nil:
		if !s.isClosed() {
			s.log.Debug().Err(err).Msg("reachout: reading a request")
		}
		return
	}
	req, err := wire.DecodeReachoutRequest(line)
	if err != nil {
		s.refuse(err.Error(), requestIDOf(line))
		return
	}
	c.nc.SetReadDeadline(time.Time{})
	answered := make(chan api.Approval, 1)
	answer := func(a api.Approval) {
		c.answered.Store(true)
		select {
		case answered <- a:
		default: // called more than once: the first one counts
		}
		// Wakes the wait for the peer's close below.
		c.nc.SetReadDeadline(time.Now())
	}
	unheard := ""
	if req.HookEventName != "" && req.HookEventName != "PermissionRequest" {
		// The hook prints the PermissionRequest hook's answer, which
		// Claude Code ignores from any other hook ("hook_no_verdict"):
		// nobody is asked, the approval is on record cancelled, and the
		// hook hears nothing (Claude Code goes on to its own check).
		unheard = api.CancelHookNoVerdict
		s.log.Warn().Str("request_id", req.RequestID).Str("hook_event", eventlog.Ident(req.HookEventName)).
			Msg("reachout: the hook runs as a Claude Code hook that ignores its answer: register it as PermissionRequest")
	}
	p, err := s.opts.Asker.Ask(approvals.Request{Source: api.SourceReachout, Kind: api.KindTool,
		RequestID: req.RequestID, ToolName: req.ToolName, ToolInput: req.ToolInput, Cwd: req.Cwd,
		SessionID: req.SessionID, PermissionSuggestions: req.PermissionSuggestions,
		AssistantContext: req.AssistantContext, Timeout: s.opts.Timeout, Bound: true, Unheard: unheard,
		Requester: c.sc.Ref()}, answer)
	if err != nil {
		s.refuse("asking: "+err.Error(), req.RequestID)
		return
	}
	c.mu.Lock()
	c.pending = p
	closed := s.isClosed()
	c.mu.Unlock()
	if closed { // Close did not see it pending
		p.Cancel(api.CancelDaemonStopped)
	}
	a, ok := s.await(c, p, answered)
	if !ok {
		return
	}
	resp, ok := responseFor(req.RequestID, a)
	if !ok {
		return // cancelled: closed without an answer
	}
	if _, err := c.sc.Write(wire.AppendReachoutResponse(nil, resp), writeTimeout); err != nil {
		s.log.Debug().Err(err).Str("approval", a.ID).Msg("reachout: the hook did not take its answer")
	}
}

// refusedPeer says why a peer of the daemon's uid may not ask through the
// hook socket: it is a process this daemon started (a job, an executor,
// or anything they started), which are the agents the hook asks about,
// never the hook. nil: it may.
func refusedPeer(p proc.Peer) error { return proc.StartedRefusal(p.Pid) }

// await waits for p's answer while watching for the hook going away:
// gone, p is cancelled (requester_gone) and await returns false.
func (s *Server) await(c *conn, p approvals.Pending, answered <-chan api.Approval) (api.Approval, bool) {
	select {
	case a := <-answered:
		return a, true
	default:
	}
	gone, err := waitHangup(c.nc)
	select {
	case a := <-answered:
		return a, true
	default:
	}
	if !gone && s.isClosed() {
		// Close cut the wait short; the daemon_stopping answer is on its
		// way (a Cancel answers from the approval's actor).
		t := time.NewTimer(closeGrace)
		defer t.Stop()
		select {
		case a := <-answered:
			return a, true
		case <-t.C:
		}
	}
	switch {
	case gone:
		s.log.Debug().Str("approval", p.ID()).Msg("reachout: the hook went away before its answer")
	case c.lost.Load():
		s.log.Warn().Str("approval", p.ID()).Msg("reachout: the approval's actor stopped before its answer; the hook is closed unanswered")
	default:
		s.log.Debug().Err(err).Str("approval", p.ID()).Msg("reachout: the connection ended before its answer")
	}
	p.Cancel(api.CancelRequesterGone)
	return api.Approval{}, false
}

func (s *Server) refuse(msg, requestID string) {
	s.log.Warn().Str("request_id", requestID).Msg("reachout: refused a request: " + msg)
	s.emit(RequestRefused{Error: msg, RequestID: requestID})
}

// requestIDOf is a malformed request's request_id, canonical, if it has a
// readable one; "".
func requestIDOf(line []byte) string {
	var v struct {
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal(line, &v) != nil {
		return ""
	}
	id, _ := wire.ParseUUID(v.RequestID)
	return id
}

// waitHangup waits until the peer has closed its end completely (POLLHUP:
// both directions shut, which a half-close does not do), discarding what
// the peer still writes, or until a read deadline interrupts it. It holds
// no OS thread while it waits: the callback is run again by the netpoller
// only when the socket changes state. gone reports the peer's close.
func waitHangup(nc *net.UnixConn) (gone bool, err error) {
	raw, err := nc.SyscallConn()
	if err != nil {
		return false, err
	}
	var buf [4096]byte
	var ioErr error
	err = raw.Read(func(fd uintptr) bool {
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				ioErr = err
				return true
			}
			if n == 0 {
				return false
			}
			re := fds[0].Revents
			if re&(unix.POLLHUP|unix.POLLERR) != 0 {
				gone = true
				return true
			}
			if re&unix.POLLIN == 0 {
				return false
			}
			// Bytes after the request line are ignored; a read of 0 is
			// the half-close, which is not the hook going away.
			k, err := unix.Read(int(fd), buf[:])
			if k > 0 {
				continue
			}
			if err != nil && err != unix.EAGAIN && err != unix.EINTR {
				ioErr = err
				return true
			}
			return false
		}
	})
	if err == nil {
		err = ioErr
	}
	return gone, err
}

// responseFor is the answer a hook hears for a, an approval in its
// terminal state; false: it hears none (the connection is closed), as for
// a cancelled approval (but one cancelled because the daemon stops, which
// answers Timeout as the real bot does when it stops).
func responseFor(requestID string, a api.Approval) (wire.ReachoutResponse, bool) {
	r := wire.ReachoutResponse{RequestID: requestID}
	res := a.Resolution
	if res == nil {
		return r, false
	}
	switch a.State {
	case api.ApprovalAllowed:
		r.Decision, r.Message = string(api.DecisionAllow), res.Message
	case api.ApprovalDenied:
		r.Decision, r.Message = string(api.DecisionDeny), res.Message
	case api.ApprovalAlwaysAllowed:
		r.Decision, r.AlwaysAllowSuggestion = string(api.DecisionAlwaysAllow), res.Suggestion
	case api.ApprovalReplied:
		r.Decision, r.UserMessage = string(api.DecisionReply), res.UserMessage
	case api.ApprovalTimedOut:
		r.Decision = string(api.DecisionTimeout)
	case api.ApprovalCancelled:
		if res.Reason != api.CancelDaemonStopped {
			return r, false
		}
		r.Decision = string(api.DecisionTimeout)
	default:
		return r, false
	}
	return r, true
}
