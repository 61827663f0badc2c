package proc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/orchestrd/orchestrd/internal/testio"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// socketDir is a directory for sockets any user may reach.
func socketDir(t *testing.T) string {
	t.Helper()
	dir := testio.ShortTemp(t, "proc-sock")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serves checks that ln answers a connection to path.
func serves(t *testing.T, ln *net.UnixListener, path string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatalf("dialing %s: %v", path, err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("accepting on %s: %v", path, err)
	}
}

// A socket file nobody answers on (a daemon that died) is replaced; the
// new one is removed when the listener closes.
func TestListenUnixReplacesAStaleSocket(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(socketDir(t), "s.sock")
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	old.Close()
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	serves(t, ln, path)
	ln.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after Close: %v", err)
	}
}

// A socket another process answers on is not taken: the error says so,
// naming who listens (SO_PEERCRED), and the one listening keeps its socket.
func TestListenUnixRefusesALiveSocket(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(socketDir(t), "s.sock")
	live, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	_, err = ListenUnix(path)
	want := fmt.Sprintf("another process is already listening on %s (uid %d, pid %d)", path, os.Getuid(), os.Getpid())
	var iu *InUseError
	if !errors.Is(err, ErrInUse) || !errors.As(err, &iu) || err.Error() != want {
		t.Fatalf("over a live socket: %v, want %s", err, want)
	}
	serves(t, live, path)
}

// Anything at the path that is not a socket is refused and left alone.
func TestListenUnixRefusesWhatIsNotASocket(t *testing.T) {
	dir := socketDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, sub} {
		if _, err := ListenUnix(p); err == nil || err.Error() != p+" exists and is not a socket" {
			t.Fatalf("ListenUnix(%s) = %v", p, err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Fatalf("the file was touched: %q %v", b, err)
	}
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Fatalf("the directory was touched: %v", err)
	}
	long := filepath.Join(dir, strings.Repeat("x", 120))
	if _, err := ListenUnix(long); err == nil || !strings.Contains(err.Error(), "listening on "+long) {
		t.Fatalf("ListenUnix(a path too long) = %v", err)
	}
}

// The socket is 0600 whatever the umask, and from the moment it exists: it
// is created so, not chmod-ed after (the kernel reports a chmod of the file
// to inotify as IN_ATTRIB); the umask is left as it was.
func TestListenUnixIsPrivateFromTheStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := socketDir(t)
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, dir, unix.IN_CREATE|unix.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	for i, mask := range []int{0, 0o022} {
		unix.Umask(mask)
		name := "s" + string(rune('0'+i)) + ".sock"
		path := filepath.Join(dir, name)
		ln, err := ListenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		// The events of what ListenUnix did are queued by now.
		var created, changed bool
		buf := make([]byte, 4096)
		n, _ := unix.Read(in, buf)
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			evName := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			if evName == name {
				created = created || ev.Mask&unix.IN_CREATE != 0
				changed = changed || ev.Mask&unix.IN_ATTRIB != 0
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		if !created || changed {
			ln.Close()
			t.Fatalf("umask %03o: inotify saw created %v, attributes changed after %v; want created with its mode", mask, created, changed)
		}
		fi, err := os.Lstat(path)
		ln.Close()
		if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Fatalf("umask %03o: socket mode %v (%v), want 0600", mask, fi.Mode(), err)
		}
		if got := unix.Umask(mask); got != mask {
			t.Fatalf("ListenUnix changed the umask from %03o to %03o", mask, got)
		}
	}
}

// acceptOne accepts one connection on ln while dial connects.
func acceptOne(t *testing.T, ln *net.UnixListener, dial func() (net.Conn, error)) (*net.UnixConn, net.Conn) {
	t.Helper()
	type accepted struct {
		c   *net.UnixConn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.AcceptUnix()
		ch <- accepted{c, err}
	}()
	client, err := dial()
	if err != nil {
		ln.Close()
		<-ch
		t.Fatalf("dial: %v", err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatalf("accept: %v", a.err)
	}
	return a.c, client
}

// The peer's pid and uid are what the kernel recorded; our own uid passes
// the same-uid check.
func TestPeerOfReadsTheCredentials(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(socketDir(t), "s.sock")
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, client := acceptOne(t, ln, func() (net.Conn, error) { return net.Dial("unix", path) })
	defer srv.Close()
	defer client.Close()
	p, err := PeerOf(srv)
	if err != nil || p.Pid != int32(os.Getpid()) || p.UID != uint32(os.Getuid()) || p.GID != uint32(os.Getgid()) {
		t.Fatalf("PeerOf = %+v, %v; want pid %d uid %d gid %d", p, err, os.Getpid(), os.Getuid(), os.Getgid())
	}
	if q, err := CheckSameUID(srv); err != nil || q != p {
		t.Fatalf("CheckSameUID = %+v, %v", q, err)
	}
}

// A peer running as another uid is refused, with its uid and pid read.
func TestCheckSameUIDRefusesAnotherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to connect as another uid")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const uid = 65534
	path := filepath.Join(socketDir(t), "s.sock")
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// 0600 alone keeps other users out; open it so the uid check is what
	// refuses.
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	srv, client := acceptOne(t, ln, func() (net.Conn, error) {
		type dialed struct {
			c   net.Conn
			err error
		}
		ch := make(chan dialed, 1)
		go func() {
			// Credentials are per thread: this one connects as uid, and is
			// never unlocked, so it ends with the goroutine.
			runtime.LockOSThread()
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uid, uid, ^uintptr(0)); e != 0 {
				ch <- dialed{nil, e}
				return
			}
			c, err := net.Dial("unix", path)
			ch <- dialed{c, err}
		}()
		d := <-ch
		return d.c, d.err
	})
	defer srv.Close()
	defer client.Close()
	p, err := CheckSameUID(srv)
	if err == nil || err.Error() != "peer uid 65534 is not the daemon's uid 0" {
		t.Fatalf("CheckSameUID = %+v, %v", p, err)
	}
	if p.UID != uid || p.Pid != int32(os.Getpid()) {
		t.Fatalf("refused peer read as %+v", p)
	}
}
