package state

import (
	"cmp"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
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
		if w.kind == "finished" && r.SDKSessionID != "" {
			// The agent's session the next task of this one resumes.
			if _, err := t.exec(`UPDATE sessions SET sdk_session_id = ? WHERE id = ?`, r.SDKSessionID, r.SessionID); err != nil {
				return err
			}
		}
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

// MessagesReported records report_message notifications: one row per
// task, its messages in sequence order as one JSON array. The caller drops
// the duplicates it saw (the executor actor does, for the task's life); a
// (task_id, sequence) recorded twice all the same is read back once, the
// copy written first. Each event_data must be JSON and is kept byte for
// byte.
func MessagesReported(ms []api.SessionMessage) Write { return &messagesWrite{ms: ms} }

type messagesWrite struct {
	ms   []api.SessionMessage
	rows []messageRow
}

// messageRow is one row of task_message_batches.
type messageRow struct {
	task, session string
	first, last   int64
	count         int
	messages      string
}

func (w *messagesWrite) what() string {
	if len(w.ms) == 0 {
		return "record no messages"
	}
	return fmt.Sprintf("record %d messages of task %s", len(w.ms), w.ms[0].TaskID)
}

func (w *messagesWrite) prepare() error {
	for i, m := range w.ms {
		if m.TaskID == "" || m.SessionID == "" {
			return fmt.Errorf("message %d has no task or session", i)
		}
		if len(m.EventData) > 0 && !wire.ValidJSON(m.EventData) {
			return fmt.Errorf("message %d of task %s: event_data is not valid JSON", m.Sequence, m.TaskID)
		}
	}
	// The messages of each task, by sequence, each sequence once (the
	// first of a batch wins). A batch is nearly always one task's, in
	// order: sorted only when it is not.
	ms := w.ms
	if !slices.IsSortedFunc(ms, cmpMessage) {
		ms = slices.Clone(ms)
		slices.SortStableFunc(ms, cmpMessage)
	}
	now := time.Now()
	var at timeText
	for i := 0; i < len(ms); {
		row := messageRow{task: ms[i].TaskID, session: ms[i].SessionID, first: ms[i].Sequence}
		// The messages of this row: the task's, as many as fit in
		// maxRowBytes (one at least).
		j, size := i, 2
		for j < len(ms) && ms[j].TaskID == row.task {
			n := len(ms[j].EventType) + len(ms[j].EventData) + messageOverhead
			if j > i && size+n > maxRowBytes {
				break
			}
			size += n
			j++
		}
		// Built in place: the row's text is the builder's one allocation.
		var sb strings.Builder
		sb.Grow(size)
		var scratch [96]byte
		sb.WriteByte('[')
		for k, m := range ms[i:j] {
			if k > 0 && m.Sequence == row.last {
				continue // a duplicate: the first of the batch stays
			}
			if row.count > 0 {
				sb.WriteByte(',')
			}
			sb.Write(appendMessageHead(scratch[:0], m, at.of(m.ReceivedAt, now)))
			if len(m.EventData) > 0 {
				sb.WriteString(`,"event_data":`)
				sb.Write(m.EventData)
			}
			sb.WriteByte('}')
			row.count++
			row.last = m.Sequence
		}
		sb.WriteByte(']')
		row.messages = sb.String()
		w.rows = append(w.rows, row)
		// Duplicates of the row's last message do not start the next.
		for i = j; i < len(ms) && ms[i].TaskID == row.task && ms[i].Sequence == row.last; i++ {
		}
	}
	return nil
}

// maxRowBytes bounds one row's messages (a message larger than it has a
// row of its own): SQLite refuses a value over 1e9 bytes, and an
// executor's line may be 8 MiB.
const maxRowBytes = 4 << 20

// messageOverhead is about what a stored message takes besides its event
// type and data.
const messageOverhead = len(`{"sequence":,"event_type":"","ts":,"received_at":"","event_data":},`) + 20 + 13 + len(timeLayout)

// timeText formats the times of a batch, which are nearly all one time,
// once.
type timeText struct {
	t    time.Time
	text []byte
}

func (c *timeText) of(t, now time.Time) []byte {
	if t.IsZero() {
		t = now
	}
	if c.text == nil || !t.Equal(c.t) {
		c.t, c.text = t, t.UTC().AppendFormat(c.text[:0], timeLayout)
	}
	return c.text
}

func cmpMessage(a, b api.SessionMessage) int {
	if c := strings.Compare(a.TaskID, b.TaskID); c != 0 {
		return c
	}
	return cmp.Compare(a.Sequence, b.Sequence)
}

// storedMessage is one element of a row's messages.
type storedMessage struct {
	Sequence   int64           `json:"sequence"`
	EventType  string          `json:"event_type"`
	TS         int64           `json:"ts"`
	ReceivedAt string          `json:"received_at"`
	EventData  json.RawMessage `json:"event_data"`
}

// appendMessageHead appends m as a storedMessage up to its event_data (it
// leaves out a zero ts); receivedAt is its time, formatted.
func appendMessageHead(buf []byte, m api.SessionMessage, receivedAt []byte) []byte {
	buf = append(buf, `{"sequence":`...)
	buf = strconv.AppendInt(buf, m.Sequence, 10)
	buf = append(buf, `,"event_type":`...)
	buf = wire.AppendJSONString(buf, m.EventType, false)
	if m.Timestamp != 0 {
		buf = append(buf, `,"ts":`...)
		buf = strconv.AppendInt(buf, m.Timestamp, 10)
	}
	buf = append(buf, `,"received_at":"`...)
	buf = append(buf, receivedAt...)
	return append(buf, '"')
}

func (w *messagesWrite) apply(t *wtx) error {
	for _, r := range w.rows {
		if _, err := t.exec(`INSERT INTO task_message_batches(task_id, session_id, first_seq, last_seq, count, messages)
			VALUES(?, ?, ?, ?, ?, ?)`, r.task, r.session, r.first, r.last, r.count, r.messages); err != nil {
			return err
		}
	}
	return nil
}

func (q Tasks) records(what, query string, args ...any) ([]api.TaskRecord, error) {
	return jsonRows[api.TaskRecord](q.s, what, "a task record", query, args...)
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
	query, args := listQuery(`SELECT record FROM tasks`, where, "seq DESC", f.Limit, args)
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
	err := q.s.query("read session "+id, `SELECT s.id, s.executor, s.created_at, s.updated_at,
		coalesce(s.sdk_session_id, ''), (SELECT count(*) FROM tasks t WHERE t.session_id = s.id)
		FROM sessions s WHERE s.id = ?`, func(sc scanner) error {
		var r api.SessionRecord
		var created, updated string
		if err := sc.Scan(&r.ID, &r.Executor, &created, &updated, &r.SDKSessionID, &r.Tasks); err != nil {
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

// SessionUsage sums the tokens and cost of a session's tasks, from their
// records; nil when none reported any.
func (q Tasks) SessionUsage(id string) (*api.TokenUsage, error) {
	var out *api.TokenUsage
	err := q.s.query("sum the tokens of session "+id, `SELECT
		coalesce(sum(json_extract(record, '$.token_usage.input_tokens')), 0),
		coalesce(sum(json_extract(record, '$.token_usage.output_tokens')), 0),
		coalesce(sum(json_extract(record, '$.token_usage.cache_read_tokens')), 0),
		coalesce(sum(json_extract(record, '$.token_usage.cache_write_tokens')), 0),
		coalesce(sum(json_extract(record, '$.token_usage.cost_usd')), 0),
		count(json_extract(record, '$.token_usage'))
		FROM tasks WHERE session_id = ?`, func(sc scanner) error {
		var u api.TokenUsage
		var n int
		if err := sc.Scan(&u.InputTokens, &u.OutputTokens, &u.CacheReadTokens, &u.CacheWriteTokens, &u.CostUSD, &n); err != nil {
			return err
		}
		if n > 0 {
			out = &u
		}
		return nil
	}, id)
	return out, err
}

// Messages returns a session's messages in order (its tasks in the order
// they were created, each task's by sequence); limit > 0 keeps the last
// limit of them, reading only the rows that hold them.
func (q Tasks) Messages(sessionID string, limit int) ([]api.SessionMessage, error) {
	// Rows newest task first, each task's by its last sequence, highest
	// first: the messages wanted come first. A task's messages are taken
	// whole (rows may interleave when sequences came out of order), then
	// put in order, last first; out is the reverse of the answer.
	out := []api.SessionMessage{}
	var task []taskMessage // the current task's, as read
	var taskID string
	bySeq := map[int64]int{}
	endTask := func() {
		slices.SortFunc(task, func(a, b taskMessage) int { return cmp.Compare(b.m.Sequence, a.m.Sequence) })
		for _, m := range task {
			out = append(out, m.m)
		}
		task = task[:0]
		clear(bySeq)
	}
	full := func() bool { return limit > 0 && len(out) >= limit }
	err := q.s.query("read the messages of session "+sessionID, `SELECT b.id, b.task_id, b.last_seq, b.messages
		FROM task_message_batches b JOIN tasks t ON t.id = b.task_id WHERE b.session_id = ?
		ORDER BY t.seq DESC, b.last_seq DESC`, func(sc scanner) error {
		var id, last int64
		var tid, raw string
		if err := sc.Scan(&id, &tid, &last, &raw); err != nil {
			return err
		}
		if tid != taskID {
			endTask()
			taskID = tid
		}
		if full() {
			return errStopScan // an older task: none of its messages is wanted
		}
		if limit > 0 && len(out)+len(task) >= limit && last < cutoff(task, limit-len(out)) {
			return errStopScan // this row and the rest of the task's are older than every message wanted
		}
		var ms []storedMessage
		if err := json.Unmarshal([]byte(raw), &ms); err != nil {
			return fmt.Errorf("decoding the messages of task %s (row %d): %w", tid, id, err)
		}
		for _, sm := range ms {
			m := api.SessionMessage{SessionID: sessionID, TaskID: tid, Sequence: sm.Sequence, EventType: sm.EventType,
				EventData: sm.EventData, Timestamp: sm.TS}
			var err error
			if m.ReceivedAt, err = time.Parse(timeLayout, sm.ReceivedAt); err != nil {
				return fmt.Errorf("message %d of task %s: %w", sm.Sequence, tid, err)
			}
			if i, ok := bySeq[m.Sequence]; ok {
				if id < task[i].row { // the copy written first is kept
					task[i] = taskMessage{row: id, m: m}
				}
				continue
			}
			bySeq[m.Sequence] = len(task)
			task = append(task, taskMessage{row: id, m: m})
		}
		return nil
	}, sessionID)
	if err != nil {
		return nil, err
	}
	endTask()
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	slices.Reverse(out)
	return out, nil
}

// taskMessage is a message read, with the row it came from.
type taskMessage struct {
	row int64
	m   api.SessionMessage
}

// cutoff is the lowest sequence among the n highest of task (n >= 1,
// len(task) >= n).
func cutoff(task []taskMessage, n int) int64 {
	seqs := make([]int64, len(task))
	for i, m := range task {
		seqs[i] = m.m.Sequence
	}
	slices.SortFunc(seqs, func(a, b int64) int { return cmp.Compare(b, a) })
	return seqs[n-1]
}
