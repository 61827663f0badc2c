package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// nats-server's log reaches the daemon's at warn and above; a route's
// connect errors (each of its connections tries every second) are said
// once, then at most every minute per route, the next line saying how
// many were not; the first of a new outage (after seconds without an
// error of the route) is said at once.
func TestNATSLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := newNATSLogger(zerolog.New(&buf).Level(zerolog.InfoLevel))
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	l.routes.now = func() time.Time { return now }
	dial := func(port int) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
			Err: errors.New("connect: connection refused")}
	}
	const format = "Error trying to connect to route (attempt %v): %v"

	l.Noticef("Server is ready")
	l.Debugf("Trying to connect to route on %s", "127.0.0.1:6223")
	l.Warnf("JetStream cluster stream %q has NO quorum, stalled", "X")
	for i := range 240 { // four connections a second for a minute less a second
		now = now.Add(time.Second / 4)
		l.Errorf(format, i+1, dial(6223))
		if i%4 == 0 {
			l.Errorf(format, i+1, dial(6224)) // another route: its own count
		}
	}
	now = now.Add(2 * time.Second)
	l.Errorf(format, 241, dial(6223))
	l.Errorf("a %s error", "rare") // others are said each time
	l.Errorf("a %s error", "rare")
	// The route came back; lost again 3 s later, then errors a second
	// apart: the first is said at once, the next three not.
	now = now.Add(3 * time.Second)
	l.Errorf(format, 1, dial(6224))
	for i := range 3 {
		now = now.Add(time.Second)
		l.Errorf(format, i+2, dial(6224))
	}

	var lines []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		lines = append(lines, m)
	}
	want := []struct{ level, route, msg string }{
		{"warn", "", `JetStream cluster stream "X" has NO quorum, stalled`},
		{"error", "127.0.0.1:6223", "Error trying to connect to route (attempt 1): dial tcp 127.0.0.1:6223: connect: connection refused"},
		{"error", "127.0.0.1:6224", "Error trying to connect to route (attempt 1): dial tcp 127.0.0.1:6224: connect: connection refused"},
		{"error", "127.0.0.1:6223", "Error trying to connect to route (attempt 241): dial tcp 127.0.0.1:6223: connect: connection refused (239 more like it for this route in the last 1m2s not logged; said at most every 1m0s)"},
		{"error", "", "a rare error"},
		{"error", "", "a rare error"},
		{"error", "127.0.0.1:6224", "Error trying to connect to route (attempt 1): dial tcp 127.0.0.1:6224: connect: connection refused (59 more like it for this route in the last 1m5s not logged; said at most every 1m0s)"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		got := lines[i]
		if got["level"] != w.level || got["message"] != w.msg || (w.route != "" && got["route"] != w.route) || got["component"] != "nats" {
			t.Errorf("line %d: %v, want %+v", i+1, got, w)
		}
	}
	if lines[3]["suppressed"] != float64(239) {
		t.Errorf("suppressed: %v", lines[3]["suppressed"])
	}
}
