// Package httpapi is the daemon's HTTP front-end: Loopsy's cross-machine
// API (spec 004) at /api/v1, so the loopsy CLI and other Loopsy daemons
// work against orchestrd. Every request but /health needs a key
// (Authorization: Bearer <64 hex>): the daemon's own (home/http.key) or a
// peer's (allowed_keys).
//
// It is a front-end only: routing, keys, rate limits, the audit log, and
// the encoding of Loopsy's bodies, errors and streams. It reaches the
// domains one way, the daemon's method table (Caller, which is
// control.Server.Invoke), as the control socket and the dashboard do:
// commands run as jobs on a lane (job.stream, job.cancel, job.wait,
// lane.list), the shared context and the peers are Loopsy's domain
// (loopsy.*, package loopsy). Transfers are files moved over HTTP beneath
// the allowed roots (transfer.go).
package httpapi

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/sockserve"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// ProtocolVersion is the Loopsy protocol version orchestrd speaks.
const ProtocolVersion = "1.0.0"

// Loopsy's error codes (its packages/protocol/src/errors.ts).
const (
	CodeMissingKey          = 1001
	CodeInvalidKey          = 1002
	CodePeerNotFound        = 2001
	CodePeerVersionMismatch = 2005
	CodeCommandDenied       = 3001
	CodeMaxConcurrent       = 3003
	CodeExecFailed          = 3004
	CodeJobNotFound         = 3006
	CodePathDenied          = 4001
	CodeFileNotFound        = 4002
	CodeTooLarge            = 4003
	CodeChecksumMismatch    = 4004
	CodeTransferFailed      = 4005
	CodeContextNotFound     = 5001
	CodeContextTooLarge     = 5002
	CodeContextMaxEntries   = 5003
	CodeInternal            = 9001
	CodeRateLimited         = 9002
	CodeInvalidRequest      = 9003
	maxJSONBody             = 1 << 20
	readHeaderTimeout       = 10 * time.Second
	readBodyTimeout         = 30 * time.Second
	idleTimeout             = 2 * time.Minute
	maxHeaderBytes          = 64 << 10
	shutdownStreamsGrace    = 2 * time.Second
)

// Caller calls a method of the daemon's method table (control.Server's
// Invoke), as the dashboard's Caller does; push hears the lines a
// streaming method (job.stream) sends ahead of its answer.
type Caller interface {
	Invoke(ctx context.Context, from api.Origin, method string, params any, push func(event string, data []byte, taken func(ok bool))) (json.RawMessage, error)
}

// byHTTP is the origin of the API's calls (api.Origin's By).
const byHTTP = "http"

// Options configures a Server.
type Options struct {
	Config  Config
	APIKey  string // the daemon's own key
	NodeID  string
	Version string // orchestrd's
	// Caller is the method table: the lanes' methods and Loopsy's
	// (loopsy.*) are called through it.
	Caller Caller
	// OnClose, when set, runs first when the server closes (the daemon
	// stops Loopsy's background work there).
	OnClose func()
	Home    string
	Bus     *eventlog.Bus
	Logger  zerolog.Logger
	Started time.Time
	// Listener, when set, is Config.Listen already bound by the caller
	// (the daemon binds it before its lanes start, so a port in use is
	// known at once); Start serves on it, or closes it when it fails. Nil:
	// Start listens itself.
	Listener net.Listener
	// Certificate, when set, is Config.Cert and Config.Key already loaded
	// by the caller (LoadCertificate, before anything starts); nil: Start
	// loads them when Config.Cert is set.
	Certificate *tls.Certificate
	// Mounts are other front-ends served on the API's listener (the
	// dashboard, /metrics). A mount does its own authentication unless
	// Bearer asks for the API's (a known key, rate limited).
	Mounts []Mount
	// Observe, when set, hears of every request once it is answered: the
	// pattern of the route that served it ("" when none did), its status
	// and how long it took. It must not block.
	Observe func(route string, status int, d time.Duration)
	// System, when set, hosts the "http-streams" supervisor: each
	// /execute/stream is a "stream" actor under it (sockserve.Stream).
	// Plain request/response calls stay handlers.
	System *actors.System
	// StreamWriteTimeout bounds each write of an /execute/stream once its
	// job has ended; 0: 30 s.
	StreamWriteTimeout time.Duration
}

