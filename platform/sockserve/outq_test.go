package sockserve

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// queueConn is a connection of another front-end: it counts references
// and records what the queue tells it.
type queueConn struct {
	refs    atomic.Int32
	mu      sync.Mutex
	aborted []string
	dropped uint64
	closed  chan struct{}
	once    sync.Once
	nc      net.Conn
}

func (c *queueConn) Acquire() { c.refs.Add(1) }
func (c *queueConn) Release() { c.refs.Add(-1) }
func (c *queueConn) Abort(reason string, _ error) {
	c.mu.Lock()
	c.aborted = append(c.aborted, reason)
	c.mu.Unlock()
}
func (c *queueConn) Dropped(n uint64) {
	c.mu.Lock()
	c.dropped += n
	c.mu.Unlock()
}
func (c *queueConn) CloseSocket() { c.once.Do(func() { c.nc.Close(); close(c.closed) }) }

// tcpPair is a connected pair of TCP sockets on the loopback.
func tcpPair(t *testing.T) (server *net.TCPConn, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP here: %v", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); s.Close() })
	return s.(*net.TCPConn), client
}

// The outbound queue is not the control socket's alone: any front-end's
// connection (here a TCP socket and a QueueConn of a test's own) gets the
// same ordering, bound, drop-oldest and flush-on-close.
func TestOutQueueServesAnyConnection(t *testing.T) {
	srv, client := tcpPair(t)
	qc := &queueConn{closed: make(chan struct{}), nc: srv}
	var q OutQueue
	q.Init(srv, qc, &QueueOptions{Lines: 4, DropOldest: true, RespHigh: 2})
	qc.refs.Store(1) // the connection's own

	// Lines come out in the order they were queued.
	q.PushResp([]byte(`{"id":1,"result":{}}` + "\n"))
	q.PushEvent([]byte(`{"event":"e","data":1}` + "\n"))
	q.PushResp([]byte(`{"id":2,"result":{}}` + "\n"))
	br := bufio.NewReader(client)
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []string{`{"id":1,"result":{}}`, `{"event":"e","data":1}`, `{"id":2,"result":{}}`} {
		if got, err := br.ReadString('\n'); err != nil || strings.TrimSuffix(got, "\n") != want {
			t.Fatalf("read %q (%v), want %q", got, err, want)
		}
	}

	// Past the bound, the oldest events go, responses stay, and the client
	// is told how many went once the queue drains. The client reads nothing
	// until the socket is full and the writer is stuck.
	big := `{"event":"pad","data":"` + strings.Repeat("x", 64<<10) + `"}` + "\n"
	waitUntil(t, "the socket is full", func() bool {
		q.PushEvent([]byte(big))
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.count() >= 3
	})
	for i := 0; i < 10; i++ {
		q.PushEvent([]byte(`{"event":"n","data":` + strconv.Itoa(i) + `}` + "\n"))
	}
	q.PushResp([]byte(`{"id":3,"result":{}}` + "\n"))
	var notices uint64
	var ns []string
	for {
		s, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		s = strings.TrimSuffix(s, "\n")
		if strings.HasPrefix(s, `{"id":3`) {
			break
		}
		if n, ok := strings.CutPrefix(s, `{"event":"events.dropped","data":{"dropped":`); ok {
			k, err := strconv.ParseUint(strings.TrimSuffix(n, "}}"), 10, 64)
			if err != nil {
				t.Fatalf("notice %q", s)
			}
			notices += k
		}
		if strings.HasPrefix(s, `{"event":"n"`) {
			ns = append(ns, s)
		}
	}
	if notices == 0 || notices != droppedOf(qc) {
		t.Fatalf("the client was told of %d dropped events, the connection of %d", notices, droppedOf(qc))
	}
	// The newest events survive, the oldest went.
	if len(ns) == 0 || len(ns) == 10 || ns[len(ns)-1] != `{"event":"n","data":9}` {
		t.Fatalf("events after the overflow: %q", ns)
	}

	// Close after flush: what is queued goes out, then the socket closes,
	// and every reference the queue took is back.
	q.PushResp([]byte(`{"id":4,"result":{}}` + "\n"))
	q.CloseAfterFlush()
	q.PushResp([]byte(`{"id":5,"result":{}}` + "\n")) // refused: closing
	if s, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(s, `{"id":4`) {
		t.Fatalf("last line %q (%v)", s, err)
	}
	select {
	case <-qc.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the socket was not closed after the flush")
	}
	waitUntil(t, "the writer's references are back", func() bool { return qc.refs.Load() == 1 })
	if len(qc.aborted) != 0 {
		t.Fatalf("aborted: %v", qc.aborted)
	}
}

