package state

import (
	"errors"
	"fmt"
)

// Clanker is the record of the clanker repos orchestrd is the dashboard
// of: each repo's task records (the truth its .clanker/tasks files are
// written from), its own state (pause, spool drain position) and its
// outbox (lines committed but maybe not yet appended to events.log or the
// dead-letter file).
type Clanker struct{ s *Store }

// Clanker returns the clanker part of the store.
func (s *Store) Clanker() Clanker { return Clanker{s} }

// ClankerTask is one stored task record. Projected is the hash of the file
// content orchestrd last wrote for it ("" before the first write).
type ClankerTask struct {
	ID        string
	Seq       int64 // creation order within the repo
	Record    []byte
	Projected string
	Created   string // hash of the task_create that made it ("" when imported)
}

// ClankerLine is an outbox entry: Data is appended to File (a path under
// the repo's .clanker), or replaces it, once its commit is durable.
type ClankerLine struct {
	Seq     int64
	File    string
	Replace bool
	Data    string
}

// ClankerSnapshot is what Load reads of one repo.
type ClankerSnapshot struct {
	Tasks  []ClankerTask // by Seq
	State  []byte        // nil: none recorded
	Outbox []ClankerLine // by Seq
}

// Load reads one repo's records.
func (c Clanker) Load(repo string) (ClankerSnapshot, error) {
	var snap ClankerSnapshot
	err := c.s.query("read the tasks of clanker repo "+repo,
		`SELECT id, seq, record, projected, created FROM clanker_tasks WHERE repo = ? ORDER BY seq`, func(sc scanner) error {
			var t ClankerTask
			var rec string
			if err := sc.Scan(&t.ID, &t.Seq, &rec, &t.Projected, &t.Created); err != nil {
				return err
			}
			t.Record = []byte(rec)
			snap.Tasks = append(snap.Tasks, t)
			return nil
		}, repo)
	if err != nil {
		return snap, err
	}
	err = c.s.query("read the state of clanker repo "+repo,
		`SELECT state FROM clanker_repos WHERE repo = ?`, func(sc scanner) error {
			var st string
			if err := sc.Scan(&st); err != nil {
				return err
			}
			snap.State = []byte(st)
			return nil
		}, repo)
	if err != nil {
		return snap, err
	}
	err = c.s.query("read the outbox of clanker repo "+repo,
		`SELECT seq, file, mode, data FROM clanker_outbox WHERE repo = ? ORDER BY seq`, func(sc scanner) error {
			var l ClankerLine
			var mode string
			if err := sc.Scan(&l.Seq, &l.File, &mode, &l.Data); err != nil {
				return err
			}
			l.Replace = mode == "replace"
			snap.Outbox = append(snap.Outbox, l)
			return nil
		}, repo)
	return snap, err
}

// Repos returns every recorded repo's state, by repo.
func (c Clanker) Repos() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := c.s.query("read the clanker repos", `SELECT repo, state FROM clanker_repos ORDER BY repo`, func(sc scanner) error {
		var repo, st string
		if err := sc.Scan(&repo, &st); err != nil {
			return err
		}
		out[repo] = []byte(st)
		return nil
	})
	return out, err
}

// ClankerCommit is one atomic change to a repo's records: everything in it
// is committed together or not at all (a spool line's effects with the
// drain position after it).
type ClankerCommit struct {
	Repo      string
	Tasks     []ClankerTask     // upserted (Projected is kept unless set)
	Deleted   []string          // task ids removed
	Projected map[string]string // task id -> hash of the file written
	State     []byte            // the repo's state; nil leaves it
	Outbox    []ClankerLine     // added
	// OutboxDone removes the outbox lines up to this seq (appended).
	OutboxDone int64
	// OutboxWritten removes these lines too: written while an earlier
	// line waits for its own file.
	OutboxWritten []int64
}

// ClankerCommitted returns the write of c.
func ClankerCommitted(c ClankerCommit) Write { return &clankerWrite{c: c} }

type clankerWrite struct{ c ClankerCommit }

func (w *clankerWrite) what() string { return "record a change of clanker repo " + w.c.Repo }

func (w *clankerWrite) prepare() error {
	if w.c.Repo == "" {
		return errors.New("no repo")
	}
	for _, t := range w.c.Tasks {
		if t.ID == "" || len(t.Record) == 0 {
			return fmt.Errorf("task %q without an id or a record", t.ID)
		}
	}
	return nil
}

func (w *clankerWrite) apply(t *wtx) error {
	c := w.c
	for _, tk := range c.Tasks {
		if _, err := t.exec(`INSERT INTO clanker_tasks(repo, id, seq, record, created) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(repo, id) DO UPDATE SET record = excluded.record,
				created = CASE WHEN excluded.created = '' THEN created ELSE excluded.created END`,
			c.Repo, tk.ID, tk.Seq, string(tk.Record), tk.Created); err != nil {
			return err
		}
	}
	for _, id := range c.Deleted {
		if _, err := t.exec(`DELETE FROM clanker_tasks WHERE repo = ? AND id = ?`, c.Repo, id); err != nil {
			return err
		}
	}
	for id, h := range c.Projected {
		if _, err := t.exec(`UPDATE clanker_tasks SET projected = ? WHERE repo = ? AND id = ?`, h, c.Repo, id); err != nil {
			return err
		}
	}
	if c.State != nil {
		if _, err := t.exec(`INSERT INTO clanker_repos(repo, state) VALUES (?, ?)
			ON CONFLICT(repo) DO UPDATE SET state = excluded.state`, c.Repo, string(c.State)); err != nil {
			return err
		}
	}
	for _, l := range c.Outbox {
		mode := "append"
		if l.Replace {
			mode = "replace"
		}
		if _, err := t.exec(`INSERT INTO clanker_outbox(repo, seq, file, mode, data) VALUES (?, ?, ?, ?, ?)`, c.Repo, l.Seq, l.File, mode, l.Data); err != nil {
			return err
		}
	}
	if c.OutboxDone > 0 {
		if _, err := t.exec(`DELETE FROM clanker_outbox WHERE repo = ? AND seq <= ?`, c.Repo, c.OutboxDone); err != nil {
			return err
		}
	}
	for _, seq := range c.OutboxWritten {
		if _, err := t.exec(`DELETE FROM clanker_outbox WHERE repo = ? AND seq = ?`, c.Repo, seq); err != nil {
			return err
		}
	}
	return nil
}
