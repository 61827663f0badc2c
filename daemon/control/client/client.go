package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

// ErrNoDaemon is wrapped by Dial's error when nothing listens on the socket.
var ErrNoDaemon = errors.New("no daemon")

// ErrClientClosed is wrapped by Call's error once the connection is gone.
var ErrClientClosed = errors.New("control connection closed")

// clientMaxLine bounds one line from the daemon. Lines from the daemon are
// not limited by the protocol: job.finished and job.get carry a job's whole
// output.
const clientMaxLine = 256 << 20

// eventBuffer is how many pushed events Events() buffers before the client's
// reader stops reading the socket (back-pressure onto the daemon), and
// eventBytes how many bytes of them (their data and raw bytes): a job's
// output comes in pieces of up to 512 KiB, and 256 of those, held for a
// reader whose own output is blocked (a pager, a full pipe), were 128 MiB
// in this process. One event larger than eventBytes is still taken, alone.
const (
	eventBuffer = 256
	eventBytes  = 4 << 20
)

// eventRecheck is how often a reader over eventBytes looks whether the
// events were taken (a channel says when it has room, not when it has
// fewer bytes): a 4 MiB buffer lasts longer than this at any speed a
// client writes its output.
const eventRecheck = 2 * time.Millisecond

// Client is a control-socket connection. Calls may be made concurrently.
type Client struct {
	nc         net.Conn
	nextID     atomic.Uint64
	events     chan wire.Event
	done       chan struct{} // closed by Close
	readerDone chan struct{} // closed when the reader has stopped

	wmu sync.Mutex // serialises request writes

	queued queuedSizes // the reader's own: sizes of the events in events

	mu        sync.Mutex
	pending   map[uint64]*pendingCall
	err       error // why the reader stopped; set once, before readerDone closes
	closeOnce sync.Once
}

// pendingCall is one Call waiting for its response. The reader decodes the
// result straight into result (the caller's value) and then sends on ch.
type pendingCall struct {
	result any
	ch     chan error // capacity 1
}

var pendingCalls = sync.Pool{New: func() any { return &pendingCall{ch: make(chan error, 1)} }}

// Dial connects to the control socket at path. When nothing listens there
// the error wraps ErrNoDaemon and reads "no daemon at PATH: ...".
func Dial(path string) (*Client, error) {
	nc, err := net.Dial("unix", path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w at %s: %w", ErrNoDaemon, path, err)
		}
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	return newClient(nc), nil
}

// newClient starts a client on a connection to the daemon.
func newClient(nc net.Conn) *Client {
	c := &Client{
		nc:         nc,
		events:     make(chan wire.Event, eventBuffer),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
		pending:    map[uint64]*pendingCall{},
	}
	go c.read()
	return c
}

// Events returns the pushed events; it is closed when the connection ends.
// When nobody reads it the client stops reading the socket once it holds
// eventBuffer events or eventBytes bytes: calls then wait too.
func (c *Client) Events() <-chan wire.Event { return c.events }

// Call sends one request and waits for its response, decoding the result
// into result (unless nil). A remote error is returned as *wire.Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	id := c.nextID.Add(1)
	buf := make([]byte, 0, 48+len(method))
	buf = append(buf, `{"id":`...)
	buf = strconv.AppendUint(buf, id, 10)
	buf = append(buf, `,"method":`...)
	buf = wire.AppendJSONString(buf, method, true)
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return fmt.Errorf("encoding params for %s: %w", method, err)
		}
		buf = append(buf, `,"params":`...)
		buf = append(buf, p...)
	}
	buf = append(buf, '}', '\n')

	pc := pendingCalls.Get().(*pendingCall)
	pc.result = result
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		c.recycle(pc)
		return fmt.Errorf("%s: %w", method, err)
	}
	c.pending[id] = pc
	c.mu.Unlock()

	c.wmu.Lock()
	_, werr := c.nc.Write(buf)
	c.wmu.Unlock()
	if werr != nil {
		if c.abandon(id) {
			c.recycle(pc)
			return fmt.Errorf("%s: %w", method, c.failure(werr))
		}
		return c.finish(pc) // answered anyway
	}

	select {
	case err := <-pc.ch:
		c.recycle(pc)
		return err
	case <-ctx.Done():
		if c.abandon(id) {
			c.recycle(pc)
			return ctx.Err()
		}
		return c.finish(pc) // the reader is delivering it right now
	case <-c.readerDone:
		if c.abandon(id) {
			c.recycle(pc)
			return fmt.Errorf("%s: %w", method, c.failure(nil))
		}
		return c.finish(pc)
	}
}

