// Package ui is the daemon's web dashboard: server-rendered pages under
// /ui/ on the HTTP listener (mounted on daemon/httpapi's server), live
// through one server-sent-events stream per page from the event bus.
//
// What it owns: the signed-in sessions (in memory, written through to the
// state store when it has one, so a sign-in outlives a restart until it
// expires or the API key changes; the store holds a hash of a session's
// token, never the token), the one-time sign-in links `orchestrd ui`
// asks for, and one bounded queue per open stream. What it knows of the
// domains: nothing but their method names. Every page reads, and every
// button acts, through the control socket's method table (Caller, which
// is control.Server.Invoke), so the dashboard can do no more and no less
// than a client of the socket, and a domain adds a page by registering a
// page and its actions (pages.go, actions.go), never by a switch here.
//
// Whom it tells: the event log (ui.signed_in, ui.sign_in_failed,
// ui.signed_out, ui.sessions_restored); what a button did is the domain's own event
// (approval.resolved, job.cancel_requested, ...).
//
// Safety: sign-in takes the daemon's API key (home/http.key) or a one-time
// link, and gives an HttpOnly, SameSite=Strict cookie that expires. Every
// POST needs the session's CSRF token and passes net/http's cross-origin
// protection (Sec-Fetch-Site, Origin against Host); every answer carries a
// strict Content-Security-Policy (no inline script or style), frame
// denial and no referrer. A listener on loopback answers only to a
// loopback Host (DNS rebinding).
package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/sockserve"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Caller calls a method of the daemon's method table (control.Server's
// Invoke) as from: the dashboard (api.ByUI) and the session, with the
// check of who stands behind a button that answers for a person
// (Origin.Admit).
type Caller interface {
	Invoke(ctx context.Context, from api.Origin, method string, params any, push func(event string, data []byte, taken func(ok bool))) (json.RawMessage, error)
}

// Options configures the dashboard.
type Options struct {
	Config  Config
	Caller  Caller
	Bus     *eventlog.Bus
	Key     string // the daemon's API key: what signs in
	Home    string // the event log is read from here (events page)
	Version string
	Logger  zerolog.Logger
	// Loopback says the listener is on a loopback address: requests must
	// name a loopback Host.
	Loopback bool
	// TLS says the listener serves TLS: the cookie is Secure.
	TLS bool
	// Store, when set, keeps the sessions across restarts (nil: memory
	// only).
	Store *state.Store
	// System, when set, hosts the "ui-streams" supervisor: each page's
	// event stream and each job's output stream is a "stream" actor under
	// it (sockserve.Stream). Pages stay plain handlers.
	System *actors.System
}

// Server is the dashboard: an http.Handler for /ui/.
type Server struct {
	opts     Options
	cfg      Config
	log      zerolog.Logger
	sessions *sessions
	tmpl     map[string]*template.Template // page name -> layout + page
	mux      *http.ServeMux
	xorigin  *http.CrossOriginProtection

	mu      sync.Mutex
	closed  bool
	streams map[*stream]struct{}
	wg      sync.WaitGroup // open streams
	// sup supervises the streams' actors (nil without a System).
	sup   *sockserve.Supervisor
	errs  *recentErrors
	unsub func()

	charts     *charts // charts.go: the last hour's
	stopCharts func()
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// New makes the dashboard.
func New(opts Options) (*Server, error) {
	if opts.Caller == nil || opts.Bus == nil {
		return nil, errors.New("ui: Options needs a Caller and a Bus")
	}
	if len(opts.Key) < 32 {
		return nil, errors.New("ui: Options.Key is not an API key")
	}
	cfg := opts.Config.withDefaults()
	s := &Server{opts: opts, cfg: cfg, log: opts.Logger.With().Str("component", "ui").Logger(),
		sessions: newSessions(cfg, opts.Key), streams: map[*stream]struct{}{}, errs: newRecentErrors(recentErrorsKept)}
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	if opts.System != nil {
		sup, err := sockserve.NewSupervisor(opts.System, "ui-streams", "", s.log)
		if err != nil {
			return nil, fmt.Errorf("ui: %w", err)
		}
		s.sup = sup
	}
	if opts.Store != nil {
		// A store that cannot be read costs the browsers their sign-in,
		// not the dashboard.
		ev, err := s.sessions.persist(opts.Store, s.log)
		if err != nil {
			s.log.Error().Err(err).Msg("ui: the stored sessions: browsers signed in before sign in again")
		}
		if ev != (SessionsRestored{}) {
			s.emit(ev)
		}
	}
	s.xorigin = http.NewCrossOriginProtection()
	s.xorigin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.emit(SignInFailed{Peer: r.RemoteAddr, Reason: "cross_origin"})
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	s.unsub = opts.Bus.Subscribe(errorKinds, s.errs)
	s.startCharts()
	s.routes()
	return s, nil
}

// Handler serves /ui/ (and the redirect from /ui).
func (s *Server) Handler() http.Handler { return s }

// ServeHTTP checks the Host, sets the headers every answer carries and
// routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if s.opts.Loopback && !loopbackHost(r.Host) {
		http.Error(w, "this dashboard answers only to a loopback host name (localhost, 127.0.0.1, [::1])", http.StatusMisdirectedRequest)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// loopbackHost says host (a Host header, with or without port) names
// this machine's loopback.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.Handle("GET /ui/assets/", http.StripPrefix("/ui/", assetServer()))
	m.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusMovedPermanently) })
	m.HandleFunc("GET /ui/login", s.loginPage)
	m.Handle("POST /ui/login", s.xorigin.Handler(http.HandlerFunc(s.loginPost)))
	m.Handle("POST /ui/logout", s.xorigin.Handler(s.authed(s.logout)))
	m.Handle("GET /ui/stream", s.authed(sockserve.StreamHandler(s.sup, "stream", s.streamEvents)))
	m.Handle("GET /ui/jobs/{id}/output", s.authed(sockserve.StreamHandler(s.sup, "stream", s.streamOutput)))
	m.Handle("POST /ui/act/{action}", s.xorigin.Handler(s.authed(s.act)))
	m.Handle("POST /ui/start/{form}", s.xorigin.Handler(s.authed(s.startWork)))
	m.Handle("GET /ui/start/{form}", s.authed(s.startFormPage))
	for _, p := range pages {
		m.Handle("GET "+p.Pattern, s.authed(s.pageHandler(p)))
	}
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.session(r); !ok {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		http.Error(w, "no such page: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	})
	s.mux = m
}

func assetServer() http.Handler {
	sub, err := fs.Sub(assetFS, ".")
	if err != nil {
		panic(err)
	}
	fsrv := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The assets are in the binary: they change with it only.
		w.Header().Set("Cache-Control", "private, max-age=300")
		fsrv.ServeHTTP(w, r)
	})
}

