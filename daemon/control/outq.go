package control

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Queue states.
const (
	qOpen    uint8 = iota
	qClosing       // no new lines; the writer closes the socket once it has written the rest
	qDead          // the socket is closed or about to be; queued lines are discarded
)

// qent is one queued line. seq orders responses and events into one stream.
type qent struct {
	seq  uint64
	line []byte
}

// outq is a connection's outbound queue: responses and events in two FIFOs
// under one bound, drained by a writer goroutine that runs only while there
// is something to write.
type outq struct {
	cn *conn

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
	// room wakes a reader waiting in waitRoom; made on first need.
	room chan struct{}
}

// Bounds on what an idle connection keeps: larger slices are released when
// the writer goes idle.
const keepEntries = 64

func (q *outq) count() int { return len(q.resp) + len(q.ev) - q.evHead }

// full reports whether adding a line of n bytes would pass the bound.
func (q *outq) full(n int) bool {
	c := q.count()
	return c >= q.cn.srv.opts.SubscriberQueue || (c > 0 && q.bytes+n > maxQueuedBytes)
}

// dropOldestEvent drops the oldest queued event. The caller holds mu and
// has checked that there is one.
func (q *outq) dropOldestEvent() {
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
// finish drops it only after closeAfterFlush has taken mu and moved the
// queue out of qOpen. A writer started later, from a goroutine holding no
// reference (a job actor answering job.wait), could otherwise revive a
// count that had already reached zero and release the server's WaitGroup
// twice.
func (q *outq) startWriter() bool {
	if q.writing {
		return false
	}
	q.writing = true
	q.cn.acquire()
	return true
}

// spawnWriter starts the writer goroutine; it takes over the reference
// startWriter took.
func (q *outq) spawnWriter() { go q.run() }

// pushResp queues a response. Responses are never dropped: when the queue
// is full, queued events make room (or, under the disconnect policy, the
// subscriber is disconnected); when responses alone fill it, the client is
// disconnected. Safe from any goroutine; never blocks.
func (q *outq) pushResp(line []byte) { q.pushRespThen(line, nil) }

// pushRespThen queues a response and, if it was queued, calls then before
// any other line can be queued after it (then runs with mu held: it must
// not call back into q).
func (q *outq) pushRespThen(line []byte, then func()) {
	q.mu.Lock()
	if q.state != qOpen {
		q.mu.Unlock()
		return
	}
	for q.full(len(line)) {
		if q.evHead < len(q.ev) {
			if q.cn.srv.dropOldest {
				q.dropOldestEvent()
				continue
			}
			q.mu.Unlock()
			q.overflowDisconnect()
			return
		}
		q.mu.Unlock()
		q.cn.srv.log.Warn().Str("conn_id", q.cn.id).Int("queued", q.cn.srv.opts.SubscriberQueue).
			Msg("control: client does not read its responses; disconnecting")
		q.cn.abort(ReasonResponseQueueFull)
		return
	}
	q.seq++
	q.resp = append(q.resp, qent{q.seq, line})
	q.bytes += len(line)
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
		q.bytes -= len(line)
	}
	q.mu.Unlock()
	if direct {
		q.writeDirect(line, seq)
	} else if start {
		q.spawnWriter()
	}
}

// writeDirect writes line (sequence number seq) without blocking, on the
// goroutine that holds the writer role (q.writing). What the socket does
// not take at once goes back to the head of the queue and a writer
// goroutine takes over as usual; it also handles a close requested
// meanwhile.
func (q *outq) writeDirect(line []byte, seq uint64) {
	n, err := writeNonBlocking(q.cn.nc, line)
	if h := testHookDirectWritten.Load(); h != nil {
		(*h)(q.cn, len(line))
	}
	if err != nil {
		if !q.cn.closing.Load() {
			q.cn.srv.log.Debug().Err(err).Str("conn_id", q.cn.id).Msg("control: write failed")
		}
		q.mu.Lock()
		q.writing = false
		q.mu.Unlock()
		q.cn.abort(ReasonWriteError)
		q.cn.release()
		return
	}
	q.mu.Lock()
	if n < len(line) && q.state != qDead {
		q.resp = append(q.resp, qent{})
		copy(q.resp[1:], q.resp)
		q.resp[0] = qent{seq, line[n:]}
		q.bytes += len(line) - n
	}
	if q.count() == 0 && q.dropped == 0 && q.state == qOpen {
		q.writing = false
		q.mu.Unlock()
		q.cn.release()
		return
	}
	q.mu.Unlock()
	q.spawnWriter()
}

