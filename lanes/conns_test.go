package lanes

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// byoLaneConfig is lane byo's: bring your own runner (none of its own),
// one slot.
func byoLaneConfig() LaneConfig {
	lc := defaultLane(0, 1, NetworkHost, 0)
	lc.Spares = 0
	return lc
}

// startByoLane starts a lanes manager serving lane byo (byoLaneConfig) in
// home, logging to logger, and waits until the lane serves (lane.started);
// it is shut down when the test ends. rejected gets the lane's
// runner.rejected events.
func startByoLane(t *testing.T, home string, logger zerolog.Logger) (m *Manager, rejected chanSink) {
	t.Helper()
	bus, err := eventlog.Open(eventlog.Options{Path: filepath.Join(home, "events.ndjson")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	rejected, started := make(chanSink, 4), make(chanSink, 4)
	t.Cleanup(bus.Subscribe([]string{"runner.rejected"}, rejected))
	t.Cleanup(bus.Subscribe([]string{"lane.started"}, started))
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	t.Cleanup(sys.Shutdown)
	m, err = Start(Options{Lanes: map[string]LaneConfig{"byo": byoLaneConfig()}, ShutdownTimeout: 2 * time.Second,
		MaxFrameBytes: wire.DefaultMaxFrame, FinishedJobs: 100, FinishedOutputBytes: 1 << 20, Sandbox: true,
		Home: home, Exe: "/bin/true", RunnerStderr: io.Discard, Bus: bus, System: sys, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := m.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("no lane.started")
	}
	return m, rejected
}

// A connection to a lane's socket still handshaking is listed under the
// lane (kind handshake, the peer's pid); once it ends (here: closed
// without a handshake, runner.rejected), it is not.
func TestLaneConnsListHandshakes(t *testing.T) {
	home := testio.ShortTemp(t, "laneconns")
	m, rejected := startByoLane(t, home, zerolog.Nop())
	if l, n := m.Conns("nope", api.MaxListedConns); len(l) != 0 || n != 0 {
		t.Fatalf("an unknown lane lists %+v (%d)", l, n)
	}
	conn, err := net.Dial("unix", filepath.Join(home, "runner-byo.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var list []api.ConnInfo
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if list, n = m.Conns("byo", api.MaxListedConns); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the handshaking connection is not listed: %+v", list)
		}
	}
	if list[0].Kind != "handshake" || int(list[0].Pid) != os.Getpid() || list[0].Since.IsZero() {
		t.Fatalf("listed %+v, want a handshake from pid %d", list[0], os.Getpid())
	}
	conn.Close()
	select {
	case <-rejected:
	case <-time.After(20 * time.Second):
		t.Fatal("no runner.rejected")
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, n := m.Conns("byo", api.MaxListedConns); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ended connection is still listed")
		}
	}
}

// unreadBytes is what waits unread in a socket's receive queue: what tells
// a runner whose heartbeat the daemon has not taken yet from one that sent
// nothing (runner.heartbeat_behind).
func TestUnreadBytes(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c.(*net.UnixConn)
	}
	if n := unreadBytes(conns[1]); n != 0 {
		t.Fatalf("nothing written: %d unread", n)
	}
	if _, err := conns[0].Write(make([]byte, 1234)); err != nil {
		t.Fatal(err)
	}
	if n := unreadBytes(conns[1]); n != 1234 {
		t.Fatalf("1234 written: %d unread", n)
	}
	if n := unreadBytes(nil); n != 0 {
		t.Fatalf("no connection: %d", n)
	}
}
