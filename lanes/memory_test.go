package lanes

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// A runner's memory_bytes is its own word. A bring-your-own runner that
// reports 0 while its process (here this test process, tens of MiB) is
// over the lane's max_runner_memory_bytes is still caught, by the
// daemon's own measurement of the pid the kernel gives for its socket.
func TestMemoryLimitDoesNotTrustTheRunner(t *testing.T) {
	lc := defaultLane(0, 1, NetworkHost, 0)
	lc.MaxRunnerMemoryBytes = 1 << 20
	lc.HeartbeatTimeout = api.Duration{Duration: 30 * time.Second}
	m, bus := startTestLane(t, lc)
	killed := make(chanSink, 4)
	defer bus.Subscribe([]string{"runner.killed"}, killed)()

	c, err := net.Dial("unix", m.lanes["bench"].socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := wire.WriteFrame(c, wire.TypeHandshake, wire.Handshake{Lane: "bench", Pid: uint32(os.Getpid()), Token: m.lanes["bench"].token,
		Version: "liar"}); err != nil {
		t.Fatal(err)
	}
	fr := wire.NewFrameReader(bufio.NewReader(c), 0)
	if f, err := fr.Next(); err != nil || f.Type != wire.TypeHandshakeAck {
		t.Fatalf("handshake: %v %v", f.Type, err)
	}
	if err := wire.WriteFrame(c, wire.TypeHeartbeat, wire.Heartbeat{MemoryBytes: 0}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-killed:
		e := r.Event.(RunnerKilled)
		if e.Reason != "memory_limit" || e.Pid != os.Getpid() || !strings.Contains(e.Detail, "measured") ||
			!strings.Contains(e.Detail, "it reports 0") {
			t.Fatalf("runner.killed = %+v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a runner over the limit that reports 0 bytes was not killed")
	}
	// The daemon closed the connection: what is left to read ends in EOF.
	for {
		_, err := fr.Next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the connection of the killed runner is still open")
		}
		if err != nil {
			break
		}
	}
}
