package daemontest_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemontest"
)

func TestMain(m *testing.M) { os.Exit(daemontest.Main(m)) }

// A daemon in this process: ready with its lane's runners (the built
// binary), a job run on it, its events read; Stop returns once Run has,
// clean, with the daemon.stopped event written and no runner left; a
// second daemon after it starts on the same home.
func TestStartStop(t *testing.T) {
	const cfg = "[daemon]\nshutdown_timeout = \"2s\"\n[http]\nenabled = false\n[lanes.net]\nrunners = 2\nspares = 0\nnetwork = \"host\"\n"
	d := daemontest.Start(t, cfg)
	var ls struct{ Lanes []api.LaneStatus }
	d.MustCall("lane.list", nil, &ls)
	var runners []int
	for _, l := range ls.Lanes {
		for _, r := range l.Runners {
			if r.Spawned && r.Pid > 0 {
				runners = append(runners, r.Pid)
			}
		}
	}
	if len(runners) != 2 {
		t.Fatalf("runners %v, want 2: %+v", runners, ls.Lanes)
	}
	var st struct {
		Version string `json:"version"`
	}
	d.MustCall("status", nil, &st)
	if st.Version != daemontest.Version {
		t.Errorf("status version %q, want %q", st.Version, daemontest.Version)
	}
	rec := d.Wait(d.Submit(api.JobSpec{Lane: "net", Argv: []string{"sh", "-c", "exit 3"}}))
	if rec.State != api.StateFailed || rec.ExitCode == nil || *rec.ExitCode != 3 {
		t.Fatalf("job %+v, want failed with exit 3", rec)
	}
	d.WaitEvent("job.finished", func(e map[string]any) bool { return e["job_id"] == rec.ID })

	d.Stop()
	select {
	case <-d.Done():
	default:
		t.Fatal("Stop returned before daemon.Run")
	}
	if err := d.Err(); err != nil {
		t.Fatalf("daemon.Run: %v\n%s", err, daemontest.Tail(d.Log.String(), 3000))
	}
	if d.Events()[len(d.Events())-1]["kind"] != "daemon.stopped" {
		t.Errorf("the event log does not end with daemon.stopped")
	}
	for _, pid := range runners {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("runner %d is alive after Stop", pid)
		}
	}

	again := daemontest.StartAt(t, d.Home, "")
	again.MustCall("status", nil, nil)
}
