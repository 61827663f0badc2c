package eventlog_test

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// eventlog's own kinds: the shared socket kinds and eventlog.dropped.
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		eventlog.ConnRefused{Socket: "/h/control.sock", Pid: 98, UID: 1001, Reason: "uid"},
		eventlog.ConnProtocolError{ConnID: "c1", Lane: "review", Peer: "control", Error: "bad json", Fatal: true},
		eventlog.LogDropped{Dropped: 3},
	)
}
