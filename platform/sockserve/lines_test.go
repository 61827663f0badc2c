package sockserve

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle timer (a message to an actor
		// stopped, such as a stream's end after its actor); it ends by
		// itself a second later.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testio.Eventually(t, 10*time.Second, what, cond)
}

// fakeRaw feeds Lines from memory: each read takes the next chunk size,
// and every other read, when chunks says so, finds the socket empty
// (EAGAIN), as a real socket between two writes of its peer.
type fakeRaw struct {
	data   []byte
	chunks []byte
	k      int
	empty  bool
}

func (f *fakeRaw) Read(fn func(uintptr) bool) error {
	for !fn(0) {
	}
	return nil
}

func (f *fakeRaw) sysRead(_ int, p []byte) (int, error) {
	if len(f.chunks) > 0 {
		c := f.chunks[f.k%len(f.chunks)]
		f.k++
		if c%7 == 0 && !f.empty {
			f.empty = true
			return 0, unix.EAGAIN
		}
		f.empty = false
		p = p[:min(len(p), int(c)+1)]
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// collect reads every line and the final error of a reader.
func collect(next func() ([]byte, error)) (lines []string, err error) {
	for {
		l, err := next()
		if err != nil {
			return lines, err
		}
		lines = append(lines, string(l))
	}
}

// Lines frames exactly as wire.LineReader (the framing every decoder was
// fuzzed with), whatever the sizes of the reads, with the socket found
// empty between them or not.
func FuzzLinesMatchLineReader(f *testing.F) {
	f.Add([]byte("{\"id\":1}\n{\"id\":2}\r\n\n  \nlast"), []byte{3, 7, 200}, uint16(16))
	f.Add(bytes.Repeat([]byte("x"), 9000), []byte{255}, uint16(0))
	f.Add(append(bytes.Repeat([]byte("y"), 5000), '\n', 'z', '\n'), []byte{14, 255}, uint16(6000))
	f.Add([]byte("abc\r"), []byte(nil), uint16(3))
	f.Fuzz(func(t *testing.T, data, chunks []byte, max16 uint16) {
		max := int(max16)
		want, werr := collect(wire.NewLineReader(bytes.NewReader(data), max).Next)
		fr := &fakeRaw{data: data, chunks: chunks}
		l := NewLines(fr, max, "")
		l.sysRead = fr.sysRead
		got, gerr := collect(l.Next)
		if len(got) != len(want) {
			t.Fatalf("%d lines, want %d (%v / %v)", len(got), len(want), gerr, werr)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("line %d = %q, want %q", i, got[i], want[i])
			}
		}
		if errors.Is(werr, io.EOF) != errors.Is(gerr, io.EOF) || errors.Is(werr, ErrLineTooLong) != errors.Is(gerr, ErrLineTooLong) {
			t.Fatalf("error %v, want %v", gerr, werr)
		}
		if werr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("error %q, want %q", gerr, werr)
		}
		if l.bufp != nil {
			t.Fatal("the read buffer is held after the end")
		}
	})
}

func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	dir := t.TempDir()
	ln, err := Listen(filepath.Join(dir, "s.sock"), ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	sv, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	return sv, cl.(*net.UnixConn)
}

// On a real socket: an idle connection holds no read buffer, a read
// deadline interrupts a line that is continued afterwards, and the peer's
// close ends it.
func TestLinesOnSocket(t *testing.T) {
	sv, cl := socketPair(t)
	defer sv.Close()
	defer cl.Close()
	rc, err := sv.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	l := NewLines(rc, 64, "test line")
	defer l.Close()
	cl.Write([]byte("one\ntw"))
	if line, err := l.Next(); err != nil || string(line) != "one" {
		t.Fatalf("Next = %q, %v", line, err)
	}
	sv.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := l.Next(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Next past the deadline: %v", err)
	}
	sv.SetReadDeadline(time.Time{})
	cl.Write([]byte("o\n"))
	if line, err := l.Next(); err != nil || string(line) != "two" {
		t.Fatalf("Next = %q, %v", line, err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Next(); done <- err }()
	// Waiting for a line with nothing read: no buffer held.
	waitUntil(t, "the reader waits", func() bool { return len(done) == 0 })
	cl.Write(bytes.Repeat([]byte("z"), 70))
	cl.Write([]byte("\n"))
	if err := <-done; !errors.Is(err, ErrLineTooLong) || err.Error() != "test line longer than 64 bytes: line too long" {
		t.Fatalf("a long line: %v", err)
	}
	_ = bufio.ErrBufferFull
}