// Mount is a handler served on the API's listener under Pattern (a
// net/http ServeMux pattern).
type Mount struct {
	Pattern string
	Handler http.Handler
	Bearer  bool
}

// Server serves the API.
type Server struct {
	opts   Options
	cfg    Config
	keys   []namedKey
	srv    *http.Server
	ln     net.Listener
	log    zerolog.Logger
	done   chan struct{}
	exec   *executions
	paths  paths
	limits *limiter
	audit  *audit // nil without a home
	// execOff says why /execute is off ("" when on: ExecOff).
	execOff string
	// streams supervises the long-lived streams' actors (nil without a
	// System).
	streams *sockserve.Supervisor
}

// Conns lists at most max of the streams open now, the oldest first, and
// how many are open.
func (s *Server) Conns(max int) ([]api.ConnInfo, int) {
	if s.streams == nil {
		return nil, 0
	}
	return s.streams.List(max)
}

type namedKey struct{ name, key string }

// LoadCertificate reads c's cert and key (PEM files).
func LoadCertificate(c Config) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, fmt.Errorf("reading [http] cert and key: %w", err)
	}
	return &cert, nil
}

// Start listens on cfg.Listen (or serves on opts.Listener) until Close.
// When it cannot start it emits http.unavailable and returns the error:
// the caller says it (the daemon goes on without the API, or stops when
// its config asked for it).
func Start(opts Options) (*Server, error) {
	cfg := opts.Config
	s := &Server{opts: opts, cfg: cfg, log: opts.Logger.With().Str("component", "http").Logger(), done: make(chan struct{})}
	s.keys = append(s.keys, namedKey{"self", opts.APIKey})
	for name, k := range cfg.AllowedKeys {
		s.keys = append(s.keys, namedKey{name, k})
	}
	ln := opts.Listener
	unavailable := func(err error) (*Server, error) {
		if ln != nil {
			ln.Close()
		}
		s.emit(Unavailable{Addr: cfg.Listen, Error: err.Error()})
		return nil, err
	}
	var err error
	s.paths = newPaths(cfg.Transfer, opts.Home)
	s.limits = newLimiter(cfg.RateLimits)
	// An exec_lane the config file set is a lane (Validate); the default
	// one may not be: /execute is then off, said once here.
	if opts.Caller != nil {
		names, err := s.laneNames()
		if err != nil {
			return unavailable(err)
		}
		if s.execOff = ExecOff(cfg, names); s.execOff != "" {
			s.log.Warn().Str("exec_lane", cfg.ExecLane).Strs("lanes", names).Msg("http: /execute is off: " + s.execOff)
			s.emit(ExecuteDisabled{ExecLane: cfg.ExecLane, Lanes: names, Reason: s.execOff})
		}
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return unavailable(fmt.Errorf("serving Loopsy's HTTP API on %s: %w", cfg.Listen, err))
		}
	}
	if cfg.Cert != "" {
		cert := opts.Certificate
		if cert == nil {
			if cert, err = LoadCertificate(cfg); err != nil {
				return unavailable(fmt.Errorf("serving Loopsy's HTTP API on %s: %w", cfg.Listen, err))
			}
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})
	}
	if opts.System != nil {
		if s.streams, err = sockserve.NewSupervisor(opts.System, "http-streams", "", s.log); err != nil {
			return unavailable(fmt.Errorf("serving Loopsy's HTTP API: %w", err))
		}
	}
	s.ln = ln
	s.exec = newExecutions(s)
	if opts.Home != "" {
		s.audit = openAudit(opts.Home, cfg.Audit, s.log)
	}
	s.srv = &http.Server{Handler: s.audited(s.routes()), ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout,
		MaxHeaderBytes: maxHeaderBytes, ErrorLog: log.New(zlogWriter{s.log}, "", 0)}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("http: the server stopped")
		}
	}()
	s.emit(Listening{Addr: ln.Addr().String(), TLS: cfg.Cert != ""})
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server: it stops accepting, cancels the executions
// still running (their waiting requests answer killed), lets requests
// finish for a moment, then closes what is left.
func (s *Server) Close(ctx context.Context) error {
	if s.opts.OnClose != nil {
		s.opts.OnClose()
	}
	s.exec.closeAll()
	sctx, cancel := context.WithTimeout(ctx, shutdownStreamsGrace)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	if s.streams != nil {
		// Every handler has returned: this ends no stream, it stops
		// the supervisor.
		if serr := s.streams.Stop(ctx); serr != nil {
			s.log.Error().Err(serr).Msg("http: stopping the streams' supervisor")
		}
	}
	if s.audit != nil {
		s.audit.close()
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stopping the HTTP API: %w", err)
	}
	return nil
}

