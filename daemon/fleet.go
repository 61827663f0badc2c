package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/fleet"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The fleet ([cluster]): started after the lanes have recovered their
// jobs and before any front-end takes work; handed to the lanes, which
// send it the jobs of shared lanes. Stopped in two steps around the lanes:
// it takes no more jobs, the lanes end theirs (their ends still recorded
// in the fleet), then it leaves.

// fleetLocal is this node's lanes as the fleet sees them (fleet.Local).
type fleetLocal struct{ m *lanes.Manager }

func (l fleetLocal) SharedLanes() []string     { return l.m.SharedLanes() }
func (l fleetLocal) FreeSlots(lane string) int { return l.m.FreeSlots(lane) }
func (l fleetLocal) OnSlotFreed(fn func())     { l.m.OnSlotFreed(fn) }
func (l fleetLocal) Run(id string, spec api.JobSpec, sink func(string, []byte), done func(api.JobRecord)) error {
	return l.m.RunClusterJob(id, spec, sink, done)
}
func (l fleetLocal) Stdin(id string, data []byte, eof bool, reply func(error)) {
	l.m.StdinHere(id, data, eof, reply)
}
func (l fleetLocal) Cancel(id string, force bool, reply func(bool, error)) {
	l.m.CancelHere(id, force, reply)
}

var _ lanes.Cluster = (*fleet.Fleet)(nil)

// startFleet starts the fleet when [cluster] is on (nil when off) and
// hands it to the lanes; id is this node's credentials, checked before
// anything started (fleet.Check).
func startFleet(cfg fleet.Config, id *fleet.Identity, home string, mgr *lanes.Manager, bus *eventlog.Bus, log zerolog.Logger) (*fleet.Fleet, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	// fleet.Start is bounded by [cluster] start_timeout.
	f, err := fleet.Start(context.Background(), fleet.Options{Config: cfg, Home: home, Local: fleetLocal{mgr}, Bus: bus, Logger: log, Identity: id})
	if err != nil {
		return nil, fmt.Errorf("starting the fleet ([cluster]): %w", err)
	}
	mgr.SetCluster(f)
	return f, nil
}

// sharedLanes are the names of the lanes shared with the fleet, sorted.
func sharedLanes(ls map[string]lanes.LaneConfig) []string {
	var out []string
	for _, n := range sortedKeys(ls) {
		if ls[n].Shared {
			out = append(out, n)
		}
	}
	return out
}

// closeFleet leaves the fleet (after the lanes stopped).
func closeFleet(f *fleet.Fleet, log zerolog.Logger) {
	if f == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Close(ctx) }()
	// A fleet that lost its quorum (the other nodes stopped first) answers
	// nothing: the daemon stops anyway, within its bound.
	select {
	case err := <-done:
		if err != nil {
			log.Error().Err(err).Msg("leaving the fleet")
		}
	case <-time.After(fleetLeaveBound):
		log.Error().Dur("bound", fleetLeaveBound).Msg("leaving the fleet took too long: stopping without it")
	}
}

// fleetLeaveBound bounds each step of leaving the fleet at a stop.
const fleetLeaveBound = 12 * time.Second

// stopTaking stops the fleet's pulls, within fleetLeaveBound.
func stopTaking(f *fleet.Fleet, log zerolog.Logger) {
	done := make(chan struct{})
	go func() { f.StopTaking(); close(done) }()
	select {
	case <-done:
	case <-time.After(fleetLeaveBound):
		log.Error().Dur("bound", fleetLeaveBound).Msg("the fleet's pulls did not stop in time: stopping the lanes anyway")
	}
}

// registerFleet registers the fleet's methods; with the fleet off they
// answer why.
func registerFleet(mux api.Mux, f *fleet.Fleet) {
	if f != nil {
		f.Register(mux)
		return
	}
	off := func(call api.Call) {
		call.Fail(api.Errorf(api.CodeNotFound, "%s: this daemon is not in a fleet ([cluster] enabled = false in its config)", call.Method()))
	}
	mux.Handle("cluster.nodes", off)
	mux.Handle("cluster.events", off)
}
