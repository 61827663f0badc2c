package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrInUse is what ListenUnix's error wraps when another process answers
// on the path.
var ErrInUse = errors.New("another process is already listening")

// InUseError is ListenUnix's error when another process answers on the
// path (errors.Is(err, ErrInUse)): who listens there, as the kernel told
// it on a connection to it (SO_PEERCRED), else the socket file's owner.
type InUseError struct {
	Path string
	UID  uint32 // the listening process's uid (else the file's owner)
	Pid  int32  // 0: not known (its pid namespace is not ours, or its credentials could not be read)
}

func (e *InUseError) Error() string { return ErrInUse.Error() + " on " + e.Path + " (" + e.Who() + ")" }

// Is makes errors.Is(err, ErrInUse) hold.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// Who is the listening process in a few words: "uid 1000, pid 4242", or
// "uid 1000" when its pid is not known.
func (e *InUseError) Who() string {
	if e.Pid > 0 {
		return fmt.Sprintf("uid %d, pid %d", e.UID, e.Pid)
	}
	return fmt.Sprintf("uid %d", e.UID)
}

// inUse is the InUseError of path, whose file is fi, answered on c.
func inUse(path string, fi os.FileInfo, c net.Conn) *InUseError {
	e := &InUseError{Path: path}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID = st.Uid
	}
	if uc, ok := c.(*net.UnixConn); ok {
		if p, err := PeerOf(uc); err == nil {
			e.UID, e.Pid = p.UID, p.Pid
		}
	}
	return e
}

// ListenUnix listens on a unix stream socket at path, the one policy of
// every socket the daemon serves:
//   - the socket file is mode 0600 from the moment it exists: the socket
//     is made 0600 before it is bound (the kernel creates the file with the
//     socket's mode less the umask), so there is no window in which another
//     user could connect, and the process's umask is never touched (other
//     goroutines may be creating files or forking meanwhile);
//   - a stale socket file (nothing answers on it) is replaced;
//   - a socket another process answers on is not taken (an InUseError,
//     naming its uid and pid);
//   - anything else at path (a file, a directory) is refused, never removed;
//   - the file is removed when the listener is closed.
//
// The directory is the caller's: ListenUnix neither makes nor checks it.
func ListenUnix(path string) (*net.UnixListener, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != os.ModeSocket:
		return nil, fmt.Errorf("%s exists and is not a socket", path)
	case err == nil:
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			defer c.Close()
			return nil, inUse(path, fi, c)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("checking %s: %w", path, err)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = unix.Fchmod(int(fd), 0o600) }); cerr != nil {
			return cerr
		}
		if err != nil {
			return fmt.Errorf("making the socket 0600 before binding it: %w", err)
		}
		return nil
	}}
	ln, err := lc.Listen(context.Background(), "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(true)
	return ul, nil
}

// Peer is the process at the other end of a unix connection, as the kernel
// recorded it when that process connected (SO_PEERCRED).
type Peer struct {
	Pid int32 // 0 when it lives in a pid namespace this process cannot see
	UID uint32
	GID uint32
}

// PeerOf reads the credentials of c's peer.
func PeerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if cerr != nil {
		return Peer{}, cerr
	}
	return Peer{Pid: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}

// CheckSameUID is the policy of every socket the daemon serves: a peer is
// served only when it runs as the daemon's own uid. It returns what was
// read of the peer and, when the peer is refused, an error saying why
// ("peer uid 1000 is not the daemon's uid 0", or that its credentials
// could not be read); the caller refuses it with that reason.
func CheckSameUID(c *net.UnixConn) (Peer, error) {
	p, err := PeerOf(c)
	if err != nil {
		return Peer{}, fmt.Errorf("cannot read peer credentials: %w", err)
	}
	if own := os.Getuid(); p.UID != uint32(own) {
		return p, fmt.Errorf("peer uid %d is not the daemon's uid %d", p.UID, own)
	}
	return p, nil
}

// Descends reports whether the process pid is ancestor or one of its
// descendants, by the parent links in /proc (as this process's pid
// namespace numbers them). A process that is gone, or a chain longer than
// 64, is not.
func Descends(pid, ancestor int) bool {
	for range 64 {
		if pid == ancestor {
			return true
		}
		if pid <= 1 {
			return false
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			return false
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			return false
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			return false
		}
		pid = ppid
	}
	return false
}
