package control

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds the control server emits about its connections and
// subscribers. A refused peer (conn.refused) and bad input
// (conn.protocol_error) are eventlog's shared socket kinds: lanes emits
// them too. Kinds are noun.verb_past; field names are stable snake_case and
// only ever added to. They are registered with the event log below.

type ConnOpened struct {
	ConnID string `json:"conn_id"`
	Socket string `json:"socket"`
	Pid    int32  `json:"pid"`
	UID    uint32 `json:"uid"`
}

func (ConnOpened) Kind() string { return "conn.opened" }

type ConnClosed struct {
	ConnID   string `json:"conn_id"`
	Reason   string `json:"reason"`
	Requests uint64 `json:"requests"`
}

func (ConnClosed) Kind() string { return "conn.closed" }

// SubscriberOverflowed: a subscriber fell behind; Policy says what was done.
type SubscriberOverflowed struct {
	ConnID  string `json:"conn_id"`
	Policy  string `json:"policy"` // drop_oldest, disconnect
	Dropped uint64 `json:"dropped"`
}

func (SubscriberOverflowed) Kind() string { return "subscriber.overflowed" }

func init() {
	eventlog.Register(ConnOpened{}, ConnClosed{}, SubscriberOverflowed{})
}
