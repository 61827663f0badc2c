// Package ipc serves one clanker repo's pod socket (spec 003) in place of
// clanker's dashboard: NDJSON, each request line gets one response line, in
// order; a connection may send several. It runs on platform/sockserve; the
// lines are decoded here (wire) and handed to the repo's actor (clanker),
// which answers. The daemon gives the clanker domain its Listener.
package ipc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/clanker"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/platform/sockserve"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// Timeouts of a connection.
const (
	// idleTimeout closes a connection that sends no request for this long
	// (clanker's client sends one and waits 5 s for its answer).
	idleTimeout = 5 * time.Minute
	// answerTimeout bounds the wait for the repo's answer; past it the
	// pod hears an error (its own client gave up after 5 s anyway).
	answerTimeout = 30 * time.Second
	writeTimeout  = 10 * time.Second
	closeGrace    = 2 * time.Second
)

// maxConns bounds the pods' connections to one repo socket.
const maxConns = 1024

// Server serves one repo's socket.
type Server struct {
	path string
	repo string
	h    clanker.Handler
	bus  *eventlog.Bus
	log  zerolog.Logger
	ln   *net.UnixListener
	dir  *beneath.Dir // the socket's directory, when the repo's; closed last
	srv  *sockserve.Server
}

// Listener returns the clanker.Listener the daemon gives the clanker
// domain. Each repo's socket has a "pods" supervisor in sys, one "pod"
// actor a connection (sockserve).
func Listener(bus *eventlog.Bus, sys *actors.System, log zerolog.Logger) clanker.Listener {
	return func(socket string, dir *beneath.Dir, repo string, h clanker.Handler) (clanker.Closer, error) {
		return Listen(socket, dir, repo, h, bus, sys, log)
	}
}

// Listen makes the socket (0600; a stale socket is replaced, a live one
// refused) and serves it until Close. With dir (the socket's directory,
// opened beneath the repo without following a link; Listen's to close)
// the socket is bound in dir through its descriptor (/proc/self/fd/N/NAME),
// so no link an agent put on socket's path is followed; without, socket
// is the operator's path and its directory is made.
func Listen(socket string, dir *beneath.Dir, repo string, h clanker.Handler, bus *eventlog.Bus, sys *actors.System,
	log zerolog.Logger) (*Server, error) {
	lo := sockserve.ListenOptions{DirMode: 0o755}
	if dir != nil {
		lo = sockserve.ListenOptions{DirFd: dir.Fd()}
	}
	ln, err := sockserve.Listen(socket, lo)
	if err != nil {
		if dir != nil {
			dir.Close()
		}
		return nil, fmt.Errorf("making clanker's socket %s: %w", socket, err)
	}
	s := &Server{path: socket, repo: repo, h: h, bus: bus, ln: ln, dir: dir,
		log: log.With().Str("component", "clankeripc").Str("repo", repo).Logger()}
	srv, err := sockserve.New(sockserve.Options{Path: socket, Component: "clanker", MaxConns: maxConns,
		Serve: s.serve, Grace: closeGrace, Bus: bus, Logger: s.log, Panicked: s.panicked,
		System: sys, Supervisor: "pods", SupervisorID: supervisorID(socket, repo), Kind: "pod"})
	if err != nil {
		ln.Close()
		if dir != nil {
			dir.Close()
		}
		return nil, fmt.Errorf("serving clanker's socket %s: %w", socket, err)
	}
	s.srv = srv
	s.srv.Serve(ln)
	return s, nil
}

func (s *Server) emit(ev eventlog.Event) {
	if s.bus != nil {
		s.bus.Emit(ev)
	}
}

// draining counts, by socket path, the servers closed whose connections
// are still ending (Close's goroutine): their "pods" supervisor is still
// there, so a repo serving its socket again meanwhile (its actor
// restarted) names its own apart.
var draining = struct {
	sync.Mutex
	n   map[string]int
	seq int
}{n: map[string]int{}}

// supervisorID names a socket's connections supervisor: the repo's path,
// its slashes made dashes; "-rN" after it while an earlier server of the
// socket is still closing.
func supervisorID(socket, repo string) string {
	id := strings.ReplaceAll(strings.Trim(repo, "/"), "/", "-")
	draining.Lock()
	defer draining.Unlock()
	if draining.n[socket] > 0 {
		draining.seq++
		id += "-r" + strconv.Itoa(draining.seq)
	}
	return id
}

