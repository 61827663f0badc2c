package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

func TestKinds(t *testing.T) {
	code := 3
	eventlogtest.CheckKinds(t,
		ApprovalNotifyFailed{ID: "a-1f2e3d-4", Error: "exited with status 3", ExitCode: &code, Signal: "SIGKILL",
			StderrTail: "curl: (6) Could not resolve host: ntfy.sh\n"},
	)
}

// The test process is a child subreaper, as the daemon is: a notify
// command must never be taken for an orphan.
var (
	reaperOnce sync.Once
	reaper     *proc.Reaper
	orphansMu  sync.Mutex
	orphans    []int
)

func testReaper(t *testing.T) *proc.Reaper {
	reaperOnce.Do(func() {
		var err error
		reaper, err = proc.NewReaper(func(o proc.Orphan) {
			orphansMu.Lock()
			orphans = append(orphans, o.Pid)
			orphansMu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	return reaper
}

func wasOrphan(pid int) bool {
	orphansMu.Lock()
	defer orphansMu.Unlock()
	for _, p := range orphans {
		if p == pid {
			return true
		}
	}
	return false
}

// sink collects the events of a bus without a file.
type sink struct{ ch chan *eventlog.Record }

func (s sink) Deliver(r *eventlog.Record) { s.ch <- r }

type fixture struct {
	t   *testing.T
	dir string
	bus *eventlog.Bus
	evs chan *eventlog.Record
	log *testio.SyncBuffer
}

func newFixture(t *testing.T) *fixture {
	testReaper(t)
	bus, err := eventlog.Open(eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, dir: t.TempDir(), bus: bus, evs: make(chan *eventlog.Record, 1024), log: &testio.SyncBuffer{}}
	unsub := bus.Subscribe([]string{"approval.notify_failed"}, sink{f.evs})
	t.Cleanup(func() { unsub(); bus.Close() })
	return f
}

func (f *fixture) start(opts Options, script string) *Notifier {
	opts.Command = []string{"sh", "-c", script, "notify", f.dir}
	opts.Reaper = reaper
	opts.Bus = f.bus
	opts.Logger = zerolog.New(f.log).Level(zerolog.DebugLevel)
	return New(opts)
}

func (f *fixture) failure() ApprovalNotifyFailed {
	f.t.Helper()
	select {
	case r := <-f.evs:
		return r.Event.(ApprovalNotifyFailed)
	case <-time.After(20 * time.Second):
		f.t.Fatal("no approval.notify_failed within 20s")
	}
	return ApprovalNotifyFailed{}
}

func (f *fixture) noFailure() {
	f.t.Helper()
	select {
	case r := <-f.evs:
		f.t.Fatalf("unexpected event %+v", r.Event)
	default:
	}
}

// waitFile waits for a file the command writes (renamed into place whole).
func (f *fixture) waitFile(name string) []byte {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(f.dir, name))
		if err == nil {
			return b
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s not written within 20s (log: %s)", name, f.log.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (f *fixture) pid(name string) int {
	f.t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(string(f.waitFile(name))))
	if err != nil {
		f.t.Fatal(err)
	}
	return pid
}

// readPid reads a pid file the command wrote, if it did.
func (f *fixture) readPid(name string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(f.dir, name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil
}

// gone waits until pid is dead (a zombie no one reaped yet counts).
func gone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, ok := proc.ReadStat(pid)
		if !ok || st.State == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func approval(id string) api.Approval {
	return api.Approval{ID: id, State: api.ApprovalPending, Source: api.SourceReachout, Kind: api.KindTool,
		ToolName: "Bash", ToolInput: json.RawMessage(`{"command":"rm -rf build"}`), Cwd: "/src",
		CreatedAt: time.Date(2026, 11, 23, 21, 0, 0, 0, time.UTC), Deadline: time.Date(2026, 11, 23, 21, 10, 0, 0, time.UTC)}
}

// The command gets the approval as JSON on its stdin and its id in its
// environment; a success is no event.
func TestNotifyWritesApprovalToStdin(t *testing.T) {
	testReaper(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := newFixture(t)
	n := f.start(Options{}, `cat > "$1/$ORCHESTRD_APPROVAL_ID.tmp" && echo $$ > "$1/pid" && mv "$1/$ORCHESTRD_APPROVAL_ID.tmp" "$1/$ORCHESTRD_APPROVAL_ID.json"`)
	a := approval("a-1f2e3d-1")
	n.Notify(a)
	got := f.waitFile(a.ID + ".json")
	want, _ := json.Marshal(a)
	if !bytes.Equal(got, want) {
		t.Fatalf("stdin:\n got %s\nwant %s", got, want)
	}
	pid := f.pid("pid")
	gone(t, pid)
	n.Close()
	f.noFailure()
	if wasOrphan(pid) {
		t.Fatal("the reaper took the notify command for an orphan")
	}
	if !strings.Contains(f.log.String(), "notify_command ran") {
		t.Fatalf("no debug line for the success: %s", f.log.String())
	}
}

// A non-zero exit is an event with its status and the end of its stderr;
// so is a command that cannot start.
func TestNotifyFailures(t *testing.T) {
	testReaper(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := newFixture(t)
	n := f.start(Options{}, `head -c 2000 /dev/zero | tr '\0' x >&2; echo >&2; echo "ntfy: no route to host" >&2; exit 3`)
	n.Notify(approval("a-1-1"))
	ev := f.failure()
	if ev.ID != "a-1-1" || ev.Error != "exited with status 3" || ev.ExitCode == nil || *ev.ExitCode != 3 || ev.Signal != "" {
		t.Fatalf("event %+v", ev)
	}
	if len(ev.StderrTail) != StderrTail || !strings.HasSuffix(ev.StderrTail, "xxx\nntfy: no route to host\n") {
		t.Fatalf("stderr tail %q (%d bytes)", ev.StderrTail, len(ev.StderrTail))
	}
	n.Close()
	if !strings.Contains(f.log.String(), `"level":"warn"`) || !strings.Contains(f.log.String(), "a-1-1") {
		t.Fatalf("no warning logged: %s", f.log.String())
	}

	n = New(Options{Command: []string{filepath.Join(f.dir, "no-such-command")}, Bus: f.bus, Reaper: reaper})
	n.Notify(approval("a-1-2"))
	ev = f.failure()
	if ev.ID != "a-1-2" || !strings.HasPrefix(ev.Error, "start "+filepath.Join(f.dir, "no-such-command")+": ") || ev.ExitCode != nil {
		t.Fatalf("event %+v", ev)
	}
	n.Close()

	// Killed by a signal (its own).
	n = f.start(Options{}, `kill -TERM $$`)
	n.Notify(approval("a-1-3"))
	ev = f.failure()
	if ev.Error != "killed by SIGTERM" || ev.Signal != "SIGTERM" || ev.ExitCode != nil {
		t.Fatalf("event %+v", ev)
	}
	n.Close()
}

// A command past its timeout is killed with its whole process group, a
// child it forked included. The command writes its pid and its child's
// before it waits; on a machine so loaded that the timeout fires first, the
// attempt proves nothing and is made again with a longer timeout (the test
// waits for events, it does not time anything).
func TestNotifyTimeoutKillsGroup(t *testing.T) {
	testReaper(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := newFixture(t)
	for attempt, timeout := 1, 300*time.Millisecond; ; attempt, timeout = attempt+1, timeout*4 {
		if attempt > 5 {
			t.Fatalf("the command never wrote its pids before its timeout (last %s)", timeout/4)
		}
		child, self := fmt.Sprintf("child-%d", attempt), fmt.Sprintf("pid-%d", attempt)
		n := f.start(Options{Timeout: timeout}, fmt.Sprintf(
			`sleep 1000 & echo waiting >&2; echo $! > "$1/%[1]s.tmp"; mv "$1/%[1]s.tmp" "$1/%[1]s"; echo $$ > "$1/%[2]s.tmp"; mv "$1/%[2]s.tmp" "$1/%[2]s"; wait`,
			child, self))
		id := fmt.Sprintf("a-2-%d", attempt)
		n.Notify(approval(id))
		ev := f.failure() // the timeout's kill: nothing of the group writes after it
		childPid, ok1 := f.readPid(child)
		pid, ok2 := f.readPid(self)
		if !ok1 || !ok2 {
			n.Close()
			t.Logf("attempt %d: killed at %s before it wrote its pids; again with a longer timeout", attempt, timeout)
			continue
		}
		// Its stderr line comes before its pids: the kill may land as
		// soon as they are written.
		if ev.ID != id || !strings.HasPrefix(ev.Error, "timed out after "+timeout.String()) || ev.Signal != "SIGKILL" ||
			ev.ExitCode != nil || ev.StderrTail != "waiting\n" {
			n.Close()
			t.Fatalf("event %+v", ev)
		}
		gone(t, pid)
		gone(t, childPid)
		n.Close()
		if wasOrphan(pid) {
			t.Fatal("the reaper took the notify command for an orphan")
		}
		return
	}
}

// Notify never blocks: past Concurrency runs and QueueSize waiting, an
// approval's run is dropped with an event. Close kills what still runs
// after its grace and drops what waits.
func TestNotifyQueueFullAndClose(t *testing.T) {
	testReaper(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := newFixture(t)
	n := f.start(Options{Concurrency: 2, QueueSize: 1, Timeout: time.Minute, CloseGrace: 200 * time.Millisecond},
		`echo $$ > "$1/$ORCHESTRD_APPROVAL_ID.tmp"; mv "$1/$ORCHESTRD_APPROVAL_ID.tmp" "$1/$ORCHESTRD_APPROVAL_ID"; exec sleep 1000`)
	n.Notify(approval("a-3-1"))
	p1 := f.pid("a-3-1")
	n.Notify(approval("a-3-2"))
	p2 := f.pid("a-3-2")
	// Both workers are busy: one more waits, the next is dropped.
	n.Notify(approval("a-3-3"))
	start := time.Now()
	n.Notify(approval("a-3-4"))
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Notify blocked %s", d)
	}
	ev := f.failure()
	if ev.ID != "a-3-4" || !strings.HasPrefix(ev.Error, "queue full") {
		t.Fatalf("event %+v", ev)
	}
	if len(n.queue) != 1 {
		t.Fatalf("%d queued, want 1: no more than Concurrency run at once", len(n.queue))
	}
	n.Close()
	gone(t, p1)
	gone(t, p2)
	got := map[string]string{}
	for range 2 {
		ev := f.failure()
		got[ev.ID] = ev.Error
	}
	if got["a-3-1"] != "the daemon is stopping: killed" || got["a-3-2"] != "the daemon is stopping: killed" {
		t.Fatalf("events at close: %v", got)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "a-3-3")); err == nil {
		t.Fatal("a queued approval ran after Close")
	}
	n.Notify(approval("a-3-5")) // after Close: nothing, no panic
	f.noFailure()
}

// Without a command nothing runs and nothing is started.
func TestNotifyWithoutCommand(t *testing.T) {
	testReaper(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	n := New(Options{})
	n.Notify(approval("a-4-1"))
	n.Close()
	n.Close()
}
