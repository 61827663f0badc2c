package sockserve

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/wire"
)

// ErrLineTooLong is what a line over the maximum wraps (the wire package's,
// so a front-end checks one error whatever reads its lines).
var ErrLineTooLong = wire.ErrLineTooLong

// Buffer sizes of Lines.
const (
	readBufSize = 4 << 10 // one read; taken from a pool only while bytes wait in it
	// longKeepCap: a long-line buffer above this is dropped before the next
	// line, so one long line does not pin it for the connection's life.
	longKeepCap = 256 << 10
)

var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// rawReader is syscall.RawConn's Read: f is called with the descriptor
// until it returns true, the netpoller waiting for readability between
// calls (read deadlines apply).
type rawReader interface {
	Read(f func(fd uintptr) bool) error
}

// Lines frames a socket's bytes into NDJSON lines of bounded length.
//
// A line is the bytes before a '\n', minus one trailing '\r'; it must be
// at most max bytes. Lines holds no buffer while the connection is idle:
// its 4 KiB read buffer comes from a pool when bytes arrive and goes back
// once every byte read is consumed and the socket has nothing more, so an
// idle connection costs its goroutine and little else. A line that fits
// in the read buffer is returned without a copy; a longer one is
// assembled, never holding more than max+1 of its bytes.
type Lines struct {
	rc   rawReader
	max  int
	what string

	bufp *[]byte // the pooled read buffer; nil while idle
	r, w int     // (*bufp)[r:w] is read and not consumed
	long []byte  // the start of a line longer than the read buffer
	eof  bool    // the peer closed its end; what is buffered is still served
	// partial: long holds the start of a line whose read was interrupted
	// by an error (a deadline); the next call continues it.
	partial bool
	err     error // sticky: a line too long, or EOF once reached
	rerr    error // the read error the callback met

	sysRead func(fd int, p []byte) (int, error) // syscall.Read; the fuzz test's fake
	do      func(fd uintptr) bool               // l.read, bound once
}

// NewLines frames c's lines of at most max bytes (0: wire.DefaultMaxLine);
// what names the line in ErrLineTooLong's message ("control line").
func NewLines(c rawReader, max int, what string) *Lines {
	if max <= 0 {
		max = wire.DefaultMaxLine
	}
	if max == math.MaxInt {
		max--
	}
	if what == "" {
		what = "control line"
	}
	// syscall.Read rather than unix.Read: the race detector sees it
	// (bytes written by a peer happen before they are read).
	l := &Lines{rc: c, max: max, what: what, sysRead: syscall.Read}
	l.do = l.read
	return l
}

// Next returns the next line without its newline and one trailing '\r',
// valid until the next call. A final line without a newline is returned
// before io.EOF. A line over the maximum returns an error wrapping
// ErrLineTooLong, and so does every later call. Any other error (a
// deadline, a reset, the socket closed) is returned as it is, and a line
// read in part is continued by the next call.
func (l *Lines) Next() ([]byte, error) {
	if l.err != nil {
		return nil, l.err
	}
	if !l.partial {
		if cap(l.long) > longKeepCap {
			l.long = nil
		}
		l.long = l.long[:0]
	}
	l.partial = false
	for {
		if l.r < l.w {
			b := (*l.bufp)[l.r:l.w]
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				l.r += i + 1
				if len(l.long) == 0 {
					return l.finish(b[:i])
				}
				if len(l.long)+i > l.max+1 {
					return l.tooLong()
				}
				l.long = append(l.long, b[:i]...)
				return l.finish(l.long)
			}
			if len(l.long) == 0 && len(b) < len(*l.bufp) {
				// Room left: keep the start of the line in the buffer.
				if l.r > 0 {
					l.w = copy(*l.bufp, b)
					l.r = 0
				}
			} else {
				// The buffer is full of one line's start: assemble it.
				if len(l.long)+len(b) > l.max+1 {
					return l.tooLong()
				}
				l.long = appendBounded(l.long, b, l.max+1)
				l.r, l.w = 0, 0
			}
		}
		if l.eof {
			l.err = io.EOF
			rest := l.long
			if l.r < l.w {
				rest = append(rest, (*l.bufp)[l.r:l.w]...)
				l.r = l.w
			}
			l.release()
			if len(rest) == 0 {
				return nil, io.EOF
			}
			return l.finish(rest)
		}
		if err := l.rc.Read(l.do); err != nil {
			l.partial = len(l.long) > 0
			return nil, err
		}
		if l.rerr != nil {
			err := l.rerr
			l.rerr = nil
			l.partial = len(l.long) > 0
			return nil, err
		}
	}
}

// read is one attempt to read into the buffer's free end, run by the
// netpoller's RawConn.Read: false asks it to wait until the socket is
// readable. An empty buffer goes back to the pool before the wait.
func (l *Lines) read(fd uintptr) bool {
	if l.bufp == nil {
		l.bufp = readBufs.Get().(*[]byte)
		l.r, l.w = 0, 0
	} else if l.r == l.w {
		l.r, l.w = 0, 0
	}
	for {
		n, err := l.sysRead(int(fd), (*l.bufp)[l.w:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if l.r == l.w {
				l.release()
			}
			return false
		case err != nil:
			l.rerr = err
		case n == 0:
			l.eof = true
		default:
			l.w += n
		}
		return true
	}
}

// release gives the read buffer back; nothing unread is in it.
func (l *Lines) release() {
	if l.bufp != nil {
		readBufs.Put(l.bufp)
		l.bufp, l.r, l.w = nil, 0, 0
	}
}

// Close gives back what Lines holds; the connection reads no more.
func (l *Lines) Close() { l.release(); l.long = nil }

// Forget lets go of the buffer without giving it back to the pool: the
// last line may still be read by someone who was handed it (a late
// answer's handler). Close after Forget does nothing.
func (l *Lines) Forget() { l.bufp, l.r, l.w, l.long = nil, 0, 0, nil }

func (l *Lines) finish(line []byte) ([]byte, error) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > l.max {
		return l.tooLong()
	}
	return line, nil
}

func (l *Lines) tooLong() ([]byte, error) {
	l.long = nil
	l.release()
	l.err = fmt.Errorf("%s longer than %d bytes: %w", l.what, l.max, ErrLineTooLong)
	return nil, l.err
}

// appendBounded appends data to buf, growing it to at most limit bytes of
// capacity; len(buf)+len(data) must not exceed limit.
func appendBounded(buf, data []byte, limit int) []byte {
	need := len(buf) + len(data)
	if need > cap(buf) {
		c := min(max(2*cap(buf), need, readBufSize), limit)
		nb := make([]byte, len(buf), c)
		copy(nb, buf)
		buf = nb
	}
	return append(buf, data...)
}
