package proc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"
)

// formatTCPLine writes s as the kernel writes a line of /proc/net/tcp{,6}.
func formatTCPLine(s TCPSocket) string {
	addr := func(ap netip.AddrPort) string {
		var b strings.Builder
		if ap.Addr().Is4() {
			a := ap.Addr().As4()
			fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(a[:]))
		} else {
			a := ap.Addr().As16()
			for w := range 4 {
				fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(a[w*4:]))
			}
		}
		fmt.Fprintf(&b, ":%04X", ap.Port())
		return b.String()
	}
	return fmt.Sprintf("   3: %s %s %02X 00000000:00000000 00:00000000 00000000 %5d        0 %d 1 0000000000000000 20 4 30 10 -1",
		addr(s.Local), addr(s.Remote), s.State, s.UID, s.Inode)
}

func TestParseTCPLine(t *testing.T) {
	for _, c := range []struct {
		line string
		want TCPSocket
	}{
		// 127.0.0.1:8080 to 127.0.0.1:40000 on a little-endian machine, as
		// the kernel prints it: the same below for ::1 and ::ffff:127.0.0.1.
		{"   0: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 20 4 30 10 -1",
			TCPSocket{Local: netip.MustParseAddrPort("127.0.0.1:8080"), Remote: netip.MustParseAddrPort("127.0.0.1:40000"), State: 1, UID: 1000, Inode: 12345}},
		{"   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 0",
			TCPSocket{Local: netip.MustParseAddrPort("[::1]:8080"), Remote: netip.MustParseAddrPort("[::]:0"), State: 10, Inode: 77}},
		{"  12: 0000000000000000FFFF00000100007F:9C40 0000000000000000FFFF00000100007F:1F90 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000",
			TCPSocket{Local: netip.MustParseAddrPort("[::ffff:127.0.0.1]:40000"), Remote: netip.MustParseAddrPort("[::ffff:127.0.0.1]:8080"), State: 6}},
	} {
		if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
			t.Skip("the lines are a little-endian machine's")
		}
		got, err := ParseTCPLine([]byte(c.line))
		if err != nil || got != c.want {
			t.Errorf("ParseTCPLine(%q) = %+v, %v; want %+v", c.line, got, err, c.want)
		}
	}
	for _, c := range []struct{ line, why string }{
		{"", "fields"},
		{"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode", "slot"},
		{"   0 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 1", "slot"},
		{"   x: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 1", "slot"},
		{"   0: 0100007F 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 1", "no port"},
		{"   0: 0100007F:1F9 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 1", "port"},
		{"   0: 0100007:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 1", "neither 8 nor 32"},
		{"   0: 0100007G:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 1", "not hexadecimal"},
		{"   0: 0100007F:1F90 00000000000000000000000001000000:9C40 01 00000000:00000000 00:00000000 00000000 0 0 1", "families"},
		{"   0: 0100007F:1F90 0100007F:9C40 1 00000000:00000000 00:00000000 00000000 0 0 1", "state"},
		{"   0: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 -1 0 1", "uid"},
		{"   0: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 x", "inode"},
		{"   0: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 1 " + strings.Repeat("0", 600), "longer"},
	} {
		if _, err := ParseTCPLine([]byte(c.line)); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("ParseTCPLine(%q) = %v, want an error saying %q", c.line, err, c.why)
		}
	}
}

// Whatever a line holds, ParseTCPLine returns a socket or an error; a
// socket it returns is the one the kernel's own line for it says.
func FuzzParseTCPLine(f *testing.F) {
	f.Add([]byte("   0: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 20 4 30 10 -1"))
	f.Add([]byte("   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1"))
	f.Add([]byte("  12: 0000000000000000FFFF00000100007F:9C40 0000000000000000FFFF00000100007F:1F90 06 0:0 03:00001770 0 0 0 0 3"))
	f.Add([]byte("   0: 0100007F:1F90 0100007F:9C40 01 a b c -0 0 +1"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, line []byte) {
		s, err := ParseTCPLine(line)
		if err != nil {
			return
		}
		again, err := ParseTCPLine([]byte(formatTCPLine(s)))
		if err != nil || again != s {
			t.Fatalf("%q parsed as %+v; its kernel line %q parses as %+v, %v", line, s, formatTCPLine(s), again, err)
		}
	})
}

