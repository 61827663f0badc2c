package sockserve

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Writer is the socket an OutQueue writes to: a stream socket of package
// net (*net.UnixConn, *net.TCPConn), whose writes of several lines are one
// writev and which can be tried without blocking.
type Writer interface {
	io.Writer
	syscall.Conn
	SetWriteDeadline(t time.Time) error
}

// QueueConn is the connection an OutQueue serves. The queue calls it from
// any goroutine; none of its methods may block.
type QueueConn interface {
	// Acquire takes a reference on the connection for a goroutine writing
	// for it (a writer goroutine, or one answering that writes directly);
	// Release gives it back. The queue acquires only while it is open, so
	// the connection must hold a reference of its own until it has called
	// CloseAfterFlush or Kill.
	Acquire()
	Release()
	// Abort closes the connection at once, the queue having given up:
	// writing failed (ReasonWriteError, with err), the client leaves its
	// responses unread past the bound (ReasonResponseQueueFull), or events
	// overflowed under OverflowDisconnect (ReasonSubscriberOverflow). The
	// connection then calls Kill.
	Abort(reason string, err error)
	// Dropped reports n events dropped under OverflowDropOldest, once the
	// queue has room again and the client is told (events.dropped).
	Dropped(n uint64)
	// CloseSocket closes the socket, once CloseAfterFlush's lines are
	// written.
	CloseSocket()
}

// Why an OutQueue gives up on its connection (QueueConn.Abort); the
// control socket reports them in conn.closed.
const (
	ReasonWriteError         = "write_error"         // writing failed (client gone, flush timeout)
	ReasonResponseQueueFull  = "response_queue_full" // unread responses alone exceeded the bound
	ReasonSubscriberOverflow = "subscriber_overflow" // events overflowed, DropOldest unset
)

// Defaults of QueueOptions fields left zero.
const (
	DefaultMaxQueuedBytes = 16 << 20
	DefaultFlushTimeout   = time.Second
)

// QueueOptions bound an OutQueue; one value serves every queue of a server.
type QueueOptions struct {
	// Lines bounds the lines queued (responses and events); one line is
	// always accepted, and MaxBytes bounds the bytes.
	Lines int
	// MaxBytes bounds the bytes queued, next to Lines; 0 is
	// DefaultMaxQueuedBytes.
	MaxBytes int
	// FlushTimeout bounds how long CloseAfterFlush may take to write what
	// is queued; 0 is DefaultFlushTimeout.
	FlushTimeout time.Duration
	// DropOldest: events over the bound drop the oldest queued ones
	// (OverflowDropOldest); otherwise the connection is aborted
	// (OverflowDisconnect).
	DropOldest bool
	// RespHigh is how many unread responses make WaitRoom wait.
	RespHigh int
}

// Queue states.
const (
	qOpen    uint8 = iota
	qClosing       // no new lines; the writer closes the socket once it has written the rest
	qDead          // the socket is closed or about to be; queued lines are discarded
)

// qent is one queued line. seq orders responses and events into one stream.
// taken, set for a streamed line (PushStream), hears whether it was written.
// tail, if not empty, is written right after line, in the same writev
// (PushStreamTail): bytes the pusher holds until taken runs, not copied.
type qent struct {
	seq   uint64
	line  []byte
	tail  []byte
	taken func(bool)
}

// OutQueue is a connection's outbound queue: responses and events in two
// FIFOs under one bound, drained by a writer goroutine that runs only while
// there is something to write. It knows nothing of the protocol: lines are
// bytes, written to a Writer for a QueueConn. The zero value is unusable:
// call Init.
type OutQueue struct {
	w    Writer
	rc   syscall.RawConn // w's, for direct writes; nil if w has none
	c    QueueConn
	opts *QueueOptions

	mu      sync.Mutex
	state   uint8
	writing bool // a writer goroutine is running
	seq     uint64
	resp    []qent
	ev      []qent // ev[evHead:] are queued; the rest were dropped
	evHead  int
	bytes   int    // bytes queued
	dropped uint64 // events dropped in the current overflow episode
	// The writer's spare slices, swapped with resp/ev on each batch, and
	// its iovec.
	spareResp, spareEv []qent
	vec                net.Buffers
	// room wakes a reader waiting in WaitRoom; made on first need.
	room chan struct{}
}

