package main

import (
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// Finished jobs past [state] retain_jobs, then past retain_for, are pruned
// from the store (here at start), each prune a jobs.pruned event; the
// jobs kept stay queryable.
func TestFinishedJobsArePruned(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	lanes := "[lanes.work]\nrunners = 1\nspares = 0\nnetwork = \"host\"\n"
	d := startDaemonAt(t, home, "[state]\nretain_jobs = 2\n"+lanes)
	var ids []string
	for range 5 {
		id := d.submit(api.JobSpec{Lane: "work", Argv: []string{"true"}})
		d.wait(id)
		ids = append(ids, id)
	}
	d.stop()

	d2 := startDaemonAt(t, home, "[state]\nretain_jobs = 2\n"+lanes)
	e := d2.waitEvent("jobs.pruned", nil)
	if e["count"] != float64(3) || e["retain_jobs"] != float64(2) || e["retain_for"] != "168h0m0s" {
		t.Fatalf("jobs.pruned = %v, want count 3 by retain_jobs 2", e)
	}
	for i, id := range ids {
		err := d2.call("job.get", map[string]any{"id": id}, nil)
		if kept := i >= 3; kept != (err == nil) {
			t.Fatalf("job %d (%s): job.get %v, want kept %v", i, id, err, kept)
		}
	}
	var l struct{ Jobs []api.JobRecord }
	d2.mustCall("job.list", nil, &l)
	if len(l.Jobs) != 2 || l.Jobs[0].ID != ids[3] {
		t.Fatalf("job.list after pruning: %+v", l.Jobs)
	}
	d2.stop()

	d3 := startDaemonAt(t, home, "[state]\nretain_jobs = 0\nretain_for = \"1ms\"\n"+lanes)
	e = d3.waitEvent("jobs.pruned", func(e map[string]any) bool { return e["retain_for"] == "1ms" })
	if e["count"] != float64(2) || e["retain_jobs"] != float64(0) {
		t.Fatalf("jobs.pruned = %v, want count 2 by retain_for 1ms", e)
	}
	d3.mustCall("job.list", nil, &l)
	if len(l.Jobs) != 0 {
		t.Fatalf("job.list after pruning by age: %+v", l.Jobs)
	}
}
