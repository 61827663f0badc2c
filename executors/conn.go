package executors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/orchestrd/orchestrd/executors/ptyfd"
	"github.com/orchestrd/orchestrd/wire"
)

// writeQueue bounds the lines waiting to be written to one executor. An
// executor that stops reading its socket until this many pile up is killed
// (executor.protocol_error): the daemon never blocks on it, nor grows.
const writeQueue = 1024

// conn is the JSON-RPC connection to one executor: a reader goroutine that
// decodes lines and hands them to the pool actor, a writer goroutine fed
// by a bounded queue, and a gate the actor closes to stop reading (the
// kernel's socket buffer then pushes back on the executor). The reader is
// at most maxAhead batches ahead of the actor: the gate is decided on
// what the actor has taken, and a starved actor must not let the reader
// fill its mailbox past it.
type conn struct {
	c   net.Conn
	out chan []byte
	// fds keeps the descriptors that came with the executor's lines
	// (spawn_terminal's PTY); nil on a socket that cannot carry them.
	fds *ptyfd.Reader

	mu     sync.Mutex
	cond   *sync.Cond
	gated  bool // the reader waits before its next line
	ahead  int  // batches delivered that the actor has not taken yet
	closed bool
	done   chan struct{} // closed once both goroutines have returned
}

// inbound is what the reader hands the actor: a decoded message, or the
// refusal of a line (bad), or the end of the stream (err). A
// report_message the reader could decode itself comes as report, with
// isReport set (msg is then empty): the actor's hot path decodes nothing.
type inbound struct {
	msg      wire.RPCMessage
	report   wire.ReportMessage
	isReport bool
	bad      *wire.RPCDecodeError
	err      error // set on the last inbound: the connection is gone
}

// Reading in batches: the lines already in the read buffer go to the actor
// together, at most maxBatch of them, so a flood costs the actor a message
// per batch, not per line. A line that is not complete yet is not waited
// for: what is there goes at once.
const maxBatch = 256

// maxAhead is how many batches the reader may have handed the actor that
// it has not taken: two, so that the next batch is read while the actor
// takes one, and what the gate lets through past its marks is at most
// those.
const maxAhead = 2

// arenaSize is how much of the report_message event data one allocation
// holds: the reader copies each message's event_data out of its line
// buffer into the current arena, and starts a new one when it is full.
const arenaSize = 32 << 10

// startConn starts c's goroutines; deliver runs on the reader goroutine,
// once per batch of lines and once more at the end (a batch of one
// inbound with err set), and must not block for long. The batch is the
// actor's to keep; it calls cn.taken once it has taken each (the last
// one's is not waited for).
func startConn(c net.Conn, maxLine int, deliver func(cn *conn, batch []inbound)) *conn {
	cn := &conn{c: c, out: make(chan []byte, writeQueue), done: make(chan struct{})}
	cn.cond = sync.NewCond(&cn.mu)
	if uc, ok := c.(*net.UnixConn); ok {
		cn.fds = ptyfd.NewReader(uc)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		cn.read(maxLine, func(b []inbound) { deliver(cn, b) })
	}()
	go func() {
		defer wg.Done()
		cn.write()
	}()
	go func() {
		wg.Wait()
		close(cn.done)
	}()
	return cn
}