// Queued is the bytes queued now (frontend.list's queued_bytes).
func (q *OutQueue) Queued() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return int64(q.bytes)
}

// Bounds on what an idle connection keeps: larger slices are released when
// the writer goes idle.
const keepEntries = 64

// Init readies q to write to w for c, bounded by opts.
func (q *OutQueue) Init(w Writer, c QueueConn, opts *QueueOptions) {
	q.w, q.c, q.opts = w, c, opts
	q.rc, _ = w.SyscallConn() // an error comes again at the first write
}

func (q *OutQueue) maxBytes() int {
	if q.opts.MaxBytes > 0 {
		return q.opts.MaxBytes
	}
	return DefaultMaxQueuedBytes
}

func (q *OutQueue) count() int { return len(q.resp) + len(q.ev) - q.evHead }

// full reports whether adding a line of n bytes would pass the bound.
func (q *OutQueue) full(n int) bool {
	c := q.count()
	return c >= q.opts.Lines || (c > 0 && q.bytes+n > q.maxBytes())
}

// dropOldestEvent drops the oldest queued event. The caller holds mu and
// has checked that there is one.
func (q *OutQueue) dropOldestEvent() {
	q.bytes -= len(q.ev[q.evHead].line)
	q.ev[q.evHead] = qent{}
	q.evHead++
	q.dropped++
	if q.evHead == len(q.ev) {
		q.ev, q.evHead = q.ev[:0], 0
	} else if q.evHead >= 32 && q.evHead*2 >= len(q.ev) {
		// Compact so steady overflow doesn't grow the slice forever.
		n := copy(q.ev, q.ev[q.evHead:])
		clear(q.ev[n:])
		q.ev, q.evHead = q.ev[:n], 0
	}
}

// startWriter marks the writer running; the caller holds mu and has seen
// the queue open. When it returns true the caller holds the writer role and
// a reference on the connection for it, and must, after unlocking, either
// hand both to a writer goroutine (spawnWriter) or give them back
// (writeDirect's idle and error paths).
//
// The reference is taken here, under mu with the queue open, because that
// is the one place where the connection's own token is known to be held:
// the connection drops it only after CloseAfterFlush or Kill has taken mu
// and moved the queue out of qOpen (conn.finish does). A writer started later, from a goroutine holding no
// reference (a job actor answering job.wait), could otherwise revive a
// count that had already reached zero and release the server's WaitGroup
// twice.
func (q *OutQueue) startWriter() bool {
	if q.writing {
		return false
	}
	q.writing = true
	q.c.Acquire()
	return true
}

// spawnWriter starts the writer goroutine; it takes over the reference
// startWriter took.
func (q *OutQueue) spawnWriter() { go q.run() }

// PushResp queues a response. Responses are never dropped: when the queue
// is full, queued events make room (or, under the disconnect policy, the
// subscriber is disconnected); when responses alone fill it, the client is
// disconnected. Safe from any goroutine; never blocks.
func (q *OutQueue) PushResp(line []byte) { q.PushRespThen(line, nil) }

// PushStream queues a line that is never dropped, as a response is, and
// calls taken once it is written to the socket (true), or once the
// connection is gone without it (false). A method streaming to its
// client (job.stream) sends its next line from taken, so a client that
// does not read holds the method back and nothing piles up here. Safe
// from any goroutine; never blocks; taken runs on another goroutine or
// after PushStream returns, never under the queue's lock.
func (q *OutQueue) PushStream(line []byte, taken func(bool)) {
	q.push(line, nil, nil, taken)
}

// PushStreamTail is PushStream of line followed by tail, written together
// (one writev) without being copied: both stay the caller's and must not
// change until taken runs.
func (q *OutQueue) PushStreamTail(line, tail []byte, taken func(bool)) {
	q.push(line, tail, nil, taken)
}

// PushRespThen queues a response and, if it was queued, calls then before
// any other line can be queued after it (then runs with mu held: it must
// not call back into q).
func (q *OutQueue) PushRespThen(line []byte, then func()) { q.push(line, nil, then, nil) }

