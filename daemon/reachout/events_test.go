package reachout

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind the reachout front-end defines is registered, sampled here,
// and logged as it promises.
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		Listening{Socket: "/run/user/1000/vibe-reachout.sock", TimeoutMs: 300000},
		Unavailable{Socket: "/run/user/1000/vibe-reachout.sock", Error: "socket in use"},
		RequestRefused{Error: "missing tool_name", RequestID: "550e8400-e29b-41d4-a716-446655440000"},
		SocketReplaced{Socket: "/tmp/vibe-reachout-1000.sock", Found: "directory", Error: "a directory is at the socket's path: not removed"},
	)
}
