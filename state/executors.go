package state

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Tasks is the executor tables' typed interface: sessions, tasks and the
// messages their executors reported. A task's record is kept whole as JSON
// beside the columns the queries need; a message's event_data is kept as
// the text it came as and read back byte for byte.
type Tasks struct{ s *Store }

// Tasks returns the executor tables' interface.
func (s *Store) Tasks() Tasks { return Tasks{s} }

// TaskCreated records a new task and creates its session, or moves an
// existing session's updated_at.
func TaskCreated(t api.TaskRecord) Write { return &taskWrite{t: t, kind: "created"} }

// TaskStarted records a task running.
func TaskStarted(t api.TaskRecord) Write { return &taskWrite{t: t, kind: "started"} }

// TaskFinished records a task's terminal state: once (a second is
// ErrFinished and changes nothing).
func TaskFinished(t api.TaskRecord) Write { return &taskWrite{t: t, kind: "finished"} }

type taskWrite struct {
	t      api.TaskRecord
	kind   string
	record string
}

func (w *taskWrite) what() string { return "record task " + w.t.ID + " " + w.kind }

func (w *taskWrite) prepare() error {
	t := &w.t
	switch {
	case t.ID == "":
		return errors.New("the task has no id")
	case t.SessionID == "":
		return errors.New("the task has no session")
	case t.Executor == "":
		return errors.New("the task has no executor")
	case w.kind == "finished" && !t.State.Terminal():
		return fmt.Errorf("%q is not a terminal state", t.State)
	case w.kind != "finished" && t.State.Terminal():
		return fmt.Errorf("a %s task is finished, not %s", t.State, w.kind)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encoding the task: %w", err)
	}
	w.record = string(b)
	return nil
}

func (w *taskWrite) apply(t *wtx) error {
	r := &w.t
	switch w.kind {
	case "created":
		now := fmtTime(r.CreatedAt)
		if _, err := t.exec(`INSERT INTO sessions(id, executor, created_at, updated_at) VALUES(?, ?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at`, r.SessionID, r.Executor, now, now); err != nil {
			return err
		}
		ok, err := t.exec1(`INSERT INTO tasks(id, session_id, executor, state, record, created_at) VALUES(?, ?, ?, ?, ?, ?)
			ON CONFLICT(id) DO NOTHING`, r.ID, r.SessionID, r.Executor, string(r.State), w.record, now)
		if err == nil && !ok {
			return ErrExists
		}
		return err
	default:
		ok, err := t.exec1(`UPDATE tasks SET state = ?, record = ?, finished_at = ?
			WHERE id = ? AND state IN ('queued', 'running')`,
			string(r.State), w.record, fmtTimePtr(r.FinishedAt), r.ID)
		if err != nil || ok {
			return err
		}
		var state string
		if err := t.queryRow(`SELECT state FROM tasks WHERE id = ?`, r.ID).Scan(&state); errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		return fmt.Errorf("task %s is %s: %w", r.ID, state, ErrFinished)
	}
}

// MessagesReported records report_message notifications; a (task_id,
// sequence) already recorded is ignored.
func MessagesReported(ms []api.SessionMessage) Write { return &messagesWrite{ms: ms} }

type messagesWrite struct {
	ms   []api.SessionMessage
	args [][]any
}

func (w *messagesWrite) what() string {
	if len(w.ms) == 0 {
		return "record no messages"
	}
	return fmt.Sprintf("record %d messages of task %s", len(w.ms), w.ms[0].TaskID)
}

func (w *messagesWrite) prepare() error {
	w.args = make([][]any, 0, len(w.ms))
	for i, m := range w.ms {
		if m.TaskID == "" || m.SessionID == "" {
			return fmt.Errorf("message %d has no task or session", i)
		}
		data, err := jsonText("event_data", m.EventData)
		if err != nil {
			return fmt.Errorf("message %d of task %s: %w", m.Sequence, m.TaskID, err)
		}
		at := m.ReceivedAt
		if at.IsZero() {
			at = time.Now()
		}
		var ts any
		if m.Timestamp != 0 {
			ts = m.Timestamp
		}
		w.args = append(w.args, []any{m.TaskID, m.Sequence, m.SessionID, m.EventType, data, ts, fmtTime(at)})
	}
	return nil
}

// messagesChunk is how many messages one INSERT carries: a statement per
// row costs more in binding and stepping than the row itself.
const messagesChunk = 32

var messagesInsert = map[int]string{}

func init() {
	for _, n := range []int{1, messagesChunk} {
		q := `INSERT INTO task_messages(task_id, sequence, session_id, event_type, event_data, ts, received_at) VALUES` +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?),", n), ",") +
			` ON CONFLICT(task_id, sequence) DO NOTHING`
		messagesInsert[n] = q
	}
}