// testHookDirectWritten, when set by a test, runs after writeDirect's write
// of a line of n bytes and before it looks at the queue again: the window
// in which the connection can close under it.
var testHookDirectWritten atomic.Pointer[func(cn *conn, n int)]

// writeNonBlocking makes one write attempt on the non-blocking socket; a
// full socket buffer is 0 bytes written, not an error.
func writeNonBlocking(nc *net.UnixConn, b []byte) (int, error) {
	rc, err := nc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = unix.Write(int(fd), b)
			if werr != unix.EINTR {
				return true // done, whatever happened: never wait here
			}
		}
	}); err != nil {
		return 0, err
	}
	if werr == unix.EAGAIN {
		return 0, nil
	}
	return max(n, 0), werr
}

// pushEvent queues an event line (shared, never modified). It runs inside
// Bus.Emit on the emitter's goroutine: O(1) amortised, never blocks.
func (q *outq) pushEvent(line []byte) {
	q.mu.Lock()
	if q.state != qOpen {
		q.mu.Unlock()
		return
	}
	if q.full(len(line)) {
		if !q.cn.srv.dropOldest {
			q.mu.Unlock()
			q.overflowDisconnect()
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
	q.ev = append(q.ev, qent{q.seq, line})
	q.bytes += len(line)
	start := q.startWriter()
	q.mu.Unlock()
	if start {
		q.spawnWriter()
	}
}

// overflowDisconnect closes a subscriber that fell behind under the
// disconnect policy. The caller must not hold mu.
func (q *outq) overflowDisconnect() {
	cn := q.cn
	if cn.closing.Load() {
		return
	}
	cn.srv.emit(SubscriberOverflowed{ConnID: cn.id, Policy: OverflowDisconnect})
	cn.abort(ReasonSubscriberOverflow)
}

// kill discards everything queued; nothing more is accepted or written.
func (q *outq) kill() {
	q.mu.Lock()
	q.state = qDead
	q.discardLocked()
	q.mu.Unlock()
}

func (q *outq) discardLocked() {
	clear(q.resp)
	clear(q.ev)
	q.resp, q.ev, q.evHead, q.bytes = nil, nil, 0, 0
}

// closeAfterFlush stops accepting lines and closes the socket once what is
// queued has been written, or at once when nothing is. Writing is bounded
// by flushTimeout.
func (q *outq) closeAfterFlush() {
	q.mu.Lock()
	if q.state != qOpen {
		q.mu.Unlock()
		return
	}
	if !q.writing {
		q.state = qDead
		q.mu.Unlock()
		q.cn.closeSocket()
		return
	}
	q.state = qClosing
	q.mu.Unlock()
	q.cn.nc.SetWriteDeadline(time.Now().Add(flushTimeout))
}

// waitRoom blocks the connection's reader while the client leaves too many
// responses unread (the writer is stuck behind a full socket). It returns
// false if done closes first.
func (q *outq) waitRoom(done <-chan struct{}) bool {
	high := q.cn.srv.respHigh
	for {
		q.mu.Lock()
		if q.state != qOpen || (len(q.resp) < high && q.bytes < maxQueuedBytes/2) {
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
func (q *outq) run() {
	cn := q.cn
	defer cn.release()
	q.mu.Lock()
	vec := q.vec
	q.vec = nil
	q.mu.Unlock()
	for {
		q.mu.Lock()
		if q.state == qDead {
			q.writing = false
			q.mu.Unlock()
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
				cn.closeSocket()
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
			cn.srv.emit(SubscriberOverflowed{ConnID: cn.id, Policy: OverflowDropOldest, Dropped: dropped})
		}
		vec = merge(vec, resp, evAll[evHead:])
		all := vec
		_, err := vec.WriteTo(cn.nc) // consumes vec
		clear(all[:cap(all)])
		vec = all[:0]
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
			if !cn.closing.Load() {
				cn.srv.log.Debug().Err(err).Str("conn_id", cn.id).Msg("control: write failed")
			}
			q.mu.Lock()
			q.writing = false
			q.mu.Unlock()
			cn.abort(ReasonWriteError)
			return
		}
	}
}

// shrinkLocked releases large idle slices so an idle connection stays small.
func (q *outq) shrinkLocked() {
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
			dst = append(dst, a[i].line)
			i++
		} else {
			dst = append(dst, b[j].line)
			j++
		}
	}
	for ; i < len(a); i++ {
		dst = append(dst, a[i].line)
	}
	for ; j < len(b); j++ {
		dst = append(dst, b[j].line)
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
