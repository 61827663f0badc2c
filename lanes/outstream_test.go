package lanes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// acks records what a stream acknowledged.
type acks struct {
	mu   sync.Mutex
	last int64
	n    int
}

func (a *acks) ack(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n < a.last {
		panic("acknowledgement went back")
	}
	a.last, a.n = n, a.n+1
}

func (a *acks) get() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// readAll reads r to its end within a deadline: bytes per stream, gaps.
func readAll(t *testing.T, r *OutputReader) (out map[string][]byte, gaps []OutputPiece) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out = map[string][]byte{}
	next := int64(0)
	for {
		p, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, gaps
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Offset != next {
			t.Fatalf("piece at %d, want %d", p.Offset, next)
		}
		if p.Gap > 0 {
			gaps = append(gaps, p)
			next += p.Gap
			continue
		}
		out[p.Stream] = append(out[p.Stream], p.Data...)
		next += int64(len(p.Data))
	}
}

// A reader attached before the first byte gets every byte, each stream's
// in order, then io.EOF with the record; nothing is retained after it.
func TestOutputReaderGetsEveryByte(t *testing.T) {
	s := newOutStream(nil, "j-1", 10)
	r := s.attach("test", false)
	var want bytes.Buffer
	for i := range 100 {
		chunk := bytes.Repeat([]byte{byte(i)}, 1000)
		stream := StreamStdout
		if i%3 == 0 {
			stream = StreamStderr
		} else {
			want.Write(chunk)
		}
		s.write(stream, chunk)
	}
	s.end(api.JobRecord{ID: "j-1", State: api.StateSucceeded, Output: "x"})
	out, gaps := readAll(t, r)
	if len(gaps) != 0 || !bytes.Equal(out[StreamStdout], want.Bytes()) || len(out[StreamStderr]) != 34000 {
		t.Fatalf("gaps %v, stdout %d bytes (equal %v), stderr %d", gaps, len(out[StreamStdout]),
			bytes.Equal(out[StreamStdout], want.Bytes()), len(out[StreamStderr]))
	}
	if rec := r.Record(); rec.State != api.StateSucceeded || rec.Output != "" {
		t.Fatalf("record %+v", rec)
	}
	r.Close("ended")
	if len(s.pieces) != 0 || s.base != s.total {
		t.Fatalf("%d pieces retained, base %d of %d", len(s.pieces), s.base, s.total)
	}
	rec := api.JobRecord{}
	s.record(&rec)
	if rec.Output != string(make([]byte, 10)) || rec.OutputBytes != 100000 || !rec.OutputTruncated {
		t.Fatalf("kept %q, %d bytes, truncated %v", rec.Output, rec.OutputBytes, rec.OutputTruncated)
	}
}

