package httpapi

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind of the HTTP front-end is registered, sampled here, and
// logged as it promises.
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		Listening{Addr: "127.0.0.1:19532", TLS: true},
		Unavailable{Addr: "127.0.0.1:19532", Error: "address already in use"},
		ExecStarted{JobID: "j-1", KeyName: "self", Peer: "127.0.0.1:5000", Command: "ls", Args: []string{"-la"}, Stream: true},
		ExecCancelled{JobID: "j-1", KeyName: "laptop", Reason: "client_gone"},
		ExecDenied{KeyName: "self", Peer: "127.0.0.1:5000", Command: "rm", Reason: "denylist"},
		AuthFailed{Peer: "10.0.0.2:4000", Path: "/api/v1/status", Reason: "invalid_key"},
		RateLimited{KeyName: "laptop", Peer: "10.0.0.3:5000", Category: "exec", Path: "/api/v1/execute", RetryAfter: 2, Suppressed: 7},
		TransferDone{Direction: "push", Path: "/srv/in/a.bin", Bytes: 1 << 20, SHA256: "ab12", KeyName: "laptop", Peer: "10.0.0.3:5000"},
		ExecuteDisabled{ExecLane: "net", Lanes: []string{"gpu"}, Reason: "[http] exec_lane is \"net\", and there is no such lane"},
		TransferDenied{Direction: "pull", Path: "/home/u/.ssh/id_ed25519", Reason: "path_denied", KeyName: "laptop", Peer: "10.0.0.3:5000"},
	)
}
