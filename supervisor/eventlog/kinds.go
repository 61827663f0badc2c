package eventlog

// Every supervisor decision and lifecycle change is a typed struct, an
// Event. Each package defines its kinds beside the code that emits them
// (lanes/events.go, daemon/events.go, daemon/control/events.go) and
// registers them (registry.go). Kinds are noun.verb_past; field names are
// stable snake_case and only ever added to. Empty optional fields are
// omitted.
//
// The kinds below are eventlog's own: the socket kinds that more than one
// package emits (lanes and the control server both refuse peers and read
// bad input), and the writer's eventlog.dropped.

// Event is one typed event. Its JSON fields become the fields of the log line
// next to ts, seq and kind.
type Event interface{ Kind() string }

// Ephemeral marks events delivered to subscribers but not written to
// events.ndjson (job output would drown the log).
type Ephemeral interface {
	Event
	Ephemeral()
}

// Appender is implemented by the hot events that write their own JSON
// object (task.message, by the ten thousand a second): Emit appends it
// instead of going through encoding/json. AppendJSON must append one JSON
// object, on one line, with the fields and values json.Marshal would write
// (eventlogtest.CheckKinds compares the two).
type Appender interface {
	Event
	AppendJSON(dst []byte) []byte
}

// WireDataer is implemented by events whose data for control-socket
// subscribers differs from their log line (job.finished carries the whole
// job record there). WireData's JSON is sent as the event's data as it is.
type WireDataer interface {
	Event
	WireData() any
}

// ConnRefused: a peer was refused: a connection (Socket, the path of a
// unix socket or the address of a TCP listener), or one call on it
// (Method: one only a person may call, refused to a process the daemon
// started). Peer is a TCP peer's address.
type ConnRefused struct {
	Socket string `json:"socket"`
	Peer   string `json:"peer,omitempty"`
	Pid    int32  `json:"pid,omitempty"`
	UID    uint32 `json:"uid"`
	Method string `json:"method,omitempty"`
	Reason string `json:"reason"`
}

func (ConnRefused) Kind() string { return "conn.refused" }

// ConnProtocolError records bad input on a connection: a malformed line, an
// oversized frame or line. Fatal says whether the connection was closed.
type ConnProtocolError struct {
	ConnID string `json:"conn_id,omitempty"`
	Lane   string `json:"lane,omitempty"`
	Peer   string `json:"peer"` // control, runner
	Error  string `json:"error"`
	Fatal  bool   `json:"fatal"`
}

func (ConnProtocolError) Kind() string { return "conn.protocol_error" }

// LogDropped: the event log writer fell behind and dropped lines.
type LogDropped struct {
	Dropped uint64 `json:"dropped"`
}

func (LogDropped) Kind() string { return "eventlog.dropped" }

func init() { Register(ConnRefused{}, ConnProtocolError{}, LogDropped{}) }
