package lanes

import (
	"context"
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Recovery is what Recover did with the jobs a dead daemon left.
type Recovery struct {
	Requeued int // only queued: queued again under their ids
	Failed   int // may have run (daemon_lost), or their lane is gone (lane_removed)
}

// Recover takes over the jobs the previous daemon left unfinished (it
// died: kill -9, a crash). Call it once, after Start and before the lanes
// take work. A job only queued (no runner ever saw it: its dispatch is
// recorded before a runner gets it) is queued again in its lane under
// its id; one dispatched or running may have run and must not run twice:
// it ends failed with api.ErrDaemonLost; a queued one whose lane is no
// longer configured ends failed with api.ErrLaneRemoved. The failures are
// recorded in one go; each job is a job.recovered event. A cluster job
// (the fleet set with SetCluster first) is never queued again here: it
// ends failed with api.ErrNodeLost, as the fleet records it.
func (m *Manager) Recover(ctx context.Context) (Recovery, error) {
	var r Recovery
	if m.sh.jobs == nil {
		return r, nil
	}
	us, err := m.sh.jobs.Unfinished()
	if err != nil {
		return r, fmt.Errorf("reading the jobs the last daemon left unfinished: %w", err)
	}
	if len(us) == 0 {
		return r, nil
	}
	now := time.Now()
	var failed []api.JobRecord
	var events []JobRecovered
	var requeue []UnfinishedJob
	for _, u := range us {
		rec := u.Record
		_, laneOK := m.lanes[rec.Lane]
		_, fleetJob := m.owned(rec.ID)
		switch {
		case fleetJob:
			// A job the fleet gave the daemon that died: the nodes that
			// remain end it node_lost in the fleet's record, which is
			// the one that counts; here it is never run again.
			events = append(events, JobRecovered{JobID: rec.ID, Lane: rec.Lane, Action: "failed",
				Was: string(rec.State), Error: api.ErrNodeLost})
			rec.State, rec.Error, rec.FinishedAt = api.StateFailed, api.ErrNodeLost, &now
			failed = append(failed, rec)
		case rec.State != api.StateQueued:
			events = append(events, JobRecovered{JobID: rec.ID, Lane: rec.Lane, Action: "failed",
				Was: string(rec.State), Error: api.ErrDaemonLost})
			rec.State, rec.Error, rec.FinishedAt = api.StateFailed, api.ErrDaemonLost, &now
			failed = append(failed, rec)
		case u.Spec.StdinStream:
			// Its stdin was to come from a client that went with the
			// daemon: it cannot run as submitted.
			events = append(events, JobRecovered{JobID: rec.ID, Lane: rec.Lane, Action: "failed",
				Was: string(rec.State), Error: api.ErrStdinLost})
			rec.State, rec.Error, rec.FinishedAt = api.StateFailed, api.ErrStdinLost, &now
			failed = append(failed, rec)
		case !laneOK:
			events = append(events, JobRecovered{JobID: rec.ID, Lane: rec.Lane, Action: "failed",
				Was: string(rec.State), Error: api.ErrLaneRemoved})
			rec.State, rec.Error, rec.FinishedAt = api.StateFailed, api.ErrLaneRemoved, &now
			failed = append(failed, rec)
		default:
			requeue = append(requeue, u)
		}
	}
	if len(failed) > 0 {
		if err := m.sh.jobs.FinishAll(ctx, failed); err != nil {
			return r, fmt.Errorf("recording the %s the last daemon left dispatched or running as failed: %w", api.Count(len(failed), "job"), err)
		}
	}
	for _, e := range events {
		m.sh.bus.Emit(e)
	}
	r.Failed = len(failed)
	for _, u := range requeue {
		h := m.lanes[u.Record.Lane]
		rec, spec := u.Record, u.Spec
		spec.Lane = rec.Lane
		if spec.KillGraceMs == nil { // recorded before kill grace was: the lane's
			g := uint64(h.cfg.KillGrace.Milliseconds())
			spec.KillGraceMs = &g
		}
		// Admitted long ago: the queue limit does not apply.
		h.pending.Add(1)
		out := newOutStream(m.sh, rec.ID, int(spec.MaxOutputBytes))
		m.sh.store.add(rec, out)
		m.sh.bus.Emit(JobRecovered{JobID: rec.ID, Lane: rec.Lane, Action: "requeued"})
		m.sys.Send(h.laneRef(), submitJob{rec: rec, spec: spec, out: out})
	}
	r.Requeued = len(requeue)
	return r, nil
}
