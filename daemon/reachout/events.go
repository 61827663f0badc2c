package reachout

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds of the reachout front-end (vibe-reachout's hook socket).
// A peer of another uid is eventlog's shared conn.refused. Kinds are
// noun.verb_past; field names are stable snake_case and only ever added
// to.

// Listening: the socket is up. TimeoutMs is how long an approval asked
// through it stays pending (the [approvals] timeout capped by the hook's
// timeout_seconds).
type Listening struct {
	Socket    string `json:"socket"`
	TimeoutMs int64  `json:"timeout_ms"`
}

func (Listening) Kind() string { return "reachout.listening" }

// Unavailable: the socket could not be made (a live vibe-reachout bot holds
// it, say); the daemon goes on without it.
type Unavailable struct {
	Socket string `json:"socket"`
	Error  string `json:"error"`
}

func (Unavailable) Kind() string { return "reachout.unavailable" }

// RequestRefused: a hook's request was malformed (or could not be asked);
// its connection was closed without an answer, which the hook takes as
// "fall back to the terminal". RequestID is the request's id when one could
// be read.
type RequestRefused struct {
	Error     string `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

func (RequestRefused) Kind() string { return "reachout.request_refused" }

// SocketReplaced: the file at the socket's path was no longer the socket
// the daemon made (Found: nothing, socket, symlink, file, directory,
// fifo, other): someone removed or replaced it, maybe to answer the
// hook's questions itself. TookBack: it was removed and the socket made
// again; else Error says why not (said once until it changes).
type SocketReplaced struct {
	Socket   string `json:"socket"`
	Found    string `json:"found"`
	TookBack bool   `json:"took_back"`
	Error    string `json:"error,omitempty"`
}

func (SocketReplaced) Kind() string { return "reachout.socket_replaced" }

func init() {
	eventlog.Register(Listening{}, Unavailable{}, RequestRefused{}, SocketReplaced{})
}
