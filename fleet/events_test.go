package fleet

import (
	"slices"
	"strconv"
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

func TestKinds(t *testing.T) {
	eventlogtest.CheckKinds(t,
		ClusterStarted{Node: "n1", Incarnation: "ab", Mode: "embedded", URL: "nats://127.0.0.1:4222", Lanes: []string{"gpu"}, Replicas: 3, ServerVersion: "2.15.2"},
		ClusterNodeJoined{Node: "n1", Incarnation: "ab", Lanes: []string{"gpu"}},
		ClusterNodeLost{Node: "n2", Incarnation: "cd", By: "n1", Reason: "heartbeat_expired", Jobs: []string{"c-ab-1"}},
		ClusterJobLost{JobID: "c-ab-2", Node: "n2", Incarnation: "cd", By: "n1"},
		ClusterNodeReturned{Node: "n2", Incarnation: "cd"},
		ClusterJobTaken{JobID: "c-ab-1", Lane: "gpu"},
		ClusterTakeLost{JobID: "c-ab-1", Lane: "gpu", TakenBy: "n2"},
		ClusterResultDropped{JobID: "c-ab-1", State: "succeeded", Recorded: "failed", Why: "already_ended: node_lost"},
		ClusterDisconnected{Node: "n1", Error: "EOF"},
		ClusterReconnected{Node: "n1", URL: "nats://127.0.0.1:4222"},
		ClusterStopped{Node: "n1", EventsDropped: 2},
		ClusterOutputRepublished{JobID: "c-ab-1", Pieces: 3, Lost: 1},
	)
}

// lastLines keeps the last max lines, oldest first, however many came.
func TestLastLines(t *testing.T) {
	for _, tc := range []struct{ max, add, first int }{{3, 0, 0}, {3, 2, 0}, {3, 3, 0}, {3, 7, 4}, {1, 5, 4}, {4, 8, 4}} {
		h := &lastLines{max: tc.max}
		for i := range tc.add {
			h.add(evLine{kind: strconv.Itoa(i)})
		}
		var got []string
		for _, l := range h.take() {
			got = append(got, l.kind)
		}
		var want []string
		for i := tc.first; i < tc.add; i++ {
			want = append(want, strconv.Itoa(i))
		}
		if !slices.Equal(got, want) || len(h.take()) != 0 {
			t.Errorf("max %d, %d added: %v, want %v", tc.max, tc.add, got, want)
		}
	}
}
