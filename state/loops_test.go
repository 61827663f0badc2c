package state

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

func TestLoopsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	root := api.LoopRecord{ID: "1-abc", LoopType: api.LoopPlan, Status: api.LoopPending, MaxIterations: 10,
		OutputArtifacts: []string{}, CreatedAt: 1, UpdatedAt: 1, Repo: "/r", Base: "main", Branch: "loop/1-abc"}
	pid := root.ID
	child := api.LoopRecord{ID: api.ChildLoopID(root.ID, 1), LoopType: api.LoopSpec, ParentID: &pid,
		Status: api.LoopPending, CreatedAt: 2, UpdatedAt: 2}
	if err := s.Do(ctx, LoopSaved(root), LoopSaved(child)); err != nil {
		t.Fatal(err)
	}
	root.Status, root.Iteration, root.Progress = api.LoopRunning, 2, "\n---\n## Iteration 1 Failed\nboom\n"
	it := api.LoopIteration{LoopID: root.ID, Iteration: 1, Prompt: "p", TaskID: "t-1", Status: "failed", Feedback: "boom"}
	it2 := api.LoopIteration{LoopID: root.ID, Iteration: 2, Prompt: "p2", Status: "running"}
	if err := s.Do(ctx, LoopSaved(root), IterationSaved(it), IterationSaved(it2)); err != nil {
		t.Fatal(err)
	}
	it2.Status, it2.Passed = "passed", true
	if err := s.Do(ctx, IterationSaved(it2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What a restart reads back.
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, ok, err := s.Loops().Get(root.ID)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if got.Status != api.LoopRunning || got.Iteration != 2 || got.Progress != root.Progress || got.ParentID != nil {
		t.Fatalf("got %+v", got)
	}
	all, err := s.Loops().All()
	if err != nil || len(all) != 2 || all[0].ID != root.ID || all[1].ID != child.ID || *all[1].ParentID != root.ID {
		t.Fatalf("all: %+v %v", all, err)
	}
	its, err := s.Loops().Iterations(root.ID)
	if err != nil || len(its) != 2 || its[0].Feedback != "boom" || !its[1].Passed || its[1].Status != "passed" {
		t.Fatalf("iterations: %+v %v", its, err)
	}
	if err := s.Do(ctx, LoopsDeleted([]string{root.ID, child.ID})); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Loops().Get(root.ID); ok {
		t.Fatal("the deleted loop is still there")
	}
	if its, _ := s.Loops().Iterations(root.ID); len(its) != 0 {
		t.Fatalf("iterations of a deleted loop: %+v", its)
	}
	// Bad records are refused before they are queued.
	for _, bad := range []api.LoopRecord{{}, {ID: "x", LoopType: "nope", Status: api.LoopPending}, {ID: "x", LoopType: api.LoopCode, Status: "meh"}} {
		if err := s.Do(ctx, LoopSaved(bad)); err == nil {
			t.Fatalf("%+v was recorded", bad)
		}
	}
	if err := s.Do(ctx, IterationSaved(api.LoopIteration{LoopID: "x"})); err == nil {
		t.Fatal("an iteration without a status was recorded")
	}
}
