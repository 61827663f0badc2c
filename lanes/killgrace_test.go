package lanes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
	"github.com/orchestrd/orchestrd/wire"
)

func graceMs(v uint64) *uint64 { return &v }

// kill_grace: 10 s by default, 0 to an hour in whole milliseconds.
func TestKillGraceConfig(t *testing.T) {
	if g := DefaultLanes()[api.DefaultLane].KillGrace.Duration; g != 10*time.Second {
		t.Fatalf("default kill_grace %s", g)
	}
	for _, tc := range []struct {
		grace time.Duration
		err   string
	}{
		{0, ""},
		{time.Hour, ""},
		{-time.Second, "lanes.x.kill_grace must be between 0s and 1h0m0s, in whole milliseconds, got -1s"},
		{time.Hour + time.Millisecond, "got 1h0m0.001s"},
		{1500 * time.Microsecond, "got 1.5ms"},
	} {
		lc := DefaultFor("x")
		lc.KillGrace.Duration = tc.grace
		errs := ValidateLanes("lanes", map[string]LaneConfig{"x": lc})
		if (tc.err == "") != (len(errs) == 0) || (tc.err != "" && !strings.Contains(errs[0].Error(), tc.err)) {
			t.Errorf("kill_grace %s: %v, want %q", tc.grace, errs, tc.err)
		}
	}
}

// The Job frame carries kill_grace_ms only when it is not the runner's
// default.
func TestWireJobKillGrace(t *testing.T) {
	for _, tc := range []struct {
		spec, frame *uint64
	}{
		{nil, nil},
		{graceMs(wire.DefaultKillGraceMs), nil},
		{graceMs(0), graceMs(0)},
		{graceMs(2500), graceMs(2500)},
	} {
		w := wireJob(&api.JobSpec{Command: "x", KillGraceMs: tc.spec}, "j-1")
		if (w.KillGraceMs == nil) != (tc.frame == nil) || (tc.frame != nil && *w.KillGraceMs != *tc.frame) {
			t.Errorf("spec %v: frame %v, want %v", tc.spec, w.KillGraceMs, tc.frame)
		}
	}
}

// Through real runners, with a lane grace of an hour: a job that exits on
// SIGTERM ends stopped by sigterm; one that ignores it is killed by a
// second cancel, or by a forced first one, each cancel an event.
func TestCancelGraceAndForce(t *testing.T) {
	lc := defaultLane(1, 3, NetworkHost, 0)
	lc.Spares, lc.KillGrace.Duration = 0, time.Hour
	m, bus := startTestLane(t, lc)
	waitServing(t, m, 1)
	events := eventlogtest.NewRecorder()
	defer bus.Subscribe([]string{"job.cancel_requested"}, events)()
	dir := t.TempDir()

	if _, err := m.Submit(api.JobSpec{Lane: "bench", Command: "true", KillGraceMs: graceMs(api.MaxKillGraceMs + 1)}); err == nil ||
		!strings.Contains(err.Error(), "kill_grace_ms must be at most 3600000") {
		t.Fatalf("kill_grace_ms over an hour: %v", err)
	}
	start := func(script string) string {
		t.Helper()
		marker := filepath.Join(dir, "m"+time.Now().Format("150405.000000000"))
		// (wait: see runner's TestCancelSendsSIGTERM)
		id, err := m.Submit(api.JobSpec{Lane: "bench", Command: script + "; sleep 60 & echo > " + marker + "; wait"})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "job "+id+" ready", func() bool {
			_, err := os.Stat(marker)
			rec, _ := m.Get(id)
			return err == nil && rec.State == api.StateRunning
		})
		return id
	}
	cancel := func(id string, force bool) {
		t.Helper()
		done := make(chan error, 1)
		m.CancelWith(id, force, func(running bool, err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	term := start(`trap 'exit 3' TERM`)
	cancel(term, false)
	if r := waitEnd(t, m, term); r.State != api.StateCancelled || r.StoppedBy != wire.StoppedBySIGTERM || *r.ExitCode != 3 {
		t.Fatalf("job that exits on SIGTERM: %+v", r)
	}
	twice := start(`trap '' TERM`)
	cancel(twice, false)
	cancel(twice, false)
	if r := waitEnd(t, m, twice); r.State != api.StateCancelled || r.StoppedBy != wire.StoppedBySIGKILL {
		t.Fatalf("job cancelled twice: %+v", r)
	}
	forced := start(`trap '' TERM`)
	cancel(forced, true)
	if r := waitEnd(t, m, forced); r.State != api.StateCancelled || r.StoppedBy != wire.StoppedBySIGKILL {
		t.Fatalf("job cancelled with force: %+v", r)
	}

	var got []JobCancelRequested
	for _, r := range events.Records() {
		got = append(got, r.Event.(JobCancelRequested))
	}
	want := []JobCancelRequested{
		{JobID: term, Lane: "bench", State: "running"},
		{JobID: twice, Lane: "bench", State: "running"},
		{JobID: twice, Lane: "bench", State: "running", Again: true},
		{JobID: forced, Lane: "bench", State: "running", Force: true},
	}
	if len(got) != len(want) {
		t.Fatalf("job.cancel_requested: %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("job.cancel_requested %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