// abandon removes a pending call; false means the reader already took it
// and is about to answer it (and may be writing into its result).
func (c *Client) abandon(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[id]; !ok {
		return false
	}
	delete(c.pending, id)
	return true
}

func (c *Client) finish(pc *pendingCall) error {
	err := <-pc.ch
	c.recycle(pc)
	return err
}

func (c *Client) recycle(pc *pendingCall) {
	pc.result = nil
	pendingCalls.Put(pc)
}

// failure is the error to report once the connection failed: the reader's
// reason when it has one.
func (c *Client) failure(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if err == nil {
		return ErrClientClosed
	}
	return fmt.Errorf("%w: %w", ErrClientClosed, err)
}

func (c *Client) read() {
	defer close(c.readerDone)
	defer close(c.events)
	lr := wire.NewLineReader(c.nc, clientMaxLine)
	var rerr error
	var connErr *wire.Error
	for rerr == nil {
		line, err := lr.Next()
		if err != nil {
			rerr = err
			break
		}
		if len(line) == 0 {
			continue
		}
		if kind, data, ok := fastEvent(line); ok {
			ev := wire.Event{Event: kind, Data: bytes.Clone(data)}
			// A binary job.stream's piece: its bytes follow the line.
			n, isRaw, err := wire.RawDataLen(ev.Data)
			if err != nil {
				rerr = fmt.Errorf("daemon sent a malformed line: %w", err)
				break
			}
			if isRaw {
				if ev.Raw, rerr = lr.ReadRawInto(c.rawBuf(n), n); rerr != nil {
					break
				}
			}
			rerr = c.push(ev)
			continue
		}
		if id, result, ok := fastResult(line); ok {
			c.answer(id, result, nil)
			continue
		}
		var cl wire.ClientLine
		if err := json.Unmarshal(line, &cl); err != nil {
			rerr = fmt.Errorf("daemon sent a malformed line: %w", err)
			break
		}
		switch {
		case cl.Event != "":
			rerr = c.push(wire.Event{Event: cl.Event, Data: cl.Data})
		case cl.ID == nil:
		case !c.answer(*cl.ID, cl.Result, cl.Error) && *cl.ID == 0 && cl.Error != nil:
			// A connection-level error (refused, line too long): if the
			// connection ends next, this is why.
			connErr = cl.Error
		}
	}
	if connErr != nil && errors.Is(rerr, io.EOF) {
		rerr = connErr
	}
	c.mu.Lock()
	switch {
	case errors.Is(rerr, io.EOF):
		c.err = fmt.Errorf("%w by the daemon", ErrClientClosed)
	case errors.Is(rerr, net.ErrClosed):
		c.err = ErrClientClosed
	default:
		c.err = fmt.Errorf("%w: %w", ErrClientClosed, rerr)
	}
	c.mu.Unlock()
	// Calls still pending see readerDone and remove themselves.
}

// Buffers of binary pieces (Event.Raw), reused once their reader is done
// with them (ReleaseRaw): a job's output at full speed would otherwise
// allocate a buffer a piece and keep this process's collector busy.
const (
	rawPoolMin = 64 << 10
	rawPoolMax = 1 << 20
)

var rawPool sync.Pool

// rawBuf is a buffer for n raw bytes: a released one when one is at hand.
func (c *Client) rawBuf(n int) []byte {
	if n > rawPoolMax {
		return nil
	}
	if bp, ok := rawPool.Get().(*[]byte); ok {
		if cap(*bp) >= n {
			return *bp
		}
	}
	return make([]byte, 0, max(n, rawPoolMin))
}

