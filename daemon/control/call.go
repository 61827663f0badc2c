package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/orchestrd/orchestrd/platform/bufpool"
	"sync/atomic"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/wire"
)

// Call is one request on a connection, handed to its method's handler (it
// is the control socket's api.Call). It is answered exactly once, at once or
// later, from any goroutine; later answers are ignored.
//
// A call its handler leaves unanswered is tracked by its connection until
// it is answered. When the connection ends first, its OnClose functions
// run and, when the daemon is stopping, it is answered CodeShuttingDown.
type Call struct {
	cn     *conn
	id     uint64
	method string
	params json.RawMessage

	answered atomic.Bool
	// tracked: the connection holds the call among its pending ones (or
	// is about to), so its answer must take it out.
	tracked atomic.Bool
	onClose []func() // under cn.mu
}

var (
	_ api.Call       = (*Call)(nil)
	_ api.StreamCall = (*Call)(nil)
	_ api.OriginCall = (*Call)(nil)
)

// reset readies c for the request req on cn.
func (c *Call) reset(cn *conn, req wire.Request) {
	c.cn, c.id, c.method, c.params = cn, req.ID, req.Method, req.Params
	c.answered.Store(false)
	c.tracked.Store(false)
	c.onClose = nil
}

// Method is the method called.
func (c *Call) Method() string { return c.method }

// Origin is a control client's: its pid as the kernel gave it.
func (c *Call) Origin() api.Origin { return api.Origin{By: api.ByControl, Pid: c.cn.peer.Pid} }

// Decode decodes the params into v, refusing unknown fields and trailing
// data; absent params leave v as it is. The error is an *api.Error
// (CodeInvalidParams) naming the method and the problem.
func (c *Call) Decode(v any) error {
	if _, none := v.(*api.NoParams); none && noParams(c.params) {
		return nil // absent or {}: nothing to decode (ping's way)
	}
	if e := wire.DecodeParams(wire.Request{ID: c.id, Method: c.method, Params: c.params}, v); e != nil {
		return &api.Error{Code: e.Code, Message: e.Message}
	}
	return nil
}

// Respond answers with result.
func (c *Call) Respond(result any) { c.respondThen(result, nil) }

// respondThen answers with result and runs then (see OutQueue.PushRespThen)
// before any other line can be queued after the answer.
func (c *Call) respondThen(result any, then func()) {
	if !c.answered.CompareAndSwap(false, true) {
		return
	}
	c.cn.respondThen(c.id, result, nil, then)
	c.settled()
}

// Fail answers with err: an *api.Error keeps its code, message and data;
// any other error is CodeInternal.
func (c *Call) Fail(err error) {
	if !c.answered.CompareAndSwap(false, true) {
		return
	}
	c.cn.respond(c.id, nil, wireError(err))
	c.settled()
}

// Push queues an event line for the call's client ahead of its answer,
// never dropped (OutQueue.PushStream); taken hears when the socket took
// it. data must be one JSON object (the method built it). After the
// answer the line is not sent.
func (c *Call) Push(event string, data []byte, taken func(ok bool)) {
	c.PushRaw(event, data, nil, taken)
}

// PushRaw is Push followed by raw, as it is (api.RawPusher): one line of
// the queue, the bytes after its newline written with it (one writev), not
// copied: raw is the caller's and stays as it is until taken runs.
func (c *Call) PushRaw(event string, data, raw []byte, taken func(ok bool)) {
	if c.answered.Load() {
		taken(false)
		return
	}
	n := len(`{"event":"","data":}`) + len(event) + len(data) + 2
	bp := getLine(n)
	line := append((*bp)[:0], `{"event":`...)
	line = wire.AppendJSONString(line, event, false)
	line = append(line, `,"data":`...)
	line = append(line, data...)
	line = append(line, '}', '\n')
	*bp = line
	// The queue is done with the line once taken runs (written, or the
	// connection gone): its buffer serves the next one, so a job's output
	// streamed at full speed does not allocate a line per piece.
	c.cn.q.PushStreamTail(line, raw, func(ok bool) {
		putLine(bp)
		taken(ok)
	})
}

// Buffers of pushed lines: a streamed job's lines are up to a piece of
// output in base64 (about 90 KiB) or as it is (a binary piece: up to a
// runner's 512 KiB chunk and its line); larger ones are not kept, nor
// more than a few of each size once a burst is over.
var linePool = bufpool.New(4<<10, 512<<10, 4)

func getLine(n int) *[]byte {
	b := linePool.Get(n)
	return &b
}

func putLine(bp *[]byte) { linePool.Put(*bp) }

// settled takes an answered call out of its connection's pending ones.
func (c *Call) settled() {
	if c.tracked.Load() {
		c.cn.untrack(c)
	}
}

// OnClose registers f to run if the connection ends while the call is
// unanswered; at once if it has already ended. f must not block.
func (c *Call) OnClose(f func()) {
	cn := c.cn
	cn.mu.Lock()
	if !cn.callsClosed {
		c.onClose = append(c.onClose, f)
		cn.mu.Unlock()
		return
	}
	cn.mu.Unlock()
	if !c.answered.Load() {
		f()
	}
}

// wireError is err as the protocol's error object.
func wireError(err error) *wire.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return &wire.Error{Code: ae.Code, Message: ae.Message, Data: ae.Data}
	}
	return wire.Errorf(wire.CodeInternal, "internal error: %v", err)
}

// track holds a call its handler left unanswered until it is answered or
// the connection ends.
func (cn *conn) track(c *Call) {
	cn.mu.Lock()
	c.tracked.Store(true)
	if !c.answered.Load() { // else it was answered meanwhile: nothing to hold
		if cn.pending == nil {
			cn.pending = map[*Call]struct{}{}
		}
		cn.pending[c] = struct{}{}
	}
	cn.mu.Unlock()
}

func (cn *conn) untrack(c *Call) {
	cn.mu.Lock()
	delete(cn.pending, c)
	cn.mu.Unlock()
}

// closeCalls ends the calls still pending when the connection ends: their
// OnClose functions run, and when the daemon is stopping they are answered
// so (the answer is flushed before the socket closes).
func (cn *conn) closeCalls(reason string) {
	cn.mu.Lock()
	calls := cn.pending
	cn.pending = nil
	cn.callsClosed = true
	cn.mu.Unlock()
	for c := range calls {
		if !c.answered.Load() {
			for _, f := range c.onClose {
				f()
			}
		}
		if reason == ReasonDaemonStopping {
			c.Fail(api.Errorf(api.CodeShuttingDown, "daemon is stopping"))
		}
	}
}

// noParams reports whether params are absent or an empty object.
func noParams(p json.RawMessage) bool {
	p = bytes.TrimSpace(p)
	if len(p) == 0 {
		return true
	}
	if p[0] != '{' || p[len(p)-1] != '}' {
		return false
	}
	return len(bytes.TrimSpace(p[1:len(p)-1])) == 0
}
