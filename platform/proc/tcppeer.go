package proc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
)

// The process behind a TCP connection: the kernel records no peer
// credentials for TCP as it does for a unix socket (SO_PEERCRED), so a
// connection this process accepted is matched to the process at its other
// end through /proc, as ss -p does: the client's end is the socket in
// /proc/net/tcp or tcp6 whose local address is the connection's remote one
// and whose remote address is its local one; that line gives the socket's
// inode, and the processes holding it are those with a /proc/PID/fd link
// to socket:[INODE]. Only a connection of this process's network
// namespace is in its tables (loopback traffic never leaves one); only the
// processes this process may look into are searched (its own uid's, or
// all as root).

// TCPSocket is one line of /proc/net/tcp or /proc/net/tcp6: one socket of
// this network namespace.
type TCPSocket struct {
	Local, Remote netip.AddrPort // IPv4 as 4-byte addresses, IPv6 (v4-mapped ones too) as 16-byte
	State         uint8          // the kernel's TCP state (1 established, 10 listen, ...)
	UID           uint32         // the owner of the socket
	Inode         uint64         // 0: no process holds it (closed, in TIME_WAIT)
}

// maxTCPLine bounds a line of /proc/net/tcp{,6} (about 150 bytes).
const maxTCPLine = 512

// ParseTCPLine parses one socket's line of /proc/net/tcp or tcp6 (not the
// header line): "sl: local remote st tx:rx tr:when retrnsmt uid timeout
// inode ...". Addresses are hexadecimal as the kernel prints them (each
// 32-bit word of the address in host byte order), ports hexadecimal.
func ParseTCPLine(line []byte) (TCPSocket, error) {
	var s TCPSocket
	if len(line) > maxTCPLine {
		return s, fmt.Errorf("line of %d bytes: longer than %d", len(line), maxTCPLine)
	}
	f := bytes.Fields(line)
	if len(f) < 10 {
		return s, fmt.Errorf("%d fields, want at least 10", len(f))
	}
	if len(f[0]) < 2 || f[0][len(f[0])-1] != ':' {
		return s, fmt.Errorf("slot %q does not end in ':'", f[0])
	}
	if _, err := strconv.ParseUint(string(f[0][:len(f[0])-1]), 10, 32); err != nil {
		return s, fmt.Errorf("slot %q is not a number", f[0])
	}
	var err error
	if s.Local, err = parseTCPAddr(f[1]); err != nil {
		return s, fmt.Errorf("local address: %w", err)
	}
	if s.Remote, err = parseTCPAddr(f[2]); err != nil {
		return s, fmt.Errorf("remote address: %w", err)
	}
	if s.Local.Addr().Is4() != s.Remote.Addr().Is4() {
		return s, errors.New("local and remote addresses of different families")
	}
	st, err := strconv.ParseUint(string(f[3]), 16, 8)
	if err != nil || len(f[3]) != 2 {
		return s, fmt.Errorf("state %q is not two hexadecimal digits", f[3])
	}
	s.State = uint8(st)
	uid, err := strconv.ParseUint(string(f[7]), 10, 32)
	if err != nil {
		return s, fmt.Errorf("uid %q is not a number", f[7])
	}
	s.UID = uint32(uid)
	if s.Inode, err = strconv.ParseUint(string(f[9]), 10, 64); err != nil {
		return s, fmt.Errorf("inode %q is not a number", f[9])
	}
	return s, nil
}

// parseTCPAddr parses "0100007F:1F90" (IPv4) or 32 hexadecimal digits
// and a port (IPv6).
func parseTCPAddr(b []byte) (netip.AddrPort, error) {
	i := bytes.IndexByte(b, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("%q has no port", b)
	}
	h, p := b[:i], b[i+1:]
	if len(p) != 4 {
		return netip.AddrPort{}, fmt.Errorf("port %q is not four hexadecimal digits", p)
	}
	port, err := strconv.ParseUint(string(p), 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q is not four hexadecimal digits", p)
	}
	if len(h) != 8 && len(h) != 32 {
		return netip.AddrPort{}, fmt.Errorf("address %q is neither 8 nor 32 hexadecimal digits", h)
	}
	var ip [16]byte
	for w := 0; w < len(h)/8; w++ {
		v, err := strconv.ParseUint(string(h[w*8:w*8+8]), 16, 32)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("address %q is not hexadecimal", h)
		}
		binary.NativeEndian.PutUint32(ip[w*4:], uint32(v))
	}
	var a netip.Addr
	if len(h) == 8 {
		a = netip.AddrFrom4([4]byte(ip[:4]))
	} else {
		a = netip.AddrFrom16(ip)
	}
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// sameAddrPort compares two addresses, a v4-mapped IPv6 one equal to its
// IPv4 one.
func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// findTCPSocket reads r (a /proc/net/tcp{,6}) for the socket whose local
// end is local and remote end remote; one that a process holds (an inode)
// is preferred to one none does.
func findTCPSocket(r io.Reader, local, remote netip.AddrPort) (TCPSocket, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxTCPLine+1)
	var found TCPSocket
	seen, first := false, true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		s, err := ParseTCPLine(sc.Bytes())
		if err != nil {
			return TCPSocket{}, false, err
		}
		if sameAddrPort(s.Local, local) && sameAddrPort(s.Remote, remote) && (!seen || found.Inode == 0) {
			found, seen = s, true
		}
	}
	if err := sc.Err(); err != nil {
		return TCPSocket{}, false, err
	}
	return found, seen, nil
}

