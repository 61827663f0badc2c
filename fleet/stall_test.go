package fleet

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// deafDialer reaches the server as the client asks, but while it is
// deaf the client gets none of the messages the server sends over the
// first connection it makes (every MSG and HMSG is dropped; the rest,
// PINGs included, comes through): a connection that is up and whose
// answers never come back. The connections after it are plain.
type deafDialer struct {
	deaf    atomic.Bool
	dials   atomic.Int32
	dropped atomic.Int32
	wg      sync.WaitGroup
}

func (d *deafDialer) Dial(network, addr string) (net.Conn, error) {
	c, err := net.Dial(network, addr)
	if err != nil || d.dials.Add(1) > 1 {
		return c, err
	}
	client, ours := net.Pipe()
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		io.Copy(c, ours)
		c.Close()
	}()
	go func() {
		defer d.wg.Done()
		defer ours.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			msg := bytes.HasPrefix(line, []byte("MSG ")) || bytes.HasPrefix(line, []byte("HMSG "))
			if !msg || !d.deaf.Load() {
				if _, err := ours.Write(line); err != nil {
					return
				}
				if msg {
					// The payload and its CRLF, as they come.
					if n := msgSize(line); n < 0 {
						return
					} else if _, err := io.CopyN(ours, r, int64(n+2)); err != nil {
						return
					}
				}
				continue
			}
			if n := msgSize(line); n < 0 {
				return
			} else if _, err := r.Discard(n + 2); err != nil {
				return
			}
			d.dropped.Add(1)
		}
	}()
	return client, nil
}

// msgSize is the payload size a MSG or HMSG line announces (its last
// field), -1 when it is not a number.
func msgSize(line []byte) int {
	f := bytes.Fields(line)
	n, err := strconv.Atoi(string(f[len(f)-1]))
	if err != nil {
		return -1
	}
	return n
}

// A node whose connection is up but brings back no answer to its
// JetStream requests (its start's first steps time out) connects anew
// after stallReconnect, says so (cluster.reconnect_forced, then
// cluster.reconnected), and starts; it heartbeats on the new connection.
func TestUnansweredConnectionReplaced(t *testing.T) {
	t.Parallel()
	d := &deafDialer{}
	d.deaf.Store(true)
	t.Cleanup(d.wg.Wait) // after the node's own cleanup: its pumps end with its connections
	a := startSolo(t, func(o *Options) { o.dial = d })
	forced := a.ev.kinds("cluster.reconnect_forced")
	if len(forced) != 1 {
		t.Fatalf("cluster.reconnect_forced: %+v", forced)
	}
	if e := forced[0].(ClusterReconnectForced); e.Node != "solo" || e.UnansweredMs < stallReconnect.Milliseconds() {
		t.Fatalf("cluster.reconnect_forced: %+v, want unanswered_ms >= %d", e, stallReconnect.Milliseconds())
	}
	if len(a.ev.kinds("cluster.reconnected")) == 0 || d.dials.Load() < 2 || d.dropped.Load() == 0 {
		t.Fatalf("after the forced reconnect: reconnected %d times, %d dials, %d messages dropped",
			len(a.ev.kinds("cluster.reconnected")), d.dials.Load(), d.dropped.Load())
	}
	if len(a.ev.kinds("cluster.started")) != 1 {
		t.Fatalf("cluster.started: %+v", a.ev.kinds("cluster.started"))
	}
	// It heartbeats on the new connection: the bucket has it alive.
	waitFor(t, "the node's heartbeat after the reconnect", func() bool { return alive(a, "solo") })
}

// A node whose connection stops bringing answers back once it runs (its
// heartbeats time out) connects anew after stallReconnect and heartbeats
// again.
func TestUnansweredHeartbeatsReplaceTheConnection(t *testing.T) {
	t.Parallel()
	d := &deafDialer{}
	t.Cleanup(d.wg.Wait)
	a := startSolo(t, func(o *Options) { o.dial = d })
	if n := len(a.ev.kinds("cluster.reconnect_forced")); n != 0 {
		t.Fatalf("%d forced reconnects before the connection went deaf", n)
	}
	d.deaf.Store(true)
	waitFor(t, "cluster.reconnect_forced", func() bool { return len(a.ev.kinds("cluster.reconnect_forced")) == 1 })
	forcedAt := a.f.forcedAt.Load()
	waitFor(t, "a heartbeat after the reconnect", func() bool { return a.f.beatOK.Load() > forcedAt })
	if e := a.ev.kinds("cluster.reconnect_forced")[0].(ClusterReconnectForced); e.UnansweredMs < stallReconnect.Milliseconds() || d.dropped.Load() == 0 {
		t.Fatalf("cluster.reconnect_forced %+v after %d messages dropped", e, d.dropped.Load())
	}
	if n := len(a.ev.kinds("cluster.reconnect_forced")); n != 1 {
		t.Fatalf("%d forced reconnects, want 1", n)
	}
}
