package ptyfd

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// A PTY sent with a line is taken by the reader of that line, and is a
// PTY master on this side too; lines without descriptors take nothing.
func TestPassPTY(t *testing.T) {
	tx, rx := pair(t)
	master, cmd, err := Start("/bin/sh", t.TempDir(), []string{"PATH=/usr/bin:/bin"}, 100, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := tx.Write([]byte("plain line\n")); err != nil {
		t.Fatal(err)
	}
	if err := SendFD(tx, []byte(`{"result":{"pty_pid":1}}`+"\n"), master); err != nil {
		t.Fatal(err)
	}
	master.Close()
	r := NewReader(rx)
	defer r.Close()
	br := bufio.NewReader(r)
	for _, want := range []string{"plain line\n", `{"result":{"pty_pid":1}}` + "\n"} {
		got, err := br.ReadString('\n')
		if err != nil || got != want {
			t.Fatalf("line %q, %v; want %q", got, err, want)
		}
	}
	f, err := r.Take()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := IsMaster(f); err != nil {
		t.Fatal(err)
	}
	if err := SetSize(f, 132, 43); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("stty size; exit\n")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), "43 132") {
		n, err := f.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			t.Fatalf("reading the PTY: %v; got %q", err, out.String())
		}
	}
	if _, err := r.Take(); !errors.Is(err, ErrNoFD) {
		t.Fatalf("a second Take: %v, want ErrNoFD", err)
	}
}

// A descriptor that is not a PTY master is told apart; more descriptors
// than MaxQueued are closed and counted, not kept.
func TestNotPTYAndOverflow(t *testing.T) {
	tx, rx := pair(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	for range MaxQueued + 2 {
		if err := SendFD(tx, []byte("x\n"), pr); err != nil {
			t.Fatal(err)
		}
	}
	tx.Close()
	r := NewReader(rx)
	br := bufio.NewReader(r)
	for range MaxQueued + 2 {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if r.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2", r.Dropped())
	}
	f, err := r.Take()
	if err != nil {
		t.Fatal(err)
	}
	if err := IsMaster(f); err == nil {
		t.Fatal("a pipe passed for a PTY master")
	}
	f.Close()
	r.Close()
	if _, err := r.Take(); !errors.Is(err, ErrNoFD) {
		t.Fatalf("Take after Close: %v", err)
	}
}

// A peer that goes away with bytes unread resets the connection: Read
// says so with an error and a count of 0 (recvmsg's -1 once crashed the
// bufio reader above it).
func TestReadAfterReset(t *testing.T) {
	tx, rx := pair(t)
	if _, err := rx.Write([]byte("never read\n")); err != nil {
		t.Fatal(err)
	}
	tx.Close() // with that line unread: rx's next read is ECONNRESET
	r := NewReader(rx)
	defer r.Close()
	n, err := r.Read(make([]byte, 64))
	if n != 0 || err == nil {
		t.Fatalf("Read after a reset: %d, %v; want 0 and an error", n, err)
	}
	if _, err := bufio.NewReader(r).ReadString('\n'); err == nil {
		t.Fatal("bufio read after a reset: no error")
	}
}
