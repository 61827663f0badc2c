package state

import (
	"errors"
)

// Loopsy is the record of the HTTP API's shared state: its context entries
// (each an opaque JSON document, with its expiry in Unix milliseconds, 0
// for none) and its known peers (JSON documents by node id). The API
// keeps both in memory and writes through; these rows are what a restart
// reads back.
type Loopsy struct{ s *Store }

// Loopsy returns the HTTP API's part of the store.
func (s *Store) Loopsy() Loopsy { return Loopsy{s} }

// LoopsyRow is one stored document.
type LoopsyRow struct {
	Key     string
	Doc     []byte
	Expires int64 // context only: Unix ms, 0 never
}

// Context reads every context entry that has not expired by nowMs.
func (l Loopsy) Context(nowMs int64) ([]LoopsyRow, error) {
	var out []LoopsyRow
	err := l.s.query("read the shared context",
		`SELECT key, entry, expires FROM http_context WHERE expires = 0 OR expires > ? ORDER BY key`, func(sc scanner) error {
			var r LoopsyRow
			var doc string
			if err := sc.Scan(&r.Key, &doc, &r.Expires); err != nil {
				return err
			}
			r.Doc = []byte(doc)
			out = append(out, r)
			return nil
		}, nowMs)
	return out, err
}

// Peers reads every known peer.
func (l Loopsy) Peers() ([]LoopsyRow, error) {
	var out []LoopsyRow
	err := l.s.query("read the peers", `SELECT node_id, peer FROM http_peers ORDER BY node_id`, func(sc scanner) error {
		var r LoopsyRow
		var doc string
		if err := sc.Scan(&r.Key, &doc); err != nil {
			return err
		}
		r.Doc = []byte(doc)
		out = append(out, r)
		return nil
	})
	return out, err
}

// ContextPut records (or replaces) a context entry.
func ContextPut(r LoopsyRow) Write { return &loopsyWrite{kind: "context", put: true, r: r} }

// ContextDeleted removes a context entry (no error if it is gone).
func ContextDeleted(key string) Write { return &loopsyWrite{kind: "context", r: LoopsyRow{Key: key}} }

// ContextPruned removes the context entries expired by nowMs.
func ContextPruned(nowMs int64) Write { return &loopsyWrite{kind: "context", prune: nowMs} }

// PeerPut records (or replaces) a peer.
func PeerPut(r LoopsyRow) Write { return &loopsyWrite{kind: "peer", put: true, r: r} }

// PeerDeleted removes a peer (no error if it is gone).
func PeerDeleted(nodeID string) Write { return &loopsyWrite{kind: "peer", r: LoopsyRow{Key: nodeID}} }

type loopsyWrite struct {
	kind  string // context, peer
	put   bool
	prune int64
	r     LoopsyRow
}

func (w *loopsyWrite) what() string {
	switch {
	case w.prune > 0:
		return "prune the expired context entries"
	case w.put:
		return "record " + w.kind + " " + w.r.Key
	}
	return "remove " + w.kind + " " + w.r.Key
}

func (w *loopsyWrite) prepare() error {
	if w.prune == 0 && w.r.Key == "" {
		return errors.New("no key")
	}
	if w.put && len(w.r.Doc) == 0 {
		return errors.New("no document")
	}
	return nil
}

func (w *loopsyWrite) apply(t *wtx) error {
	var err error
	switch {
	case w.prune > 0:
		_, err = t.exec(`DELETE FROM http_context WHERE expires > 0 AND expires <= ?`, w.prune)
	case w.kind == "context" && w.put:
		_, err = t.exec(`INSERT INTO http_context(key, entry, expires) VALUES (?, ?, ?)
			ON CONFLICT(key) DO UPDATE SET entry = excluded.entry, expires = excluded.expires`, w.r.Key, string(w.r.Doc), w.r.Expires)
	case w.kind == "context":
		_, err = t.exec(`DELETE FROM http_context WHERE key = ?`, w.r.Key)
	case w.put:
		_, err = t.exec(`INSERT INTO http_peers(node_id, peer) VALUES (?, ?)
			ON CONFLICT(node_id) DO UPDATE SET peer = excluded.peer`, w.r.Key, string(w.r.Doc))
	default:
		_, err = t.exec(`DELETE FROM http_peers WHERE node_id = ?`, w.r.Key)
	}
	return err
}
