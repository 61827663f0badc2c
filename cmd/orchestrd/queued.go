package main

// `run` says once, on stderr, why its job is still waiting in the queue.

import (
	"context"
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"

	"github.com/orchestrd/orchestrd/api"
)

// queuedAfter is how long `run` waits, its job still queued, before it
// says why.
const queuedAfter = time.Second

// queuedNotice asks the daemon about job id and, if it is still queued,
// returns one line saying so and why; "" otherwise.
func queuedNotice(c *client.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var g struct {
		Job api.JobRecord `json:"job"`
	}
	if c.Call(ctx, "job.get", map[string]any{"id": id}, &g) != nil || g.Job.State != api.StateQueued {
		return ""
	}
	var ls struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
	if c.Call(ctx, "lane.list", nil, &ls) != nil {
		return ""
	}
	where := ""
	var q struct {
		Jobs []api.JobRecord `json:"jobs"`
	}
	if c.Call(ctx, "job.list", api.Filter{State: string(api.StateQueued), Lane: g.Job.Lane}, &q) == nil {
		for i, j := range q.Jobs {
			if j.ID == id {
				where = fmt.Sprintf(" (position %d of %d)", i+1, len(q.Jobs))
			}
		}
	}
	for _, l := range ls.Lanes {
		if l.Name == g.Job.Lane {
			return fmt.Sprintf("orchestrd: job %s is queued%s: %s", id, where, whyQueued(l))
		}
	}
	return ""
}

// laneSlots are a lane's slots as run counts them: those of its serving
// runners (ready, not spares), each runner's slots, and how many of them
// hold a job.
func laneSlots(l api.LaneStatus) (busy, total int) {
	for _, r := range l.Runners {
		if r.State == "ready" && !r.Spare {
			total += l.Slots
			busy += r.ActiveJobs
		}
	}
	return busy, total
}

// whyQueued explains from its status why a lane is not taking a job.
func whyQueued(l api.LaneStatus) string {
	var serving, spares, backoff, starting int
	busy, total := laneSlots(l)
	for _, r := range l.Runners {
		switch {
		case r.State == "ready" && r.Spare:
			spares++
		case r.State == "ready":
			serving++
		case r.State == "backoff":
			backoff++
		case r.State == "starting":
			starting++
		}
	}
	switch {
	case l.Degraded:
		return fmt.Sprintf("lane %s is degraded: its runners keep failing and are restarted with backoff (%d of %d backing off, %d ready)",
			l.Name, backoff, len(l.Runners), serving)
	case serving == 0 && backoff > 0:
		return fmt.Sprintf("lane %s has no runner ready: %d backing off after failing, %d starting", l.Name, backoff, starting)
	case serving == 0 && starting > 0:
		return fmt.Sprintf("lane %s has no runner ready yet (%d starting)", l.Name, starting)
	case serving == 0:
		return fmt.Sprintf("lane %s has no runner: it waits for a bring-your-own runner to connect to runner-%s.sock", l.Name, l.Name)
	}
	why := fmt.Sprintf("lane %s is busy: %d of %s in use", l.Name, busy, api.Count(total, "slot"))
	if backoff > 0 {
		why += fmt.Sprintf(", %s backing off", api.Count(backoff, "runner"))
	}
	return why
}
