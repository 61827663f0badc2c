package main

import (
	"testing"

	"github.com/orchestrd/orchestrd/lanes"
)

// startDaemon returns only once every lane has all its runners ready. A
// lane that has not published its status yet is listed with no runners;
// taking that for "all (zero) runners ready" let tests go on with no
// runner up (seen on a loaded machine: a daemon stopped before any runner
// had connected).
func TestLanesReady(t *testing.T) {
	ready := func(id string) lanes.RunnerStatus {
		return lanes.RunnerStatus{ID: id, State: "ready", Spawned: true, Pid: 1}
	}
	starting := lanes.RunnerStatus{ID: "net-1", State: "starting", Spawned: true}
	for _, c := range []struct {
		name       string
		ls         []lanes.LaneStatus
		configured map[string]int
		want       bool
	}{
		{"no lanes yet", nil, nil, false},
		{"lane not published yet", []lanes.LaneStatus{{Name: "net", Runners: []lanes.RunnerStatus{}}},
			map[string]int{"net": 2}, false},
		{"lane.started not logged yet", []lanes.LaneStatus{{Name: "net", Runners: []lanes.RunnerStatus{ready("net-0")}}},
			map[string]int{}, false},
		{"a runner starting", []lanes.LaneStatus{{Name: "net", Runners: []lanes.RunnerStatus{ready("net-0"), starting}}},
			map[string]int{"net": 2}, false},
		{"the spare missing", []lanes.LaneStatus{{Name: "net", Spares: 1, Runners: []lanes.RunnerStatus{ready("net-0"), ready("net-1")}}},
			map[string]int{"net": 2}, false},
		{"all ready", []lanes.LaneStatus{{Name: "net", Spares: 1, Runners: []lanes.RunnerStatus{ready("net-0"), ready("net-1"), ready("net-2")}}},
			map[string]int{"net": 2}, true},
		{"a bring-your-own lane", []lanes.LaneStatus{{Name: "byo", Runners: []lanes.RunnerStatus{}}},
			map[string]int{"byo": 0}, true},
	} {
		if got := lanesReady(c.ls, c.configured); got != c.want {
			t.Errorf("%s: lanesReady = %v, want %v", c.name, got, c.want)
		}
	}
}
