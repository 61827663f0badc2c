package main

import (
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// A lane whose min_free_memory is above all this machine has holds its
// jobs back: lane.paused says why, a job submitted waits queued (it is not
// refused) with the lane's runners ready and idle, and it can be cancelled
// there. Another lane runs as ever.
func TestMinFreeMemoryKeepsJobsQueued(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, `
[lanes.held]
runners = 1
slots = 1
network = "host"
min_free_memory = 1125899906842624
[lanes.net]
runners = 1
slots = 1
network = "host"
`)
	e := d.waitEvent("lane.paused", func(e map[string]any) bool { return e["lane"] == "held" })
	if e["reason"] != "min_free_memory" || e["min_free_memory"].(float64) != 1<<50 ||
		e["available_bytes"].(float64) <= 0 || e["available_bytes"].(float64) >= 1<<50 {
		t.Fatalf("lane.paused = %v", e)
	}
	d.waitEvent("runner.ready", func(e map[string]any) bool { return e["lane"] == "held" })
	id := d.submit(api.JobSpec{Lane: "held", Argv: []string{"true"}})
	// The lane decides at submission: had it a free slot to use, the job
	// would be dispatched by now.
	if rec := d.job(id); rec.State != api.StateQueued {
		t.Fatalf("job on the held lane: %+v", rec)
	}
	if l := d.lane("held"); l.Queued != 1 || l.Running != 0 {
		t.Fatalf("held lane: queued %d running %d", l.Queued, l.Running)
	}
	if rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"true"}})); rec.State != api.StateSucceeded {
		t.Fatalf("job on the other lane: %+v", rec)
	}
	if rec := d.job(id); rec.State != api.StateQueued {
		t.Fatalf("job on the held lane: %+v", rec)
	}
	out := mustCLI(t, "cancel", "--home", d.home, id)
	if rec := d.wait(id); rec.State != api.StateCancelled {
		t.Fatalf("cancelled: %+v\n%s", rec, out)
	}
	for _, ev := range d.events() {
		if ev["kind"] == "job.dispatched" && ev["job_id"] == id {
			t.Fatalf("the held job was dispatched: %v", ev)
		}
		if ev["kind"] == "lane.resumed" && strings.Contains(ev["lane"].(string), "held") {
			t.Fatalf("the lane resumed: %v", ev)
		}
	}
}