// PushRespThenTaken is PushRespThen that also calls taken as PushStream
// does: once line is written, or the connection gone without it (line is
// then no longer the queue's: its buffer may be reused).
func (q *OutQueue) PushRespThenTaken(line []byte, then func(), taken func(bool)) {
	q.push(line, nil, then, taken)
}

func (q *OutQueue) push(line, tail []byte, then func(), taken func(bool)) {
	q.mu.Lock()
	if q.state != qOpen {
		q.mu.Unlock()
		if taken != nil {
			taken(false)
		}
		return
	}
	size := len(line) + len(tail)
	for q.full(size) {
		if q.evHead < len(q.ev) {
			if q.opts.DropOldest {
				q.dropOldestEvent()
				continue
			}
			q.mu.Unlock()
			q.c.Abort(ReasonSubscriberOverflow, nil)
			if taken != nil {
				taken(false)
			}
			return
		}
		q.mu.Unlock()
		q.c.Abort(ReasonResponseQueueFull, nil)
		if taken != nil {
			taken(false)
		}
		return
	}
	q.seq++
	q.resp = append(q.resp, qent{q.seq, line, tail, taken})
	q.bytes += size
	if then != nil {
		then()
	}
	start := q.startWriter()
	// Alone in the queue with no writer running: write it on this goroutine
	// (one attempt that never blocks) rather than start a writer goroutine.
	direct := start && q.count() == 1 && q.dropped == 0
	var seq uint64
	if direct {
		seq = q.resp[0].seq
		q.resp[0] = qent{}
		q.resp = q.resp[:0]
		q.bytes -= size
	}
	q.mu.Unlock()
	if direct {
		q.writeDirect(line, tail, seq, taken)
	} else if start {
		q.spawnWriter()
	}
}

// writeDirect writes line and tail (sequence number seq) without
// blocking, on the goroutine that holds the writer role (q.writing). What
// the socket does not take at once goes back to the head of the queue and
// a writer goroutine takes over as usual; it also handles a close
// requested meanwhile.
func (q *OutQueue) writeDirect(line, tail []byte, seq uint64, taken func(bool)) {
	size := len(line) + len(tail)
	n, err := q.writeNonBlocking(line, tail)
	if h := TestHookDirectWritten.Load(); h != nil {
		(*h)(q.c, size)
	}
	if err != nil {
		q.mu.Lock()
		q.writing = false
		q.mu.Unlock()
		q.c.Abort(ReasonWriteError, err)
		q.c.Release()
		if taken != nil {
			taken(false)
		}
		return
	}
	if n == size && taken != nil {
		taken(true)
		taken = nil
	}
	q.mu.Lock()
	if n < size && q.state != qDead {
		rest := qent{seq: seq, taken: taken}
		if n < len(line) {
			rest.line, rest.tail = line[n:], tail
		} else {
			rest.line = tail[n-len(line):]
		}
		q.resp = append(q.resp, qent{})
		copy(q.resp[1:], q.resp)
		q.resp[0] = rest
		q.bytes += size - n
		taken = nil
	}
	if taken != nil { // not written, and the queue is dead
		defer taken(false)
	}
	if q.count() == 0 && q.dropped == 0 && q.state == qOpen {
		q.writing = false
		q.mu.Unlock()
		q.c.Release()
		return
	}
	q.mu.Unlock()
	q.spawnWriter()
}

// TestHookDirectWritten is for tests only (this package's and the
// front-ends'). When set, it runs after writeDirect's write
// of a line of n bytes and before it looks at the queue again: the window
// in which the connection can close under it.
var TestHookDirectWritten atomic.Pointer[func(c QueueConn, n int)]

// writeNonBlocking makes one write attempt of b and then tail (one writev)
// on the non-blocking socket; a full socket buffer is 0 bytes written, not
// an error.
func (q *OutQueue) writeNonBlocking(b, tail []byte) (int, error) {
	rc := q.rc
	if rc == nil {
		var err error
		if rc, err = q.w.SyscallConn(); err != nil {
			return 0, err
		}
	}
	a := attempts.Get().(*attempt)
	a.b, a.tail = b, tail
	err := rc.Write(a.do)
	n, werr := a.n, a.err
	a.b, a.tail, a.err = nil, nil, nil
	attempts.Put(a)
	if err != nil {
		return 0, err
	}
	if werr == unix.EAGAIN {
		return 0, nil
	}
	return max(n, 0), werr
}

