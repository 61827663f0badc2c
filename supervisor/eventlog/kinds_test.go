package eventlog_test

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// eventlog's own kinds: the shared socket kinds and eventlog.dropped.
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		eventlog.ConnRefused{Socket: "127.0.0.1:7878", Peer: "127.0.0.1:40000", Pid: 99, UID: 1000, Method: "plan.approve", Reason: "started"},
		eventlog.ConnProtocolError{ConnID: "c1", Lane: "review", Peer: "control", Error: "bad json", Fatal: true},
		eventlog.LogDropped{Dropped: 3},
	)
}
