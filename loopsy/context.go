package loopsy

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/state"
)

// Store is where Loopsy keeps what must survive a restart: the shared
// context and the peers. Writes go through Enqueue (applied in order); the
// answer to a request that changed something waits for its commit.
type Store interface {
	Enqueue(w state.Write, done func(error)) error
	Context(nowMs int64) ([]state.LoopsyRow, error)
	Peers() ([]state.LoopsyRow, error)
}

// ContextEntry is Loopsy's ContextEntry, as every context endpoint answers.
type ContextEntry struct {
	Key        string   `json:"key"`
	Value      string   `json:"value"`
	FromNodeID string   `json:"fromNodeId"`
	CreatedAt  int64    `json:"createdAt"`
	UpdatedAt  int64    `json:"updatedAt"`
	TTL        *float64 `json:"ttl,omitempty"` // seconds
	ExpiresAt  int64    `json:"expiresAt,omitempty"`
}

func (e *ContextEntry) expired(nowMs int64) bool { return e.ExpiresAt != 0 && e.ExpiresAt <= nowMs }

// maxContextKey bounds a context key, in bytes.
const maxContextKey = 256

// ctxStore is the shared context: a map readers see at once, written
// through to the store in the order of the changes. An expired entry is
// gone for readers at once and pruned from the store in the background.
type ctxStore struct {
	writeThrough
	mu  sync.Mutex
	m   map[string]*ContextEntry
	cfg Config
	now func() time.Time
}

func newCtxStore(st Store, cfg Config) (*ctxStore, error) {
	c := &ctxStore{writeThrough: writeThrough{st}, m: map[string]*ContextEntry{}, cfg: cfg, now: time.Now}
	if st == nil {
		return c, nil
	}
	rows, err := st.Context(c.now().UnixMilli())
	if c.m, err = decodeRows(rows, err, "the shared context", func(e *ContextEntry) string { return e.Key }); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeRows reads the store's documents (what: "the peers") into a map
// by key; a document that does not decode, or whose own key is not its
// row's, is refused.
func decodeRows[T any](rows []state.LoopsyRow, err error, what string, key func(*T) string) (map[string]*T, error) {
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	m := make(map[string]*T, len(rows))
	for _, r := range rows {
		v := new(T)
		if err := json.Unmarshal(r.Doc, v); err != nil || key(v) != r.Key {
			return nil, fmt.Errorf("reading %s: the row of %q does not hold its record (%v)", what, r.Key, err)
		}
		m[r.Key] = v
	}
	return m, nil
}

// writeThrough records changes made in memory: callers commit under the
// lock that guards their map, so commits follow the order of the changes.
type writeThrough struct{ st Store } // nil: memory only

// commit queues w and returns what to wait on.
func (t writeThrough) commit(w state.Write) <-chan error {
	ch := make(chan error, 1)
	if t.st == nil {
		ch <- nil
		return ch
	}
	if err := t.st.Enqueue(w, func(err error) { ch <- err }); err != nil {
		ch <- err
	}
	return ch
}

func checkContextKey(key string) error {
	switch {
	case key == "":
		return &refusal{CodeInvalidRequest, "a context key must not be empty"}
	case len(key) > maxContextKey:
		return &refusal{CodeInvalidRequest, fmt.Sprintf("a context key is at most %d bytes, got %d", maxContextKey, len(key))}
	case !utf8.ValidString(key) || strings.ContainsRune(key, 0):
		return &refusal{CodeInvalidRequest, "a context key must be UTF-8 text without NUL"}
	}
	return nil
}

// put sets key; the entry is visible at once and durable once wait
// returns nil. When the store refused it, wait puts back what was there
// (unless another change came since) and returns the error. doc is the
// entry as JSON: what the store keeps and what the API answers.
func (c *ctxStore) put(key, value, from string, ttl *float64) (doc []byte, wait func() error, err error) {
	if err := checkContextKey(key); err != nil {
		return nil, nil, err
	}
	if len(value) > c.cfg.MaxValueBytes {
		return nil, nil, &refusal{CodeContextTooLarge,
			fmt.Sprintf("Value exceeds max size of %d bytes (got %d)", c.cfg.MaxValueBytes, len(value))}
	}
	now := c.now().UnixMilli()
	e := &ContextEntry{Key: key, Value: value, FromNodeID: from, CreatedAt: now, UpdatedAt: now, TTL: ttl}
	if ttl != nil {
		e.ExpiresAt = now + int64(math.Ceil(*ttl*1000))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.m[key]
	if prev != nil && prev.expired(now) {
		prev = nil
	}
	if prev == nil && c.live(now) >= c.cfg.MaxEntries {
		return nil, nil, &refusal{CodeContextMaxEntries,
			fmt.Sprintf("Max context entries (%d) reached", c.cfg.MaxEntries)}
	}
	if prev != nil {
		e.CreatedAt = prev.CreatedAt
	}
	// Encoded under the lock, once: the entry's CreatedAt is its
	// predecessor's, and the commits follow the order of the changes.
	if doc, err = json.Marshal(e); err != nil {
		return nil, nil, fmt.Errorf("encoding context entry %q: %w", key, err)
	}
	c.m[key] = e
	done := c.commit(state.ContextPut(state.LoopsyRow{Key: key, Doc: doc, Expires: e.ExpiresAt}))
	wait = func() error {
		err := <-done
		if err != nil {
			c.mu.Lock()
			if c.m[key] == e {
				if prev != nil {
					c.m[key] = prev
				} else {
					delete(c.m, key)
				}
			}
			c.mu.Unlock()
		}
		return err
	}
	return doc, wait, nil
}

// live counts the entries not expired at now, dropping the expired ones
// from memory (the store's rows go with the next prune).
func (c *ctxStore) live(now int64) int {
	for k, e := range c.m {
		if e.expired(now) {
			delete(c.m, k)
		}
	}
	return len(c.m)
}

func (c *ctxStore) get(key string) (ContextEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[key]
	if e == nil || e.expired(c.now().UnixMilli()) {
		return ContextEntry{}, false
	}
	return *e, true
}

// del removes key: false if there was none (or it had expired).
func (c *ctxStore) del(key string) (bool, <-chan error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[key]
	if e == nil {
		return false, nil
	}
	delete(c.m, key)
	if e.expired(c.now().UnixMilli()) {
		return false, nil
	}
	return true, c.commit(state.ContextDeleted(key))
}

func (c *ctxStore) list(prefix string) []ContextEntry {
	c.mu.Lock()
	now := c.now().UnixMilli()
	out := make([]ContextEntry, 0, len(c.m))
	for k, e := range c.m {
		if !e.expired(now) && strings.HasPrefix(k, prefix) {
			out = append(out, *e)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b ContextEntry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// prune removes the entries expired by now from memory and the store.
func (c *ctxStore) prune() <-chan error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().UnixMilli()
	c.live(now)
	return c.commit(state.ContextPruned(now))
}

// pruneLoop prunes every interval until stop is closed.
func (c *ctxStore) pruneLoop(interval time.Duration, stop <-chan struct{}, logErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			select {
			case err := <-c.prune():
				if err != nil {
					logErr(err)
				}
			case <-stop:
				return
			}
		}
	}
}