// attempt is one write attempt's line and result. Its do is bound once, so
// handing it to syscall.RawConn.Write allocates nothing (a closure would:
// it escapes through the interface).
type attempt struct {
	b, tail []byte
	n       int
	err     error
	do      func(fd uintptr) bool
	iov     [2][]byte
}

var attempts = sync.Pool{New: func() any {
	a := &attempt{}
	a.do = a.write
	return a
}}

func (a *attempt) write(fd uintptr) bool {
	for {
		if len(a.tail) == 0 {
			a.n, a.err = unix.Write(int(fd), a.b)
		} else {
			a.iov = [2][]byte{a.b, a.tail}
			a.n, a.err = unix.Writev(int(fd), a.iov[:])
			a.iov = [2][]byte{}
		}
		if a.err != unix.EINTR {
			return true // done, whatever happened: never wait here
		}
	}
}

// PushEvent queues an event line (shared, never modified). It runs inside
// Bus.Emit on the emitter's goroutine: O(1) amortised, never blocks.
func (q *OutQueue) PushEvent(line []byte) {
	q.mu.Lock()
	if q.state != qOpen {
		q.mu.Unlock()
		return
	}
	if q.full(len(line)) {
		if !q.opts.DropOldest {
			q.mu.Unlock()
			q.c.Abort(ReasonSubscriberOverflow, nil)
			return
		}
		for q.full(len(line)) && q.evHead < len(q.ev) {
			q.dropOldestEvent()
		}
		if q.full(len(line)) {
			// Only responses are queued: this event is the one to go.
			q.dropped++
			q.mu.Unlock()
			return
		}
	}
	q.seq++
	q.ev = append(q.ev, qent{seq: q.seq, line: line})
	q.bytes += len(line)
	start := q.startWriter()
	q.mu.Unlock()
	if start {
		q.spawnWriter()
	}
}

// Kill discards everything queued; nothing more is accepted or written.
func (q *OutQueue) Kill() {
	q.mu.Lock()
	q.state = qDead
	lost := q.discardLocked()
	q.mu.Unlock()
	tellLost(lost)
}

// discardLocked drops what is queued and returns the streamed lines' taken
// functions, to be told outside the lock (tellLost).
func (q *OutQueue) discardLocked() []func(bool) {
	lost := takenOf(nil, q.resp)
	clear(q.resp)
	clear(q.ev)
	q.resp, q.ev, q.evHead, q.bytes = nil, nil, 0, 0
	return lost
}

// takenOf appends the taken functions of ents to dst.
func takenOf(dst []func(bool), ents []qent) []func(bool) {
	for _, e := range ents {
		if e.taken != nil {
			dst = append(dst, e.taken)
		}
	}
	return dst
}

func tellLost(fs []func(bool)) {
	for _, f := range fs {
		f(false)
	}
}

// CloseAfterFlush stops accepting lines and closes the socket once what is
// queued has been written, or at once when nothing is. Writing is bounded
// by QueueOptions.FlushTimeout.
func (q *OutQueue) CloseAfterFlush() {
	q.mu.Lock()
	if q.state != qOpen {
		q.mu.Unlock()
		return
	}
	if !q.writing {
		q.state = qDead
		q.mu.Unlock()
		q.c.CloseSocket()
		return
	}
	q.state = qClosing
	q.mu.Unlock()
	ft := q.opts.FlushTimeout
	if ft <= 0 {
		ft = DefaultFlushTimeout
	}
	q.w.SetWriteDeadline(time.Now().Add(ft))
}

// WaitRoom blocks the connection's reader while the client leaves too many
// responses unread (the writer is stuck behind a full socket). It returns
// false if done closes first.
func (q *OutQueue) WaitRoom(done <-chan struct{}) bool {
	high := q.opts.RespHigh
	for {
		q.mu.Lock()
		if q.state != qOpen || (len(q.resp) < high && q.bytes < q.maxBytes()/2) {
			q.mu.Unlock()
			return true
		}
		if q.room == nil {
			q.room = make(chan struct{}, 1)
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-done:
			return false
		}
	}
}

