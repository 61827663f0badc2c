package executors

import (
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// gatedLog is memLog whose TaskFinished commits (calls done) only once
// the gate is open: a state store behind.
type gatedLog struct {
	*memLog
	gate      chan struct{}
	finishing chan string
	wg        sync.WaitGroup
}

func (l *gatedLog) TaskFinished(t api.TaskRecord, done func(error)) error {
	l.finishing <- t.ID
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		<-l.gate
		_ = l.memLog.TaskFinished(t, done)
	}()
	return nil
}

// A task's waiters (task.wait, Manager.Wait) hear of its end once the
// store has it, not before: what a client reads next (session.get's
// agent session and tokens) is the store's.
func TestTaskWaitAnsweredOnceCommitted(t *testing.T) {
	log := &gatedLog{memLog: &memLog{}, gate: make(chan struct{}), finishing: make(chan string, 1)}
	var once sync.Once
	open := func() { once.Do(func() { close(log.gate) }) }
	// Cleanups run last first: the gate opens, then the manager stops,
	// then the gated commits are waited for.
	t.Cleanup(log.wg.Wait)
	m, methods, home := startTestPool(t, log)
	t.Cleanup(open)

	var r struct {
		TaskID string `json:"task_id"`
	}
	methods.do(t, "task.execute", map[string]any{"prompt": "hello", "cwd": home}, &r)
	early := newCall("task.wait", map[string]any{"id": r.TaskID, "timeout_ms": 60000})
	methods["task.wait"](early)
	select {
	case id := <-log.finishing:
		if id != r.TaskID {
			t.Fatalf("finishing %s, want %s", id, r.TaskID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not end within 30s")
	}
	// Ended in memory, not yet in the store: task.get says so, no wait is
	// answered, nor one asked now.
	var g struct {
		Task api.TaskRecord `json:"task"`
	}
	methods.do(t, "task.get", map[string]any{"id": r.TaskID}, &g)
	if g.Task.State != api.TaskCompleted {
		t.Fatalf("task.get before the commit: %+v", g.Task)
	}
	late := newCall("task.wait", map[string]any{"id": r.TaskID})
	methods["task.wait"](late)
	heard := make(chan api.TaskRecord, 1)
	if err := m.Wait(r.TaskID, func(rec api.TaskRecord) { heard <- rec }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*fakeCall{early, late} {
		select {
		case b := <-c.out:
			t.Fatalf("task.wait answered before the store had the end: %s", b)
		default:
		}
	}
	select {
	case rec := <-heard:
		t.Fatalf("Manager.Wait answered before the store had the end: %+v", rec)
	default:
	}
	open()
	for _, c := range []*fakeCall{early, late} {
		var w struct {
			Task api.TaskRecord `json:"task"`
		}
		c.wait(t, &w)
		if w.Task.State != api.TaskCompleted {
			t.Fatalf("task.wait after the commit: %+v", w.Task)
		}
	}
	select {
	case rec := <-heard:
		if rec.State != api.TaskCompleted {
			t.Fatalf("Manager.Wait: %+v", rec)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Manager.Wait not answered after the commit")
	}
}
