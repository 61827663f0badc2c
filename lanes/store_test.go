package lanes

import (
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func rec(id string, st api.State) api.JobRecord {
	return api.JobRecord{ID: id, Lane: "net", State: st, CreatedAt: time.Now()}
}

func TestStoreWaitFinishEvict(t *testing.T) {
	s := newStore(2, 1<<20)
	s.add(rec("a", api.StateQueued), nil)
	var got []api.JobRecord
	var mu sync.Mutex
	cancel, ok := s.wait("a", func(r api.JobRecord) { mu.Lock(); got = append(got, r); mu.Unlock() })
	if !ok {
		t.Fatal("wait on a live job not found")
	}
	defer cancel()
	s.update(rec("a", api.StateRunning))
	if r, _ := s.get("a"); r.State != api.StateRunning {
		t.Fatalf("state = %s", r.State)
	}
	if !s.finish(rec("a", api.StateSucceeded)) {
		t.Fatal("finish returned false")
	}
	if s.finish(rec("a", api.StateFailed)) {
		t.Fatal("a job finished twice")
	}
	s.update(rec("a", api.StateRunning)) // late update must not resurrect it
	if r, _ := s.get("a"); r.State != api.StateSucceeded {
		t.Fatalf("state after late update = %s", r.State)
	}
	mu.Lock()
	if len(got) != 1 || got[0].State != api.StateSucceeded {
		t.Fatalf("waiter got %+v", got)
	}
	mu.Unlock()
	// Waiting on a finished job answers at once.
	called := false
	s.wait("a", func(api.JobRecord) { called = true })
	if !called {
		t.Fatal("wait on a finished job did not answer at once")
	}
	for _, id := range []string{"b", "c"} {
		s.add(rec(id, api.StateQueued), nil)
		s.finish(rec(id, api.StateFailed))
	}
	if _, ok := s.get("a"); ok {
		t.Fatal("oldest finished job not evicted from the cache past its bound")
	}
	if out, r, ok := s.stream("b"); !ok || out != nil || r.State != api.StateFailed {
		t.Fatalf("stream of a cached finished job: %v %+v %v", out, r, ok)
	}
	if len(s.list(api.Filter{})) != 2 {
		t.Fatalf("list = %v", s.list(api.Filter{}))
	}
	c := s.stateCounts()
	if c[api.StateSucceeded] != 1 || c[api.StateFailed] != 2 || c[api.StateQueued] != 0 {
		t.Fatalf("counts = %v (terminal counts are cumulative)", c)
	}
	if _, ok := s.wait("nope", func(api.JobRecord) {}); ok {
		t.Fatal("wait on an unknown job found it")
	}
}

func TestStoreListFilters(t *testing.T) {
	s := newStore(10, 1<<20)
	a, b := rec("a", api.StateQueued), rec("b", api.StateQueued)
	b.Lane = "heavy"
	b.CreatedAt = a.CreatedAt.Add(time.Millisecond)
	s.add(a, nil)
	s.add(b, nil)
	a.Output = "big"
	a.State = api.StateSucceeded
	s.finish(a)
	if l := s.list(api.Filter{Lane: "heavy"}); len(l) != 1 || l[0].ID != "b" {
		t.Fatalf("lane filter: %v", l)
	}
	if l := s.list(api.Filter{State: "succeeded"}); len(l) != 1 || l[0].ID != "a" || l[0].Output != "" {
		t.Fatalf("state filter (lists omit output): %v", l)
	}
	if l := s.list(api.Filter{}); len(l) != 2 || l[0].ID != "a" {
		t.Fatalf("order: %v", l)
	}
}
