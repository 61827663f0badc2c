package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// chaosConfig: one lane of 2 runners x 2 slots, so that jobs queue behind
// the ones that run; runners restart at once.
const chaosConfig = `
[daemon]
shutdown_timeout = "2s"
[lanes.work]
runners = 2
slots = 2
network = "host"
[lanes.work.restart]
stable = "100ms"
`

// chaosLog is what the clients of every daemon of the test were told.
type chaosLog struct {
	mu    sync.Mutex
	acked map[string]bool          // job ids a job.submit answered
	seen  map[string]api.JobRecord // terminal records a job.wait answered
}

func (l *chaosLog) ack(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[id] = true
}

// saw records a terminal record a client was given; two different
// terminal records for one job is a failure.
func (l *chaosLog) saw(t *testing.T, rec api.JobRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.seen[rec.ID]; ok && (prev.State != rec.State || prev.Error != rec.Error) {
		t.Errorf("job %s was %s (%s), then %s (%s)", rec.ID, prev.State, prev.Error, rec.State, rec.Error)
	}
	l.seen[rec.ID] = rec
}

func (l *chaosLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *chaosLog) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.acked))
	for id := range l.acked {
		out = append(out, id)
	}
	return out
}

// The daemon is killed with SIGKILL at random moments while several clients
// submit and wait, and restarted on the same home, several times. At the
// end: every job_id ever acknowledged is found and finished; what a client
// was told of a finished job never changes; none ran twice (each job
// appends a line to a file named after its id); a job that was only queued
// when its daemon died ran after the restart; no process is left over.
func TestChaosDaemonKilled(t *testing.T) {
	underRace(t)
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	home := shortTemp(t)
	marks := shortTemp(t)
	if err := os.Chmod(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	tag := newTag()
	log := &chaosLog{acked: map[string]bool{}, seen: map[string]api.JobRecord{}}
	spec := func(r *rand.Rand) api.JobSpec {
		// Mostly short jobs, some long enough to be running at the kill.
		sleep := []string{"0", "0.05", "0.2", "1.5"}[r.IntN(4)]
		return api.JobSpec{Lane: "work", Argv: []string{"sh", "-c",
			`echo ran >> "$0/$ORCHESTRD_JOB_ID"; sleep "$1"`, marks, sleep, tag}}
	}

	const rounds = 4
	var lost, requeued int
	for round := 0; round < rounds; round++ {
		roundStart := log.count()
		d := startDaemonAt(t, home, chaosConfig)
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for c := 0; c < 4; c++ {
			cl, err := client.Dial(d.sock())
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(seed+uint64(round*16+c), 7))
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer cl.Close()
				for ctx.Err() == nil {
					var res struct {
						JobID string `json:"job_id"`
					}
					if err := cl.Call(ctx, "job.submit", spec(r), &res); err != nil {
						return // the daemon is gone: this submission was not acknowledged
					}
					log.ack(res.JobID)
					if r.IntN(3) > 0 {
						continue
					}
					// Some clients wait for their job: what they are told
					// must be what the end finds.
					var w struct{ Job api.JobRecord }
					if err := cl.Call(ctx, "job.wait", map[string]any{"id": res.JobID, "timeout_ms": 60000}, &w); err != nil {
						return
					}
					if w.Job.State.Terminal() {
						log.saw(t, w.Job)
					}
				}
			}()
		}
		// Kill once some jobs run and others wait behind them, at a random
		// moment after that (after a random number of acknowledgements).
		eventually(t, 30*time.Second, "jobs running and queued", func() bool {
			l := d.lane("work")
			return l.Running > 0 && l.Queued > 0
		})
		// Each round acknowledges at least 4 jobs, whatever the draw and
		// however slowly a loaded machine starts them (the check after the
		// rounds wants rounds*4).
		more, base := rng.IntN(12), log.count()
		want := max(base+more, roundStart+4)
		eventually(t, 30*time.Second, "more submissions acknowledged", func() bool { return log.count() >= want })
		if err := d.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-d.done
		stop()
		wg.Wait()
		d.waitRunnersGone() // the dead daemon's runners go with it
	}

	// The last daemon: every acknowledged job ends, and nothing changed.
	d := startDaemonAt(t, home, chaosConfig)
	ids := log.ids()
	if len(ids) < rounds*4 {
		t.Fatalf("only %d jobs acknowledged in %d rounds", len(ids), rounds)
	}
	for _, id := range ids {
		rec, err := d.tryWait(id)
		if err != nil {
			t.Errorf("acknowledged job %s: %v", id, err)
			continue
		}
		if !rec.State.Terminal() {
			t.Errorf("job %s is %s at the end", id, rec.State)
			continue
		}
		log.saw(t, rec)
		b, err := os.ReadFile(filepath.Join(marks, id))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		runs := strings.Count(string(b), "ran\n")
		switch {
		case runs > 1:
			t.Errorf("job %s ran %d times", id, runs)
		case rec.State == api.StateSucceeded && runs != 1:
			t.Errorf("job %s succeeded but ran %d times", id, runs)
		case rec.Error == api.ErrDaemonLost:
			lost++
		}
	}
	// Each job has one terminal event at most, over every daemon's log.
	finished := map[string]int{}
	for _, e := range d.events() {
		switch e["kind"] {
		case "job.finished":
			finished[fmt.Sprint(e["job_id"])]++
		case "job.recovered":
			if e["action"] == "requeued" {
				requeued++
			}
		}
	}
	for id, n := range finished {
		if n > 1 {
			t.Errorf("job %s finished %d times in the event log", id, n)
		}
	}
	// Every round killed running jobs and left queued ones: some were
	// failed daemon_lost and some requeued.
	if lost == 0 || requeued == 0 {
		t.Errorf("%d jobs failed daemon_lost, %d requeued over %d kills; want some of each", lost, requeued, rounds)
	}
	t.Logf("%d jobs acknowledged, %d failed daemon_lost, %d requeued", len(ids), lost, requeued)
	d.stop()
	if left := tagged(tag); len(left) > 0 {
		t.Errorf("processes of the killed daemons' jobs are left: %v", left)
	}
}
