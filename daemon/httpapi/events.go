package httpapi

import "github.com/orchestrd/orchestrd/supervisor/eventlog"

// The event kinds of the HTTP front-end (Loopsy's API; those of its peers
// and discovery are the loopsy domain's). Field names are stable
// snake_case; a key is never in an event, only its name.

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

// ExecuteDisabled: /execute is off: exec_lane, left to its default,
// names none of the daemon's lanes (Reason says which key turns it on).
type ExecuteDisabled struct {
	ExecLane string   `json:"exec_lane"`
	Lanes    []string `json:"lanes"`
	Reason   string   `json:"reason"`
}

func (ExecuteDisabled) Kind() string { return "http.execute_disabled" }

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

// RateLimited: a key went past its category's rate; the request was
// refused (429, code 9002). Repeats within a second are counted in
// Suppressed of the next one, so a flood does not flood the log.
type RateLimited struct {
	KeyName    string `json:"key_name"`
	Peer       string `json:"peer"`
	Category   string `json:"category"`
	Path       string `json:"path"`
	RetryAfter int    `json:"retry_after_s"`
	Suppressed int    `json:"suppressed,omitempty"`
}

func (RateLimited) Kind() string { return "http.rate_limited" }

// TransferDone: a file was pushed to this node or pulled from it.
type TransferDone struct {
	Direction string `json:"direction"` // push, pull
	Path      string `json:"path"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256,omitempty"`
	KeyName   string `json:"key_name"`
	Peer      string `json:"peer"`
}

func (TransferDone) Kind() string { return "http.transfer_done" }

// TransferDenied: a path outside allowed_paths or under denied_paths, a
// file past max_file_size, or a checksum that did not match; nothing was
// written.
type TransferDenied struct {
	Direction string `json:"direction"`
	Path      string `json:"path"`
	Reason    string `json:"reason"` // path_denied, too_large, checksum_mismatch
	KeyName   string `json:"key_name"`
	Peer      string `json:"peer"`
}

func (TransferDenied) Kind() string { return "http.transfer_denied" }

func init() {
	eventlog.Register(Listening{}, Unavailable{}, ExecStarted{}, ExecCancelled{}, ExecDenied{}, AuthFailed{},
		RateLimited{}, TransferDone{}, TransferDenied{}, ExecuteDisabled{})
}
