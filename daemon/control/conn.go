package control

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/platform/sockserve"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// conn is the state of one connection shared by its reader goroutine, its
// actor, its writer goroutine and its bus sink. Fields below "actor only"
// are touched only by the conn actor (or by finish once the actor is gone).
type conn struct {
	srv   *Server
	nc    *net.UnixConn
	id    string
	peer  proc.Peer // as sockserve read it at accept (SO_PEERCRED)
	since time.Time // admitted
	q     OutQueue

	// credit holds one token per line handed to the actor and not yet
	// handled; the reader blocks when it is full.
	credit chan struct{}
	// done is closed by finish; it releases a reader waiting for credit.
	done chan struct{}

	refs      atomic.Int32 // see Acquire / Release
	closing   atomic.Bool  // a reason is set: the reader stops handing lines over
	finished  atomic.Bool
	stopSent  atomic.Bool
	closeOnce sync.Once

	mu     sync.Mutex
	reason string
	ref    actors.Ref
	unsub  func()
	// subGen is bumped (under mu) by every (un)subscribe; a sink whose
	// generation is stale ignores records. Read without mu by Deliver.
	subGen atomic.Uint64
	// pending are the calls answered later that are not answered yet;
	// callsClosed: the connection has ended them (see closeCalls).
	pending     map[*Call]struct{}
	callsClosed bool

	// actor only
	requests  uint64
	session   string
	protoErrs int
}

func newConn(s *Server, nc *net.UnixConn, id string) *conn {
	cn := &conn{srv: s, nc: nc, id: id, credit: make(chan struct{}, s.inFlight), done: make(chan struct{})}
	cn.q.Init(nc, cn, &s.qopts)
	cn.refs.Store(1)
	return cn
}

// info is what frontend.list and the tree show of the connection.
func (cn *conn) info() api.ConnInfo {
	return api.ConnInfo{Kind: "conn", ID: cn.id, Pid: cn.peer.Pid, Since: cn.since,
		AgeMs: time.Since(cn.since).Milliseconds(), QueuedBytes: cn.q.Queued()}
}

// Acquire takes a reference for a goroutine about to start; the caller must
// already hold one (the conn's own token, or a running goroutine's).
func (cn *conn) Acquire() { cn.refs.Add(1) }

// Release drops a reference; the last one releases the server's WaitGroup
// token for this connection.
func (cn *conn) Release() {
	if cn.refs.Add(-1) == 0 {
		cn.srv.wg.Done()
	}
}

// setReason records why the connection closes; the first reason wins.
func (cn *conn) setReason(r string) string {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.reason == "" {
		cn.reason = r
		cn.closing.Store(true)
	}
	return cn.reason
}

func (cn *conn) actorRef() actors.Ref {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.ref
}

// CloseSocket closes the socket once. The reader and a blocked writer
// return with an error.
func (cn *conn) CloseSocket() { cn.closeOnce.Do(func() { cn.nc.Close() }) }

var _ QueueConn = (*conn)(nil)

// Abort is the outbound queue giving up on the connection (see QueueConn).
func (cn *conn) Abort(reason string, err error) {
	switch reason {
	case ReasonWriteError:
		if !cn.closing.Load() {
			cn.srv.log.Debug().Err(err).Str("conn_id", cn.id).Msg("control: write failed")
		}
	case ReasonResponseQueueFull:
		cn.srv.log.Warn().Str("conn_id", cn.id).Int("queued", cn.srv.opts.SubscriberQueue).
			Msg("control: client does not read its responses; disconnecting")
	case ReasonSubscriberOverflow:
		if cn.closing.Load() {
			return
		}
		cn.srv.emit(SubscriberOverflowed{ConnID: cn.id, Policy: OverflowDisconnect})
	}
	cn.abort(reason)
}

// Dropped reports events dropped under the drop_oldest policy.
func (cn *conn) Dropped(n uint64) {
	cn.srv.emit(SubscriberOverflowed{ConnID: cn.id, Policy: OverflowDropOldest, Dropped: n})
}

// abort closes the connection now, without flushing: the writer failed, the
// client let its responses pile up, or a subscriber overflowed under the
// disconnect policy. Safe from any goroutine; never blocks.
func (cn *conn) abort(reason string) {
	cn.setReason(reason)
	cn.unsubscribe()
	cn.q.Kill()
	cn.CloseSocket()
	// Tell the actor to stop, unless it is already stopping (finish has
	// begun) or not started yet (its Started sees the reason and stops).
	if ref := cn.actorRef(); !ref.IsZero() && !cn.finished.Load() && cn.stopSent.CompareAndSwap(false, true) {
		cn.srv.sys.Send(ref, stopConn{})
	}
}

