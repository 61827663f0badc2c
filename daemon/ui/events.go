package ui

import (
	"context"
	"net/url"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// SignedIn: a browser signed in to the dashboard, with the key or a
// one-time link (how). Session is a short name for it, not its token.
type SignedIn struct {
	Session   string    `json:"session"`
	Peer      string    `json:"peer"`
	How       string    `json:"how"` // key, link
	ExpiresAt time.Time `json:"expires_at"`
}

func (SignedIn) Kind() string { return "ui.signed_in" }

// SignedOut: a session signed out.
type SignedOut struct {
	Session string `json:"session"`
}

func (SignedOut) Kind() string { return "ui.signed_out" }

// SignInFailed: a request was refused: reason no_key, wrong_key,
// bad_link, rate_limited, csrf (a POST without its session's token) or
// cross_origin (a POST another site's page made).
type SignInFailed struct {
	Peer   string `json:"peer"`
	Reason string `json:"reason"`
}

func (SignInFailed) Kind() string { return "ui.sign_in_failed" }

// SessionsRestored: at start, the dashboard read back the sessions it had
// stored (a restart's, a crash's): Restored are signed in still; it
// dropped those that had expired, those made under another API key (the
// key changed: they are signed out) and the oldest past max_sessions.
type SessionsRestored struct {
	Restored  int `json:"restored"`
	Expired   int `json:"expired"`
	OtherKey  int `json:"other_key"`
	OverLimit int `json:"over_limit"`
}

func (SessionsRestored) Kind() string { return "ui.sessions_restored" }

func init() { eventlog.Register(SignedIn{}, SignedOut{}, SignInFailed{}, SessionsRestored{}) }

type ctxSession struct{}

func withSession(ctx context.Context, se *session) context.Context {
	return context.WithValue(ctx, ctxSession{}, se)
}

func sessionOf(ctx context.Context) *session {
	se, _ := ctx.Value(ctxSession{}).(*session)
	if se == nil {
		return &session{}
	}
	return se
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