// Acknowledgements: with no reader, everything as it comes; with a
// stalled reader, no further than outputBuffer - OutputWindow past it, so
// the runner can hold no more than outputBuffer beyond it; as it reads,
// acknowledgements go on; once it detaches, all of it.
func TestOutputAcknowledgedAsReadersRead(t *testing.T) {
	s := newOutStream(nil, "j-1", 0)
	var a acks
	s.onRunner(a.ack)
	chunk := make([]byte, 32<<10)
	for range 64 {
		s.write(StreamStdout, chunk)
	}
	if a.get() < s.total-OutputWindow/4 {
		t.Fatalf("no reader: acknowledged %d of %d", a.get(), s.total)
	}
	r := s.attach("test", false)
	start := s.total
	// The runner sends what it may: up to acked + OutputWindow.
	for s.total < a.get()+OutputWindow {
		s.write(StreamStdout, chunk)
	}
	if held := s.total - start; a.get()+OutputWindow-start > outputBuffer || held > outputBuffer {
		t.Fatalf("a stalled reader: acknowledged %d past it, %d held", a.get()-start, held)
	}
	// Reading lets it go on.
	before := a.get()
	for range 8 {
		if _, err := r.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if a.get() <= before {
		t.Fatalf("reading acknowledged nothing more: %d", a.get())
	}
	r.Close("detached")
	if a.get() != s.total {
		t.Fatalf("detached: acknowledged %d of %d", a.get(), s.total)
	}
}

// A runner that takes no acknowledgements: a stalled reader is pushed
// ahead past outputHardCap and told what it missed; the stream holds no
// more than that.
func TestOutputReaderBehindARunnerWithoutCredit(t *testing.T) {
	s := newOutStream(nil, "j-1", 0)
	r := s.attach("test", false)
	chunk := make([]byte, 32<<10)
	for range 512 { // 16 MiB
		s.write(StreamStdout, chunk)
		held := int64(0)
		for _, p := range s.pieces {
			held += int64(len(p.data))
		}
		if held > outputHardCap+int64(len(chunk)) {
			t.Fatalf("%d bytes held", held)
		}
	}
	s.end(api.JobRecord{ID: "j-1", State: api.StateSucceeded})
	out, gaps := readAll(t, r)
	n := int64(len(out[StreamStdout]))
	missed := int64(0)
	for _, g := range gaps {
		missed += g.Gap
		if g.GapReason != GapBehind {
			t.Fatalf("gap %+v", g)
		}
	}
	if len(gaps) == 0 || n+missed != 16<<20 || n < outputBuffer {
		t.Fatalf("%d delivered, %d missed in %d gaps", n, missed, len(gaps))
	}
	if d, m := r.Counts(); d != n || m != missed {
		t.Fatalf("counts %d %d", d, m)
	}
}

// A reader attached to a running job gets what its record keeps, a gap to
// the live bytes, then every byte from there; one of a finished job its
// record's output and a gap for what it did not keep.
func TestOutputReaderAttachedLate(t *testing.T) {
	s := newOutStream(nil, "j-1", 5)
	s.write(StreamStdout, []byte("0123456789"))
	r := s.attach("test", false)
	s.write(StreamStderr, []byte("live"))
	s.end(api.JobRecord{ID: "j-1", State: api.StateFailed})
	out, gaps := readAll(t, r)
	if string(out[StreamOutput]) != "01234" || string(out[StreamStderr]) != "live" || len(gaps) != 1 ||
		gaps[0].Offset != 5 || gaps[0].Gap != 5 || gaps[0].GapReason != GapNotKept {
		t.Fatalf("out %q, gaps %+v", out, gaps)
	}
	f := finishedStream(nil, api.JobRecord{ID: "j-2", State: api.StateSucceeded, Output: "abc", OutputBytes: 7})
	out, gaps = readAll(t, f.attach("test", false))
	if string(out[StreamOutput]) != "abc" || len(gaps) != 1 || gaps[0].Gap != 4 {
		t.Fatalf("finished: out %q, gaps %+v", out, gaps)
	}
	// An error's output is why it could not run: not output.
	e := finishedStream(nil, api.JobRecord{ID: "j-3", State: api.StateError, Output: "no such file", OutputBytes: 12})
	if out, gaps = readAll(t, e.attach("test", false)); len(out) != 0 || len(gaps) != 0 {
		t.Fatalf("error: out %q, gaps %+v", out, gaps)
	}
}

// A reader waiting for output is woken by a write, by the end and by its
// context; a closed reader returns ErrReaderClosed.
func TestOutputReaderWaits(t *testing.T) {
	s := newOutStream(nil, "j-1", 0)
	r := s.attach("test", false)
	got := make(chan OutputPiece, 1)
	go func() {
		p, _ := r.Next(context.Background())
		got <- p
	}()
	s.write(StreamStdout, []byte("hi"))
	if p := <-got; string(p.Data) != "hi" {
		t.Fatalf("piece %+v", p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Next(ctx)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	r.Close("detached")
	if _, err := r.Next(context.Background()); !errors.Is(err, ErrReaderClosed) {
		t.Fatalf("closed: %v", err)
	}
}

// An observer (the dashboard's reader) never holds the job back: with
// only a stalled observer attached everything is acknowledged as it
// comes; it skips ahead past outputBuffer behind, so memory holds at most
// that for it, and it is told of the gap (behind); a reader that is not
// an observer still holds the runner back beside it.
func TestObserverHoldsNothingBack(t *testing.T) {
	s := newOutStream(nil, "j-1", 0)
	var a acks
	s.onRunner(a.ack)
	obs := s.attach("observer", true)
	chunk := make([]byte, 32<<10)
	for range 64 { // 2 MiB, the observer reads nothing
		s.write(StreamStdout, chunk)
	}
	if got := a.get(); got != s.total {
		t.Fatalf("acknowledged %d of %d with only a stalled observer", got, s.total)
	}
	s.mu.Lock()
	held := s.total - s.base
	s.mu.Unlock()
	if held > outputBuffer {
		t.Fatalf("memory holds %d bytes for a stalled observer, more than %d", held, outputBuffer)
	}
	reader := s.attach("control", false)
	before := a.get()
	for range 64 {
		s.write(StreamStdout, chunk)
	}
	if got := a.get(); got > before+outputBuffer {
		t.Fatalf("a stalled reader beside the observer: acknowledged %d past %d, more than outputBuffer", got-before, before)
	}
	reader.Close("detached")
	s.end(api.JobRecord{ID: "j-1", State: api.StateSucceeded})
	_, gaps := readAll(t, obs)
	if len(gaps) == 0 || gaps[0].GapReason != GapBehind {
		t.Fatalf("the observer's gaps %+v, want one that says it fell behind", gaps)
	}
}

// A runner's chunks are routed into the stream by its connection's reader
// (outroutes.go) and can be there before the job's actor hears the
// runner's JobAck (onRunner). The runner counts its acknowledgements from
// 0: those bytes are acknowledged when onRunner comes, not taken as
// acknowledged already. Before, a window's worth written first was never
// acknowledged at all, and the job waited for credit for ever (orchbench's
// `run` hung with its head blocked, 1 MiB read by the client).
func TestOutputWrittenBeforeTheRunnerAckIsAcknowledged(t *testing.T) {
	for _, reader := range []bool{false, true} {
		s := newOutStream(nil, "j-1", 0)
		var r *OutputReader
		if reader {
			r = s.attach("test", false)
		}
		chunk := make([]byte, 256<<10)
		for s.total < OutputWindow { // all the runner may send unacknowledged
			s.write(StreamStdout, chunk)
		}
		var a acks
		s.onRunner(a.ack)
		if reader {
			for {
				p, err := r.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if p.Offset+int64(len(p.Data)) >= s.total {
					break
				}
			}
		}
		if got := a.get(); got < s.total {
			t.Fatalf("reader %v: acknowledged %d of the %d written before onRunner: the runner waits for ever", reader, got, s.total)
		}
		if r != nil {
			r.Close("detached")
		}
	}
}
