package ui

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/state"
)

// storeSetup is a new store's path, a moment and the default [ui].
func storeSetup(t *testing.T) (string, time.Time, Config) {
	return filepath.Join(t.TempDir(), "state.db"), time.Unix(1_800_000_000, 0), DefaultConfig()
}

// storedSessions is a sessions over the store at path, as a daemon that
// starts makes it: what it read back, and the store (closed at the end).
func storedSessions(t *testing.T, path string, cfg Config, key string, now time.Time) (*sessions, SessionsRestored, *state.Store) {
	t.Helper()
	st, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ss := newSessions(cfg, key)
	ss.now = func() time.Time { return now }
	ev, err := ss.persist(st, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return ss, ev, st
}

// A stored session is found again after the store is reopened (a
// restart), with the same name and CSRF token; one signed out is not.
// The store's files never hold a token, a CSRF token or the key.
func TestSessionsStored(t *testing.T) {
	path, now, cfg := storeSetup(t)
	ss, ev, st := storedSessions(t, path, cfg, testKey, now)
	if ev != (SessionsRestored{}) {
		t.Fatalf("a new store restored %+v", ev)
	}
	a, sa := ss.start()
	b, _ := ss.start()
	ss.end(b)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	ss2, ev, st2 := storedSessions(t, path, cfg, testKey, now.Add(time.Hour))
	if ev != (SessionsRestored{Restored: 1}) {
		t.Fatalf("restored %+v, want the one session signed in", ev)
	}
	got, ok := ss2.get(a)
	if !ok || got.id != sa.id || got.csrf != sa.csrf || !got.expires.Equal(sa.expires.Truncate(time.Millisecond)) {
		t.Fatalf("after a restart the session is %+v (%v), want %+v", got, ok, sa)
	}
	if _, ok := ss2.get(b); ok {
		t.Fatal("a session signed out came back after a restart")
	}
	if err := st2.Close(); err != nil {
		t.Fatal(err)
	}

	// Every file of the store, byte for byte: no secret in any form.
	var all []byte
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, raw...)
	}
	if !bytes.Contains(all, []byte(sa.id)) {
		t.Fatalf("the store's files (%v) do not hold the session at all: the check below proves nothing", files)
	}
	for name, secret := range map[string]string{"token a": a, "token b": b, "csrf": sa.csrf, "key": testKey} {
		raw, _ := hex.DecodeString(secret)
		up := strings.ToUpper(secret)
		if bytes.Contains(all, []byte(secret)) || bytes.Contains(all, raw) || bytes.Contains(all, []byte(up)) {
			t.Errorf("the store's files hold the %s", name)
		}
		sum := hashOf(secret)
		if bytes.Contains(all, sum[:]) {
			t.Errorf("the store's files hold a plain SHA-256 of the %s", name)
		}
	}
}

// A changed API key signs every stored session out, and drops them.
func TestSessionsStoredKeyChanged(t *testing.T) {
	path, now, cfg := storeSetup(t)
	ss, _, st := storedSessions(t, path, cfg, testKey, now)
	a, _ := ss.start()
	st.Close()

	otherKey := strings.Repeat("f", 64)
	ss2, ev, st2 := storedSessions(t, path, cfg, otherKey, now)
	if ev != (SessionsRestored{OtherKey: 1}) {
		t.Fatalf("with another key restored %+v, want the session dropped for the key", ev)
	}
	if _, ok := ss2.get(a); ok {
		t.Fatal("a session made under the old key signs in under the new one")
	}
	st2.Close()
	// Back to the first key: the session was dropped, not kept aside.
	ss3, ev, _ := storedSessions(t, path, cfg, testKey, now)
	if _, ok := ss3.get(a); ok || ev != (SessionsRestored{}) {
		t.Fatalf("the dropped session came back with the old key (%+v)", ev)
	}
}

