package control

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind the control server defines is registered, sampled here, and
// logged as it promises.
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		ConnOpened{ConnID: "c1", Socket: "/h/control.sock", Pid: 99, UID: 1000},
		ConnClosed{ConnID: "c1", Reason: "eof", Requests: 12},
		SubscriberOverflowed{ConnID: "c1", Policy: "drop_oldest", Dropped: 10},
	)
}
