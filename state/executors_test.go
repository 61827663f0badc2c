package state

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
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
