package metrics

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/rs/zerolog"
)

// Listen binds [metrics] listen, which Validate checked is loopback; the
// address it bound must be loopback too ("localhost" could name another).
func Listen(addr string) (net.Listener, error) {
	if err := CheckLoopback(addr); err != nil {
		return nil, fmt.Errorf("%s %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err != nil || !ap.Addr().Unmap().IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("%s bound %s, which is not loopback", addr, ln.Addr())
	}
	return ln, nil
}

// Server serves GET /metrics, without a key, on a listener of its own;
// every other path is 404.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Serve serves h at GET /metrics on ln until Close.
func Serve(ln net.Listener, h http.Handler, logger zerolog.Logger) *Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	lg := logger.With().Str("component", "metrics").Logger()
	s := &Server{ln: ln, done: make(chan struct{}), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10, ErrorLog: log.New(lg, "", 0)}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			lg.Error().Err(err).Msg("metrics: the listener stopped")
		}
	}()
	return s
}

// Addr is the address it listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, lets a scrape under way finish (within ctx), then
// closes what is left and waits for the server's goroutine.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stopping the metrics listener: %w", err)
	}
	return nil
}
