package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// pruneChunk is the most rows one prune write deletes, so that pruning a
// big backlog never holds the writer long.
const pruneChunk = 500

// pruneQueries are how a table's finished rows are pruned (Jobs.Prune,
// Approvals.Prune). noun names the rows in errors. last reads the time
// and the key of the keep-th most recently finished row (its argument is
// keep-1); beforeLast deletes at most a chunk of the finished rows older
// than that one (its time twice, its key, the chunk); before deletes at
// most a chunk of those finished before a time (the time, the chunk).
type pruneQueries struct {
	noun, last, beforeLast, before string
}

// prune deletes q's finished rows: all but the keep most recently
// finished (keep <= 0: no bound on the count), and those finished before
// before (zero: no bound on age). It deletes a chunk a write, so that
// other writes come between, and returns how many it deleted.
func (s *Store) prune(ctx context.Context, q *pruneQueries, keep int, before time.Time) (int, error) {
	total := 0
	for _, w := range []*pruneWrite{{q: q, keep: keep}, {q: q, before: before}} {
		if w.keep <= 0 && w.before.IsZero() {
			continue
		}
		for {
			w.deleted = 0
			if err := s.Do(ctx, w); err != nil {
				return total, err
			}
			total += w.deleted
			if w.deleted < pruneChunk {
				break
			}
			if err := ctx.Err(); err != nil {
				return total, fmt.Errorf("prune %s: %w", q.noun, err)
			}
		}
	}
	return total, nil
}

type pruneWrite struct {
	q       *pruneQueries
	keep    int
	before  time.Time
	deleted int // the result
}

func (w *pruneWrite) what() string   { return "prune finished " + w.q.noun }
func (w *pruneWrite) prepare() error { return nil }
func (w *pruneWrite) apply(t *wtx) error {
	var res sql.Result
	var err error
	if w.keep > 0 {
		// The keep-th most recently finished row is the last one kept.
		var at string
		var key int64
		err = t.queryRow(w.q.last, w.keep-1).Scan(&at, &key)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // no more than keep
		}
		if err != nil {
			return err
		}
		res, err = t.exec(w.q.beforeLast, at, at, key, pruneChunk)
	} else {
		res, err = t.exec(w.q.before, fmtTime(w.before), pruneChunk)
	}
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	w.deleted = int(n)
	return err
}