func (s *Server) emit(ev eventlog.Event) {
	if s.opts.Bus != nil {
		s.opts.Bus.Emit(ev)
	}
}

func keyName(r *http.Request) string { return info(r).keyName }

// audited records every request in the audit log once it is answered.
func (s *Server) audited(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &reqInfo{}
		rec := &recorder{ResponseWriter: w}
		r2 := r.WithContext(context.WithValue(r.Context(), infoKey{}, ri))
		h.ServeHTTP(rec, r2)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		if s.opts.Observe != nil {
			s.opts.Observe(r2.Pattern, status, time.Since(start))
		}
		if s.audit != nil {
			s.audit.add(auditLine{Time: start.UTC().Format(time.RFC3339Nano), Peer: r.RemoteAddr, KeyName: ri.keyName,
				Method: r.Method, Path: r.URL.Path, Status: status, JobID: ri.jobID,
				Duration: time.Since(start).Milliseconds(), Bytes: rec.bytes})
		}
	})
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	const p = "/api/v1"
	mux.HandleFunc("GET "+p+"/health", s.health)
	mux.HandleFunc("GET "+p+"/status", s.auth(s.status))
	mux.HandleFunc("GET "+p+"/identity", s.auth(s.identity))
	mux.HandleFunc("POST "+p+"/execute", s.auth(s.execute))
	mux.HandleFunc("POST "+p+"/execute/stream", s.auth(sockserve.StreamHandler(s.streams, "stream", s.executeStream)))
	mux.HandleFunc("DELETE "+p+"/execute/{jobId}", s.auth(s.cancel))
	mux.HandleFunc("GET "+p+"/execute/jobs", s.auth(s.jobs))
	mux.HandleFunc("PUT "+p+"/context/{key}", s.auth(s.contextPut))
	mux.HandleFunc("GET "+p+"/context/{key}", s.auth(s.contextGet))
	mux.HandleFunc("DELETE "+p+"/context/{key}", s.auth(s.contextDelete))
	mux.HandleFunc("GET "+p+"/context", s.auth(s.contextList))
	mux.HandleFunc("POST "+p+"/transfer/push", s.auth(s.push))
	mux.HandleFunc("POST "+p+"/transfer/pull", s.auth(s.pull))
	mux.HandleFunc("POST "+p+"/transfer/list", s.auth(s.list))
	mux.HandleFunc("GET "+p+"/peers", s.auth(s.peersList))
	mux.HandleFunc("POST "+p+"/peers", s.auth(s.peersAdd))
	mux.HandleFunc("POST "+p+"/peers/handshake", s.auth(s.peersHandshake))
	mux.HandleFunc("DELETE "+p+"/peers/{nodeId}", s.auth(s.peersRemove))
	for _, m := range s.opts.Mounts {
		h := m.Handler
		if m.Bearer {
			h = s.auth(h.ServeHTTP)
		}
		mux.Handle(m.Pattern, h)
	}
	mux.HandleFunc("/", s.auth(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeInvalidRequest, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	}))
	return mux
}