func (cn *conn) read(maxLine int, deliver func([]inbound)) {
	var r io.Reader = cn.c
	if cn.fds != nil {
		r = cn.fds
		defer cn.fds.Close()
	}
	if maxLine <= 0 {
		maxLine = wire.DefaultMaxRPCLine // as the reader takes 0
	}
	lr := wire.NewRPCLineReader(r, maxLine)
	d := lineDecoder{}
	// Every batch handed over counts until the actor has taken it.
	hand := func(b []inbound) {
		cn.mu.Lock()
		cn.ahead++
		cn.mu.Unlock()
		deliver(b)
	}
	size := 16 // the last batch's length: the next one is made as large
	for {
		cn.mu.Lock()
		for (cn.gated || cn.ahead >= maxAhead) && !cn.closed {
			cn.cond.Wait()
		}
		closed := cn.closed
		cn.mu.Unlock()
		if closed {
			hand([]inbound{{err: errors.New("connection closed by the daemon")}})
			return
		}
		batch := make([]inbound, 0, size)
		for len(batch) < maxBatch && (len(batch) == 0 || lr.LineBuffered()) {
			line, err := lr.Next()
			if err != nil {
				if errors.Is(err, wire.ErrLineTooLong) {
					err = fmt.Errorf("a line over %d bytes: %w", maxLine, err)
				}
				hand(append(batch, inbound{err: err}))
				cn.close()
				return
			}
			if len(line) > 0 {
				batch = append(batch, d.decode(line))
			}
		}
		if len(batch) > 0 {
			size = len(batch)
			hand(batch)
		}
	}
}

// lineDecoder decodes an executor's lines on the reader goroutine.
type lineDecoder struct {
	names wire.Interner
	arena []byte
}

// decode decodes line, which is valid only until the next read: what the
// inbound keeps is copied.
func (d *lineDecoder) decode(line []byte) inbound {
	// The flood's lines, in one pass.
	if rep, ok := d.names.DecodeReportLine(line); ok {
		rep.EventData = d.keep(rep.EventData)
		return inbound{report: rep, isReport: true}
	}
	m, bad := wire.ParseRPCInPlace(line)
	if bad != nil {
		return inbound{bad: bad}
	}
	if m.Kind == wire.RPCKindNotification && m.Method == "report_message" {
		if rep, ok := d.names.DecodeReportMessage(m.Params); ok {
			rep.EventData = d.keep(rep.EventData)
			return inbound{report: rep, isReport: true}
		}
	}
	// Anything else is rare: the actor decodes it, from copies.
	if m.Params != nil {
		m.Params = bytes.Clone(m.Params)
	}
	if m.Result != nil {
		m.Result = bytes.Clone(m.Result)
	}
	return inbound{msg: m}
}

// keep copies b into the arena.
func (d *lineDecoder) keep(b []byte) []byte {
	if b == nil {
		return nil
	}
	if len(b) > arenaSize/4 {
		return bytes.Clone(b)
	}
	if cap(d.arena)-len(d.arena) < len(b) {
		d.arena = make([]byte, 0, arenaSize)
	}
	start := len(d.arena)
	d.arena = append(d.arena, b...)
	return d.arena[start:len(d.arena):len(d.arena)]
}

func (cn *conn) write() {
	for b := range cn.out {
		if _, err := cn.c.Write(b); err != nil {
			cn.close()
			for range cn.out { // drain until send closes it
			}
			return
		}
	}
}

// send queues one line (with its newline); false when the queue is full
// (the executor stopped reading) or the connection is closed.
func (cn *conn) send(line []byte) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return false
	}
	select {
	case cn.out <- line:
		return true
	default:
		return false
	}
}

// takeFD returns the oldest descriptor the executor passed and the daemon
// has not taken.
func (cn *conn) takeFD() (*os.File, error) {
	if cn.fds == nil {
		return nil, ptyfd.ErrNoFD
	}
	return cn.fds.Take()
}

// taken tells the reader the actor has taken a batch it delivered (and
// closed or opened the gate after it).
func (cn *conn) taken() {
	cn.mu.Lock()
	cn.ahead--
	cn.mu.Unlock()
	cn.cond.Broadcast()
}

// gate stops (true) or resumes (false) reading.
func (cn *conn) gate(on bool) {
	cn.mu.Lock()
	cn.gated = on
	cn.mu.Unlock()
	cn.cond.Broadcast()
}

// close closes the socket; the reader delivers its last inbound.
func (cn *conn) close() {
	cn.mu.Lock()
	if !cn.closed {
		cn.closed = true
		close(cn.out)
		cn.c.Close()
	}
	cn.mu.Unlock()
	cn.cond.Broadcast()
}