// FindTCPSocket finds, in this network namespace's /proc/net/tcp and
// tcp6, the socket whose local end is local and remote end remote. false:
// there is none (in another network namespace, on another machine, or
// gone).
func FindTCPSocket(local, remote netip.AddrPort) (TCPSocket, bool, error) {
	var best TCPSocket
	seen := false
	for _, name := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(name)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return TCPSocket{}, false, err
		}
		s, ok, err := findTCPSocket(f, local, remote)
		f.Close()
		if err != nil {
			return TCPSocket{}, false, fmt.Errorf("reading %s: %w", name, err)
		}
		if ok && (!seen || best.Inode == 0) {
			best, seen = s, true
		}
	}
	return best, seen, nil
}

// maxHolders bounds the processes SocketHolders returns.
const maxHolders = 64

// SocketHolders are the processes (at most 64) holding the socket whose
// inode is inode, among those whose descriptors this process may read
// (its own uid's, or all as root): each /proc/PID/fd link is compared
// with socket:[INODE]. A process that ends meanwhile is skipped.
func SocketHolders(inode uint64) ([]int, error) {
	if inode == 0 {
		return nil, nil
	}
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var pids []int
	for {
		names, err := d.Readdirnames(256)
		for _, n := range names {
			pid, perr := strconv.Atoi(n)
			if perr != nil || pid <= 0 {
				continue
			}
			if holds(pid, want) {
				pids = append(pids, pid)
				if len(pids) == maxHolders {
					return pids, nil
				}
			}
		}
		if err == io.EOF {
			return pids, nil
		}
		if err != nil {
			return pids, fmt.Errorf("listing /proc: %w", err)
		}
	}
}

// holds says the process pid has a descriptor whose link is want.
func holds(pid int, want string) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	fds, err := os.Open(dir)
	if err != nil {
		return false // gone, or not ours to read
	}
	defer fds.Close()
	for {
		names, err := fds.Readdirnames(256)
		for _, n := range names {
			if l, lerr := os.Readlink(dir + n); lerr == nil && l == want {
				return true
			}
		}
		if err != nil {
			return false
		}
	}
}

// TCPPeer is what FindTCPPeer learnt of the process at the other end of a
// TCP connection.
type TCPPeer struct {
	// Seen: the client's socket is in this network namespace's tables.
	Seen   bool
	Socket TCPSocket
	// Pids are the processes holding it that this process may look into.
	Pids []int
}

// FindTCPPeer finds the process at the other end of a TCP connection this
// process accepted: server is the connection's local address, client its
// remote one.
func FindTCPPeer(server, client netip.AddrPort) (TCPPeer, error) {
	s, ok, err := FindTCPSocket(client, server)
	if err != nil || !ok {
		return TCPPeer{}, err
	}
	p := TCPPeer{Seen: true, Socket: s}
	p.Pids, err = SocketHolders(s.Inode)
	return p, err
}

// StartedRefusal is the one rule by which every door of the daemon refuses
// the processes it started to answer for a person: nil when the process
// pid may, else why not. pid is as this process's pid namespace numbers it
// (SO_PEERCRED's, or a pid FindTCPPeer found); 0 (unknown: a process in a
// pid namespace this one cannot see) may, and so may this process itself.
func StartedRefusal(pid int32) error {
	if self := os.Getpid(); pid > 0 && int(pid) != self && Descends(int(pid), self) {
		return fmt.Errorf("peer pid %d is a process this daemon started (a job, an executor or their child)", pid)
	}
	return nil
}

// TCPStartedRefusal is StartedRefusal for the peer of a TCP connection
// this process accepted (server its local address, client its remote
// one), matched to its process by FindTCPPeer. It returns the pid matched
// (0: none) and, when the peer is refused, why:
//   - a process holding the client's socket that this process started;
//   - a client whose socket is in this network namespace but held by no
//     process it may look into, when that socket is of its own uid (or it
//     is root): its process closed it after sending, and a request sent
//     and dropped cannot be told from one an agent sent;
//   - a client whose socket is gone when its address is loopback or one
//     of this machine's, for the same reason (a reset tears the socket
//     down at once);
//   - /proc that cannot be read.
//
// A peer that cannot be matched otherwise may, as a unix peer without a
// pid may: a client on another machine or in another network namespace
// (the jobs of a no-net lane have their own, with no way to this one's
// loopback), or a socket of another uid when this process is not root (it
// cannot be one this process started: they run as its uid, without
// privileges to change it).
func TCPStartedRefusal(server, client netip.AddrPort) (pid int32, uid uint32, err error) {
	p, err := FindTCPPeer(server, client)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot tell which process peer %s is: %w", client, err)
	}
	if !p.Seen {
		if localAddr(client.Addr()) {
			return 0, 0, fmt.Errorf("peer %s closed its connection before its process could be told", client)
		}
		return 0, 0, nil
	}
	uid = p.Socket.UID
	for _, pid := range p.Pids {
		if err := StartedRefusal(int32(pid)); err != nil {
			return int32(pid), uid, err
		}
	}
	if len(p.Pids) > 0 {
		return int32(p.Pids[0]), uid, nil
	}
	if own := os.Getuid(); own != 0 && uid != uint32(own) {
		return 0, uid, nil
	}
	return 0, uid, fmt.Errorf("peer %s: no process holds its socket any more (closed after sending), so its process cannot be told", client)
}

// localAddr says a is loopback or an address of one of this network
// namespace's interfaces.
func localAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: as if it were
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
				return true
			}
		}
	}
	return false
}
