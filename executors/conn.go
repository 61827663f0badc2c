package executors

import (
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
// kernel's socket buffer then pushes back on the executor).
type conn struct {
	c   net.Conn
	out chan []byte
	// fds keeps the descriptors that came with the executor's lines
	// (spawn_terminal's PTY); nil on a socket that cannot carry them.
	fds *ptyfd.Reader

	mu     sync.Mutex
	cond   *sync.Cond
	gated  bool // the reader waits before its next line
	closed bool
	done   chan struct{} // closed once both goroutines have returned
}

// inbound is what the reader hands the actor: a decoded message, or the
// refusal of a line (bad), or the end of the stream (err).
type inbound struct {
	msg wire.RPCMessage
	bad *wire.RPCDecodeError
	err error // set on the last inbound: the connection is gone
}

// startConn starts c's goroutines; deliver runs on the reader goroutine,
// once per line and once more at the end, and must not block for long.
func startConn(c net.Conn, maxLine int, deliver func(inbound)) *conn {
	cn := &conn{c: c, out: make(chan []byte, writeQueue), done: make(chan struct{})}
	cn.cond = sync.NewCond(&cn.mu)
	if uc, ok := c.(*net.UnixConn); ok {
		cn.fds = ptyfd.NewReader(uc)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		cn.read(maxLine, deliver)
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

func (cn *conn) read(maxLine int, deliver func(inbound)) {
	var r io.Reader = cn.c
	if cn.fds != nil {
		r = cn.fds
		defer cn.fds.Close()
	}
	lr := wire.NewRPCLineReader(r, maxLine)
	for {
		cn.mu.Lock()
		for cn.gated && !cn.closed {
			cn.cond.Wait()
		}
		closed := cn.closed
		cn.mu.Unlock()
		if closed {
			deliver(inbound{err: errors.New("connection closed by the daemon")})
			return
		}
		line, err := lr.Next()
		if err != nil {
			if errors.Is(err, wire.ErrLineTooLong) {
				err = fmt.Errorf("a line over %d bytes: %w", maxLine, err)
			}
			deliver(inbound{err: err})
			cn.close()
			return
		}
		if len(line) == 0 {
			continue
		}
		m, bad := wire.ParseRPC(line)
		if bad != nil {
			deliver(inbound{bad: bad})
			continue
		}
		deliver(inbound{msg: m})
	}
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
