package eventlog

import (
	"errors"
	"sync"
	"testing"
)

// A bus opened with SeqFrom above the log's last line continues above it
// and says how many numbers it skipped; one without continues from the log.
func TestSeqFromSkipsAnEarlierReservation(t *testing.T) {
	path := logPath(t)
	b := openTest(t, Options{Path: path})
	for range 3 {
		b.Emit(jobQueued{JobID: "j", Lane: "l"})
	}
	b.Close()

	b = openTest(t, Options{Path: path, SeqFrom: 100})
	if r := b.Emit(jobQueued{JobID: "j", Lane: "l"}); r.Seq != 101 {
		t.Fatalf("first seq after SeqFrom 100 = %d, want 101", r.Seq)
	}
	if n := b.SeqSkipped(); n != 97 {
		t.Fatalf("SeqSkipped = %d, want 97 (3 in the log, 100 reserved)", n)
	}
	b.Close()

	// A reservation below the log's last line changes nothing.
	b = openTest(t, Options{Path: path, SeqFrom: 50})
	if r := b.Emit(jobQueued{JobID: "j", Lane: "l"}); r.Seq != 102 || b.SeqSkipped() != 0 {
		t.Fatalf("seq %d skipped %d, want 102 and 0", r.Seq, b.SeqSkipped())
	}
	b.Close()

	// Without a file too.
	b = openTest(t, Options{SeqFrom: 7})
	if r := b.Emit(jobQueued{JobID: "j", Lane: "l"}); r.Seq != 8 {
		t.Fatalf("seq without a file = %d, want 8", r.Seq)
	}
}

// The bus asks for the next range once half of the reserved one is used,
// one request at a time, and never waits for it: Emit goes on numbering
// while the request is pending, even past the reservation.
func TestReserveSeqAhead(t *testing.T) {
	var mu sync.Mutex
	var pending []func(uint64, error)
	b := openTest(t, Options{Path: logPath(t), SeqReserved: 64, SeqBlock: 64,
		ReserveSeq: func(done func(uint64, error)) {
			mu.Lock()
			pending = append(pending, done)
			mu.Unlock()
		}})
	asked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(pending)
	}
	emitTo := func(seq uint64) {
		for b.Seq() < seq {
			b.Emit(jobQueued{JobID: "j", Lane: "l"})
		}
	}
	emitTo(31)
	if n := asked(); n != 0 {
		t.Fatalf("asked %d times with 33 of 64 numbers left, want 0", n)
	}
	emitTo(32) // half a block left
	if n := asked(); n != 1 {
		t.Fatalf("asked %d times at seq 32 of 64, want 1", n)
	}
	emitTo(70) // past the reservation: no wait, no second request
	if n := asked(); n != 1 {
		t.Fatalf("asked %d times while a request was pending, want 1", n)
	}
	// A failed reservation is asked again, not at every Emit but a
	// sixteenth of a block later.
	pending[0](0, errors.New("disk full"))
	emitTo(73)
	if n := asked(); n != 1 {
		t.Fatalf("asked again at once after a failure")
	}
	emitTo(74)
	if n := asked(); n != 2 {
		t.Fatalf("asked %d times after the retry point, want 2", n)
	}
	pending[1](128, nil) // reserved up to 128
	emitTo(95)
	if n := asked(); n != 2 {
		t.Fatalf("asked %d times at seq 95 of 128, want 2", n)
	}
	emitTo(96)
	if n := asked(); n != 3 {
		t.Fatalf("asked %d times at seq 96 of 128, want 3", n)
	}
}
