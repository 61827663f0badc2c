package api

import "time"

// FrontEnd is one way into the daemon, as frontend.list, the ready line
// and orchestrd status show it: where it listens, or why it does not.
type FrontEnd struct {
	// Name is control, http, hook, "clanker REPO" or "lane NAME" (a lane
	// that takes bring-your-own runners).
	Name    string `json:"name"`
	Address string `json:"address,omitempty"` // a socket's path, a host:port
	// Off says why it does not serve ("" when it does): turned off by the
	// config ("[http] enabled = false") or failed at start ("127.0.0.1:19532
	// in use"; Failed then).
	Off    string `json:"off,omitempty"`
	Failed bool   `json:"failed,omitempty"`
	// ConnsOpen counts the connections open to it now (sockets and HTTP
	// streams that are actors); Conns lists at most MaxListedConns of them,
	// the oldest first, ConnsLeftOff says how many more there are.
	ConnsOpen    int        `json:"conns_open,omitempty"`
	Conns        []ConnInfo `json:"conns,omitempty"`
	ConnsLeftOff int        `json:"conns_left_off,omitempty"`
}

// FrontEndList is the answer to frontend.list.
type FrontEndList struct {
	FrontEnds []FrontEnd `json:"frontends"`
}

// MaxListedConns bounds the connections frontend.list and the actor tree
// list under one front-end; ConnsLeftOff (children_left_off in the tree)
// counts the rest.
const MaxListedConns = 32

// ConnInfo is one connection open to a front-end (a socket's, or a
// long-lived HTTP stream), as frontend.list and the actor tree show it.
type ConnInfo struct {
	// Kind is the connection actor's kind: conn (control), hook, pod,
	// stream, handshake (a lane socket's, until a runner actor holds it),
	// or runner (a bring-your-own runner's connection; ID is the runner's).
	Kind string `json:"kind"`
	ID   string `json:"id"`
	// Pid is a unix-socket peer's process (SO_PEERCRED); Address an HTTP
	// stream's remote address.
	Pid     int32  `json:"pid,omitempty"`
	Address string `json:"address,omitempty"`
	// Since is when it was accepted; AgeMs its age at the listing.
	Since time.Time `json:"since"`
	AgeMs int64     `json:"age_ms"`
	// QueuedBytes are bytes written to it and not yet taken by the peer's
	// socket (its outbound queue, a write under way).
	QueuedBytes int64 `json:"queued_bytes"`
}
