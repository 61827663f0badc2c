package daemon

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/state"
)

// The adapter queues each write, calls done once it is committed (or
// with the error that ended it, a write that could not even be queued
// included) and reads what was committed.
func TestApprovalLog(t *testing.T) {
	defer goleak.VerifyNone(t)
	st, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var l approvals.Log = approvalLog{st}
	wait := func(what string, record func(done func(error))) error {
		t.Helper()
		ch := make(chan error, 2)
		record(func(err error) { ch <- err })
		select {
		case err := <-ch:
			select {
			case err2 := <-ch:
				t.Fatalf("%s: done called twice (%v, %v)", what, err, err2)
			default:
			}
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: done never called", what)
		}
		return nil
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := api.Approval{ID: "a-abc123-1", State: api.ApprovalPending, Source: api.SourcePlan, Kind: api.KindPlan,
		Content: "plan", Specs: []byte(`[{"n":1}]`), CreatedAt: now, Deadline: now.Add(time.Minute)}
	if err := wait("requested", func(done func(error)) { l.RecordRequested(a, done) }); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Pending(); err != nil || len(p) != 1 || p[0].ID != a.ID {
		t.Fatalf("Pending: %+v %v", p, err)
	}
	a.State = api.ApprovalAlwaysAllowed
	a.Resolution = &api.Resolution{Decision: api.DecisionAlwaysAllow, By: api.ByCLI, At: now}
	rules := []api.ApprovalRule{
		{ID: "r-abc123-1", Origin: "always_allow", Tool: "Bash", Content: "ls:*", Decision: "allow", CreatedAt: now},
		{ID: "r-abc123-2", Origin: "always_allow", Tool: "Read", Decision: "allow", CreatedAt: now},
	}
	if err := wait("resolved", func(done func(error)) { l.RecordResolved(a, rules, done) }); err != nil {
		t.Fatal(err)
	}
	if err := wait("resolved again", func(done func(error)) { l.RecordResolved(a, nil, done) }); !errors.Is(err, state.ErrFinished) {
		t.Fatalf("a second resolution: %v", err)
	}
	if got, ok, err := l.Get(a.ID); !ok || err != nil || got.State != api.ApprovalAlwaysAllowed {
		t.Fatalf("Get: %+v %v %v", got, ok, err)
	}
	if got, err := l.List(approvals.Query{State: "always_allowed", Source: api.SourcePlan, Limit: 5}); err != nil || len(got) != 1 {
		t.Fatalf("List: %+v %v", got, err)
	}
	if got, err := l.Rules(); err != nil || len(got) != 2 || got[1].ID != "r-abc123-2" {
		t.Fatalf("Rules: %+v %v", got, err)
	}
	if err := wait("rule deleted", func(done func(error)) { l.DeleteRule("r-abc123-1", done) }); err != nil {
		t.Fatal(err)
	}
	if err := wait("unknown rule deleted", func(done func(error)) { l.DeleteRule("r-abc123-1", done) }); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("deleting an unknown rule: %v", err)
	}
	// Bad input never reaches the queue, and done still hears of it.
	if err := wait("bad", func(done func(error)) { l.RecordRequested(api.Approval{}, done) }); err == nil {
		t.Fatal("an approval without an id was recorded")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait("after close", func(done func(error)) { l.RecordRequested(a, done) }); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("a write after Close: %v", err)
	}
}
