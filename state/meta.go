package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Meta is the meta table: small named values the daemon keeps across
// restarts (the node id, counters such as the event log's seq).
type Meta struct{ s *Store }

// Meta returns the meta table's interface.
func (s *Store) Meta() Meta { return Meta{s} }

// Get returns a value; ok is false when key has none.
func (m Meta) Get(key string) (value string, ok bool, err error) {
	st, err := m.s.read("SELECT value FROM meta WHERE key = ?")
	if err == nil {
		err = st.QueryRowContext(bg, key).Scan(&value)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, m.s.readErr("read meta "+key, err)
	}
	return value, true, nil
}

// Set stores a value, once committed.
func (m Meta) Set(ctx context.Context, key, value string) error {
	return m.s.Do(ctx, &metaSet{key: key, value: value})
}

// Reserve hands out the next n numbers of the counter key: first is the
// first of them (1 for a new counter), and the counter then stands at
// first+n-1. A number is never handed out twice, across restarts and
// crashes: a daemon that died wasted at most the rest of its range. The
// event log reserves its seq numbers in blocks this way.
func (m Meta) Reserve(ctx context.Context, key string, n int64) (first int64, err error) {
	w := &metaReserve{key: key, n: n}
	if err := m.s.Do(ctx, w); err != nil {
		return 0, err
	}
	return w.first, nil
}

// ReserveLater is Reserve without waiting: done gets the first number of
// the range once it is committed, or the error, on the writer goroutine
// (see Enqueue: it must return quickly and not call the Store). An error
// returned here means nothing was queued and done is not called. The event
// log asks for its next seq range this way from inside Emit.
func (m Meta) ReserveLater(key string, n int64, done func(first int64, err error)) error {
	w := &metaReserve{key: key, n: n}
	return m.s.Enqueue(w, func(err error) { done(w.first, err) })
}

type metaSet struct{ key, value string }

func (w *metaSet) what() string { return "set meta " + w.key }
func (w *metaSet) prepare() error {
	if w.key == "" {
		return errors.New("empty key")
	}
	return nil
}
func (w *metaSet) apply(t *wtx) error {
	_, err := t.exec("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", w.key, w.value)
	return err
}

type metaReserve struct {
	key   string
	n     int64
	first int64 // the result
}

func (w *metaReserve) what() string { return "reserve from counter " + w.key }
func (w *metaReserve) prepare() error {
	if w.key == "" {
		return errors.New("empty key")
	}
	if w.n < 1 {
		return fmt.Errorf("cannot reserve %d numbers", w.n)
	}
	return nil
}
func (w *metaReserve) apply(t *wtx) error {
	var cur int64
	var s string
	err := t.queryRow("SELECT value FROM meta WHERE key = ?", w.key).Scan(&s)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		if cur, err = strconv.ParseInt(s, 10, 64); err != nil || cur < 0 {
			return fmt.Errorf("counter holds %q, not a count", s)
		}
	}
	if cur > (1<<63-1)-w.n {
		return fmt.Errorf("counter at %d cannot grow by %d", cur, w.n)
	}
	if _, err := t.exec("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
		w.key, strconv.FormatInt(cur+w.n, 10)); err != nil {
		return err
	}
	w.first = cur + 1
	return nil
}

// metaOpened is Open's write: the node id at the first open, the time of
// this one.
type metaOpened struct {
	newID  string
	at     time.Time
	nodeID string // the result
}

func (w *metaOpened) what() string   { return "record the open" }
func (w *metaOpened) prepare() error { return nil }
func (w *metaOpened) apply(t *wtx) error {
	if _, err := t.exec("INSERT INTO meta(key, value) VALUES('node_id', ?) ON CONFLICT(key) DO NOTHING", w.newID); err != nil {
		return err
	}
	if _, err := t.exec("INSERT INTO meta(key, value) VALUES('opened_at', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
		fmtTime(w.at)); err != nil {
		return err
	}
	return t.queryRow("SELECT value FROM meta WHERE key = 'node_id'").Scan(&w.nodeID)
}