// run is the writer goroutine: it takes everything queued, writes it with
// one writev (net.Buffers), and repeats until the queue is empty.
func (q *OutQueue) run() {
	defer q.c.Release()
	q.mu.Lock()
	vec := q.vec
	q.vec = nil
	q.mu.Unlock()
	var written []func(bool)
	for {
		q.mu.Lock()
		if q.state == qDead {
			q.writing = false
			lost := q.discardLocked()
			q.mu.Unlock()
			tellLost(lost)
			return
		}
		if q.count() == 0 && q.dropped == 0 {
			q.writing = false
			closing := q.state == qClosing
			if closing {
				q.state = qDead
			}
			if cap(vec) <= keepEntries {
				q.vec = vec[:0] // for the next writer
			}
			q.shrinkLocked()
			q.mu.Unlock()
			if closing {
				q.c.CloseSocket()
			}
			return
		}
		resp, evAll, evHead := q.resp, q.ev, q.evHead
		q.resp, q.ev, q.evHead, q.bytes = q.spareResp[:0], q.spareEv[:0], 0, 0
		q.spareResp, q.spareEv = nil, nil
		dropped := q.dropped
		q.dropped = 0
		if q.room != nil {
			select {
			case q.room <- struct{}{}:
			default:
			}
		}
		q.mu.Unlock()

		if vec == nil {
			vec = make(net.Buffers, 0, len(resp)+len(evAll)-evHead+1)
		}
		vec = vec[:0]
		if dropped > 0 {
			// The episode ends now that the queue is empty again.
			vec = append(vec, droppedLine(dropped))
			q.c.Dropped(dropped)
		}
		vec = merge(vec, resp, evAll[evHead:])
		written = takenOf(written[:0], resp)
		all := vec
		_, err := vec.WriteTo(q.w) // consumes vec; one writev
		clear(all[:cap(all)])
		vec = all[:0]
		for _, f := range written {
			f(err == nil)
		}
		clear(written)
		clear(resp)
		clear(evAll)
		q.mu.Lock()
		if q.spareResp == nil {
			q.spareResp = resp[:0]
		}
		if q.spareEv == nil {
			q.spareEv = evAll[:0]
		}
		q.mu.Unlock()
		if err != nil {
			q.mu.Lock()
			q.writing = false
			q.mu.Unlock()
			q.c.Abort(ReasonWriteError, err)
			return
		}
	}
}

// shrinkLocked releases large idle slices so an idle connection stays small.
func (q *OutQueue) shrinkLocked() {
	if cap(q.resp) > keepEntries {
		q.resp = nil
	}
	if cap(q.ev) > keepEntries {
		q.ev, q.evHead = nil, 0
	}
	if cap(q.spareResp) > keepEntries {
		q.spareResp = nil
	}
	if cap(q.spareEv) > keepEntries {
		q.spareEv = nil
	}
}

// merge appends the lines of a and b in seq order.
func merge(dst net.Buffers, a, b []qent) net.Buffers {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i].seq < b[j].seq {
			dst = appendEnt(dst, &a[i])
			i++
		} else {
			dst = append(dst, b[j].line)
			j++
		}
	}
	for ; i < len(a); i++ {
		dst = appendEnt(dst, &a[i])
	}
	for ; j < len(b); j++ {
		dst = append(dst, b[j].line)
	}
	return dst
}

// appendEnt appends a queued line and its tail, if it has one.
func appendEnt(dst net.Buffers, e *qent) net.Buffers {
	dst = append(dst, e.line)
	if len(e.tail) > 0 {
		dst = append(dst, e.tail)
	}
	return dst
}

// droppedLine is the events.dropped notice.
func droppedLine(n uint64) []byte {
	b := make([]byte, 0, 48)
	b = append(b, `{"event":"events.dropped","data":{"dropped":`...)
	b = strconv.AppendUint(b, n, 10)
	return append(b, "}}\n"...)
}