// ReleaseRaw hands back an event's Raw bytes once the caller is done with
// them: a later event's may reuse the array. Optional.
func (c *Client) ReleaseRaw(b []byte) {
	if cap(b) >= rawPoolMin && cap(b) <= rawPoolMax {
		b = b[:0]
		rawPool.Put(&b)
	}
}

// push hands an event to Events(), waiting for room (back-pressure): a
// free place, and the bytes it holds within eventBytes.
func (c *Client) push(ev wire.Event) error {
	size := len(ev.Data) + len(ev.Raw)
	var t *time.Timer
	for c.queued.settle(len(c.events)) > 0 && c.queued.bytes+size > eventBytes {
		if t == nil {
			t = time.NewTimer(eventRecheck)
			defer t.Stop()
		} else {
			t.Reset(eventRecheck)
		}
		select {
		case <-t.C:
		case <-c.done:
			return net.ErrClosed
		}
	}
	select {
	case c.events <- ev:
		c.queued.pushed(len(c.events), size)
		return nil
	case <-c.done:
		return net.ErrClosed
	}
}

// queuedSizes are the sizes of the events in the channel, oldest first:
// those pushed less those taken (the channel's length says how many are
// left). Only the reader uses it.
type queuedSizes struct {
	ring  [eventBuffer]int
	head  int // the oldest
	n     int // sizes in ring
	bytes int // their sum
}

// settle forgets the sizes of the events taken, left being how many are
// still in the channel, and returns how many are.
func (q *queuedSizes) settle(left int) int {
	for q.n > left {
		q.bytes -= q.ring[q.head]
		q.head = (q.head + 1) % eventBuffer
		q.n--
	}
	return q.n
}

// pushed records an event of size bytes sent into the channel, which
// holds left events now. Those before it that are still there are all
// but it (the newest), or none if it was taken already; the send may
// have waited for a place, the ring full until then.
func (q *queuedSizes) pushed(left, size int) {
	q.settle(max(left-1, 0))
	q.ring[(q.head+q.n)%eventBuffer] = size
	q.n++
	q.bytes += size
}

// answer completes the pending call id; false if there is none.
func (c *Client) answer(id uint64, result []byte, rerr *wire.Error) bool {
	c.mu.Lock()
	pc, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !ok {
		return false
	}
	var err error
	switch {
	case rerr != nil:
		err = rerr
	case pc.result != nil:
		if e := json.Unmarshal(result, pc.result); e != nil {
			err = fmt.Errorf("decoding result: %w", e)
		}
	}
	pc.ch <- err
	return true
}

// fastResult recognises {"id":N,"result":R}, the shape wire.AppendResponse
// writes for a success, without a full decode. Anything else is left to
// encoding/json.
func fastResult(line []byte) (id uint64, result []byte, ok bool) {
	const prefix, mid = `{"id":`, `,"result":`
	if !bytes.HasPrefix(line, []byte(prefix)) || line[len(line)-1] != '}' {
		return 0, nil, false
	}
	i := len(prefix)
	start := i
	for i < len(line) && line[i] >= '0' && line[i] <= '9' && i-start < 19 {
		id = id*10 + uint64(line[i]-'0')
		i++
	}
	if i == start || !bytes.HasPrefix(line[i:], []byte(mid)) {
		return 0, nil, false
	}
	return id, line[i+len(mid) : len(line)-1], true
}

// fastEvent recognises {"event":"K","data":D} as the daemon writes it, with
// no escapes in K.
func fastEvent(line []byte) (kind string, data []byte, ok bool) {
	const prefix, mid = `{"event":"`, `","data":`
	if !bytes.HasPrefix(line, []byte(prefix)) || line[len(line)-1] != '}' {
		return "", nil, false
	}
	rest := line[len(prefix):]
	j := bytes.IndexByte(rest, '"')
	if j <= 0 || bytes.IndexByte(rest[:j], '\\') >= 0 || !bytes.HasPrefix(rest[j:], []byte(mid)) {
		return "", nil, false
	}
	return string(rest[:j]), rest[j+len(mid) : len(rest)-1], true
}

// Close closes the connection and waits for the client's reader to end.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.done)
		err = c.nc.Close()
		<-c.readerDone
	})
	return err
}
