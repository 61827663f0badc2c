package fleet

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// pullGate is how a test's node reaches its NATS server when the test
// must starve the client: once armed, the server's answer to the next
// pull request for a consumer of stream is held from the client until
// the client has given the request up (unsubscribed its inbox), and the
// client's UNSUB is held from the server until the server has sent the
// messages. The server has then delivered them (its consumer counts
// them as sent) and the client never takes them in: what a client too
// slow to read its connection within the pull's wait meets.
type pullGate struct {
	stream string

	mu   sync.Mutex
	cond *sync.Cond
	// armed: the next pull request for a consumer of stream is held.
	armed bool
	// inbox is the held pull's inbox, sid the client's subscription to
	// it, once seen; holdAt is how much of the server's bytes the
	// client may read while the pull is held.
	inbox, sid string
	holdAt     int
	conn       *gateConn
	// delivered: the server sent the held pull messages; lost: the
	// client gave them up and was then let read them.
	delivered, lost bool
}

func (g *pullGate) Dial(network, addr string) (net.Conn, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	gc := &gateConn{Conn: c, g: g}
	g.conn = gc
	go gc.pump()
	return gc, nil
}

// arm holds the next pull for a consumer of the gate's stream.
func (g *pullGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.inbox, g.sid, g.delivered, g.lost = true, "", "", false, false
}

// wasLost says whether the armed pull's messages were delivered and
// given up.
func (g *pullGate) wasLost() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lost
}

// gateConn is one connection through the gate: pump reads what the
// server sends into buf; Read hands it to the client up to what the
// gate lets through.
type gateConn struct {
	net.Conn
	g     *pullGate
	buf   []byte            // from the server, not yet read by the client
	err   error             // the server side's read error, after buf
	carry []byte            // the client's last partial protocol line
	subs  map[string]string // the client's subscriptions: inbox to sid
}

func (c *gateConn) pump() {
	b := make([]byte, 32<<10)
	for {
		n, err := c.Conn.Read(b)
		g := c.g
		g.mu.Lock()
		c.buf = append(c.buf, b[:n]...)
		if err != nil {
			c.err = err
		}
		if g.conn == c && g.sid != "" && !g.delivered && sentTo(c.buf[g.holdAt:], g.sid) {
			g.delivered = true
		}
		g.cond.Broadcast()
		g.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// sentTo says whether b holds a message of a stream delivered to the
// subscription sid (its reply an ack subject: not a status; its subject
// the message's own, not the inbox).
func sentTo(b []byte, sid string) bool {
	for _, l := range bytes.Split(b, []byte("\r\n")) {
		f := strings.Fields(string(l))
		if len(f) >= 4 && (f[0] == "MSG" || f[0] == "HMSG") && f[2] == sid && strings.HasPrefix(f[3], "$JS.ACK.") {
			return true
		}
	}
	return false
}

func (c *gateConn) Read(p []byte) (int, error) {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		lim := len(c.buf)
		if g.conn == c && g.inbox != "" && !g.lost {
			lim = g.holdAt
		}
		if lim > 0 {
			n := copy(p, c.buf[:lim])
			c.buf = c.buf[n:]
			if g.conn == c && g.inbox != "" && !g.lost {
				g.holdAt -= n
			}
			return n, nil
		}
		if c.err != nil {
			return 0, c.err
		}
		g.cond.Wait()
	}
}

// Write looks at the client's protocol lines: the armed pull's SUB and
// PUB start the hold; its UNSUB waits for the server's delivery, then
// goes out and ends the hold.
// sendWait bounds how long a held UNSUB waits for the server's messages.
const sendWait = 10 * time.Second

func (c *gateConn) Write(p []byte) (int, error) {
	g := c.g
	lines := bytes.Split(append(c.carry, p...), []byte("\r\n"))
	c.carry = nil
	if last := lines[len(lines)-1]; len(last) < 1024 {
		c.carry = append([]byte(nil), last...)
	}
	release := false
	g.mu.Lock()
	if c.subs == nil {
		c.subs = map[string]string{}
	}
	for _, l := range lines[:len(lines)-1] {
		f := strings.Fields(string(l))
		switch {
		case len(f) == 3 && f[0] == "SUB":
			c.subs[f[1]] = f[2]
		case len(f) == 4 && f[0] == "PUB" && g.armed && strings.HasPrefix(f[1], "$JS.API.CONSUMER.MSG.NEXT."+g.stream+"."):
			g.armed, g.inbox, g.sid, g.conn, g.holdAt = false, f[2], c.subs[f[2]], c, len(c.buf)
		case len(f) >= 2 && f[0] == "UNSUB" && g.conn == c && g.sid != "" && f[1] == g.sid && !g.lost:
			// Bounded: a server that has not sent the messages by then
			// expired the pull first (it came to it late, on a starved
			// machine): lost stays false and the test tries again.
			deadline := time.Now().Add(sendWait)
			t := time.AfterFunc(sendWait, func() {
				g.mu.Lock()
				g.cond.Broadcast()
				g.mu.Unlock()
			})
			for !g.delivered && c.err == nil && time.Now().Before(deadline) {
				g.cond.Wait()
			}
			t.Stop()
			release = g.delivered
			if !release {
				g.inbox = ""
			}
		}
	}
	g.mu.Unlock()
	n, err := c.Conn.Write(p)
	if release {
		g.mu.Lock()
		g.lost = true
		g.cond.Broadcast()
		g.mu.Unlock()
	}
	if err != nil {
		return n, fmt.Errorf("writing through the pull gate: %w", err)
	}
	return n, nil
}

// Deadlines on reads would reach pump's reads, not the client's: only
// writes keep theirs.
func (c *gateConn) SetDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(t) }

func (c *gateConn) SetReadDeadline(time.Time) error { return nil }
