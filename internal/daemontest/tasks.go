package daemontest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// Conn is a daemon the task helpers call: a Daemon here, or the daemon
// process of cmd/orchestrd's tests.
type Conn interface {
	// CallWithin calls method with a client deadline of within.
	CallWithin(within time.Duration, method string, params, result any) error
	// LogTail is the end of the daemon's log, for a failure's message.
	LogTail() string
}

// LogTail is the end of the daemon's log.
func (d *Daemon) LogTail() string { return Tail(d.Log.String(), 3000) }

// mustCall calls method on c within CallTimeout, failing t.
func mustCall(t testing.TB, c Conn, method string, params, result any) {
	t.Helper()
	if err := c.CallWithin(CallTimeout, method, params, result); err != nil {
		t.Fatalf("%v\ndaemon log tail:\n%s", err, c.LogTail())
	}
}

// ExecConfig is a daemon with one small lane and one executor pool
// "scripted" running the test executor (internal/testexecutor, at exe)
// with args; extra is more of the pool's table.
func ExecConfig(exe, extra string, args ...string) string {
	cmd := append([]string{exe}, args...)
	q := make([]string, len(cmd))
	for i, a := range cmd {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n\n[executors.scripted]\ncommand = [" +
		strings.Join(q, ", ") + "]\n" + extra
}

// Script is a test executor prompt of steps (JSON objects).
func Script(steps ...string) string { return `{"steps":[` + strings.Join(steps, ",") + `]}` }

// Execute starts spec (pool "scripted" and cwd home unless it says) and
// returns its task and session.
func Execute(t testing.TB, c Conn, home string, spec api.TaskSpec) (taskID, sessionID string) {
	t.Helper()
	if spec.Executor == "" {
		spec.Executor = "scripted"
	}
	if spec.Cwd == "" {
		spec.Cwd = home
	}
	var r struct {
		TaskID    string `json:"task_id"`
		SessionID string `json:"session_id"`
	}
	mustCall(t, c, "task.execute", spec, &r)
	return r.TaskID, r.SessionID
}

// WaitTask waits up to WaitTimeout for task id's end and returns its record.
func WaitTask(t testing.TB, c Conn, id string) api.TaskRecord {
	t.Helper()
	return WaitTaskWithin(t, c, id, WaitTimeout)
}

// WaitTaskWithin waits up to within for task id's end and returns its
// record.
func WaitTaskWithin(t testing.TB, c Conn, id string, within time.Duration) api.TaskRecord {
	t.Helper()
	var r struct {
		Task     api.TaskRecord `json:"task"`
		TimedOut bool           `json:"timed_out"`
	}
	if err := c.CallWithin(within+CallTimeout, "task.wait",
		map[string]any{"id": id, "timeout_ms": within.Milliseconds()}, &r); err != nil {
		t.Fatalf("%v\ndaemon log tail:\n%s", err, c.LogTail())
	}
	if r.TimedOut {
		t.Fatalf("task %s still %s after %s\n%s\ndaemon log tail:\n%s", id, r.Task.State, within,
			SessionTail(c, r.Task.SessionID, 15), c.LogTail())
	}
	return r.Task
}

// head is s's first n bytes.
func head(s string, n int) string { return s[:min(len(s), n)] }

// SessionTail is the last n messages of a session, a line each (its
// type and the start of its data), for a failure's message: how far a
// task that did not end got.
func SessionTail(c Conn, id string, n int) string {
	var r struct {
		Messages []api.SessionMessage `json:"messages"`
	}
	if err := c.CallWithin(CallTimeout, "session.get", map[string]any{"id": id}, &r); err != nil {
		return fmt.Sprintf("session %s: %v", id, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "session %s: %d messages", id, len(r.Messages))
	for _, m := range r.Messages[max(0, len(r.Messages)-n):] {
		fmt.Fprintf(&b, "\n  %d %s %s %s", m.Sequence, m.ReceivedAt.Format("15:04:05.000"), m.EventType, head(string(m.EventData), 160))
	}
	return b.String()
}

// RunningExecutor waits until task runs and returns its executor's pid.
func RunningExecutor(t testing.TB, c Conn, taskID string) int {
	t.Helper()
	pid := 0
	Eventually(t, 20*time.Second, "task "+taskID+" running on an executor", func() bool {
		var r struct {
			Pools []api.PoolStatus `json:"pools"`
		}
		mustCall(t, c, "executor.list", nil, &r)
		for _, p := range r.Pools {
			for _, e := range p.Executors {
				if e.TaskID == taskID && e.Pid > 0 {
					pid = e.Pid
					return true
				}
			}
		}
		return false
	}, nil)
	return pid
}

// Session is session id's messages.
func Session(t testing.TB, c Conn, id string) []api.SessionMessage {
	t.Helper()
	var r struct {
		Messages []api.SessionMessage `json:"messages"`
	}
	mustCall(t, c, "session.get", map[string]any{"id": id}, &r)
	return r.Messages
}

// MessagesOf is the data of the messages of ms of event type typ.
func MessagesOf(ms []api.SessionMessage, typ string) []map[string]any {
	var out []map[string]any
	for _, m := range ms {
		if m.EventType == typ {
			var v map[string]any
			_ = json.Unmarshal(m.EventData, &v)
			out = append(out, v)
		}
	}
	return out
}

// StreamTask reads events (a subscriber's, to task.message and
// task.finished and any other kinds of the task it wants) until task id's
// task.finished, handing fn the kind and sequence (0 where it has none) of
// every other event of the task, in order; other tasks' events are passed
// over. Where nothing at all comes for within, t fails with what stalled
// says.
func StreamTask(t testing.TB, events <-chan wire.Event, id string, within time.Duration, fn func(kind string, seq int64), stalled func() string) {
	t.Helper()
	for {
		select {
		case ev := <-events:
			var m struct {
				TaskID   string `json:"task_id"`
				Sequence int64  `json:"sequence"`
			}
			_ = json.Unmarshal(ev.Data, &m)
			if m.TaskID != id {
				continue
			}
			if ev.Event == "task.finished" {
				return
			}
			fn(ev.Event, m.Sequence)
		case <-time.After(within):
			t.Fatal(stalled())
		}
	}
}
