package daemonrun

import (
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// WaitReady returns only once every lane has all its runners ready. A
// lane that has not published its status yet is listed with no runners;
// taking that for "all (zero) runners ready" let tests go on with no
// runner up (seen on a loaded machine: a daemon stopped before any runner
// had connected).
func TestLanesReady(t *testing.T) {
	ready := func(id string) api.RunnerStatus {
		return api.RunnerStatus{ID: id, State: "ready", Spawned: true, Pid: 1}
	}
	starting := api.RunnerStatus{ID: "net-1", State: "starting", Spawned: true}
	for _, c := range []struct {
		name       string
		ls         []api.LaneStatus
		configured map[string]int
		want       bool
	}{
		{"no lanes yet", nil, nil, false},
		{"lane not published yet", []api.LaneStatus{{Name: "net", Runners: []api.RunnerStatus{}}},
			map[string]int{"net": 2}, false},
		{"lane.started not logged yet", []api.LaneStatus{{Name: "net", Runners: []api.RunnerStatus{ready("net-0")}}},
			map[string]int{}, false},
		{"a runner starting", []api.LaneStatus{{Name: "net", Runners: []api.RunnerStatus{ready("net-0"), starting}}},
			map[string]int{"net": 2}, false},
		{"the spare missing", []api.LaneStatus{{Name: "net", Spares: 1, Runners: []api.RunnerStatus{ready("net-0"), ready("net-1")}}},
			map[string]int{"net": 2}, false},
		{"all ready", []api.LaneStatus{{Name: "net", Spares: 1, Runners: []api.RunnerStatus{ready("net-0"), ready("net-1"), ready("net-2")}}},
			map[string]int{"net": 2}, true},
		{"a bring-your-own lane", []api.LaneStatus{{Name: "byo", Runners: []api.RunnerStatus{}}},
			map[string]int{"byo": 0}, true},
	} {
		if got := LanesReady(c.ls, c.configured); got != c.want {
			t.Errorf("%s: LanesReady = %v, want %v", c.name, got, c.want)
		}
	}
}