// auth admits a request with a known key: missing, 401 code 1001; wrong,
// 403 code 1002. Keys are compared in constant time.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hdr := r.Header.Get("Authorization")
		if hdr == "" {
			s.emit(AuthFailed{Peer: r.RemoteAddr, Path: r.URL.Path, Reason: "missing_key"})
			writeError(w, http.StatusUnauthorized, CodeMissingKey, "Missing Authorization header")
			return
		}
		tok := hdr
		if len(hdr) > 7 && strings.EqualFold(hdr[:7], "bearer ") {
			tok = strings.TrimSpace(hdr[7:])
		}
		name := ""
		for _, k := range s.keys {
			if subtle.ConstantTimeCompare([]byte(tok), []byte(k.key)) == 1 {
				name = k.name
			}
		}
		if name == "" {
			s.emit(AuthFailed{Peer: r.RemoteAddr, Path: r.URL.Path, Reason: "invalid_key"})
			writeError(w, http.StatusForbidden, CodeInvalidKey, "Invalid API key")
			return
		}
		info(r).keyName = name
		if !s.limit(w, r, name) {
			return
		}
		h(w, r)
	}
}

// writeError writes Loopsy's error body, {"error": {"code", "message"}}.
func writeError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":9001,"message":"encoding the answer"}}`)
	}
	writeJSONBytes(w, status, b)
}

// writeJSONBytes answers with b, a JSON document.
func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b)
}

// decodeBody decodes a JSON body of at most 1 MiB, sent within 30 s, into
// v; unknown fields are ignored (Loopsy's clients send more, such as
// stream). A refusal is answered here, naming the problem.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeBodyMax(w, r, v, maxJSONBody)
}

// decodeBodyMax is decodeBody with a bound of limit bytes.
func decodeBodyMax(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(readBodyTimeout))
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			writeError(w, http.StatusRequestEntityTooLarge, CodeInvalidRequest, fmt.Sprintf("request body over %d bytes", limit))
		case errors.Is(err, os.ErrDeadlineExceeded):
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("request body not sent within %s", readBodyTimeout))
		default:
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid JSON body: "+err.Error())
		}
		return false
	}
	_ = rc.SetReadDeadline(time.Time{})
	return true
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "nodeId": s.opts.NodeID,
		"uptime": time.Since(s.opts.Started).Milliseconds(), "version": ProtocolVersion})
}

func (s *Server) identityBody() map[string]any {
	host, _ := os.Hostname()
	return map[string]any{"nodeId": s.opts.NodeID, "hostname": host, "platform": runtime.GOOS,
		"version": ProtocolVersion, "port": s.port(), "capabilities": Capabilities,
		"orchestrd": s.opts.Version}
}

func (s *Server) port() int {
	if a, ok := s.ln.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// Capabilities are what this node says it serves (identity, mDNS).
var Capabilities = []string{"execute", "execute-stream", "transfer", "context", "peers"}

func (s *Server) identity(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.identityBody())
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	host, _ := os.Hostname()
	var lanes struct {
		Lanes json.RawMessage `json:"lanes"`
	}
	var loopsy struct {
		Peers json.RawMessage `json:"peers"`
	}
	if err := s.call(r.Context(), "lane.list", nil, &lanes); err != nil {
		s.writeCallErr(w, err)
		return
	}
	if err := s.call(r.Context(), "loopsy.status", nil, &loopsy); err != nil {
		s.writeCallErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodeId": s.opts.NodeID, "hostname": host, "platform": runtime.GOOS,
		"version": ProtocolVersion, "orchestrd": s.opts.Version, "uptime": time.Since(s.opts.Started).Milliseconds(),
		"peers": loopsy.Peers,
		"jobs":  map[string]int{"active": s.exec.active(), "total": s.exec.total()},
		"lanes": lanes.Lanes})
}

// zlogWriter routes the lines of a standard-library logger (net/http's
// server errors such as failed TLS handshakes) into zerolog at debug
// level: a scanner on the port must not fill the log.
type zlogWriter struct{ log zerolog.Logger }

func (w zlogWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