func droppedOf(c *queueConn) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// A streamed line is never dropped and says when the socket took it: a
// client that does not read leaves it untaken (the method waits), one that
// reads lets it go, and a connection killed with it queued says false.
func TestOutQueueStreamedLines(t *testing.T) {
	srv, client := tcpPair(t)
	qc := &queueConn{closed: make(chan struct{}), nc: srv}
	var q OutQueue
	q.Init(srv, qc, &QueueOptions{Lines: 4, DropOldest: true, RespHigh: 2})
	qc.refs.Store(1)
	srv.SetWriteBuffer(4096)
	client.(*net.TCPConn).SetReadBuffer(4096)
	line := []byte(`{"event":"job.stream","data":"` + strings.Repeat("x", 64<<10) + `"}` + "\n")
	taken := make(chan bool, 64)
	// Push until one is left untaken: the client reads nothing.
	pushed, untaken := 0, 0
	for untaken == 0 {
		q.PushStream(line, func(ok bool) { taken <- ok })
		pushed++
		select {
		case ok := <-taken:
			if !ok {
				t.Fatal("taken(false) on a live connection")
			}
		case <-time.After(200 * time.Millisecond):
			untaken = 1 // the socket is full: it waits (a pause to see it wait, not for correctness)
		}
		if pushed > 200 {
			t.Fatal("12 MiB taken by a client that reads nothing")
		}
	}
	// Events beside it may overflow; the streamed line stays.
	for range 10 {
		q.PushEvent([]byte(`{"event":"e","data":1}` + "\n"))
	}
	// The client reads: the line is taken.
	go io.Copy(io.Discard, client)
	select {
	case ok := <-taken:
		if !ok {
			t.Fatal("taken(false) once the client read")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the line was not taken once the client read")
	}
	// Killed with a line queued behind a stalled socket: false.
	srv2, client2 := tcpPair(t)
	qc2 := &queueConn{closed: make(chan struct{}), nc: srv2}
	var q2 OutQueue
	q2.Init(srv2, qc2, &QueueOptions{Lines: 4, DropOldest: true, RespHigh: 2})
	qc2.refs.Store(1)
	_ = client2
	results := make(chan bool, 300)
	for range 300 {
		q2.PushStream(line, func(ok bool) { results <- ok })
	}
	q2.Kill()
	srv2.Close()
	sawFalse := false
	for range 300 {
		select {
		case ok := <-results:
			sawFalse = sawFalse || !ok
		case <-time.After(10 * time.Second):
			t.Fatal("a streamed line was never told")
		}
	}
	if !sawFalse {
		t.Fatal("every line taken by a client that read nothing")
	}
}

// A streamed line's tail (PushStreamTail) follows its line on the wire,
// whole and in order with the other lines, through writes the socket
// takes only in part; it is the pusher's again once taken runs (here
// overwritten at once), never before: what the client reads is exact.
func TestOutQueueStreamTail(t *testing.T) {
	srv, client := tcpPair(t)
	qc := &queueConn{closed: make(chan struct{}), nc: srv}
	var q OutQueue
	q.Init(srv, qc, &QueueOptions{Lines: 1 << 10, MaxBytes: 64 << 20, RespHigh: 2})
	qc.refs.Store(1)
	srv.SetWriteBuffer(32 << 10) // smaller than most tails: written in parts
	client.(*net.TCPConn).SetReadBuffer(32 << 10)
	var want []byte
	const lines = 40
	taken := make(chan bool, lines)
	for i := range lines {
		line := []byte("line " + strconv.Itoa(i) + "\n")
		tail := []byte(strings.Repeat(string(rune('a'+i%26)), (i*7919)%(150<<10)))
		want = append(append(want, line...), tail...)
		q.PushStreamTail(line, tail, func(ok bool) {
			for j := range tail {
				tail[j] = '#' // the pusher reuses it
			}
			taken <- ok
		})
		if i%8 == 0 {
			ev := []byte(`{"event":"e"}` + "\n")
			want = append(want, ev...)
			q.PushResp(ev)
		}
	}
	got := make([]byte, len(want))
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("the client read other bytes from %d on (of %d)", i, len(want))
	}
	for range lines {
		select {
		case ok := <-taken:
			if !ok {
				t.Fatal("taken(false) on a live connection")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a line with a tail was never taken")
		}
	}
}
