package httpapi

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds of the HTTP front-end (Loopsy's API). Field names are
// stable snake_case; a key is never in an event, only its name.

// Listening: the API is up at Addr.
type Listening struct {
	Addr string `json:"addr"`
	TLS  bool   `json:"tls"`
}

func (Listening) Kind() string { return "http.listening" }

// Unavailable: the API could not listen (the port is taken, a bad
// certificate); the daemon goes on without it.
type Unavailable struct {
	Addr  string `json:"addr"`
	Error string `json:"error"`
}

func (Unavailable) Kind() string { return "http.unavailable" }

// ExecStarted: a peer asked for a command; it runs as job JobID.
type ExecStarted struct {
	JobID   string   `json:"job_id"`
	KeyName string   `json:"key_name"`
	Peer    string   `json:"peer"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	Stream  bool     `json:"stream"`
}

func (ExecStarted) Kind() string { return "http.exec_started" }

// ExecCancelled: a peer cancelled an execution (DELETE /execute/:jobId),
// or its streaming client went away (Reason client_gone).
type ExecCancelled struct {
	JobID   string `json:"job_id"`
	KeyName string `json:"key_name,omitempty"`
	Reason  string `json:"reason"`
}

func (ExecCancelled) Kind() string { return "http.exec_cancelled" }

// ExecDenied: a command on the denylist, or past max_concurrent; nothing
// ran.
type ExecDenied struct {
	KeyName string `json:"key_name"`
	Peer    string `json:"peer"`
	Command string `json:"command"`
	Reason  string `json:"reason"` // denylist, max_concurrent
}

func (ExecDenied) Kind() string { return "http.exec_denied" }

// AuthFailed: a request without a key, or with a wrong one.
type AuthFailed struct {
	Peer   string `json:"peer"`
	Path   string `json:"path"`
	Reason string `json:"reason"` // missing_key, invalid_key
}

func (AuthFailed) Kind() string { return "http.auth_failed" }

func init() {
	eventlog.Register(Listening{}, Unavailable{}, ExecStarted{}, ExecCancelled{}, ExecDenied{}, AuthFailed{})
}