// A stored session ends when it expires, across a restart too; past
// max_sessions the oldest stored ones go at start.
func TestSessionsStoredExpiryAndBound(t *testing.T) {
	path, now, cfg := storeSetup(t)
	ss, _, st := storedSessions(t, path, cfg, testKey, now)
	var toks []string
	for i := range 4 {
		ss.now = func() time.Time { return now.Add(time.Duration(i) * time.Minute) }
		tok, _ := ss.start()
		toks = append(toks, tok)
	}
	st.Close()

	// A restart with max_sessions 3: the oldest goes.
	cfg.MaxSessions = 3
	ss2, ev, st2 := storedSessions(t, path, cfg, testKey, now.Add(5*time.Minute))
	if ev != (SessionsRestored{Restored: 3, OverLimit: 1}) {
		t.Fatalf("restored %+v, want 3 and the oldest over the bound", ev)
	}
	if _, ok := ss2.get(toks[0]); ok {
		t.Fatal("the oldest session outlived max_sessions")
	}
	for _, tok := range toks[1:] {
		if _, ok := ss2.get(tok); !ok {
			t.Fatal("a live session was lost at start")
		}
	}
	st2.Close()

	// Once they expired, a restart restores none and drops them.
	later := now.Add(cfg.SessionTTL.Duration + 2*time.Minute) // the first three have ended, not the fourth
	ss3, ev, st3 := storedSessions(t, path, cfg, testKey, later)
	if ev != (SessionsRestored{Restored: 1, Expired: 2}) {
		t.Fatalf("restored %+v, want one live and two expired", ev)
	}
	if _, ok := ss3.get(toks[1]); ok {
		t.Fatal("an expired session signed in after a restart")
	}
	rows, err := st3.UISessions().All()
	if err != nil || len(rows) != 1 {
		t.Fatalf("the store holds %d sessions (%v), want the one live", len(rows), err)
	}
	// And one that expires while the daemon runs is swept from the store,
	// whatever a browser asks.
	ss3.now = func() time.Time { return later.Add(time.Hour) }
	if _, ok := ss3.get("not-a-token"); ok {
		t.Fatal("a made-up token signed in")
	}
	waitStore(t, func() bool { rows, _ := st3.UISessions().All(); return len(rows) == 0 })
}

func waitStore(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the store was not swept within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Through the server: a browser signed in before a restart (a new Server
// over the same store, on the same address) is signed in after it, its
// CSRF token still good, and the restart says so; one signed out is not.
func TestSignInSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := newHarness(t, Config{}, st)
	c, out := h.client(), h.client()
	tok := h.signIn(c)
	otok := h.signIn(out)
	if resp, _ := h.do(out, "POST", "/ui/logout", url.Values{"csrf": {otok}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	h.srv.Close()
	host := strings.TrimPrefix(h.http.URL, "http://")

	h2 := newHarness(t, Config{}, st)
	h2.waitEvent("ui.sessions_restored", func(line string) bool { return strings.Contains(line, `"restored":1,`) })
	// The browser reaches the restarted daemon where it reached the old one.
	same := map[string]string{"Host": host}
	resp, body := h2.do(c, http.MethodGet, "/ui/", nil, same)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "<h1>Overview</h1>") {
		t.Fatalf("after a restart the overview answered %d: %.300s", resp.StatusCode, body)
	}
	same["X-CSRF-Token"], same["Accept"] = tok, "application/json"
	resp, body = h2.do(c, "POST", "/ui/act/job.cancel", url.Values{"id": {"j-1"}}, same)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("the page's CSRF token after a restart: %d %s", resp.StatusCode, body)
	}
	if resp, _ := h2.do(out, http.MethodGet, "/ui/", nil, map[string]string{"Host": host}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a browser signed out before the restart got %d, want sent to sign in", resp.StatusCode)
	}
}

// hashOf is a plain SHA-256 of a hex secret's bytes and of its text.
func hashOf(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Sign-ins at once, past max_sessions: the store holds exactly the
// sessions kept in memory, so a session that went for a newer one (the
// oldest past the bound) never comes back after a restart, whatever
// order the sign-ins' writes reached the store in.
func TestSessionsStoredRacingSignIns(t *testing.T) {
	path, now, cfg := storeSetup(t)
	cfg.MaxSessions = 2
	ss, _, st := storedSessions(t, path, cfg, testKey, now)
	for round := range 40 {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() { defer wg.Done(); ss.start() }()
		}
		wg.Wait()
		rows, err := st.UISessions().All()
		if err != nil {
			t.Fatal(err)
		}
		ss.mu.Lock()
		kept := len(ss.byTok)
		for _, r := range rows {
			if _, ok := ss.byTok[[32]byte(r.TokenHash)]; !ok {
				kept = -1
			}
		}
		ss.mu.Unlock()
		if kept != cfg.MaxSessions || len(rows) != kept {
			t.Fatalf("round %d: %d sessions stored, %d in memory (-1: one stored is not), max_sessions %d",
				round, len(rows), kept, cfg.MaxSessions)
		}
	}
}
