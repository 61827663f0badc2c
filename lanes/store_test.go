package lanes

import (
	"sync"
	"testing"
	"time"
)

func rec(id string, st State) JobRecord {
	return JobRecord{ID: id, Lane: "net", State: st, CreatedAt: time.Now()}
}

func TestStoreWaitFinishEvict(t *testing.T) {
	s := newStore(2)
	s.add(rec("a", StateQueued))
	var got []JobRecord
	var mu sync.Mutex
	cancel, ok := s.wait("a", func(r JobRecord) { mu.Lock(); got = append(got, r); mu.Unlock() })
	if !ok {
		t.Fatal("wait on a live job not found")
	}
	defer cancel()
	s.update(rec("a", StateRunning))
	if r, _ := s.get("a"); r.State != StateRunning {
		t.Fatalf("state = %s", r.State)
	}
	if !s.finish(rec("a", StateSucceeded)) {
		t.Fatal("finish returned false")
	}
	if s.finish(rec("a", StateFailed)) {
		t.Fatal("a job finished twice")
	}
	s.update(rec("a", StateRunning)) // late update must not resurrect it
	if r, _ := s.get("a"); r.State != StateSucceeded {
		t.Fatalf("state after late update = %s", r.State)
	}
	mu.Lock()
	if len(got) != 1 || got[0].State != StateSucceeded {
		t.Fatalf("waiter got %+v", got)
	}
	mu.Unlock()
	// Waiting on a finished job answers at once.
	called := false
	s.wait("a", func(JobRecord) { called = true })
	if !called {
		t.Fatal("wait on a finished job did not answer at once")
	}
	for _, id := range []string{"b", "c"} {
		s.add(rec(id, StateQueued))
		s.finish(rec(id, StateFailed))
	}
	if _, ok := s.get("a"); ok {
		t.Fatal("oldest finished job not evicted past the bound")
	}
	if len(s.list(Filter{})) != 2 {
		t.Fatalf("list = %v", s.list(Filter{}))
	}
	c := s.stateCounts()
	if c[StateSucceeded] != 1 || c[StateFailed] != 2 || c[StateQueued] != 0 {
		t.Fatalf("counts = %v (terminal counts are cumulative)", c)
	}
	if _, ok := s.wait("nope", func(JobRecord) {}); ok {
		t.Fatal("wait on an unknown job found it")
	}
}

func TestStoreListFilters(t *testing.T) {
	s := newStore(10)
	a, b := rec("a", StateQueued), rec("b", StateQueued)
	b.Lane = "heavy"
	b.CreatedAt = a.CreatedAt.Add(time.Millisecond)
	s.add(a)
	s.add(b)
	a.Output = "big"
	a.State = StateSucceeded
	s.finish(a)
	if l := s.list(Filter{Lane: "heavy"}); len(l) != 1 || l[0].ID != "b" {
		t.Fatalf("lane filter: %v", l)
	}
	if l := s.list(Filter{State: "succeeded"}); len(l) != 1 || l[0].ID != "a" || l[0].Output != "" {
		t.Fatalf("state filter (lists omit output): %v", l)
	}
	if l := s.list(Filter{}); len(l) != 2 || l[0].ID != "a" {
		t.Fatalf("order: %v", l)
	}
}