// NewLoginLink makes a one-time sign-in link's token (good for
// Config.LinkTTL, once): `orchestrd ui` prints it.
func (s *Server) NewLoginLink() (token string, expires time.Time) { return s.sessions.newLink() }

// Register registers ui.login_link on mux: a one-time sign-in token and
// how long it is good for, for `orchestrd ui` (the socket's peer is the
// daemon's user: it may sign in). It is a method only a person may call:
// a session is a person's.
func (s *Server) Register(mux api.Mux) {
	api.HandlePerson(mux, "ui.login_link", func(call api.Call) {
		if err := call.Decode(&api.NoParams{}); err != nil {
			call.Fail(err)
			return
		}
		tok, exp := s.NewLoginLink()
		call.Respond(map[string]any{"path": "/ui/login?token=" + tok, "expires_at": exp.UTC()})
	})
}

// Close ends every open stream and waits for their handlers.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for st := range s.streams {
		st.close()
	}
	s.mu.Unlock()
	s.unsub()
	s.stopCharts()
	s.wg.Wait()
	if s.sup != nil {
		// The streams' handlers end as their streams close: the actors
		// then stop, and the supervisor with them.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.sup.Stop(ctx); err != nil {
			s.log.Error().Err(err).Msg("ui: stopping the streams' supervisor")
		}
		cancel()
	}
}

// Conns lists at most max of the streams open now, the oldest first, and
// how many are open.
func (s *Server) Conns(max int) ([]api.ConnInfo, int) {
	if s.sup == nil {
		return nil, 0
	}
	return s.sup.List(max)
}

func (s *Server) emit(ev eventlog.Event) { s.opts.Bus.Emit(ev) }

// from is the origin of the calls a request makes: the dashboard and its
// session (ctx's). A page reads with it; no method only a person may call
// is served to it without an Admit (act's).
func from(ctx context.Context) api.Origin {
	return api.Origin{By: api.ByUI, Session: sessionOf(ctx).id}
}

// getByPath calls method, a get taking {id}, with the id the request's path
// names, and decodes its answer into out; it returns the id. A path whose id
// is not one is refused as invalid params, saying it is not what ("a job")
// id.
func (s *Server) getByPath(ctx context.Context, r *http.Request, what, method string, out any) (string, error) {
	id := r.PathValue("id")
	if !validID(id) {
		return "", api.Errorf(api.CodeInvalidParams, "not %s id: %q", what, clipForm(id))
	}
	return id, s.call(ctx, method, map[string]any{"id": id}, out)
}

// call invokes method and decodes its answer into out (nil: ignored).
func (s *Server) call(ctx context.Context, method string, params, out any) error {
	raw, err := s.opts.Caller.Invoke(ctx, from(ctx), method, params, nil)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decoding the answer of %s: %w", method, err)
	}
	return nil
}
