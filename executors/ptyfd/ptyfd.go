// Package ptyfd is the PTY half of Agor's spawn_terminal: the executor
// opens a pseudo-terminal, starts a shell on it, and passes the PTY's
// master file descriptor to the daemon with SCM_RIGHTS on the response
// line; the daemon takes it off the socket.
//
// Both sides are here: Start and SendFD for an executor (the daemon's own
// `orchestrd executor` and the test executor), Reader and IsMaster for the
// daemon.
package ptyfd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Start starts shell (a path or a name looked up in PATH; "" is /bin/sh)
// in cwd with env on a new PTY of cols x rows, as the leader of a session
// of its own with the PTY as its controlling terminal. The caller owns
// the master and waits for the command.
func Start(shell, cwd string, env []string, cols, rows int) (*os.File, *exec.Cmd, error) {
	if shell == "" {
		shell = "/bin/sh"
	}
	if cwd != "" {
		// exec would blame the shell for a directory it cannot enter.
		if fi, err := os.Stat(cwd); err != nil {
			return nil, nil, fmt.Errorf("working directory: %w", err)
		} else if !fi.IsDir() {
			return nil, nil, fmt.Errorf("working directory %s is not a directory", cwd)
		}
	}
	cmd := exec.Command(shell)
	cmd.Dir, cmd.Env = cwd, env
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: clampSize(cols, 80), Rows: clampSize(rows, 24)})
	if err != nil {
		return nil, nil, fmt.Errorf("starting %s on a new PTY: %w", shell, err)
	}
	return master, cmd, nil
}

func clampSize(n, def int) uint16 {
	if n <= 0 {
		return uint16(def)
	}
	return uint16(min(n, 10000))
}

// SetSize sets the window size of the PTY whose master is f; the
// terminal's foreground process group gets SIGWINCH.
func SetSize(f *os.File, cols, rows int) error {
	ws := &unix.Winsize{Col: clampSize(cols, 80), Row: clampSize(rows, 24)}
	return control(f, func(fd int) error { return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws) })
}

// control runs fn on f's descriptor without taking it out of the Go
// poller (f.Fd would make it blocking, and a blocked Read would then
// outlive Close).
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// SendFD writes line on c with f's descriptor attached (SCM_RIGHTS) to its
// first byte, which is where the receiver finds it.
func SendFD(c *net.UnixConn, line []byte, f *os.File) error {
	var n int
	err := control(f, func(fd int) error {
		var err error
		n, _, err = c.WriteMsgUnix(line, unix.UnixRights(fd), nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("sending a file descriptor: %w", err)
	}
	for n < len(line) {
		m, err := c.Write(line[n:])
		if err != nil {
			return err
		}
		n += m
	}
	return nil
}

// IsMaster says whether f is the master side of a PTY (the kernel gives a
// PTY number only for that).
func IsMaster(f *os.File) error {
	err := control(f, func(fd int) error {
		_, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
		return err
	})
	if err != nil {
		return fmt.Errorf("the descriptor is not the master side of a PTY: %w", err)
	}
	return nil
}

// MaxQueued is how many received descriptors a Reader keeps untaken;
// more are closed at once and counted in Dropped.
const MaxQueued = 4

// Reader reads a unix stream socket with recvmsg, keeping the file
// descriptors that come with the bytes (SCM_RIGHTS) for Take, in the
// order they came. The kernel ends a read at the data that carried
// descriptors, so a descriptor sent with a line's first byte is queued
// before that line has been read whole.
type Reader struct {
	c   *net.UnixConn
	oob []byte

	mu      sync.Mutex
	fds     []*os.File
	dropped int
	closed  bool
}

// NewReader reads c.
func NewReader(c *net.UnixConn) *Reader {
	return &Reader{c: c, oob: make([]byte, unix.CmsgSpace(4*MaxQueued))}
}

// Read reads bytes, queueing any descriptors that come with them.
func (r *Reader) Read(p []byte) (int, error) {
	n, oobn, flags, _, err := r.c.ReadMsgUnix(p, r.oob)
	if oobn > 0 {
		r.keep(r.oob[:oobn], flags&unix.MSG_CTRUNC != 0)
	}
	if n < 0 {
		// recvmsg's -1 on an error (a reset connection) comes back as it
		// is; io.Reader's contract wants 0.
		n = 0
	}
	return n, err
}

func (r *Reader) keep(oob []byte, truncated bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if truncated {
		r.dropped++
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if r.closed || len(r.fds) >= MaxQueued {
				_ = unix.Close(fd)
				r.dropped++
				continue
			}
			// Non-blocking, so that the Go poller serves it and Close
			// ends a Read in progress.
			_ = unix.SetNonblock(fd, true)
			r.fds = append(r.fds, os.NewFile(uintptr(fd), "pty"))
		}
	}
}

// ErrNoFD says that a response that should have carried a descriptor came
// without one.
var ErrNoFD = errors.New("no file descriptor came with the response (SCM_RIGHTS)")

// Take returns the oldest received descriptor the caller now owns.
func (r *Reader) Take() (*os.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fds) == 0 {
		return nil, ErrNoFD
	}
	f := r.fds[0]
	r.fds = r.fds[1:]
	return f, nil
}

// Dropped counts the descriptors closed unread: over MaxQueued, or cut
// off by the kernel.
func (r *Reader) Dropped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Close closes the descriptors not taken; later ones are closed as they
// come.
func (r *Reader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, f := range r.fds {
		f.Close()
	}
	r.fds = nil
}

// Signal sends sig to the foreground process group of the PTY whose
// master is f (TIOCSIG), as a terminal's ^C would.
func Signal(f *os.File, sig syscall.Signal) error {
	return control(f, func(fd int) error { return unix.IoctlSetInt(fd, unix.TIOCSIG, int(sig)) })
}
