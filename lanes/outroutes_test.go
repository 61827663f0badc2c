package lanes

import (
	"bytes"
	"context"
	"testing"

	"github.com/orchestrd/orchestrd/wire"
)

// routedChunk is a pooled buffer holding n bytes of c, as the runner
// connection's reader makes one.
func routedChunk(c byte, n int) *chunkBuf {
	b := getChunk(n)
	b.b = append(b.b[:0], bytes.Repeat([]byte{c}, n)...)
	b.refs = 1
	return b
}

// A routed chunk's buffer goes back to the pool only once the stream has
// let go of it and the reader it was handed to has asked for its next
// piece: until then its bytes are the reader's, whatever else is written.
func TestRoutedChunkReuse(t *testing.T) {
	s := newOutStream(nil, "j-1", 0)
	r := s.attach("t", false)
	const n = 40 << 10 // no two join into one piece (readMerge)
	if !s.writeRouted(StreamStdout, routedChunk('a', n)) {
		t.Fatal("a routed write into a live stream refused")
	}
	p, err := r.Next(context.Background())
	if err != nil || len(p.Data) != n {
		t.Fatalf("first piece: %d bytes, %v", len(p.Data), err)
	}
	held := p.Data
	// The stream has let go of it (the only reader read past it); more
	// chunks come, from the pool: none may be the one the reader holds.
	for i := range 4 {
		s.writeRouted(StreamStdout, routedChunk(byte('b'+i), n))
	}
	if !bytes.Equal(held, bytes.Repeat([]byte{'a'}, n)) {
		t.Fatal("the piece the reader holds was overwritten before its next Next")
	}
	p, err = r.Next(context.Background())
	if err != nil || !bytes.Equal(p.Data, bytes.Repeat([]byte{'b'}, n)) {
		t.Fatalf("second piece: %d bytes %q..., %v", len(p.Data), p.Data[:min(4, len(p.Data))], err)
	}
	// Now the first is free: the next chunk of its class reuses it.
	if again := getChunk(n); &again.b[:1][0] != &held[:1][0] {
		t.Fatal("the first chunk's buffer did not go back to the pool once its reader moved on")
	}

	// Sealed (the job ended): a routed write is refused, nothing written.
	total := s.total
	s.seal()
	if s.writeRouted(StreamStdout, routedChunk('z', n)) || s.total != total {
		t.Fatalf("a routed write after the seal: total %d, was %d", s.total, total)
	}
}

// A runner connection's reader writes an OutputRaw chunk of a job routed
// to it into the job's stream; a job not routed there goes to the runner
// actor as an OutputChunk (which drops it unless the runner holds it), so a
// runner reaches no other runner's job's stream this way.
func TestRouteOutputRaw(t *testing.T) {
	routes := newOutRoutes()
	s := newOutStream(nil, "j-1", 1<<10)
	routes.set("j-1", s)
	frame := func(id, data string) []byte {
		b, err := wire.AppendOutputRaw(nil, &wire.OutputChunk{JobID: id, Stream: wire.Stdout, Chunk: []byte(data)})
		if err != nil {
			t.Fatal(err)
		}
		return b[wire.HeaderSize:]
	}
	if msg, err := routes.routeOutputRaw(nil, frame("j-1", "hello"), false); msg != nil || err != nil {
		t.Fatalf("a routed job's chunk: %v %v, want it written", msg, err)
	}
	msg, err := routes.routeOutputRaw(nil, frame("j-2", "other"), false)
	if c, ok := msg.(wire.OutputChunk); err != nil || !ok || c.JobID != "j-2" || string(c.Chunk) != "other" {
		t.Fatalf("a job not routed: %#v %v, want its OutputChunk for the actor", msg, err)
	}
	routes.del("j-1")
	if msg, _ := routes.routeOutputRaw(nil, frame("j-1", "late"), false); msg == nil {
		t.Fatal("a job no longer routed was written into its stream")
	}
	if kept, total := s.keptFrom(0); string(kept) != "hello" || total != 5 {
		t.Fatalf("stream holds %q (%d bytes), want hello", kept, total)
	}
	if _, err := routes.routeOutputRaw(nil, []byte{9, 1, 'x'}, false); err == nil {
		t.Fatal("a malformed OutputRaw payload accepted")
	}
}

// A piece held (OutputReader.Hold, job.stream's binary pieces until the
// socket took them) outlives the reader's next Next: its chunk is not
// reused until release; then it is. A piece joined in the reader's own
// buffer cannot be held.
func TestHeldChunkOutlivesNext(t *testing.T) {
	s := newOutStream(nil, "j-1", 0)
	r := s.attach("t", false)
	const n = 40 << 10 // no two join into one piece (readMerge)
	s.writeRouted(StreamStdout, routedChunk('a', n))
	p, err := r.Next(context.Background())
	if err != nil || len(p.Data) != n {
		t.Fatalf("first piece: %d bytes, %v", len(p.Data), err)
	}
	held := p.Data
	release := r.Hold()
	if release == nil {
		t.Fatal("a routed chunk handed out as it is could not be held")
	}
	for i := range 4 {
		s.writeRouted(StreamStdout, routedChunk(byte('b'+i), n))
	}
	// The reader moves on; the stream lets go of the first chunk.
	for range 4 {
		if _, err := r.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 { // chunks of the same class, from the pool
		c := getChunk(n)
		c.b = append(c.b[:0], bytes.Repeat([]byte{byte('v' + i)}, n)...)
		defer chunkPool.Put(c.b)
	}
	if !bytes.Equal(held, bytes.Repeat([]byte{'a'}, n)) {
		t.Fatal("a held piece was reused before its release")
	}
	release()
	if again := getChunk(n); &again.b[:1][0] != &held[:1][0] {
		t.Fatal("a held chunk did not go back to the pool once released")
	}

	// Small chunks joined into the reader's buffer: not holdable.
	s2 := newOutStream(nil, "j-2", 0)
	r2 := s2.attach("t", false)
	s2.write(StreamStdout, []byte("ab"))
	s2.write(StreamStdout, []byte("cd"))
	if p, err := r2.Next(context.Background()); err != nil || string(p.Data) != "abcd" {
		t.Fatalf("joined piece %q, %v", p.Data, err)
	}
	if r2.Hold() != nil {
		t.Fatal("a piece in the reader's own buffer was held (the next Next overwrites it)")
	}
}