func (cn *conn) unsubscribe() {
	cn.mu.Lock()
	u := cn.unsub
	cn.unsub = nil
	cn.subGen.Add(1)
	cn.mu.Unlock()
	if u != nil {
		u()
	}
}

// subscribe replaces the connection's subscription.
func (cn *conn) subscribe(kinds []string) {
	cn.mu.Lock()
	if cn.reason != "" {
		cn.mu.Unlock()
		return
	}
	old := cn.unsub
	s := &sink{cn: cn, gen: cn.subGen.Add(1)}
	cn.mu.Unlock()
	u := cn.srv.bus.Subscribe(kinds, s)
	cn.mu.Lock()
	if cn.subGen.Load() != s.gen || cn.reason != "" {
		// Closed or resubscribed meanwhile.
		cn.mu.Unlock()
		u()
	} else {
		cn.unsub = u
		cn.mu.Unlock()
	}
	if old != nil {
		old()
	}
}

// sink delivers bus records into the connection's queue.
type sink struct {
	cn  *conn
	gen uint64
}

func (s *sink) Deliver(r *eventlog.Record) {
	if s.cn.subGen.Load() == s.gen {
		s.cn.q.PushEvent(r.Wire())
	}
}

// finish is the end of every connection, run once: from the actor's Stopped,
// or from Server.Close for a connection whose actor never started. a is the
// actor when there is one.
func (cn *conn) finish(a *connActor) {
	if !cn.finished.CompareAndSwap(false, true) {
		return
	}
	reason := cn.setReason(ReasonActorStopped)
	cn.unsubscribe()
	close(cn.done)
	cn.closeCalls(reason)
	cn.q.CloseAfterFlush()
	var requests uint64
	if a != nil {
		requests = cn.requests
	}
	cn.srv.forget(cn) // before conn.closed: whoever hears it sees the count updated
	cn.srv.emit(ConnClosed{ConnID: cn.id, Reason: reason, Requests: requests})
	cn.Release()
}

// bigLines keeps the buffers of big answers (bigLine bytes and more) once
// written, for the next ones.
var bigLines lineCache

const bigLine = 64 << 10

// respond queues a response. It may run on any goroutine.
func (cn *conn) respond(id uint64, result any, rerr *wire.Error) {
	cn.respondThen(id, result, rerr, nil)
}

// respondThen queues a response and runs then as PushRespThen does. A big
// one is encoded into a kept buffer, given back once written.
func (cn *conn) respondThen(id uint64, result any, rerr *wire.Error, then func()) {
	var dst []byte
	if sz, ok := result.(wire.JSONSizer); ok && rerr == nil {
		if n := sz.JSONSize(); n >= bigLine {
			dst = bigLines.get(n + 64)
		}
	}
	line := cn.encode(dst, id, result, rerr)
	if cap(line) < bigLine {
		cn.q.PushRespThen(line, then)
		return
	}
	// Written (or the connection gone), the buffer is the next one's.
	cn.q.PushRespThenTaken(line, then, func(bool) { bigLines.put(line) })
}

// lineCache keeps up to keptLines buffers of big answers, each of at most
// maxKeptLine bytes, and lets them all go after lineIdle without a big
// answer. Encoded into a fresh buffer, a 1 MiB job.get spent as long
// having the runtime allocate, fault in and zero it as encoding into it;
// a sync.Pool does not help, since it empties at every other GC and each
// such answer brings one on.
type lineCache struct {
	mu    sync.Mutex
	bufs  [][]byte
	timer *time.Timer
}

const (
	keptLines   = 2
	maxKeptLine = 8 << 20
	lineIdle    = 5 * time.Second
)

// get is a kept buffer of at least n bytes' room, emptied; nil if none.
func (c *lineCache) get(n int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, b := range c.bufs {
		if cap(b) >= n {
			c.bufs = append(c.bufs[:i], c.bufs[i+1:]...)
			return b[:0]
		}
	}
	return nil
}

// put keeps b (no longer used) for a later get, if there is room.
func (c *lineCache) put(b []byte) {
	if cap(b) > maxKeptLine {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bufs) < keptLines {
		c.bufs = append(c.bufs, b[:0])
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(lineIdle, c.drop)
	} else {
		c.timer.Reset(lineIdle)
	}
}

