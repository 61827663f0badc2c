package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/api"
)

// The event log's seq is never handed out twice (issue 8): a daemon
// killed with SIGKILL in the middle of a burst of events had numbered
// events its subscribers saw but its log never got; the next daemon on
// the home numbers every event above all of them, and its daemon.started
// says how many numbers it skipped. A clean restart skips none.
func TestSeqNeverReusedAfterKill(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	logPath := filepath.Join(home, "events.ndjson")
	for round := range 3 {
		d := startDaemonAt(t, home, fastConfig)
		seen := subscribeSeqs(t, d)
		// A burst of submissions from several clients; the daemon is
		// killed while it is still emitting.
		stop := testio.Hammer(4, func() bool {
			// false: the daemon is gone
			return d.call("job.submit", api.JobSpec{Lane: "net", Argv: []string{"true"}}, nil) == nil
		})
		seen.waitFor(t, 300)
		if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-d.done
		stop()
		maxSeen := seen.close()
		old, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: the subscriber saw up to seq %d, the dead daemon's log ends at %d", round, maxSeen, lastLineSeq(t, old))

		d2 := startDaemonAt(t, home, fastConfig)
		started := d2.waitEvent("daemon.started", func(e map[string]any) bool {
			return e["pid"] == float64(d2.cmd.Process.Pid)
		})
		lines := newLines(t, logPath, len(old))
		if len(lines) == 0 {
			t.Fatal("the new daemon logged nothing")
		}
		for _, e := range lines {
			if s := uint64(e["seq"].(float64)); s <= maxSeen {
				t.Fatalf("round %d: the new daemon logged seq %d (%s); the dead one's subscriber saw up to %d",
					round, s, e["kind"], maxSeen)
			}
		}
		skipped, _ := started["seq_skipped"].(float64)
		if skipped <= 0 {
			t.Errorf("round %d: daemon.started after a crash: %v, want seq_skipped", round, started)
		}
		t.Logf("round %d: the new daemon starts at %v (skipped %v)", round, lines[0]["seq"], skipped)
		d2.stop()
	}

	// After a clean stop (d2.stop) the next daemon continues the log
	// without a gap.
	before, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := lastLineSeq(t, before)
	d := startDaemonAt(t, home, fastConfig)
	started := d.waitEvent("daemon.started", func(e map[string]any) bool { return e["pid"] == float64(d.cmd.Process.Pid) })
	if _, ok := started["seq_skipped"]; ok {
		t.Errorf("daemon.started after a clean stop: %v, want no seq_skipped", started)
	}
	if lines := newLines(t, logPath, len(before)); uint64(lines[0]["seq"].(float64)) != lastSeq+1 {
		t.Errorf("after a clean stop the log goes on at %v, want %d", lines[0]["seq"], lastSeq+1)
	}
}

// seqWatcher records the highest seq a subscriber of the control socket
// was sent.
type seqWatcher struct {
	mu   sync.Mutex
	max  uint64
	n    int // events seen
	c    *client.Client
	done chan struct{}
}

func subscribeSeqs(t *testing.T, d *testDaemon) *seqWatcher {
	c, err := client.Dial(d.sock())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Call(ctx, "events.subscribe", map[string]any{"kinds": []string{"*"}}, nil); err != nil {
		t.Fatal(err)
	}
	w := &seqWatcher{c: c, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range c.Events() {
			var e struct{ Seq uint64 }
			if json.Unmarshal(ev.Data, &e) == nil {
				w.mu.Lock()
				w.max = max(w.max, e.Seq)
				w.n++
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// waitFor waits until the subscriber has seen n events.
func (w *seqWatcher) waitFor(t *testing.T, n int) {
	eventually(t, 30*time.Second, fmt.Sprintf("the subscriber to see %d events", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.n >= n
	})
}

// close ends the subscription (the daemon is dead: what it sent has been
// read) and returns the highest seq seen.
func (w *seqWatcher) close() uint64 {
	select {
	case <-w.done: // the connection's end closed Events
	case <-time.After(10 * time.Second):
	}
	w.c.Close()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// newLines parses the event log's lines after its first skip bytes (a line
// torn by the kill, the rest of which is there, is skipped).
func newLines(t *testing.T, path string, skip int) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range bytes.Split(b[skip:], []byte("\n")) {
		var e map[string]any
		if len(l) == 0 || json.Unmarshal(l, &e) != nil || e["seq"] == nil {
			continue
		}
		out = append(out, e)
	}
	return out
}

// lastLineSeq is the seq of the log's last whole line (a kill may have
// torn the last one).
func lastLineSeq(t *testing.T, b []byte) uint64 {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var e struct{ Seq uint64 }
		if json.Unmarshal(lines[i], &e) == nil && e.Seq > 0 {
			return e.Seq
		}
	}
	t.Fatal("no whole line in the event log")
	return 0
}
