package lanes

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// ReadToEnd hands each piece and each gap to its caller in offset order and
// returns nil at the job's end; it stops with ctx's error when ctx is
// cancelled, with the caller's error when the caller returns one, and with
// ErrReaderClosed for a closed reader.
func TestReadToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Pieces, a gap (what the record did not keep before the reader
	// attached), the end.
	s := newOutStream(nil, "j-1", 5)
	s.write(StreamStdout, []byte("0123456789"))
	r := s.attach("test", false)
	s.write(StreamStderr, []byte("live"))
	s.end(api.JobRecord{ID: "j-1", State: api.StateSucceeded})
	var got []OutputPiece
	err := r.ReadToEnd(ctx, func(p OutputPiece) error {
		p.Data = append([]byte(nil), p.Data...) // valid until fn returns
		got = append(got, p)
		return nil
	})
	if err != nil {
		t.Fatalf("to the end: %v", err)
	}
	want := []OutputPiece{
		{Offset: 0, Stream: StreamOutput, Data: []byte("01234")},
		{Offset: 5, Gap: 5, GapReason: GapNotKept},
		{Offset: 10, Stream: StreamStderr, Data: []byte("live")},
	}
	if len(got) != len(want) {
		t.Fatalf("pieces %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Offset != w.Offset || g.Stream != w.Stream || string(g.Data) != string(w.Data) || g.Gap != w.Gap ||
			g.GapReason != w.GapReason {
			t.Fatalf("piece %d: %+v, want %+v", i, g, w)
		}
	}
	if rec := r.Record(); rec.State != api.StateSucceeded {
		t.Fatalf("record %+v", rec)
	}
	if delivered, missed := r.Counts(); delivered != 9 || missed != 5 {
		t.Fatalf("counts %d delivered, %d missed", delivered, missed)
	}
	r.Close("ended")

	// A context cancelled while the job still runs: ctx's error, after the
	// pieces that came before.
	s = newOutStream(nil, "j-2", 0)
	r = s.attach("test", false)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	pieces := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- r.ReadToEnd(cctx, func(p OutputPiece) error {
			pieces <- string(p.Data)
			return nil
		})
	}()
	s.write(StreamStdout, []byte("hi"))
	select {
	case p := <-pieces:
		if p != "hi" {
			t.Fatalf("piece %q", p)
		}
	case <-ctx.Done():
		t.Fatal("no piece")
	}
	ccancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("ReadToEnd did not return when its context was cancelled")
	}
	r.Close("detached")

	// The caller's error stops it at that piece: it is not handed again,
	// and the next read finds the end.
	s = newOutStream(nil, "j-3", 0)
	r = s.attach("test", false)
	s.write(StreamStdout, []byte("abc"))
	s.end(api.JobRecord{ID: "j-3", State: api.StateSucceeded})
	errStop := errors.New("stop")
	calls := 0
	if err := r.ReadToEnd(ctx, func(OutputPiece) error { calls++; return errStop }); !errors.Is(err, errStop) || calls != 1 {
		t.Fatalf("caller's error: %v after %d calls", err, calls)
	}
	if err := r.ReadToEnd(ctx, func(p OutputPiece) error { return errors.New("a piece after the end") }); err != nil {
		t.Fatalf("after the caller's error: %v", err)
	}

	// A closed reader: ErrReaderClosed, nothing handed over.
	s = newOutStream(nil, "j-4", 0)
	r = s.attach("test", false)
	s.write(StreamStdout, []byte("unread"))
	r.Close("detached")
	if err := r.ReadToEnd(ctx, func(OutputPiece) error { t.Error("a piece from a closed reader"); return nil }); !errors.Is(err, ErrReaderClosed) {
		t.Fatalf("closed: %v", err)
	}
}
