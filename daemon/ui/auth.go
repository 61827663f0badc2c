package ui

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/orchestrd/orchestrd/api"
)

// cookiePrefix starts the session cookie's name; its path is /ui/.
const cookiePrefix = "orchestrd_ui"

// cookieName is the session cookie's name for r: named for the port the
// browser reached the dashboard on ("orchestrd_ui_8080"), since a browser
// keeps cookies by host, not port: two dashboards on one host (two
// daemons, or two machines' forwarded by SSH to two local ports) would
// each overwrite the other's session, and sign each other out.
func (s *Server) cookieName(r *http.Request) string {
	_, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		port = "80"
		if s.opts.TLS {
			port = "443"
		}
	}
	if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return cookiePrefix
	}
	return cookiePrefix + "_" + port
}

// session is one signed-in browser.
type session struct {
	id      string // a short name for the event log: never the token
	csrf    string
	created time.Time
	expires time.Time
}

// sessions are the signed-in browsers and the one-time links not used
// yet, by the SHA-256 of their token (a lookup compares no secret).
type sessions struct {
	cfg   Config
	mu    sync.Mutex
	byTok map[[32]byte]*session
	links map[[32]byte]time.Time
	// logins bounds sign-in attempts, whoever makes them (a key is 256
	// bits: this keeps a flood from costing anything).
	logins *rate.Limiter
	now    func() time.Time
}

func newSessions(cfg Config) *sessions {
	return &sessions{cfg: cfg, byTok: map[[32]byte]*session{}, links: map[[32]byte]time.Time{},
		logins: rate.NewLimiter(5, 20), now: time.Now}
}

func hashTok(tok string) [32]byte { return sha256.Sum256([]byte(tok)) }

// start signs a browser in: its token (the cookie's value) and session.
// Past MaxSessions the oldest session goes.
func (ss *sessions) start() (string, *session) {
	tok := api.RandomHex(32)
	now := ss.now()
	se := &session{id: api.RandomHex(4), csrf: api.RandomHex(32), created: now, expires: now.Add(ss.cfg.SessionTTL.Duration)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.sweep(now)
	for len(ss.byTok) >= ss.cfg.MaxSessions {
		var oldest [32]byte
		var ot time.Time
		for k, s := range ss.byTok {
			if ot.IsZero() || s.created.Before(ot) {
				oldest, ot = k, s.created
			}
		}
		delete(ss.byTok, oldest)
	}
	ss.byTok[hashTok(tok)] = se
	return tok, se
}

// get is the live session whose token is tok.
func (ss *sessions) get(tok string) (*session, bool) {
	if tok == "" {
		return nil, false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	se, ok := ss.byTok[hashTok(tok)]
	if !ok || !ss.now().Before(se.expires) {
		return nil, false
	}
	return se, true
}

func (ss *sessions) end(tok string) {
	ss.mu.Lock()
	delete(ss.byTok, hashTok(tok))
	ss.mu.Unlock()
}

// newLink makes a one-time sign-in token.
func (ss *sessions) newLink() (string, time.Time) {
	tok := api.RandomHex(32)
	exp := ss.now().Add(ss.cfg.LinkTTL.Duration)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.sweep(ss.now())
	if len(ss.links) >= 64 { // links nobody used: the oldest goes
		var oldest [32]byte
		var ot time.Time
		for k, t := range ss.links {
			if ot.IsZero() || t.Before(ot) {
				oldest, ot = k, t
			}
		}
		delete(ss.links, oldest)
	}
	ss.links[hashTok(tok)] = exp
	return tok, exp
}

// useLink spends a one-time token: true if it was good.
func (ss *sessions) useLink(tok string) bool {
	if tok == "" {
		return false
	}
	h := hashTok(tok)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.links[h]
	delete(ss.links, h)
	return ok && ss.now().Before(exp)
}

// sweep drops what has expired; under mu.
func (ss *sessions) sweep(now time.Time) {
	for k, s := range ss.byTok {
		if !now.Before(s.expires) {
			delete(ss.byTok, k)
		}
	}
	for k, t := range ss.links {
		if !now.Before(t) {
			delete(ss.links, k)
		}
	}
}

// session is r's live session, from its cookie.
func (s *Server) session(r *http.Request) (*session, bool) {
	c, err := r.Cookie(s.cookieName(r))
	if err != nil {
		return nil, false
	}
	return s.sessions.get(c.Value)
}

type sessionKey struct{}

// authed admits a request with a live session. Without one a page is
// sent to sign in; anything else is refused (401).
func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se, ok := s.session(r)
		if !ok {
			if r.Method == http.MethodGet && r.Header.Get("X-Fragment") == "" && !strings.HasSuffix(r.URL.Path, "/output") &&
				r.URL.Path != "/ui/stream" {
				http.Redirect(w, r, "/ui/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "not signed in: sign in at /ui/login with the API key (orchestrd http key) or a link from orchestrd ui", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && !s.csrfOK(r, se) {
			s.emit(SignInFailed{Peer: r.RemoteAddr, Reason: "csrf"})
			http.Error(w, "the form's CSRF token is missing or wrong: reload the page", http.StatusForbidden)
			return
		}
		h(w, r.WithContext(withSession(r.Context(), se)))
	}
}

// csrfOK checks the token a POST carries (form field csrf, or header
// X-CSRF-Token) against its session's.
func (s *Server) csrfOK(r *http.Request, se *session) bool {
	tok := r.Header.Get("X-CSRF-Token")
	if tok == "" {
		r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
		tok = r.PostFormValue("csrf")
	}
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(se.csrf)) == 1
}

// maxFormBytes bounds a form's body.
const maxFormBytes = 64 << 10

func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, tok string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(r), Value: tok, Path: "/ui/", MaxAge: maxAge,
		HttpOnly: true, Secure: s.opts.TLS, SameSite: http.SameSiteStrictMode})
}

