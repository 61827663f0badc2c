package state

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// ReserveLater hands out the next range without waiting, after the ranges
// Reserve handed out before it; bad input is refused at once.
func TestReserveLater(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "state.db"), testOpts)
	m := s.Meta()
	if first, err := m.Reserve(context.Background(), "eventlog.seq", 100); err != nil || first != 1 {
		t.Fatalf("reserve: %d %v", first, err)
	}
	type res struct {
		first int64
		err   error
	}
	got := make(chan res, 1)
	if err := m.ReserveLater("eventlog.seq", 100, func(first int64, err error) { got <- res{first, err} }); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil || r.first != 101 {
			t.Fatalf("ReserveLater: %d %v, want 101", r.first, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReserveLater's done was not called")
	}
	if first, err := m.Reserve(context.Background(), "eventlog.seq", 1); err != nil || first != 201 {
		t.Fatalf("reserve after ReserveLater: %d %v, want 201", first, err)
	}
	if err := m.ReserveLater("eventlog.seq", 0, func(int64, error) { t.Error("done called for bad input") }); err == nil {
		t.Fatal("ReserveLater of 0 numbers was queued")
	}
}
