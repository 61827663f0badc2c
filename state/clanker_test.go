package state

import (
	"fmt"
	"testing"
)

// The outbox's markers: OutboxDone removes the lines up to a seq,
// OutboxWritten the ones written past it (an earlier line waits for its
// file); the others stay.
func TestClankerOutboxMarkers(t *testing.T) {
	s := openT(t, dbPath(t), testOpts)
	commit := func(c ClankerCommit) {
		t.Helper()
		done := make(chan error, 1)
		if err := s.Enqueue(ClankerCommitted(c), func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var out []ClankerLine
	for seq := int64(1); seq <= 6; seq++ {
		out = append(out, ClankerLine{Seq: seq, File: "/r/.clanker/f", Data: fmt.Sprint(seq)})
	}
	commit(ClankerCommit{Repo: "/r", Outbox: out})
	commit(ClankerCommit{Repo: "/r", OutboxDone: 1, OutboxWritten: []int64{3, 5}})
	snap, err := s.Clanker().Load("/r")
	if err != nil {
		t.Fatal(err)
	}
	var left []int64
	for _, l := range snap.Outbox {
		left = append(left, l.Seq)
	}
	if fmt.Sprint(left) != "[2 4 6]" {
		t.Fatalf("outbox left %v, want [2 4 6]", left)
	}
}
