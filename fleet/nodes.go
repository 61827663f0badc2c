package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/nodefigs"
)

// Nodes: each node puts its heartbeat (nodeInfo) under its name in the
// nodes bucket every Heartbeat/5. Every node watches the bucket and
// remembers, per node, the revision it last saw and when (its own
// monotonic clock): no clocks are compared across machines. A node whose
// revision has not changed for Heartbeat is declared lost by a CAS on
// that revision: of the nodes that try, one wins, and only it fails the
// lost node's jobs and emits cluster.node_lost.

// nodeInfo is this node's heartbeat in state.
func (f *Fleet) nodeInfo(state string) nodeInfo {
	free := make(map[string]int, len(f.lanes))
	for _, l := range f.lanes {
		free[l] = f.local.FreeSlots(l)
	}
	n := nodeInfo{Name: f.name, Incarnation: f.inc, Lanes: f.lanes, Free: free, StartedAt: f.startedAt,
		HeartbeatAt: time.Now().UTC(), State: state}
	if state == nodeAlive {
		if g, err := nodefigs.Read(f.ctx, f.home); err == nil {
			n.Figures = &g
		} else {
			f.log.Debug().Err(err).Msg("reading this node's figures for its heartbeat")
		}
	}
	return n
}

// join puts this node's first heartbeat. If the bucket still has this
// node's previous incarnation alive (it was killed and came back before
// anyone declared it lost), this node takes over its key by a CAS and
// declares that incarnation lost itself.
func (f *Fleet) join(ctx context.Context) error {
	w := f.startWait("putting this node's first heartbeat")
	for {
		b, err := f.sealNode(f.nodeInfo(nodeAlive))
		if err != nil {
			return fmt.Errorf("encoding this node's heartbeat: %w", err)
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		e, err := f.readKey(octx, nodesBucket, f.name)
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if rev, err = f.nodes.Create(octx, f.name, b); err != nil {
				err = fmt.Errorf("creating its record: %w", err)
			}
		case err != nil:
			err = fmt.Errorf("reading its record: %w", err)
		default:
			old, derr := f.readNode(f.name, e.value)
			if rev, err = f.nodes.Update(octx, f.name, b, e.rev); err != nil {
				err = fmt.Errorf("updating its record: %w", err)
			}
			if err == nil && derr == nil && old.State == nodeAlive && old.Incarnation != f.inc {
				cancel()
				f.setHBRev(rev)
				jobs := f.failJobs(ctx, f.name, old.Incarnation)
				f.emit(ClusterNodeLost{Node: f.name, Incarnation: old.Incarnation, By: f.name, Reason: "restarted", Jobs: jobs})
				return nil
			}
		}
		cancel()
		if err == nil {
			f.setHBRev(rev)
			return nil
		}
		if !isWrongSeq(err) {
			w.failed(err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("putting this node's first heartbeat: %w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (f *Fleet) setHBRev(rev uint64) {
	f.mu.Lock()
	f.hbRev = rev
	f.mu.Unlock()
	f.beatOK.Store(time.Now().UnixNano())
}

// heartbeats puts this node's heartbeat every Heartbeat/5 by a CAS on its
// last revision: losing it means another node declared this one lost
// (it was stopped or cut off): it is alive again (cluster.node_returned).
func (f *Fleet) heartbeats() {
	defer f.wg.Done()
	t := time.NewTicker(f.cfg.Heartbeat.Duration / 5)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		if f.hbPaused.Load() {
			continue
		}
		f.beat()
	}
}

func (f *Fleet) beat() {
	b, err := f.sealNode(f.nodeInfo(nodeAlive))
	if err != nil {
		f.log.Error().Err(err).Msg("encoding this node's heartbeat")
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.cfg.Heartbeat.Duration)
	defer cancel()
	f.mu.Lock()
	rev := f.hbRev
	f.mu.Unlock()
	nrev, err := f.nodes.Update(ctx, f.name, b, rev)
	if isWrongSeq(err) {
		e, gerr := f.readKey(ctx, nodesBucket, f.name)
		if gerr != nil {
			f.log.Debug().Err(gerr).Msg("reading this node's heartbeat")
			return
		}
		old, derr := f.readNode(f.name, e.value)
		if re, ok := isRefused(derr); ok {
			f.refused(re)
		}
		switch {
		case derr != nil:
			f.log.Warn().Err(derr).Msg("this node's heartbeat key holds something else: replacing it")
		case old.Incarnation != f.inc:
			f.log.Error().Str("other_incarnation", old.Incarnation).Msg("another process heartbeats under this node's name: give each node its own [cluster] name")
		case old.State == nodeLost:
			f.emit(ClusterNodeReturned{Node: f.name, Incarnation: f.inc})
		}
		nrev, err = f.nodes.Update(ctx, f.name, b, e.rev)
	}
	if err != nil {
		f.log.Debug().Err(err).Msg("putting this node's heartbeat")
		return
	}
	f.setHBRev(nrev)
}

// watchNodes keeps the peers map from the nodes bucket and declares the
// silent ones lost.
func (f *Fleet) watchNodes() {
	defer f.wg.Done()
	t := time.NewTicker(f.cfg.Heartbeat.Duration / 5)
	defer t.Stop()
	var w jetstream.KeyWatcher
	heard := time.Now() // the watch's last update
	defer func() {
		if w != nil {
			_ = w.Stop()
		}
	}()
	for {
		if w == nil {
			var err error
			w, err = f.nodes.WatchAll(f.ctx)
			if err != nil {
				f.log.Debug().Err(err).Msg("watching the fleet's nodes")
				w = nil
			}
		}
		var updates <-chan jetstream.KeyValueEntry
		if w != nil {
			updates = w.Updates()
		}
		select {
		case <-f.ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				w = nil
				continue
			}
			heard = time.Now()
			if e != nil {
				f.sawNode(e)
			}
		case <-t.C:
			// This node's own heartbeat comes through the watch every
			// Heartbeat/5: a watch silent for Heartbeat/2 is broken (its
			// consumer lived on a server that died), not the fleet. A new
			// one, and everyone's silence counted afresh.
			if w != nil && time.Since(heard) > f.cfg.Heartbeat.Duration/2 {
				f.log.Debug().Msg("the watch of the fleet's nodes went quiet: watching again")
				_ = w.Stop()
				w, heard = nil, time.Now()
				f.resetSeen()
				continue
			}
			f.checkLost()
		}
	}
}

func (f *Fleet) sawNode(e jetstream.KeyValueEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(f.peers, e.Key())
		return
	}
	n, err := f.readNode(e.Key(), e.Value())
	if re, ok := isRefused(err); ok {
		// Not this node's heartbeat: ignored, the node as last seen
		// (its silence still counts; a declaration goes over it).
		if p := f.peers[e.Key()]; p != nil {
			p.rev = e.Revision()
		}
		f.refused(re)
		return
	}
	if err != nil {
		f.log.Debug().Err(err).Msg("ignoring a node's heartbeat")
		delete(f.peers, e.Key())
		return
	}
	// An incarnation replaced, a node lost or stopped: their unfinished
	// jobs are swept (sweepLost).
	suspect := func(s stray) {
		if _, ok := f.suspects[s]; !ok {
			f.suspects[s] = time.Now()
		}
	}
	if old := f.peers[e.Key()]; old != nil && old.info.Incarnation != n.Incarnation {
		suspect(stray{e.Key(), old.info.Incarnation})
	}
	if n.State == nodeLost || n.State == nodeStopped {
		suspect(stray{e.Key(), n.Incarnation})
	}
	f.peers[e.Key()] = &peer{info: n, rev: e.Revision(), seen: time.Now()}
}

// resetSeen: after a reconnect, every node's silence is counted afresh
// (this node may have missed their heartbeats).
func (f *Fleet) resetSeen() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for _, p := range f.peers {
		p.seen = now
	}
}

