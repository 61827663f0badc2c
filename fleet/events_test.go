package fleet

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		ClusterStarted{Node: "n1", Incarnation: "ab", Mode: "embedded", URL: "nats://127.0.0.1:4222", Lanes: []string{"gpu"}, Replicas: 3},
		ClusterNodeJoined{Node: "n1", Incarnation: "ab", Lanes: []string{"gpu"}},
		ClusterNodeLost{Node: "n2", Incarnation: "cd", By: "n1", Reason: "heartbeat_expired", Jobs: []string{"c-ab-1"}},
		ClusterJobLost{JobID: "c-ab-2", Node: "n2", Incarnation: "cd", By: "n1"},
		ClusterNodeReturned{Node: "n2", Incarnation: "cd"},
		ClusterJobTaken{JobID: "c-ab-1", Lane: "gpu"},
		ClusterResultDropped{JobID: "c-ab-1", State: "succeeded", Recorded: "failed", Why: "already_ended: node_lost"},
		ClusterDisconnected{Node: "n1", Error: "EOF"},
		ClusterReconnected{Node: "n1", URL: "nats://127.0.0.1:4222"},
		ClusterStopped{Node: "n1", EventsDropped: 2},
	)
}
