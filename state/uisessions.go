package state

import (
	"errors"
	"fmt"
)

// UISessions is the record of the dashboard's signed-in sessions: what
// lets a sign-in outlive a restart or a crash of the daemon. A session's
// token (its cookie) is never stored: only a hash of it (TokenHash: the
// dashboard's HMAC of the token under the API key), a short name for the
// event log (ID), which key it was made under (KeyID: a hash of the key)
// and when it was made and ends.
type UISessions struct{ s *Store }

// UISessions returns the dashboard's part of the store.
func (s *Store) UISessions() UISessions { return UISessions{s} }

// UISessionRow is one stored session. Times are Unix milliseconds.
type UISessionRow struct {
	TokenHash []byte // 32 bytes
	ID        string
	KeyID     string
	Created   int64
	Expires   int64
}

// All reads every stored session, the oldest first (expired ones and
// other keys' too: the caller says which it drops, with UISessionsPruned).
func (u UISessions) All() ([]UISessionRow, error) {
	var out []UISessionRow
	err := u.s.query("read the dashboard's sessions",
		`SELECT token_hash, id, key_id, created, expires FROM ui_sessions ORDER BY created, id`, func(sc scanner) error {
			var r UISessionRow
			if err := sc.Scan(&r.TokenHash, &r.ID, &r.KeyID, &r.Created, &r.Expires); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	return out, err
}

// UISessionPut records a session.
func UISessionPut(r UISessionRow) Write { return &uiSessionWrite{put: true, r: r} }

// UISessionDeleted removes a session by its token's hash (no error if it
// is gone).
func UISessionDeleted(tokenHash []byte) Write {
	return &uiSessionWrite{r: UISessionRow{TokenHash: tokenHash}}
}

// UISessionsPruned removes the sessions that ended by nowMs and those of
// any key but keyID.
func UISessionsPruned(nowMs int64, keyID string) Write {
	return &uiSessionWrite{prune: true, r: UISessionRow{KeyID: keyID, Expires: nowMs}}
}

type uiSessionWrite struct {
	put, prune bool
	r          UISessionRow
}

func (w *uiSessionWrite) what() string {
	switch {
	case w.prune:
		return "prune the dashboard's ended sessions"
	case w.put:
		return "record dashboard session " + w.r.ID
	}
	return "remove a dashboard session"
}

func (w *uiSessionWrite) prepare() error {
	if w.prune {
		if w.r.KeyID == "" {
			return errors.New("no key id")
		}
		return nil
	}
	if len(w.r.TokenHash) != 32 {
		return fmt.Errorf("a token hash is 32 bytes, got %d", len(w.r.TokenHash))
	}
	if w.put && (w.r.ID == "" || w.r.KeyID == "" || w.r.Expires <= w.r.Created) {
		return errors.New("a session needs an id, a key id and an end after its start")
	}
	return nil
}

func (w *uiSessionWrite) apply(t *wtx) error {
	var err error
	switch {
	case w.prune:
		_, err = t.exec(`DELETE FROM ui_sessions WHERE expires <= ? OR key_id <> ?`, w.r.Expires, w.r.KeyID)
	case w.put:
		_, err = t.exec(`INSERT INTO ui_sessions(token_hash, id, key_id, created, expires) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(token_hash) DO UPDATE SET id = excluded.id, key_id = excluded.key_id,
			created = excluded.created, expires = excluded.expires`,
			w.r.TokenHash, w.r.ID, w.r.KeyID, w.r.Created, w.r.Expires)
	default:
		_, err = t.exec(`DELETE FROM ui_sessions WHERE token_hash = ?`, w.r.TokenHash)
	}
	return err
}