// Close stops accepting and removes the socket file at once; each
// connection then finishes the request it is answering (a short grace)
// and is closed, on a goroutine: drained is closed once every goroutine
// of the socket is done. Close returns without waiting (clanker.Closer).
func (s *Server) Close() (drained <-chan struct{}, err error) {
	// The listener removes its socket by the path it was bound by: through
	// the directory's descriptor, closed after it.
	err = s.ln.Close()
	if s.dir != nil {
		s.dir.Close()
	}
	done := make(chan struct{})
	draining.Lock()
	draining.n[s.path]++
	draining.Unlock()
	go func() {
		defer close(done)
		s.srv.Close()
		draining.Lock()
		if draining.n[s.path]--; draining.n[s.path] == 0 {
			delete(draining.n, s.path)
		}
		draining.Unlock()
	}()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return done, fmt.Errorf("closing clanker's socket %s: %w", s.path, err)
	}
	return done, nil
}

// Conns lists at most max of the pods' connections open now, the oldest
// first, and how many are open.
func (s *Server) Conns(max int) ([]api.ConnInfo, int) { return s.srv.List(max) }

// panicked tells a pod its connection ends: the error line a request
// hears, without an id (the one under way is not known here).
func (s *Server) panicked(c *sockserve.Conn) {
	c.Write(wire.AppendClankerError(nil, nil, "internal error: the connection's handler failed; reconnect"), writeTimeout)
}

type answer struct {
	data []byte
	err  error
}

func (s *Server) serve(c *sockserve.Conn) {
	nc := c.NC
	write := func(b []byte) bool { return s.write(c, b) }
	rc, err := nc.SyscallConn()
	if err != nil {
		return
	}
	lr := sockserve.NewLines(rc, wire.MaxClankerLine, "ipc request line")
	defer lr.Close()
	var out []byte
	answers := make(chan answer, 1)
	var t *time.Timer
	for {
		if s.srv.Closing() {
			return
		}
		nc.SetReadDeadline(time.Now().Add(idleTimeout))
		line, err := lr.Next()
		switch {
		case errors.Is(err, wire.ErrLineTooLong):
			s.refused(nil, err)
			write(wire.AppendClankerError(out[:0], nil, err.Error()))
			return
		case errors.Is(err, io.EOF):
			return
		case err != nil:
			return // the idle timeout, a reset, Close
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		req, err := wire.DecodeClankerRequest(line)
		if err != nil {
			// Answered without an id, as the real dashboard answers; the
			// connection goes on.
			s.refused(line, err)
			if !write(wire.AppendClankerError(out[:0], nil, err.Error())) {
				return
			}
			continue
		}
		s.h.Handle(req.Type, req.Payload, func(data []byte, err error) { answers <- answer{data, err} })
		var a answer
		select {
		case a = <-answers: // nearly always: no timer
		default:
			if t == nil {
				t = time.NewTimer(answerTimeout)
			} else {
				t.Reset(answerTimeout)
			}
			select {
			case a = <-answers:
				t.Stop()
			case <-t.C:
				// The repo did not answer in time (a store stalled): this
				// connection stops here; a late answer is dropped. The
				// repo may still read the request's bytes: their buffer
				// is not reused.
				lr.Forget()
				write(wire.AppendClankerError(out[:0], req.ID, fmt.Sprintf("the repo did not answer within %s", answerTimeout)))
				return
			}
		}
		if a.err != nil {
			out = wire.AppendClankerError(out[:0], req.ID, a.err.Error())
		} else {
			out = wire.AppendClankerOK(out[:0], req.ID, a.data)
		}
		if !write(out) {
			return
		}
	}
}

// refused says a line was refused (nil: one too long to read): the pod
// hears what it sent; the logs hear neither the line nor anything of it
// but its length and hash.
func (s *Server) refused(line []byte, err error) {
	ev := clanker.RequestRefused{Repo: s.repo, Error: wire.ClankerLogText(err), Via: "ipc"}
	if line != nil {
		ev.LineBytes, ev.LineSHA256 = len(line), clanker.LineSHA256(line)
	}
	s.log.Debug().Int("line_bytes", ev.LineBytes).Str("line_sha256", ev.LineSHA256).Msg("clanker: refused a request line: " + ev.Error)
	s.emit(ev)
}

func (s *Server) write(c *sockserve.Conn, b []byte) bool {
	if _, err := c.Write(b, writeTimeout); err != nil {
		s.log.Debug().Err(err).Msg("clanker: a pod did not take its answer")
		return false
	}
	return true
}
