package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/state"
)

// Finished approvals are pruned by [state] retain_jobs and retain_for,
// counted apart from jobs (approvals.pruned); pending ones stay.
func TestFinishedApprovalsArePruned(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	path := filepath.Join(home, "state.db")
	st, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	for i := range 6 {
		a := api.Approval{ID: fmt.Sprintf("a-test-%d", i), Source: api.SourceControl, Kind: api.KindTool,
			ToolName: "Bash", CreatedAt: base, Deadline: time.Now().Add(time.Hour)}
		if i < 5 {
			a.State, a.Resolution = api.ApprovalDenied, &api.Resolution{Decision: api.DecisionDeny, By: api.ByCLI,
				At: base.Add(time.Duration(i) * time.Second)}
		}
		if err := st.Approvals().Request(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	lanes := "[lanes.work]\nrunners = 1\nspares = 0\nnetwork = \"host\"\n"
	d := startDaemonAt(t, home, "[state]\nretain_jobs = 2\n"+lanes)
	e := d.waitEvent("approvals.pruned", nil)
	if e["count"] != float64(3) || e["retain_jobs"] != float64(2) || e["retain_for"] != "168h0m0s" {
		t.Fatalf("approvals.pruned = %v, want count 3 by retain_jobs 2", e)
	}
	for _, e := range d.events() {
		if e["kind"] == "jobs.pruned" {
			t.Fatalf("jobs were pruned, there were none: %v", e)
		}
	}
	d.stop()

	st, err = state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	left, err := st.Approvals().List(state.ApprovalQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range left {
		ids = append(ids, a.ID)
	}
	// Newest first by creation (all the same), then by insertion.
	if got := strings.Join(ids, " "); got != "a-test-5 a-test-4 a-test-3" {
		t.Fatalf("approvals left: %q, want the pending one and the 2 most recently resolved", got)
	}
}