// checkLost declares lost each alive node silent for longer than
// Heartbeat.
func (f *Fleet) checkLost() {
	// A node that cannot write its own heartbeat now (the fleet is
	// electing a leader, or this node is cut off) judges no one: it counts
	// everyone's silence afresh once it can. Else one election longer
	// than the heartbeat bound would have the nodes declare each other
	// lost.
	if time.Since(time.Unix(0, f.beatOK.Load())) > f.cfg.Heartbeat.Duration/2 {
		f.resetSeen()
		return
	}
	f.sweeps++
	if f.sweeps%sweepEvery == 0 {
		f.sweepLost()
		f.sweepOwn()
	}
	var silent []peer
	f.mu.Lock()
	for k, p := range f.peers {
		if k != f.name && p.info.State == nodeAlive && time.Since(p.seen) > f.cfg.Heartbeat.Duration {
			silent = append(silent, *p)
		}
	}
	f.mu.Unlock()
	for _, p := range silent {
		f.declareLost(p)
	}
}

// declareSettle: how long a node that declared another lost waits before
// it reads the declaration back (declareLost).
const declareSettle = 250 * time.Millisecond

// declareLost CASes p's key to lost on the revision this node last saw;
// the winner fails p's jobs and emits cluster.node_lost.
func (f *Fleet) declareLost(p peer) {
	n := p.info
	n.State, n.LostBy, n.LostAt = nodeLost, f.name, time.Now().UTC()
	b, err := f.sealNode(n)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
	_, err = f.nodes.Update(ctx, n.Name, b, p.rev)
	cancel()
	if err != nil {
		if !isWrongSeq(err) {
			f.log.Debug().Err(err).Str("node", n.Name).Msg("declaring a node lost")
		}
		return
	}
	// Two nodes' CASes on one revision both succeeded against Debian's
	// nats-server 2.9.10 (TestFleetExternalNATS: b declared lost twice,
	// 5 ms apart): a server of that line checks the revision before a
	// concurrent write is applied. The last write stands, so once both
	// would be applied, only the node whose declaration is the key's
	// value goes on.
	select {
	case <-f.ctx.Done():
		return
	case <-time.After(declareSettle):
	}
	var cur kvRecord
	rctx, rcancel := context.WithTimeout(f.ctx, 2*opTimeout)
	err = again(rctx, func(ctx context.Context, _ int) error {
		var err error
		cur, err = f.readKey(ctx, nodesBucket, n.Name)
		return err
	})
	rcancel()
	if err == nil {
		if now, derr := f.readNode(n.Name, cur.value); derr == nil && (now.LostBy != f.name || now.Incarnation != n.Incarnation) {
			f.log.Info().Str("node", n.Name).Str("declared_by", now.LostBy).Msg("another node's declaration of a lost node stands")
			return
		}
	}
	f.log.Warn().Str("node", n.Name).Str("incarnation", n.Incarnation).Msg("a fleet node stopped heartbeating: declared lost")
	jobs := f.failJobs(f.ctx, n.Name, n.Incarnation)
	f.emit(ClusterNodeLost{Node: n.Name, Incarnation: n.Incarnation, By: f.name, Reason: "heartbeat_expired", Jobs: jobs})
}

