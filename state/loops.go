package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/orchestrd/orchestrd/api"
)

// Loops is the loops domain's tables: each loop's record (the tree by
// parent_id) and each iteration's. Records are kept whole as JSON beside
// the columns the queries need.
type Loops struct{ s *Store }

// Loops returns the loops' part of the store.
func (s *Store) Loops() Loops { return Loops{s} }

// LoopSaved records a loop: inserted when new, else its record replaced.
func LoopSaved(r api.LoopRecord) Write { return &loopWrite{r: r} }

type loopWrite struct {
	r      api.LoopRecord
	record string
}

func (w *loopWrite) what() string { return "record loop " + w.r.ID + " " + string(w.r.Status) }

func (w *loopWrite) prepare() error {
	switch {
	case w.r.ID == "":
		return errors.New("the loop has no id")
	case !w.r.LoopType.Valid():
		return fmt.Errorf("loop %s: %q is not a loop type", w.r.ID, w.r.LoopType)
	case !w.r.Status.Valid():
		return fmt.Errorf("loop %s: %q is not a loop status", w.r.ID, w.r.Status)
	}
	b, err := json.Marshal(w.r)
	if err != nil {
		return fmt.Errorf("encoding loop %s: %w", w.r.ID, err)
	}
	w.record = string(b)
	return nil
}

func (w *loopWrite) apply(t *wtx) error {
	var parent any
	if w.r.ParentID != nil {
		parent = *w.r.ParentID
	}
	_, err := t.exec(`INSERT INTO loops(id, parent_id, loop_type, status, record, created_at) VALUES(?, ?, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET status = excluded.status, record = excluded.record`,
		w.r.ID, parent, string(w.r.LoopType), string(w.r.Status), w.record, w.r.CreatedAt)
	return err
}

// IterationSaved records a loop's iteration: inserted when new, else
// replaced.
func IterationSaved(it api.LoopIteration) Write { return &iterationWrite{it: it} }

type iterationWrite struct {
	it     api.LoopIteration
	record string
}

func (w *iterationWrite) what() string {
	return fmt.Sprintf("record iteration %d of loop %s %s", w.it.Iteration, w.it.LoopID, w.it.Status)
}

func (w *iterationWrite) prepare() error {
	if w.it.LoopID == "" {
		return errors.New("the iteration has no loop")
	}
	if w.it.Status == "" {
		return fmt.Errorf("iteration %d of loop %s has no status", w.it.Iteration, w.it.LoopID)
	}
	b, err := json.Marshal(w.it)
	if err != nil {
		return fmt.Errorf("encoding iteration %d of loop %s: %w", w.it.Iteration, w.it.LoopID, err)
	}
	w.record = string(b)
	return nil
}

func (w *iterationWrite) apply(t *wtx) error {
	_, err := t.exec(`INSERT INTO loop_iterations(loop_id, iteration, status, record) VALUES(?, ?, ?, ?)
		ON CONFLICT(loop_id, iteration) DO UPDATE SET status = excluded.status, record = excluded.record`,
		w.it.LoopID, w.it.Iteration, w.it.Status, w.record)
	return err
}

// LoopsDeleted removes loops and their iterations.
func LoopsDeleted(ids []string) Write { return &loopsDeleted{ids: ids} }

type loopsDeleted struct{ ids []string }

func (w *loopsDeleted) what() string { return "delete loops " + strings.Join(w.ids, ", ") }

func (w *loopsDeleted) prepare() error {
	if len(w.ids) == 0 {
		return errors.New("no loops to delete")
	}
	return nil
}

func (w *loopsDeleted) apply(t *wtx) error {
	for _, id := range w.ids {
		if _, err := t.exec(`DELETE FROM loop_iterations WHERE loop_id = ?`, id); err != nil {
			return err
		}
		if _, err := t.exec(`DELETE FROM loops WHERE id = ?`, id); err != nil {
			return err
		}
	}
	return nil
}

func (l Loops) records(what, query string, args ...any) ([]api.LoopRecord, error) {
	return jsonRows[api.LoopRecord](l.s, what, "a loop record", query, args...)
}

// Get returns a loop's record; ok is false when it is not recorded.
func (l Loops) Get(id string) (api.LoopRecord, bool, error) {
	got, err := l.records("read loop "+id, `SELECT record FROM loops WHERE id = ?`, id)
	if err != nil || len(got) == 0 {
		return api.LoopRecord{}, false, err
	}
	return got[0], true, nil
}

// All returns every loop, oldest first.
func (l Loops) All() ([]api.LoopRecord, error) {
	return l.records("list loops", `SELECT record FROM loops ORDER BY seq`)
}

// Iterations returns a loop's iterations in order.
func (l Loops) Iterations(id string) ([]api.LoopIteration, error) {
	return jsonRows[api.LoopIteration](l.s, "read the iterations of loop "+id, "an iteration of loop "+id,
		`SELECT record FROM loop_iterations WHERE loop_id = ? ORDER BY iteration`, id)
}