// A loopback connection this test process holds both ends of: FindTCPPeer
// finds the client's socket, held by this process, which is not refused
// (it is the "daemon" itself); the server's own end is not taken for it.
func TestFindTCPPeerLoopback(t *testing.T) {
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", network)
		if err != nil {
			t.Logf("%s: %v (skipped)", network, err)
			continue
		}
		defer ln.Close()
		cl, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		sv, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer sv.Close()
		server, client := sv.LocalAddr().(*net.TCPAddr).AddrPort(), sv.RemoteAddr().(*net.TCPAddr).AddrPort()
		p, err := FindTCPPeer(server, client)
		if err != nil || !p.Seen || p.Socket.Inode == 0 || !slices.Contains(p.Pids, os.Getpid()) || p.Socket.UID != uint32(os.Getuid()) {
			t.Fatalf("%s: FindTCPPeer(%s, %s) = %+v, %v; want this process (%d) holding the client's socket", network, server, client, p, err, os.Getpid())
		}
		if !sameAddrPort(p.Socket.Local, client) || !sameAddrPort(p.Socket.Remote, server) {
			t.Fatalf("%s: found %+v, not the client's end (%s to %s)", network, p.Socket, client, server)
		}
		if pid, uid, err := TCPStartedRefusal(server, client); err != nil || pid != int32(os.Getpid()) || uid != uint32(os.Getuid()) {
			t.Fatalf("%s: TCPStartedRefusal = %d, %v; want this process, not refused", network, pid, err)
		}
	}
}

// A child of this process holding a loopback connection is refused, named
// by its pid; once it closed its end, the peer is refused too (its
// process cannot be told any more), and so it is once its socket is torn
// down by a reset. A peer on an address that is not this machine's is not
// refused: nothing here can say which process it is.
func TestTCPStartedRefusal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, ln.Addr().String())
	cmd.Env = append(os.Environ(), "PROC_TEST_HELPER=dial")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := testio.StartPiped(t, cmd)
	sv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sv.Close()
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "dialled\n" {
		t.Fatalf("the helper said %q, %v", l, err)
	}
	server, client := sv.LocalAddr().(*net.TCPAddr).AddrPort(), sv.RemoteAddr().(*net.TCPAddr).AddrPort()
	pid, _, err := TCPStartedRefusal(server, client)
	if err == nil || pid != int32(cmd.Process.Pid) || !strings.Contains(err.Error(), fmt.Sprintf("peer pid %d is a process this daemon started", pid)) {
		t.Fatalf("TCPStartedRefusal of a child's connection = %d, %v; want it refused as pid %d", pid, err, cmd.Process.Pid)
	}
	stdin.Close() // the helper closes its end and exits
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	if pid, _, err := TCPStartedRefusal(server, client); err == nil || pid != 0 {
		t.Fatalf("TCPStartedRefusal once the child closed its end = %d, %v; want refused", pid, err)
	}

	// A reset: the client's socket is gone at once.
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sv2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sv2.Close()
	cl.(*net.TCPConn).SetLinger(0)
	cl.Close()
	server, client = sv2.LocalAddr().(*net.TCPAddr).AddrPort(), sv2.RemoteAddr().(*net.TCPAddr).AddrPort()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok, err := FindTCPSocket(client, server); err != nil {
			t.Fatal(err)
		} else if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reset client's socket is still listed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, err := TCPStartedRefusal(server, client); err == nil || !strings.Contains(err.Error(), "closed its connection") {
		t.Fatalf("TCPStartedRefusal of a reset loopback peer = %v; want refused", err)
	}
	if pid, _, err := TCPStartedRefusal(server, netip.MustParseAddrPort("192.0.2.7:40000")); err != nil || pid != 0 {
		t.Fatalf("TCPStartedRefusal of a peer elsewhere = %d, %v; want not refused", pid, err)
	}
}

// StartedRefusal refuses a child, never this process or an unknown pid.
func TestStartedRefusal(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if err := StartedRefusal(int32(cmd.Process.Pid)); err == nil {
		t.Fatal("a child is not refused")
	}
	for _, pid := range []int32{0, int32(os.Getpid()), int32(os.Getppid())} {
		if err := StartedRefusal(pid); err != nil {
			t.Fatalf("StartedRefusal(%d) = %v", pid, err)
		}
	}
}
