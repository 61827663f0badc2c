package ui

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/state"
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
	csrf    string // filled by get: derived from the token, never stored
	created time.Time
	expires time.Time
}

// sessions are the signed-in browsers and the one-time links not used
// yet, by their token's hash (hashTok: a lookup compares no secret).
// With a store (persist), every session is written through to it, so a
// sign-in outlives a restart or a kill -9 of the daemon: the store holds
// the token's HMAC under the API key, never the token, so a changed key
// ends every session; the CSRF token is derived from the session's token
// the same way (csrfOf) and is not stored either.
type sessions struct {
	cfg   Config
	key   []byte // the API key: what tokens are hashed under
	keyID string // names the key in the store (a hash of it)
	store *state.Store
	log   zerolog.Logger
	mu    sync.Mutex
	// wmu orders start's writes to the store as its changes in memory were
	// made (taken under mu, held for the write): sign-ins at once past
	// MaxSessions would otherwise leave a session evicted from memory
	// stored (its put after its delete), back after a restart.
	wmu   sync.Mutex
	byTok map[[32]byte]*session
	links map[[32]byte]time.Time
	// logins bounds sign-in attempts, whoever makes them (a key is 256
	// bits: this keeps a flood from costing anything).
	logins *rate.Limiter
	now    func() time.Time
	swept  time.Time // get's last sweep
}

// sweepEvery is how often a request sweeps the expired sessions.
const sweepEvery = time.Minute

func newSessions(cfg Config, key string) *sessions {
	ss := &sessions{cfg: cfg, key: []byte(key), byTok: map[[32]byte]*session{}, links: map[[32]byte]time.Time{},
		logins: rate.NewLimiter(5, 20), now: time.Now, log: zerolog.Nop()}
	ss.keyID = hex.EncodeToString(ss.mac("key id", "")[:8])
	return ss
}

// mac is the HMAC-SHA256 under the API key of what, for purpose.
func (ss *sessions) mac(purpose, what string) []byte {
	m := hmac.New(sha256.New, ss.key)
	m.Write([]byte("orchestrd ui " + purpose + "\x00" + what))
	return m.Sum(nil)
}

func (ss *sessions) hashTok(tok string) [32]byte { return [32]byte(ss.mac("token", tok)) }

// csrfOf is the CSRF token of the session whose token is tok.
func (ss *sessions) csrfOf(tok string) string { return hex.EncodeToString(ss.mac("csrf", tok)) }

// storeWait bounds how long a sign-in or sign-out waits for the store.
const storeWait = 5 * time.Second

// persist makes st the sessions' store: it reads the sessions stored
// there back (a restart's), drops the ended ones, another key's and those
// past MaxSessions (the oldest), and says so (SessionsRestored, when there
// were any).
func (ss *sessions) persist(st *state.Store, log zerolog.Logger) (SessionsRestored, error) {
	ss.store, ss.log = st, log
	rows, err := st.UISessions().All()
	if err != nil {
		return SessionsRestored{}, fmt.Errorf("reading the dashboard's sessions: %w", err)
	}
	now := ss.now()
	var ev SessionsRestored
	var kept []state.UISessionRow
	for _, r := range rows {
		switch {
		case r.KeyID != ss.keyID:
			ev.OtherKey++
		case !now.Before(time.UnixMilli(r.Expires)):
			ev.Expired++
		case len(r.TokenHash) != 32:
			ev.Expired++ // not one of ours: dropped by the prune below
		default:
			kept = append(kept, r)
		}
	}
	var drop []state.Write
	if n := len(kept) - ss.cfg.MaxSessions; n > 0 { // rows are oldest first
		for _, r := range kept[:n] {
			drop = append(drop, state.UISessionDeleted(r.TokenHash))
		}
		ev.OverLimit, kept = n, kept[n:]
	}
	ss.mu.Lock()
	for _, r := range kept {
		ss.byTok[[32]byte(r.TokenHash)] = &session{id: r.ID, created: time.UnixMilli(r.Created), expires: time.UnixMilli(r.Expires)}
	}
	ss.mu.Unlock()
	ev.Restored = len(kept)
	if ev.OtherKey+ev.Expired > 0 {
		drop = append(drop, state.UISessionsPruned(now.UnixMilli(), ss.keyID))
	}
	if len(drop) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), storeWait)
		defer cancel()
		if err := st.Do(ctx, drop...); err != nil {
			return ev, fmt.Errorf("dropping the dashboard's ended sessions: %w", err)
		}
	}
	return ev, nil
}

