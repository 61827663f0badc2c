package client

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

func TestClientFastPaths(t *testing.T) {
	for _, tc := range []struct {
		line   string
		id     uint64
		result string
		ok     bool
	}{
		{`{"id":7,"result":{"pong":true}}`, 7, `{"pong":true}`, true},
		{`{"id":0,"result":{}}`, 0, `{}`, true},
		{`{"id":18446744073709551615,"result":1}`, 0, "", false}, // 20 digits: left to encoding/json
		{`{"id":7,"error":{"code":1,"message":"x"}}`, 0, "", false},
		{`{"result":1,"id":7}`, 0, "", false},
		{`{"id":,"result":1}`, 0, "", false},
		{`{"id":7,"result":1`, 0, "", false},
		{``, 0, "", false},
	} {
		id, res, ok := fastResult([]byte(tc.line))
		if ok != tc.ok || id != tc.id || string(res) != tc.result {
			t.Errorf("fastResult(%s) = %d, %q, %v", tc.line, id, res, ok)
		}
	}
	for _, tc := range []struct {
		line, kind, data string
		ok               bool
	}{
		{`{"event":"job.output","data":{"job_id":"j-1"}}`, "job.output", `{"job_id":"j-1"}`, true},
		{`{"event":"events.dropped","data":{"dropped":3}}`, "events.dropped", `{"dropped":3}`, true},
		{`{"event":"a\"b","data":1}`, "", "", false},
		{`{"event":"","data":1}`, "", "", false},
		{`{"data":1,"event":"x"}`, "", "", false},
		{`{"event":"x"}`, "", "", false},
	} {
		kind, data, ok := fastEvent([]byte(tc.line))
		if ok != tc.ok || kind != tc.kind || string(data) != tc.data {
			t.Errorf("fastEvent(%s) = %q, %q, %v", tc.line, kind, data, ok)
		}
	}
}

// A reader that takes no events holds at most eventBytes of them (and the
// piece it is reading): the client stops reading the socket, so the daemon
// holds the rest (its own bound) or slows the job. Before, it held 256
// events, pieces of up to 512 KiB each.
func TestEventsBoundedInBytes(t *testing.T) {
	const piece = 512 << 10
	server, conn := net.Pipe()
	c := newClient(conn)
	defer c.Close()
	var written atomic.Int64 // pieces the client has read whole
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw := bytes.Repeat([]byte("x"), piece)
		for off := 0; ; off += piece {
			line := wire.AppendStreamPieceRaw([]byte(`{"event":"job.stream","data":`), &wire.StreamPiece{JobID: "j-1", Offset: int64(off), Stream: "stdout", Data: raw})
			if _, err := server.Write(append(line, "}\n"...)); err != nil {
				return
			}
			if _, err := server.Write(raw); err != nil {
				return
			}
			written.Add(1)
		}
	}()
	// Events the client keeps (a piece's size is its raw bytes and its
	// line's data); the next one it read waits to be pushed.
	data := wire.AppendStreamPieceRaw(nil, &wire.StreamPiece{JobID: "j-1", Offset: 1 << 30, Stream: "stdout", Data: make([]byte, piece)})
	held := eventBytes / (piece + len(data))
	for taken := 0; taken < 3; taken++ {
		for deadline := time.Now().Add(10 * time.Second); written.Load() < int64(taken+held+1); {
			if time.Now().After(deadline) {
				t.Fatalf("the client read %d pieces, %d taken: it stopped reading early", written.Load(), taken)
			}
			time.Sleep(time.Millisecond)
		}
		if n, q := written.Load(), len(c.Events()); n > int64(taken+held+1) || q > held {
			t.Fatalf("%d pieces of %d KiB read, %d taken, %d waiting: over %d bytes held", n, piece>>10, taken, q, eventBytes)
		}
		ev := <-c.Events()
		if len(ev.Raw) != piece {
			t.Fatalf("event of %d raw bytes", len(ev.Raw))
		}
	}
	server.Close()
	<-done
}

// The sizes of the events in the channel, as the reader keeps them while
// a reader takes some: a send that waited for a place (the channel full)
// does not overwrite the oldest's size.
func TestQueuedSizes(t *testing.T) {
	var q queuedSizes
	sum := func(sizes []int) (n int) {
		for _, s := range sizes {
			n += s
		}
		return n
	}
	var in []int // what the channel holds, oldest first
	for i := range eventBuffer {
		q.pushed(len(in)+1, i+1)
		in = append(in, i+1)
	}
	// Full; one is taken while the next send waits, then it goes in.
	in = append(in[1:], 1000)
	q.pushed(len(in), 1000)
	if got := q.settle(len(in)); got != eventBuffer || q.bytes != sum(in) {
		t.Fatalf("full channel: %d sizes, %d bytes; want %d, %d", got, q.bytes, eventBuffer, sum(in))
	}
	// Taken down to three, then one more that the reader takes at once.
	in = in[len(in)-3:]
	q.pushed(0, 7)
	in = nil
	if got := q.settle(len(in)); got != 0 || q.bytes != 0 {
		t.Fatalf("all taken: %d sizes, %d bytes left", got, q.bytes)
	}
	q.pushed(1, 5)
	if got := q.settle(1); got != 1 || q.bytes != 5 {
		t.Fatalf("one in: %d sizes, %d bytes", got, q.bytes)
	}
}
