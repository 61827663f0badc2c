package lanes

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"

	"github.com/orchestrd/orchestrd/api"
)

// Cluster is the fleet (package fleet, wired in by the daemon with
// SetCluster): jobs of shared lanes go through it, from every front-end
// that submits through the Manager (control socket, Loopsy API, loops).
// nil: one machine, and nothing here changes.
type Cluster interface {
	// Serves: lane is a shared lane some live node of the fleet serves
	// (this one included).
	Serves(lane string) bool
	// Owns: id names a cluster job (the ids a fleet gives).
	Owns(id string) bool
	// Submit records spec as a queued cluster job and commits it into its
	// lane's work queue; reply gets the id once both are committed (once,
	// on any goroutine; it must not block). The node that runs the job
	// applies its lane's defaults.
	Submit(spec api.JobSpec, reply func(id string, err error))
	// Get reads a cluster job's record, with the output it kept.
	Get(id string) (api.JobRecord, bool, error)
	// Wait calls fn once with the job's terminal record (at once if it
	// has ended) until cancel is called.
	Wait(id string, fn func(api.JobRecord)) (cancel func(), err error)
	// Cancel cancels a queued or running cluster job, wherever it is.
	Cancel(id string, force bool, reply func(wasRunning bool, err error))
	// List lists cluster jobs matching f, oldest first, without output.
	List(f api.Filter) ([]api.JobRecord, error)
	// Stdin gives a cluster job submitted with stdin_stream the next piece
	// of its stdin (eof: then its end), wherever it runs or will run;
	// reply runs once (on any goroutine) when the piece is kept for it,
	// which waits while the job has not taken the pieces before (flow
	// control).
	Stdin(id string, data []byte, eof bool, reply func(error))
	// Follow delivers the job's output from its first byte, in order, to
	// sink, which may block (the fleet reads no further meanwhile), until
	// the job ends: it returns the terminal record (without output).
	// A sink error or ctx ending stops it with that error.
	Follow(ctx context.Context, id string, sink func(stream string, data []byte) error) (api.JobRecord, error)
}

// clusterBox holds the fleet in an atomic pointer.
type clusterBox struct{ c Cluster }

// SetCluster hands the lanes the fleet (before any front-end serves):
// from then on shared lanes' jobs and cluster job ids go through it.
func (m *Manager) SetCluster(c Cluster) { m.cl.Store(&clusterBox{c: c}) }

func (m *Manager) cluster() Cluster {
	if b := m.cl.Load(); b != nil {
		return b.c
	}
	return nil
}

// owned: id names a cluster job and the fleet is on.
func (m *Manager) owned(id string) (Cluster, bool) {
	c := m.cluster()
	return c, c != nil && c.Owns(id)
}

// laneNames are the lanes an unknown lane's error lists, as `orchestrd
// lane token` lists them: "heavy, net, no-net".
func (m *Manager) laneNames(c Cluster) string {
	s := strings.Join(m.names, ", ")
	if c != nil {
		s += " (and the fleet's shared lanes)"
	}
	return s
}

// checkSpec refuses what no lane could run, naming the problem.
func checkSpec(spec *api.JobSpec) error {
	switch {
	case spec.Command == "" && len(spec.Argv) == 0:
		return api.Errorf(api.CodeInvalidParams, "job needs command or argv")
	case spec.Command != "" && len(spec.Argv) > 0:
		return api.Errorf(api.CodeInvalidParams, "job takes command or argv, not both")
	case spec.Cwd != "" && !filepath.IsAbs(spec.Cwd):
		return api.Errorf(api.CodeInvalidParams, "cwd must be an absolute path, got %q", spec.Cwd)
	case spec.WorktreeDir != "" && !filepath.IsAbs(spec.WorktreeDir):
		return api.Errorf(api.CodeInvalidParams, "worktree_dir must be an absolute path, got %q", spec.WorktreeDir)
	case spec.KillGraceMs != nil && *spec.KillGraceMs > api.MaxKillGraceMs:
		return api.Errorf(api.CodeInvalidParams, "kill_grace_ms must be at most %d (an hour), got %d", api.MaxKillGraceMs, *spec.KillGraceMs)
	}
	if e := checkEnv(spec.Env); e != nil {
		return e
	}
	return nil
}

// submitCluster submits a job of a shared lane to the fleet; a reader
// (who) follows its output from wherever it runs.
func (m *Manager) submitCluster(c Cluster, spec api.JobSpec, who string, answer func(id string, r *OutputReader, err error)) {
	if e := checkSpec(&spec); e != nil {
		answer("", nil, e)
		return
	}
	if e := m.takeStdin(&spec); e != nil {
		answer("", nil, e)
		return
	}
	c.Submit(spec, func(id string, err error) {
		if err != nil || who == "" {
			answer(id, nil, err)
			return
		}
		rd := m.followCluster(c, id, who, false)
		m.sh.bus.Emit(JobStreamOpened{JobID: id, Reader: who, From: "start"})
		answer(id, rd, nil)
	})
}