// failJobs ends every unfinished job node's incarnation took: failed,
// node_lost. A CAS per record, so an end recorded meanwhile stands.
func (f *Fleet) failJobs(ctx context.Context, node, inc string) []string {
	var ids []string
	var todo []string
	wrote := map[string]api.JobRecord{}
	err := f.scanJobs(ctx, func(e jobEntry, _ uint64) {
		if e.Record.Node == node && e.Incarnation == inc && !e.Record.State.Terminal() {
			todo = append(todo, e.Record.ID)
		}
	})
	if err != nil {
		f.log.Error().Err(err).Str("node", node).Msg("listing a lost node's jobs")
	}
	lost := func(e jobEntry) jobEntry {
		now := time.Now().UTC()
		r := &e.Record
		r.State, r.Error, r.FinishedAt = api.StateFailed, api.ErrNodeLost, &now
		if r.DispatchedAt != nil {
			r.DurationMs = now.Sub(*r.DispatchedAt).Milliseconds()
		}
		return e
	}
	for _, id := range todo {
		attempt := 0
		for ; attempt < 10; attempt++ {
			e, done, err := f.endUnfinished(ctx, id, node, inc, lost)
			if done {
				if e.Record.ID != "" {
					ids = append(ids, id)
					wrote[id] = e.Record
				}
				break
			}
			if !isWrongSeq(err) {
				f.log.Warn().Err(err).Str("job_id", id).Msg("failing a lost node's job")
				select {
				case <-ctx.Done():
					return ids
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		if attempt == 10 {
			f.log.Error().Str("job_id", id).Str("node", node).Msg("a lost node's job could not be failed after 10 tries; it stays as recorded")
		}
	}
	if f.weakCAS.Load() && len(ids) > 0 {
		// The lost node's own end of a job (it was only stopped) may have
		// succeeded on the same revision and landed last: it stands, and
		// the job is not told lost. A record that cannot be read back is
		// told lost, as written.
		f.casSettle("fail", ids[0])
		kept := ids[:0]
		for _, id := range ids {
			stood, cur, err := f.casStood(id, func(c jobEntry) bool { return sameEnd(c, wrote[id], node, inc) })
			if err == nil && !stood {
				f.log.Info().Str("job_id", id).Str("node", node).Str("state", string(cur.Record.State)).Msg("a lost node's end of a job landed after its node_lost failure (NATS older than 2.10): that end stands")
				continue
			}
			kept = append(kept, id)
		}
		ids = kept
	}
	return ids
}

// endUnfinished is one try at ending job id while it is unfinished and
// taken by node's incarnation inc: a CAS of end(record) from the revision
// read now. done: nothing is left to do (ended is end's record as written;
// zero when the job had ended or gone to another taker meanwhile). Not
// done: err, isWrongSeq when another write came between (try again).
func (f *Fleet) endUnfinished(ctx context.Context, id, node, inc string, end func(jobEntry) jobEntry) (ended jobEntry, done bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	e, rev, found, err := f.getJob(ctx, id)
	if err != nil {
		return jobEntry{}, false, err
	}
	if !found || e.Record.State.Terminal() || e.Record.Node != node || e.Incarnation != inc {
		return jobEntry{}, true, nil
	}
	e = end(e)
	if _, err := f.putJob(ctx, e, rev); err != nil {
		return jobEntry{}, false, err
	}
	return e, true, nil
}

// sweepEvery: every this many checks (of Heartbeat/5 each) a node looks
// for unfinished jobs whose node is gone (lost, stopped, or restarted
// under a new incarnation) that no declaration ended (the fleet was
// electing a leader then, or the node that declared it died): every
// Heartbeat*2, while there is something to look for.
const sweepEvery = 10

// stray is a node's incarnation whose unfinished jobs are swept.
type stray struct{ node, inc string }

// sweepLost ends failed, node_lost, every unfinished job taken by a node
// now lost or stopped, or by an incarnation of a node that has since
// restarted (this one's included). It scans the bucket once when this
// node starts, then only while a node was seen go (sawNode): a suspect is
// dropped once a scan finds nothing of it left. A CAS per record, so
// whichever node gets there first ends it, once.
func (f *Fleet) sweepLost() {
	f.mu.Lock()
	first := !f.sweptOnce
	if len(f.suspects) == 0 && !first {
		f.mu.Unlock()
		return
	}
	type now struct {
		inc  string
		gone bool // lost or stopped
	}
	nodes := map[string]now{}
	for k, p := range f.peers {
		nodes[k] = now{p.info.Incarnation, p.info.State == nodeLost || p.info.State == nodeStopped}
	}
	// A suspect seen go less than a Heartbeat ago is left to the node
	// that declared it lost (or to the restarted node itself): it is
	// failing its jobs now, and its cluster.node_lost lists them.
	recent := make(map[stray]bool, len(f.suspects)) // every suspect: seen go less than a Heartbeat ago?
	for k, since := range f.suspects {
		recent[k] = time.Since(since) < f.cfg.Heartbeat.Duration
	}
	f.mu.Unlock()
	strays := map[stray]bool{}
	err := f.scanJobs(f.ctx, func(e jobEntry, _ uint64) {
		n, known := nodes[e.Record.Node]
		if !known || e.Record.State.Terminal() || e.Record.State == api.StateQueued {
			return
		}
		if n.gone || n.inc != e.Incarnation {
			strays[stray{e.Record.Node, e.Incarnation}] = true
		}
	})
	if err != nil {
		f.log.Debug().Err(err).Msg("sweeping lost nodes' jobs")
		return
	}
	f.mu.Lock()
	f.sweptOnce = true
	for k, isRecent := range recent {
		if isRecent {
			delete(strays, k)
		} else if !strays[k] {
			delete(f.suspects, k)
		}
	}
	f.mu.Unlock()
	for s := range strays {
		for _, id := range f.failJobs(f.ctx, s.node, s.inc) {
			f.emit(ClusterJobLost{JobID: id, Node: s.node, Incarnation: s.inc, By: f.name})
		}
	}
}
