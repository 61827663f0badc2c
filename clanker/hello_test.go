package clanker

import (
	"fmt"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

// seenPods merges a pod's hellos as if applied in order, and holds at
// most maxSeenPending pods: past it a new pod's hello is the actor's.
func TestSeenPodsMergesAndBounds(t *testing.T) {
	var s seenPods
	if s.take() != nil {
		t.Fatal("an empty seenPods gave hellos")
	}
	t0 := time.Unix(100, 0)
	s.add(wire.ClankerHello{PodID: "p", Role: "judge", Worktree: "/a"}, t0)
	s.add(wire.ClankerHello{PodID: "p", Worktree: "/b"}, t0.Add(time.Second))
	got := s.take()
	if want := (seenHello{wire.ClankerHello{PodID: "p", Role: "judge", Worktree: "/b"}, t0.Add(time.Second)}); len(got) != 1 || got["p"] != want {
		t.Fatalf("took %+v, want p as %+v", got, want)
	}
	if s.take() != nil {
		t.Fatal("hellos taken twice")
	}
	for i := range maxSeenPending {
		if !s.add(wire.ClankerHello{PodID: fmt.Sprint("p", i)}, t0) {
			t.Fatalf("pod %d of %d refused", i, maxSeenPending)
		}
	}
	if s.add(wire.ClankerHello{PodID: "one more"}, t0) {
		t.Fatal("a pod past the bound was kept")
	}
	if !s.add(wire.ClankerHello{PodID: "p0", Role: "slave"}, t0) {
		t.Fatal("a pod already waiting was refused")
	}
	if got := s.take(); len(got) != maxSeenPending || got["p0"].Role != "slave" {
		t.Fatalf("took %d pods, p0 %+v", len(got), got["p0"])
	}
}
