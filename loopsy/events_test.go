package loopsy

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// Every kind of Loopsy's domain is registered, sampled here, and logged as
// it promises.
func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		PeerAdded{NodeID: "n-1", Address: "10.0.0.3", Port: 19532, Source: "handshake", KeyName: "laptop"},
		PeerRemoved{NodeID: "n-1", KeyName: "self"},
		PeerStatusChanged{NodeID: "n-1", Address: "10.0.0.3", Port: 19532, Status: "offline", Failures: 3},
		PeerHandshakeRefused{NodeID: "n-2", Peer: "10.0.0.4:5000", Version: "2.0.0", Reason: "version_mismatch"},
		DiscoveryStarted{Service: "_loopsy._tcp", Port: 19532},
		DiscoveryUnavailable{Error: "no multicast interface"},
	)
}