// followCluster is a reader of a cluster job's output, from its first
// byte: a stream of this node's own, fed from the fleet at the reader's
// pace (the feed waits while the reader is outputBuffer behind) and
// stopped when the reader detaches. It keeps no copy: the record's is the
// fleet's.
func (m *Manager) followCluster(c Cluster, id, who string, observer bool) *OutputReader {
	out := newOutStream(m.sh, id, 0)
	ctx, cancel := context.WithCancel(context.Background())
	out.unread = cancel
	g := &feedGate{wake: make(chan struct{}, 1)}
	out.onRunner(g.ack)
	rd := out.attach(who, observer)
	go func() {
		defer cancel()
		var written int64
		rec, err := c.Follow(ctx, id, func(stream string, data []byte) error {
			out.write(stream, bytes.Clone(data))
			written += int64(len(data))
			return g.waitFor(ctx, written-outputBuffer)
		})
		if err != nil {
			if ctx.Err() != nil {
				return // no reader left
			}
			// The fleet could not be followed to the end: the reader gets
			// what arrived and the record as the fleet has it now.
			m.sh.log.Warn().Err(err).Str("job_id", id).Msg("following a cluster job's output")
			rec, _, _ = c.Get(id)
			if rec.ID == "" {
				rec = api.JobRecord{ID: id, State: api.StateError, Error: "following the job's output in the fleet failed"}
			}
		}
		rec.Output = ""
		out.end(rec)
	}()
	return rd
}

// feedGate is how far a mirror's reader has taken its output: the feed
// waits on it.
type feedGate struct {
	mu    sync.Mutex
	acked int64
	wake  chan struct{}
}

func (g *feedGate) ack(n int64) {
	g.mu.Lock()
	g.acked = max(g.acked, n)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// waitFor returns once the reader has taken at least to (or ctx ends).
func (g *feedGate) waitFor(ctx context.Context, to int64) error {
	for {
		g.mu.Lock()
		ok := g.acked >= to
		g.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-g.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// The fleet's view of this node's lanes (fleet.Local, adapted by the
// daemon).

// SharedLanes lists this node's lanes with shared = true.
func (m *Manager) SharedLanes() []string {
	var out []string
	for _, n := range m.names {
		if m.lanes[n].cfg.Shared {
			out = append(out, n)
		}
	}
	return out
}

// FreeSlots is how many more jobs lane can start now: the slots of its
// ready runners less its running and queued jobs.
func (m *Manager) FreeSlots(lane string) int {
	h, ok := m.lanes[lane]
	if !ok || m.stopping.Load() || h.memHeld.Load() {
		return 0
	}
	return int(max(0, h.capacity.Load()-h.running.Load()-h.pending.Load()))
}

// OnSlotFreed sets fn, called (never blocking) whenever a shared lane may
// have room for another job.
func (m *Manager) OnSlotFreed(fn func()) { m.sh.room.Store(&fn) }

// RunClusterJob runs the cluster job id, which the fleet gave this node,
// on its lane here, recorded in this node's store too. sink gets its
// output in order (blocking holds the job back); done gets its terminal
// record once, after the last sink. An error: refused, and neither runs.
func (m *Manager) RunClusterJob(id string, spec api.JobSpec, sink func(stream string, data []byte), done func(api.JobRecord)) error {
	if _, ok := m.lanes[spec.Lane]; !ok {
		return api.Errorf(api.CodeNotFound, "lane %q is not served here", spec.Lane)
	}
	type res struct {
		rd  *OutputReader
		err error
	}
	ch := make(chan res, 1)
	m.submitAs(id, spec, "fleet", func(_ string, rd *OutputReader, err error) { ch <- res{rd, err} })
	r := <-ch
	if r.err != nil {
		return r.err
	}
	go func() {
		var lost int64
		// Its end, or the reader closed: the record is what it is.
		_ = r.rd.ReadToEnd(context.Background(), func(p OutputPiece) error {
			if p.Gap > 0 {
				lost += p.Gap
				return nil
			}
			sink(p.Stream, p.Data)
			return nil
		})
		r.rd.Close("ended")
		rec := r.rd.Record()
		if lost > 0 {
			// The fleet's readers did not get every byte: its
			// record says the output may be incomplete (run and
			// logs say so and exit non-zero).
			rec.OutputCut = true
			m.sh.log.Warn().Str("job_id", id).Int64("bytes", lost).Msg("a cluster job's output has a gap: its record says output_cut")
		}
		done(rec)
	}()
	return nil
}

// CancelHere cancels job id if it is live in this daemon (the fleet's
// cancel, sent to the node that runs it).
func (m *Manager) CancelHere(id string, force bool, reply func(wasRunning bool, err error)) {
	rec, ok := m.sh.store.get(id)
	if !ok {
		reply(false, api.Errorf(api.CodeNotFound, "job %s does not run on this node", id))
		return
	}
	m.cancelLive(rec, force, reply)
}

// readCluster attaches a reader to a cluster job's output: followed from
// the fleet, or (not following) what its record keeps now.
func (m *Manager) readCluster(c Cluster, id, who string, follow, observer bool) (*OutputReader, error) {
	rec, found, err := c.Get(id)
	switch {
	case err != nil:
		return nil, api.Errorf(api.CodeInternal, "reading cluster job %s: %v", id, err)
	case !found:
		return nil, api.Errorf(api.CodeNotFound, "job %s not found", id)
	}
	if follow && !rec.State.Terminal() {
		rd := m.followCluster(c, id, who, observer)
		m.sh.bus.Emit(JobStreamOpened{JobID: id, Reader: who, From: "fleet"})
		return rd, nil
	}
	rd := finishedStream(m.sh, rec).attach(who, observer)
	m.sh.bus.Emit(JobStreamOpened{JobID: id, Reader: who, From: "record"})
	return rd, nil
}