// loginPage asks for the key, or spends a one-time link's token.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		if !s.sessions.useLink(tok) {
			s.emit(SignInFailed{Peer: r.RemoteAddr, Reason: "bad_link"})
			s.renderLogin(w, r, http.StatusForbidden, "That sign-in link is used, expired or wrong: run orchestrd ui for a new one, or give the key.")
			return
		}
		if err := s.admitPeer(r, "GET /ui/login"); err != nil {
			s.renderLogin(w, r, http.StatusForbidden, "Refused: a process this daemon started does not sign in.")
			return
		}
		s.signIn(w, r, "link")
		return
	}
	if _, ok := s.session(r); ok {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	s.renderLogin(w, r, http.StatusOK, "")
}

// loginPost signs in with the key.
func (s *Server) loginPost(w http.ResponseWriter, r *http.Request) {
	if !s.sessions.logins.Allow() {
		s.emit(SignInFailed{Peer: r.RemoteAddr, Reason: "rate_limited"})
		s.renderLogin(w, r, http.StatusTooManyRequests, "Too many sign-in attempts: wait a moment.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	key := strings.TrimSpace(r.PostFormValue("key"))
	if subtle.ConstantTimeCompare([]byte(key), []byte(s.opts.Key)) != 1 {
		reason := "wrong_key"
		if key == "" {
			reason = "no_key"
		}
		s.emit(SignInFailed{Peer: r.RemoteAddr, Reason: reason})
		s.renderLogin(w, r, http.StatusForbidden, "That is not this daemon's API key (orchestrd http key prints it).")
		return
	}
	// Only with the right key: the check reads /proc.
	if err := s.admitPeer(r, "POST /ui/login"); err != nil {
		s.renderLogin(w, r, http.StatusForbidden, "Refused: a process this daemon started does not sign in.")
		return
	}
	s.signIn(w, r, "key")
}

func (s *Server) signIn(w http.ResponseWriter, r *http.Request, how string) {
	tok, se := s.sessions.start()
	s.setCookie(w, r, tok, int(s.cfg.SessionTTL.Seconds()))
	s.emit(SignedIn{Session: se.id, Peer: r.RemoteAddr, How: how, ExpiresAt: se.expires.UTC()})
	next := r.PostFormValue("next")
	if next == "" {
		next = r.URL.Query().Get("next")
	}
	http.Redirect(w, r, safeNext(next), http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(s.cookieName(r)); err == nil {
		s.sessions.end(c.Value)
	}
	se := sessionOf(r.Context())
	s.setCookie(w, r, "", -1)
	s.emit(SignedOut{Session: se.id})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// safeNext is where to go after signing in: a path of the dashboard,
// never another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	if u, err := url.Parse(next); err != nil || u.Host != "" || u.Scheme != "" {
		return "/ui/"
	}
	return next
}