func (w *messagesWrite) apply(t *wtx) error {
	args := w.args
	for len(args) >= messagesChunk {
		flat := make([]any, 0, 7*messagesChunk)
		for _, a := range args[:messagesChunk] {
			flat = append(flat, a...)
		}
		if _, err := t.exec(messagesInsert[messagesChunk], flat...); err != nil {
			return err
		}
		args = args[messagesChunk:]
	}
	for _, a := range args {
		if _, err := t.exec(messagesInsert[1], a...); err != nil {
			return err
		}
	}
	return nil
}

func (q Tasks) query(what, query string, scan func(scanner) error, args ...any) error {
	return Approvals(q).query(what, query, scan, args...)
}

func (q Tasks) records(what, query string, args ...any) ([]api.TaskRecord, error) {
	out := []api.TaskRecord{}
	err := q.query(what, query, func(sc scanner) error {
		var rec string
		if err := sc.Scan(&rec); err != nil {
			return err
		}
		var t api.TaskRecord
		if err := json.Unmarshal([]byte(rec), &t); err != nil {
			return fmt.Errorf("decoding a task record: %w", err)
		}
		out = append(out, t)
		return nil
	}, args...)
	return out, err
}

// Get returns a task's record; ok is false when it is not recorded.
func (q Tasks) Get(id string) (api.TaskRecord, bool, error) {
	got, err := q.records("read task "+id, `SELECT record FROM tasks WHERE id = ?`, id)
	if err != nil || len(got) == 0 {
		return api.TaskRecord{}, false, err
	}
	return got[0], true, nil
}

// TaskQuery selects tasks for List; empty fields match everything.
type TaskQuery struct {
	SessionID, Executor string
	State               api.TaskState
	Limit               int // 0 is no limit
}

// List returns matching tasks, newest first.
func (q Tasks) List(f TaskQuery) ([]api.TaskRecord, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{
		{"session_id", f.SessionID}, {"executor", f.Executor}, {"state", string(f.State)}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	query := `SELECT record FROM tasks`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY seq DESC"
	if f.Limit > 0 {
		query += " LIMIT ?"
		args = append(args, f.Limit)
	}
	return q.records("list tasks", query, args...)
}

// Unfinished returns the tasks a daemon left queued or running, oldest
// first.
func (q Tasks) Unfinished() ([]api.TaskRecord, error) {
	return q.records("list unfinished tasks", `SELECT record FROM tasks WHERE state IN ('queued', 'running') ORDER BY seq`)
}

// Session returns a session with its task count; ok is false when it is
// not recorded.
func (q Tasks) Session(id string) (api.SessionRecord, bool, error) {
	var out []api.SessionRecord
	err := q.query("read session "+id, `SELECT s.id, s.executor, s.created_at, s.updated_at,
		(SELECT count(*) FROM tasks t WHERE t.session_id = s.id) FROM sessions s WHERE s.id = ?`, func(sc scanner) error {
		var r api.SessionRecord
		var created, updated string
		if err := sc.Scan(&r.ID, &r.Executor, &created, &updated, &r.Tasks); err != nil {
			return err
		}
		var err error
		if r.CreatedAt, err = time.Parse(timeLayout, created); err != nil {
			return err
		}
		if r.UpdatedAt, err = time.Parse(timeLayout, updated); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	}, id)
	if err != nil || len(out) == 0 {
		return api.SessionRecord{}, false, err
	}
	return out[0], true, nil
}

// Messages returns a session's messages in order (its tasks in the order
// they were created, each task's by sequence); limit > 0 keeps the last
// limit of them.
func (q Tasks) Messages(sessionID string, limit int) ([]api.SessionMessage, error) {
	query := `SELECT m.task_id, m.sequence, m.event_type, m.event_data, m.ts, m.received_at
		FROM task_messages m JOIN tasks t ON t.id = m.task_id WHERE m.session_id = ?
		ORDER BY t.seq DESC, m.sequence DESC`
	args := []any{sessionID}
	if limit > 0 {
		query += " LIMIT ?"
		args = append(args, limit)
	}
	out := []api.SessionMessage{}
	err := q.query("read the messages of session "+sessionID, query, func(sc scanner) error {
		m := api.SessionMessage{SessionID: sessionID}
		var data sql.NullString
		var ts sql.NullInt64
		var at string
		if err := sc.Scan(&m.TaskID, &m.Sequence, &m.EventType, &data, &ts, &at); err != nil {
			return err
		}
		if data.Valid {
			m.EventData = json.RawMessage(data.String)
		}
		m.Timestamp = ts.Int64
		var err error
		if m.ReceivedAt, err = time.Parse(timeLayout, at); err != nil {
			return err
		}
		out = append(out, m)
		return nil
	}, args...)
	slices.Reverse(out)
	return out, err
}