// write records ws in the store, if there is one; a failure is logged
// (the session lives on in memory, and not past a restart).
func (ss *sessions) write(wait bool, ws ...state.Write) {
	if ss.store == nil || len(ws) == 0 {
		return
	}
	if wait {
		ctx, cancel := context.WithTimeout(context.Background(), storeWait)
		defer cancel()
		if err := ss.store.Do(ctx, ws...); err != nil {
			ss.log.Warn().Err(err).Msg("ui: recording a dashboard session")
		}
		return
	}
	for _, w := range ws {
		if err := ss.store.Enqueue(w, func(err error) {
			if err != nil {
				ss.log.Warn().Err(err).Msg("ui: recording a dashboard session")
			}
		}); err != nil {
			ss.log.Warn().Err(err).Msg("ui: recording a dashboard session")
		}
	}
}

// start signs a browser in: its token (the cookie's value) and session,
// recorded before it returns. Past MaxSessions the oldest session goes.
func (ss *sessions) start() (string, *session) {
	tok := api.RandomHex(32)
	now := ss.now()
	se := &session{id: api.RandomHex(4), created: now, expires: now.Add(ss.cfg.SessionTTL.Duration)}
	h := ss.hashTok(tok)
	ss.mu.Lock()
	gone := ss.sweep(now)
	for len(ss.byTok) >= ss.cfg.MaxSessions {
		var oldest [32]byte
		var ot time.Time
		for k, s := range ss.byTok {
			if ot.IsZero() || s.created.Before(ot) {
				oldest, ot = k, s.created
			}
		}
		delete(ss.byTok, oldest)
		gone = append(gone, state.UISessionDeleted(oldest[:]))
	}
	ss.byTok[h] = se
	ss.wmu.Lock()
	ss.mu.Unlock()
	ss.write(true, append(gone, state.UISessionPut(state.UISessionRow{TokenHash: h[:], ID: se.id, KeyID: ss.keyID,
		Created: se.created.UnixMilli(), Expires: se.expires.UnixMilli()}))...)
	ss.wmu.Unlock()
	c := *se
	c.csrf = ss.csrfOf(tok)
	return tok, &c
}

// get is the live session whose token is tok.
func (ss *sessions) get(tok string) (*session, bool) {
	if tok == "" {
		return nil, false
	}
	h := ss.hashTok(tok)
	now := ss.now()
	ss.mu.Lock()
	var gone []state.Write
	if now.Sub(ss.swept) >= sweepEvery { // what expired unused goes from the store too
		ss.swept = now
		gone = ss.sweep(now)
	}
	se, ok := ss.byTok[h]
	if ok && !now.Before(se.expires) {
		delete(ss.byTok, h)
		gone = append(gone, state.UISessionDeleted(h[:]))
		ok = false
	}
	ss.mu.Unlock()
	ss.write(false, gone...)
	if !ok {
		return nil, false
	}
	c := *se
	c.csrf = ss.csrfOf(tok)
	return &c, true
}

// end signs a session out, recorded before it returns.
func (ss *sessions) end(tok string) {
	h := ss.hashTok(tok)
	ss.mu.Lock()
	delete(ss.byTok, h)
	ss.mu.Unlock()
	ss.write(true, state.UISessionDeleted(h[:]))
}

// newLink makes a one-time sign-in token.
func (ss *sessions) newLink() (string, time.Time) {
	tok := api.RandomHex(32)
	exp := ss.now().Add(ss.cfg.LinkTTL.Duration)
	ss.mu.Lock()
	gone := ss.sweep(ss.now())
	defer func() { ss.mu.Unlock(); ss.write(false, gone...) }()
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
	ss.links[ss.hashTok(tok)] = exp
	return tok, exp
}

// useLink spends a one-time token: true if it was good.
func (ss *sessions) useLink(tok string) bool {
	if tok == "" {
		return false
	}
	h := ss.hashTok(tok)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.links[h]
	delete(ss.links, h)
	return ok && ss.now().Before(exp)
}

// sweep drops what has expired, under mu: the store's writes that drop
// the sessions too.
func (ss *sessions) sweep(now time.Time) []state.Write {
	var gone []state.Write
	for k, s := range ss.byTok {
		if !now.Before(s.expires) {
			delete(ss.byTok, k)
			gone = append(gone, state.UISessionDeleted(k[:]))
		}
	}
	for k, t := range ss.links {
		if !now.Before(t) {
			delete(ss.links, k)
		}
	}
	return gone
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
		r.Body = http.MaxBytesReader(nil, r.Body, formBound(r))
		tok = r.PostFormValue("csrf")
	}
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(se.csrf)) == 1
}

// formBound is how large a form r posts may be (its token is read from
// it, without script): a start form's or an action's own bound, else
// maxFormBytes.
func formBound(r *http.Request) int64 {
	if _, ok := strings.CutPrefix(r.URL.Path, "/ui/start/"); ok {
		return startFormBytes
	}
	if name, ok := strings.CutPrefix(r.URL.Path, "/ui/act/"); ok && actions[name] != nil && actions[name].Body > 0 {
		return actions[name].Body
	}
	return maxFormBytes
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