func (c *lineCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.bufs, c.timer = nil, nil
}

func (cn *conn) encode(dst []byte, id uint64, result any, rerr *wire.Error) []byte {
	if raw, ok := result.(rawResult); ok && rerr == nil {
		// A result already encoded (ping's, an empty one): no reflection.
		line := make([]byte, 0, len(`{"id":,"result":}`)+20+len(raw)+1)
		line = append(line, `{"id":`...)
		line = strconv.AppendUint(line, id, 10)
		line = append(line, `,"result":`...)
		line = append(line, raw...)
		return append(line, '}', '\n')
	}
	line, err := wire.AppendResponse(dst, id, result, rerr)
	if err != nil {
		cn.srv.log.Error().Err(err).Str("conn_id", cn.id).Msg("control: encoding response")
		line, _ = wire.AppendResponse(nil, id, nil, wire.Errorf(wire.CodeInternal, "internal error: %v", err))
	}
	return line
}

// readLoop is the connection's reader goroutine.
func (cn *conn) readLoop(ref actors.Ref) {
	defer cn.Release()
	rc, err := cn.nc.SyscallConn()
	if err != nil {
		cn.srv.sys.Send(ref, readEnd{err})
		return
	}
	// An idle connection holds no read buffer (sockserve.Lines).
	lr := sockserve.NewLines(rc, cn.srv.opts.MaxLine, "")
	defer lr.Close()
	sys := cn.srv.sys
	for {
		line, err := lr.Next()
		if err != nil {
			if !cn.closing.Load() {
				sys.Send(ref, readEnd{err})
			}
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		msg := lineMsg(bytes.Clone(line))
		// Back-pressure: don't hand over another request while the client
		// leaves its responses unread, nor more than the in-flight bound.
		if !cn.q.WaitRoom(cn.done) {
			return
		}
		select {
		case cn.credit <- struct{}{}:
		case <-cn.done:
			return
		}
		if cn.closing.Load() {
			return
		}
		sys.Send(ref, msg)
	}
}

// Messages to the conn actor.
type (
	lineMsg  []byte
	readEnd  struct{ err error }
	stopConn struct{}
)

// connActor serves one connection.
type connActor struct{ cn *conn }

func (a *connActor) Receive(c *actors.Context) {
	cn := a.cn
	switch m := c.Message().(type) {
	case sockserve.Activate:
		// Sent by the conns actor once Spawn has returned. Nothing that can
		// stop this actor (the reader, abort) starts before: an actor that
		// stops while its spawn is still being recorded confuses the
		// actors registry.
		cn.mu.Lock()
		cn.ref = c.Self()
		closing := cn.reason != ""
		cn.mu.Unlock()
		if closing {
			c.StopSelf()
			return
		}
		cn.Acquire()
		go cn.readLoop(c.Self())
	case lineMsg:
		cn.requests++
		a.handle(c, m)
		// Give the credit back only now that the answer (if immediate) is
		// queued: waitRoom then sees it.
		select {
		case <-cn.credit:
		default:
		}
	case readEnd:
		a.readEnd(c, m.err)
	case stopConn:
		c.StopSelf()
	case actors.Stopped:
		cn.finish(a)
	}
}

func (a *connActor) readEnd(c *actors.Context, err error) {
	cn := a.cn
	switch {
	case errors.Is(err, wire.ErrLineTooLong):
		cn.respond(0, nil, wire.Errorf(wire.CodeInvalidRequest, "invalid request: %v", err))
		cn.srv.emit(eventlog.ConnProtocolError{ConnID: cn.id, Peer: "control", Error: err.Error(), Fatal: true})
		cn.setReason(ReasonLineTooLong)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		// A reset is a client that closed with our answers still unread.
		cn.setReason(ReasonClientClosed)
	default:
		cn.setReason(ReasonReadError)
	}
	c.StopSelf()
}

// maxProtoErrEvents bounds the non-fatal conn.protocol_error events one
// connection can cause, so a client spewing garbage cannot flood the log.
const maxProtoErrEvents = 10

func (a *connActor) protocolError(err *wire.Error) {
	cn := a.cn
	cn.protoErrs++
	if cn.protoErrs <= maxProtoErrEvents {
		cn.srv.emit(eventlog.ConnProtocolError{ConnID: cn.id, Peer: "control", Error: err.Message, Fatal: false})
	}
}
