package state

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func TestTasksRoundTrip(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	t1 := api.TaskRecord{ID: "t-1", SessionID: "s-1", Executor: "claude", State: api.TaskQueued, Prompt: "hi",
		Cwd: "/tmp", Tools: []string{}, PermissionMode: api.ModeDefault, TimeoutMs: 1000, CreatedAt: now}
	t2 := t1
	t2.ID, t2.CreatedAt = "t-2", now.Add(time.Second)
	if err := s.Do(ctx, TaskCreated(t1), TaskCreated(t2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Do(ctx, TaskCreated(t1)); !errors.Is(err, ErrExists) {
		t.Fatalf("creating t-1 twice: %v, want ErrExists", err)
	}
	// Messages of t-2 first, out of order, with a duplicate; then t-1's.
	msg := func(task string, seq int64, text string) api.SessionMessage {
		return api.SessionMessage{SessionID: "s-1", TaskID: task, Sequence: seq, EventType: "content_block_delta",
			EventData: json.RawMessage(`{"delta": {"text": "` + text + `"}}`), Timestamp: 17}
	}
	if err := s.Do(ctx, MessagesReported([]api.SessionMessage{msg("t-2", 2, "b"), msg("t-2", 1, "a")}),
		MessagesReported([]api.SessionMessage{msg("t-2", 1, "dup"), msg("t-1", 1, "first")})); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Tasks().Messages("s-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.TaskID+"/"+string(m.EventData))
	}
	want := []string{`t-1/{"delta": {"text": "first"}}`, `t-2/{"delta": {"text": "a"}}`, `t-2/{"delta": {"text": "b"}}`}
	if len(got) != len(want) {
		t.Fatalf("messages = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("messages = %q, want %q (in order, byte for byte, the duplicate ignored)", got, want)
		}
	}
	last, err := s.Tasks().Messages("s-1", 1)
	if err != nil || len(last) != 1 || last[0].Sequence != 2 || last[0].TaskID != "t-2" {
		t.Fatalf("the last message = %+v, %v", last, err)
	}
	fin := t1
	fin.State = api.TaskFailed
	fin.Error = &api.TaskError{Code: api.TaskErrExecutorLost, Message: "gone"}
	fin.MessageCount = 1
	at := now.Add(2 * time.Second)
	fin.FinishedAt = &at
	if err := s.Do(ctx, TaskFinished(fin)); err != nil {
		t.Fatal(err)
	}
	if err := s.Do(ctx, TaskFinished(fin)); !errors.Is(err, ErrFinished) {
		t.Fatalf("finishing t-1 twice: %v, want ErrFinished", err)
	}
	rec, ok, err := s.Tasks().Get("t-1")
	if err != nil || !ok || rec.State != api.TaskFailed || rec.Error == nil || rec.Error.Code != api.TaskErrExecutorLost {
		t.Fatalf("t-1 = %+v, %v, %v", rec, ok, err)
	}
	un, err := s.Tasks().Unfinished()
	if err != nil || len(un) != 1 || un[0].ID != "t-2" {
		t.Fatalf("unfinished = %+v, %v; want t-2 alone", un, err)
	}
	list, err := s.Tasks().List(TaskQuery{SessionID: "s-1", Limit: 1})
	if err != nil || len(list) != 1 || list[0].ID != "t-2" {
		t.Fatalf("newest task of s-1 = %+v, %v; want t-2", list, err)
	}
	list, err = s.Tasks().List(TaskQuery{State: api.TaskFailed})
	if err != nil || len(list) != 1 || list[0].ID != "t-1" {
		t.Fatalf("failed tasks = %+v, %v; want t-1", list, err)
	}
	sess, ok, err := s.Tasks().Session("s-1")
	if err != nil || !ok || sess.Tasks != 2 || sess.Executor != "claude" {
		t.Fatalf("session = %+v, %v, %v", sess, ok, err)
	}
	if _, ok, err := s.Tasks().Session("s-nope"); ok || err != nil {
		t.Fatalf("unknown session: ok %v, err %v", ok, err)
	}
	if err := s.Do(ctx, MessagesReported([]api.SessionMessage{{SessionID: "s-1", TaskID: "t-1", Sequence: 9,
		EventType: "x", EventData: json.RawMessage(`{not json`)}})); err == nil {
		t.Fatal("a message whose event_data is not JSON was recorded")
	}
}

// Messages read with a limit are the tail of all of them, however the rows
// interleave: sequences out of order across commits, a task's messages
// spread over many rows, a duplicate across rows (the copy written first
// is kept), several tasks.
func TestMessagesLimitAcrossRows(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	now := time.Now().UTC()
	for i, id := range []string{"t-a", "t-b"} {
		rec := api.TaskRecord{ID: id, SessionID: "s", Executor: "e", State: api.TaskQueued, CreatedAt: now.Add(time.Duration(i) * time.Second)}
		if err := s.Do(ctx, TaskCreated(rec)); err != nil {
			t.Fatal(err)
		}
	}
	msg := func(task string, seq int64, text string) api.SessionMessage {
		return api.SessionMessage{SessionID: "s", TaskID: task, Sequence: seq, EventType: "e",
			EventData: json.RawMessage(`{"t": "` + text + `"}`)}
	}
	commits := [][]api.SessionMessage{
		{msg("t-a", 1, "a1"), msg("t-a", 2, "a2")},
		{msg("t-a", 5, "a5"), msg("t-a", 3, "a3")},
		{msg("t-a", 4, "a4"), msg("t-a", 3, "a3-dup"), msg("t-a", 6, "a6")},
		{msg("t-b", 2, "b2")},
		{msg("t-b", 1, "b1"), msg("t-b", 1, "b1-dup-same-commit"), msg("t-b", 3, "b3")},
	}
	for _, c := range commits {
		if err := s.Do(ctx, MessagesReported(c)); err != nil {
			t.Fatal(err)
		}
	}
	texts := func(ms []api.SessionMessage) string {
		var out []string
		for _, m := range ms {
			var d struct{ T string }
			_ = json.Unmarshal(m.EventData, &d)
			out = append(out, d.T)
		}
		return strings.Join(out, " ")
	}
	all, err := s.Tasks().Messages("s", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "a1 a2 a3 a4 a5 a6 b1 b2 b3"
	if got := texts(all); got != want {
		t.Fatalf("all messages: %q, want %q", got, want)
	}
	for limit := 1; limit <= 10; limit++ {
		got, err := s.Tasks().Messages("s", limit)
		if err != nil {
			t.Fatal(err)
		}
		w := all[max(0, len(all)-limit):]
		if texts(got) != texts(w) {
			t.Errorf("the last %d: %q, want %q", limit, texts(got), texts(w))
		}
	}
	// The view shows a message a row.
	var n string
	if err := s.Do(ctx, &sqlWrite{query: `SELECT count(*) || ' ' || sum(sequence) FROM task_messages WHERE task_id = 't-a'`, out: &n}); err != nil || n != "7 24" {
		t.Fatalf("the task_messages view: %q (%v), want 7 rows (a duplicate included) summing to 24", n, err)
	}
}

// A file of schema 5 kept a message a row: the upgrade moves them into
// batch rows, each event_data byte for byte, a missing ts and event_data
// still missing.
func TestMessagesMigratedFromRows(t *testing.T) {
	path := dbPath(t)
	old, err := open(path, testOpts, migrations[:5])
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := old.Do(ctx, TaskCreated(api.TaskRecord{ID: "t-1", SessionID: "s-1", Executor: "e", State: api.TaskQueued, CreatedAt: now})); err != nil {
		t.Fatal(err)
	}
	data := "{ \"text\" : \"é \\u00e9 \\\"q\\\" 'x'\" ,\n \"n\": 1.50 }"
	rows := []string{
		`INSERT INTO task_messages VALUES('t-1', 2, 's-1', 'content_block_delta', '` + strings.ReplaceAll(data, "'", "''") + `', 17, '2026-11-26T01:02:03.000004Z')`,
		`INSERT INTO task_messages VALUES('t-1', 1, 's-1', 'type "quoted"', NULL, NULL, '2026-11-26T01:02:03.000001Z')`,
	}
	for _, q := range rows {
		if err := old.Do(ctx, &sqlWrite{query: q}); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := openT(t, path, testOpts)
	ms, err := s.Tasks().Messages("s-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("%d messages after the upgrade, want 2: %+v", len(ms), ms)
	}
	if m := ms[0]; m.Sequence != 1 || m.EventType != `type "quoted"` || m.EventData != nil || m.Timestamp != 0 ||
		m.ReceivedAt.Format(timeLayout) != "2026-11-26T01:02:03.000001Z" {
		t.Errorf("message 1 after the upgrade: %+v", m)
	}
	if m := ms[1]; m.Sequence != 2 || string(m.EventData) != data || m.Timestamp != 17 || m.EventType != "content_block_delta" {
		t.Errorf("message 2 after the upgrade: %+v, event_data %q, want %q", m, m.EventData, data)
	}
	// New messages go on after them.
	if err := s.Do(ctx, MessagesReported([]api.SessionMessage{{SessionID: "s-1", TaskID: "t-1", Sequence: 3, EventType: "x"}})); err != nil {
		t.Fatal(err)
	}
	if ms, err := s.Tasks().Messages("s-1", 2); err != nil || len(ms) != 2 || ms[0].Sequence != 2 || ms[1].Sequence != 3 {
		t.Fatalf("the last 2 after a new message: %+v, %v", ms, err)
	}
}

// A commit of large messages is split into rows of at most maxRowBytes
// (SQLite refuses a value over 1e9 bytes; an executor's line may be
// 8 MiB), a message larger than that alone in its row, and read back
// whole, a duplicate at a split kept out.
func TestMessagesLargeCommitSplit(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	if err := s.Do(ctx, TaskCreated(api.TaskRecord{ID: "t-big", SessionID: "s", Executor: "e", State: api.TaskQueued, CreatedAt: time.Now()})); err != nil {
		t.Fatal(err)
	}
	data := func(n int, c byte) json.RawMessage {
		return json.RawMessage(`"` + strings.Repeat(string(c), n) + `"`)
	}
	sizes := []int{3 << 20, 3 << 20, 5 << 20, 1 << 10, 1 << 10}
	var ms []api.SessionMessage
	for i, n := range sizes {
		ms = append(ms, api.SessionMessage{SessionID: "s", TaskID: "t-big", Sequence: int64(i + 1), EventType: "e", EventData: data(n, byte('a'+i))})
	}
	// The second message again, right after itself and too large to join
	// its row: the next row would start with it.
	ms = slices.Insert(ms, 2, api.SessionMessage{SessionID: "s", TaskID: "t-big", Sequence: 2, EventType: "dup", EventData: data(3<<20, 'z')})
	if err := s.Do(ctx, MessagesReported(ms)); err != nil {
		t.Fatal(err)
	}
	var rows string
	if err := s.Do(ctx, &sqlWrite{query: `SELECT group_concat(count, ' ') FROM (SELECT count FROM task_message_batches ORDER BY id)`, out: &rows}); err != nil {
		t.Fatal(err)
	}
	if rows != "1 1 1 2" {
		t.Errorf("messages a row: %q, want \"1 1 1 2\" (3 MiB; 3 MiB; 5 MiB; 1 KiB and 1 KiB)", rows)
	}
	got, err := s.Tasks().Messages("s", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(sizes) {
		t.Fatalf("%d messages read back, want %d", len(got), len(sizes))
	}
	for i, m := range got {
		if m.Sequence != int64(i+1) || m.EventType != "e" || string(m.EventData) != string(data(sizes[i], byte('a'+i))) {
			t.Errorf("message %d: sequence %d, type %q, %d bytes of data", i+1, m.Sequence, m.EventType, len(m.EventData))
		}
	}
}

// A finished task's agent session becomes its session's (the last one a
// task reported: a task with none leaves it); the session's tasks' tokens
// and cost are summed.
func TestSessionAgentSessionAndUsage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UTC()
	task := func(id string) api.TaskRecord {
		return api.TaskRecord{ID: id, SessionID: "s-1", Executor: "claude", State: api.TaskQueued, Prompt: "hi",
			Cwd: "/tmp", Tools: []string{}, PermissionMode: api.ModeDefault, TimeoutMs: 1000, CreatedAt: now}
	}
	end := func(r api.TaskRecord, sdk string, u *api.TokenUsage) api.TaskRecord {
		r.State, r.SDKSessionID, r.TokenUsage, r.FinishedAt = api.TaskCompleted, sdk, u, &now
		return r
	}
	t1, t2, t3 := task("t-1"), task("t-2"), task("t-3")
	if err := s.Do(ctx, TaskCreated(t1), TaskCreated(t2), TaskCreated(t3)); err != nil {
		t.Fatal(err)
	}
	if u, err := s.Tasks().SessionUsage("s-1"); err != nil || u != nil {
		t.Fatalf("usage before any was reported: %+v %v", u, err)
	}
	if err := s.Do(ctx, TaskFinished(end(t1, "a", &api.TokenUsage{InputTokens: 10, OutputTokens: 1, CostUSD: 0.5})),
		TaskFinished(end(t2, "b", &api.TokenUsage{InputTokens: 5, CacheReadTokens: 3, CostUSD: 0.25})),
		TaskFinished(end(t3, "", nil))); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, ok, err := s.Tasks().Session("s-1")
	if err != nil || !ok || r.SDKSessionID != "b" || r.Tasks != 3 {
		t.Fatalf("session: %+v %v %v", r, ok, err)
	}
	u, err := s.Tasks().SessionUsage("s-1")
	if err != nil || u == nil || u.InputTokens != 15 || u.OutputTokens != 1 || u.CacheReadTokens != 3 || u.CostUSD != 0.75 {
		t.Fatalf("usage: %+v %v", u, err)
	}
	if got, ok, _ := s.Tasks().Get("t-1"); !ok || got.SDKSessionID != "a" || got.TokenUsage.CostUSD != 0.5 {
		t.Fatalf("task: %+v", got)
	}
}
