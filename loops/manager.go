package loops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/loops/artifact"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Options configures the loops domain.
type Options struct {
	Config Config
	Agents Agents
	Jobs   Jobs
	Gate   Gate
	Store  Store
	Git    Git
	Bus    *eventlog.Bus
	System *actors.System
	Logger zerolog.Logger
}

// Manager is the loops domain: the loops supervisor actor, one actor per
// live loop, the control-socket methods.
type Manager struct {
	opts      Options
	cfg       Config
	sys       *actors.System
	bus       *eventlog.Bus
	log       zerolog.Logger
	templates *artifact.Templates
	sup       actors.Ref

	mu       sync.Mutex
	stopping bool
	counts   map[api.LoopStatus]int
	byType   map[api.LoopType]map[api.LoopStatus]int // counts, by type too (CountsByType)
	plans    map[string]string                       // plan loop id -> the approval it waits for
	// done: loops whose actor stopped itself, its loop ended (finish).
	// The actor's Terminated can reach the supervisor before its ended
	// (system messages go first): an actor stopped and not in done
	// panicked.
	done map[string]bool
	// quit is closed by Shutdown; cleaning: the ended loops whose
	// worktree waits for the task and job they had under way (cleanAfter),
	// each closed once they ended (or the wait gave up).
	quit     chan struct{}
	quitOnce sync.Once
	cleaning map[string]chan struct{}
	// git is the git work run on goroutines of its own for loops that
	// ended or were deleted (cleanAfter, deleteLoops): Shutdown waits for
	// it, so that no git of the daemon's runs on in a repository after
	// the daemon stopped.
	git sync.WaitGroup
}

// Start starts the loops supervisor; Recover then takes over the loops a
// dead daemon left.
func Start(opts Options) (*Manager, error) {
	if opts.Bus == nil || opts.System == nil || opts.Store == nil || opts.Agents == nil || opts.Jobs == nil ||
		opts.Gate == nil || opts.Git == nil {
		return nil, errors.New("loops: Bus, System, Store, Agents, Jobs, Gate and Git are required")
	}
	if opts.Config.MaxRunning == 0 {
		opts.Config = DefaultConfig()
	}
	files := map[api.LoopType]string{}
	for k, f := range opts.Config.Prompts {
		files[api.LoopType(k)] = f
	}
	tmpl, err := artifact.LoadTemplates(files)
	if err != nil {
		return nil, fmt.Errorf("loops: %w", err)
	}
	m := &Manager{opts: opts, cfg: opts.Config, sys: opts.System, bus: opts.Bus, log: opts.Logger,
		templates: tmpl, counts: map[api.LoopStatus]int{}, plans: map[string]string{}, quit: make(chan struct{}),
		cleaning: map[string]chan struct{}{}}
	ref, err := m.sys.Spawn(actors.Props{Kind: "loops", ID: "loops", OnPanic: actors.Restart, MaxRestarts: 3, Within: time.Minute,
		New: func() actors.Actor { return newSup(m) }})
	if err != nil {
		return nil, fmt.Errorf("starting the loops supervisor: %w", err)
	}
	m.sup = ref
	return m, nil
}

// ChatExecutor is [loops] chat_executor (the chat domain reads it).
func (m *Manager) ChatExecutor() string { return m.cfg.ChatExecutor }

// Recover takes over the loops the store holds: the ones not ended go on
// (see loop.recover) and returns how many.
func (m *Manager) Recover(ctx context.Context) (int, error) {
	recs, err := m.opts.Store.Loops()
	if err != nil {
		return 0, fmt.Errorf("reading the loops a dead daemon left: %w", err)
	}
	done := make(chan int, 1)
	m.sys.Send(m.sup, recoverAll{recs: recs, done: done})
	select {
	case n := <-done:
		return n, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("recovering loops: %w", ctx.Err())
	}
}

// Shutdown stops every loop actor (their tasks and jobs are the
// executors' and lanes' to stop; a loop left running goes on at the next
// start) and the supervisor.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	m.quitOnce.Do(func() { close(m.quit) })
	if err := m.sys.Stop(ctx, m.sup); err != nil {
		return err
	}
	// The supervisor and its loops have stopped: nothing starts more git
	// work. What still waits for an ended loop's task gives up (quit);
	// a removal or a deletion under way ends.
	done := make(chan struct{})
	go func() { m.git.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the git work of ended and deleted loops: %w", ctx.Err())
	}
}

// Counts returns how many loops are in each status, and how many are
// running.
func (m *Manager) Counts() (map[api.LoopStatus]int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[api.LoopStatus]int, len(api.LoopStatuses))
	for _, s := range api.LoopStatuses {
		out[s] = m.counts[s]
	}
	return out, m.counts[api.LoopRunning]
}

// CountsByType returns how many loops of each type are in each status
// (every type and status, zeros included), as the supervisor last
// counted them: for the daemon's metrics, asking no actor.
func (m *Manager) CountsByType() map[api.LoopType]map[api.LoopStatus]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[api.LoopType]map[api.LoopStatus]int, len(api.LoopTypes))
	for _, t := range api.LoopTypes {
		byStatus := make(map[api.LoopStatus]int, len(api.LoopStatuses))
		for _, s := range api.LoopStatuses {
			byStatus[s] = m.byType[t][s]
		}
		out[t] = byStatus
	}
	return out
}

// PlanApproval maps a plan loop's id to the approval its plan waits for
// (plan.approve and the like take either).
func (m *Manager) PlanApproval(loopID string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.plans[loopID]
	return a, ok
}

func (m *Manager) setPlanApproval(loopID, approvalID string) {
	m.mu.Lock()
	if approvalID == "" {
		delete(m.plans, loopID)
	} else {
		m.plans[loopID] = approvalID
	}
	m.mu.Unlock()
}

// newRootID is a root loop's id, Loopr's {unix_ms}-{16 hex}.
func newRootID(now time.Time) string {
	return fmt.Sprintf("%d-%s", now.UnixMilli(), api.RandomHex(8))
}

// worktreeDir is a loop's worktree: <repo>/.loopr/worktrees/<id>.
func worktreeDir(repo, id string) string { return filepath.Join(repo, ".loopr", "worktrees", id) }

// Supervisor messages.
type (
	recoverAll struct {
		recs []api.LoopRecord
		done chan int
	}
	createLoop struct {
		rec   api.LoopRecord
		reply func(api.LoopRecord, error)
	}
	// changed: a loop's record is committed (its actor tells).
	changed struct{ rec api.LoopRecord }
	// ended: a loop's actor is stopping (its loop ended).
	ended    struct{ id string }
	wantSlot struct{ id string }
	freeSlot struct{ id string }
	control  struct {
		op    string
		id    string
		arg   string
		reply func(any, error)
	}
	spawnChildren struct {
		parent   string
		children []api.LoopRecord
	}
	deleted struct{ ids []string }
	// snapshot asks for every loop's record as the supervisor knows it
	// (committed, and what the state table is checked against).
	snapshot struct{ reply func([]api.LoopRecord) }
)

// node is what the supervisor knows of a loop.
type node struct {
	rec      api.LoopRecord
	ref      actors.Ref
	children []string
	// dying: the actor of a loop that ended, until its Terminated (its
	// name is taken until then); merge: a loop.merge that came meanwhile,
	// made then.
	dying actors.Ref
	merge *control
}

type sup struct {
	m       *Manager
	nodes   map[string]*node
	waiting []string
	slots   map[string]bool
}

func newSup(m *Manager) *sup { return &sup{m: m, nodes: map[string]*node{}, slots: map[string]bool{}} }

func (s *sup) Receive(c *actors.Context) {
	switch msg := c.Message().(type) {
	case recoverAll:
		n := 0
		for _, r := range msg.recs {
			s.add(r)
		}
		var clean []api.LoopRecord // ended, with a branch or worktree left
		for _, r := range msg.recs {
			if r.Status.Terminal() {
				if (r.MergedInto != "" && !s.m.cfg.KeepBranches) || worktreeLeft(r) {
					clean = append(clean, r)
				}
				continue
			}
			if s.spawn(c, r, spawnRecovered, nil) {
				n++
			}
		}
		if len(clean) > 0 {
			// A daemon stopped between a loop's end and its worktree's
			// removal, or between a merge and its branch's deletion: done
			// now (a branch not there is passed over).
			go func() {
				for _, r := range clean {
					s.m.cleanEnded(r)
				}
			}()
		}
		s.recount()
		msg.done <- n
	case createLoop:
		if s.nodes[msg.rec.ID] != nil {
			msg.reply(api.LoopRecord{}, api.Errorf(api.CodeInvalidState, "loop %s exists", msg.rec.ID))
			return
		}
		s.add(msg.rec)
		if !s.spawn(c, msg.rec, spawnNew, msg.reply) {
			delete(s.nodes, msg.rec.ID)
		}
	case spawnChildren:
		for _, r := range msg.children {
			if s.nodes[r.ID] != nil {
				continue
			}
			s.add(r)
			s.spawn(c, r, spawnNew, nil)
		}
	case changed:
		n := s.nodes[msg.rec.ID]
		if n == nil {
			return
		}
		n.rec = msg.rec
		s.recount()
		if msg.rec.ParentID != nil {
			if p := s.nodes[*msg.rec.ParentID]; p != nil {
				c.Send(p.ref, childChanged{rec: msg.rec})
			}
		}
	case ended:
		s.m.mu.Lock()
		delete(s.m.done, msg.id)
		s.m.mu.Unlock()
		if n := s.nodes[msg.id]; n != nil {
			n.dying, n.ref = n.ref, actors.Ref{}
		}
		s.release(c, msg.id)
	case actors.Terminated:
		// A loop's actor stopped without ending its loop (it panicked):
		// its loop waits, as it was recorded, for the next start.
		for id, n := range s.nodes {
			if n.dying.Equal(msg.Who) {
				// An ended loop's actor is gone: a merge asked meanwhile
				// can run it again under its name.
				n.dying = actors.Ref{}
				if m := n.merge; m != nil {
					n.merge = nil
					s.merge(c, n, *m)
				}
				continue
			}
			if n.ref.Equal(msg.Who) {
				n.ref = actors.Ref{}
				s.release(c, id)
				s.m.mu.Lock()
				normal, stopping := s.m.done[id], s.m.stopping
				delete(s.m.done, id)
				s.m.mu.Unlock()
				if !normal && !stopping && !n.rec.Status.Terminal() {
					s.actorFailed(c, n)
				}
			}
		}
	case wantSlot:
		if !s.slots[msg.id] && !slices.Contains(s.waiting, msg.id) {
			s.waiting = append(s.waiting, msg.id)
		}
		s.schedule(c)
	case freeSlot:
		s.release(c, msg.id)
	case control:
		s.control(c, msg)
	case snapshot:
		out := make([]api.LoopRecord, 0, len(s.nodes))
		for _, n := range s.nodes {
			out = append(out, n.rec)
		}
		msg.reply(out)
	case deleted:
		for _, id := range msg.ids {
			if n := s.nodes[id]; n != nil {
				if n.rec.ParentID != nil {
					if p := s.nodes[*n.rec.ParentID]; p != nil {
						p.children = slices.DeleteFunc(p.children, func(x string) bool { return x == id })
					}
				}
				c.Stop(n.ref)
				if n.merge != nil {
					n.merge.reply(nil, api.Errorf(api.CodeNotFound, "loop %s was deleted before its merge was tried again", id))
				}
				delete(s.nodes, id)
				s.m.setPlanApproval(id, "")
			}
		}
		s.recount()
	}
}

func (s *sup) add(r api.LoopRecord) {
	s.nodes[r.ID] = &node{rec: r}
	if r.ParentID != nil {
		if p := s.nodes[*r.ParentID]; p != nil && !slices.Contains(p.children, r.ID) {
			p.children = append(p.children, r.ID)
		}
	}
}

const (
	spawnNew = iota
	spawnRecovered
	// spawnMerge: a root whose merge failed (git_failed), live again for
	// loop.merge (reviveMerge).
	spawnMerge
)

func (s *sup) spawn(c *actors.Context, r api.LoopRecord, how int, reply func(api.LoopRecord, error)) bool {
	n := s.nodes[r.ID]
	var kids []api.LoopRecord
	for _, k := range n.children {
		kids = append(kids, s.nodes[k].rec)
	}
	var parent *api.LoopRecord
	if r.ParentID != nil {
		if p := s.nodes[*r.ParentID]; p != nil {
			pr := p.rec
			parent = &pr
		}
	}
	ref, err := c.Spawn(actors.Props{Kind: "loop", ID: r.ID, OnPanic: actors.Stop,
		New: func() actors.Actor {
			return &loop{m: s.m, sup: c.Self(), rec: r, how: how, reply: reply, kids: kids, parent: parent}
		}})
	if err != nil {
		s.m.log.Error().Err(err).Str("loop_id", r.ID).Msg("starting a loop's actor")
		if reply != nil {
			reply(api.LoopRecord{}, api.Errorf(api.CodeInternal, "starting loop %s: %v", r.ID, err))
		}
		return false
	}
	n.ref = ref
	return true
}

// actorFailed ends the loop whose actor stopped before its loop did (it
// panicked: actor.panicked says where): its agent's task and validation
// job are stopped, never left running unwatched, and the loop is failed
// (actor_failed) as its record was, committed before anyone hears of it,
// its parent told as of any child's end. Not run again: the panic would
// come again.
func (s *sup) actorFailed(c *actors.Context, n *node) {
	r := n.rec
	if r.TaskID != "" {
		s.m.opts.Agents.Stop(r.TaskID, true)
	}
	if r.JobID != "" {
		s.m.opts.Jobs.Cancel(r.JobID)
	}
	r.Status, r.Error, r.Stage = api.LoopFailed, api.LoopErrActorFailed, ""
	r.Message = "the daemon's actor of this loop failed (see the actor.panicked event)"
	r.TaskID, r.JobID, r.ApprovalID = "", "", ""
	r.UpdatedAt = time.Now().UnixMilli()
	s.m.log.Error().Str("loop_id", r.ID).Msg("a loop's actor stopped before its loop ended: the loop is failed")
	s.m.bus.Emit(LoopEnded{ID: r.ID, Status: r.Status, Error: r.Error})
	self, sys := c.Self(), c.System()
	if err := s.m.opts.Store.SaveLoop(r, func(err error) {
		if err != nil {
			s.m.log.Error().Err(err).Str("loop_id", r.ID).Msg("recording a failed loop in the state store")
		}
		sys.Send(self, changed{rec: r})
		s.m.bus.Emit(LoopUpdated{newLoopLine(r)})
	}); err != nil {
		s.m.log.Error().Err(err).Str("loop_id", r.ID).Msg("recording a failed loop in the state store")
		sys.Send(self, changed{rec: r})
		s.m.bus.Emit(LoopUpdated{newLoopLine(r)})
	}
}

func (s *sup) release(c *actors.Context, id string) {
	delete(s.slots, id)
	s.waiting = slices.DeleteFunc(s.waiting, func(x string) bool { return x == id })
	s.schedule(c)
}

// schedule grants free slots to the waiting loops, oldest first.
func (s *sup) schedule(c *actors.Context) {
	for len(s.slots) < s.m.cfg.MaxRunning && len(s.waiting) > 0 {
		slices.SortStableFunc(s.waiting, func(a, b string) int {
			ra, rb := s.nodes[a], s.nodes[b]
			if ra == nil || rb == nil {
				return 0
			}
			if ra.rec.CreatedAt != rb.rec.CreatedAt {
				return int(ra.rec.CreatedAt - rb.rec.CreatedAt)
			}
			return strings.Compare(a, b)
		})
		id := s.waiting[0]
		s.waiting = s.waiting[1:]
		n := s.nodes[id]
		if n == nil || n.ref.IsZero() {
			continue
		}
		s.slots[id] = true
		c.Send(n.ref, slotGranted{})
	}
}

func (s *sup) recount() {
	counts := map[api.LoopStatus]int{}
	byType := map[api.LoopType]map[api.LoopStatus]int{}
	for _, n := range s.nodes {
		counts[n.rec.Status]++
		if byType[n.rec.LoopType] == nil {
			byType[n.rec.LoopType] = map[api.LoopStatus]int{}
		}
		byType[n.rec.LoopType][n.rec.Status]++
	}
	s.m.mu.Lock()
	s.m.counts, s.m.byType = counts, byType
	s.m.mu.Unlock()
}

// descendants lists id's descendants, depth first.
func (s *sup) descendants(id string) []string {
	var out []string
	n := s.nodes[id]
	if n == nil {
		return nil
	}
	for _, k := range n.children {
		out = append(out, k)
		out = append(out, s.descendants(k)...)
	}
	return out
}

// control is loop.start, pause, resume, cancel and delete, checked
// against the state table (ARCHITECTURE.md) and done by the loop's actor.
func (s *sup) control(c *actors.Context, msg control) {
	n := s.nodes[msg.id]
	if n == nil {
		msg.reply(nil, api.Errorf(api.CodeNotFound, "no loop %q", msg.id))
		return
	}
	st := n.rec.Status
	if msg.op == "merge" {
		s.merge(c, n, msg)
		return
	}
	if err := allowed(msg.op, msg.id, st); err != nil {
		if msg.op == "start" || msg.op == "resume" {
			switch {
			case n.rec.MergeRetryable():
				err = api.Errorf(api.CodeInvalidState, "loop %s: its merge into %s failed (git_failed): orchestrd loop merge %s tries it again (orchestrd loop show %s says why it failed)",
					msg.id, n.rec.Base, msg.id, msg.id)
			case n.rec.Stage == api.StageMergeWaiting && st == api.LoopRunning:
				err = api.Errorf(api.CodeInvalidState, "loop %s is complete and waits to merge into %s (merge_waiting: orchestrd loop show %s says why): orchestrd loop merge %s tries it now",
					msg.id, n.rec.Base, msg.id, msg.id)
			}
		}
		msg.reply(nil, err)
		return
	}
	switch msg.op {
	case "delete":
		ids := append([]string{msg.id}, s.descendants(msg.id)...)
		var recs []api.LoopRecord
		for _, id := range ids {
			d := s.nodes[id]
			if d.rec.Status == api.LoopRunning || d.rec.Status == api.LoopRebasing {
				msg.reply(nil, api.Errorf(api.CodeInvalidState, "loop %s: its descendant %s is %s: cancel it first", msg.id, id, d.rec.Status))
				return
			}
			recs = append(recs, d.rec)
		}
		for _, id := range ids {
			if d := s.nodes[id]; !d.ref.IsZero() {
				c.Stop(d.ref)
				d.ref = actors.Ref{}
			}
			s.waiting = slices.DeleteFunc(s.waiting, func(x string) bool { return x == id })
			delete(s.slots, id)
		}
		self, m := c.Self(), s.m
		m.git.Go(func() {
			m.deleteLoops(recs, func(err error) {
				if err != nil {
					msg.reply(nil, err)
					return
				}
				m.sys.Send(self, deleted{ids: ids})
				m.bus.Emit(LoopDeleted{ID: msg.id, Removed: ids})
				msg.reply(map[string]any{"deleted": true, "removed": ids}, nil)
			})
		})
	case "cancel":
		if n.ref.IsZero() {
			msg.reply(nil, api.Errorf(api.CodeInvalidState, "loop %s is %s but not live in this daemon", msg.id, st))
			return
		}
		// Answered once the loop and every live descendant have ended
		// (each end committed and told to this supervisor first).
		var targets []actors.Ref
		cancelled := []string{msg.id} // the loop, then its live descendants
		for _, id := range s.descendants(msg.id) {
			if d := s.nodes[id]; !d.ref.IsZero() && !d.rec.Status.Terminal() {
				targets = append(targets, d.ref)
				cancelled = append(cancelled, id)
			}
		}
		var left atomic.Int32
		left.Store(int32(len(targets) + 1))
		var rootErr atomic.Pointer[error]
		var once sync.Once
		var timer *time.Timer
		finish := func() {
			once.Do(func() {
				if timer != nil {
					timer.Stop()
				}
				if e := rootErr.Load(); e != nil {
					msg.reply(nil, *e)
					return
				}
				msg.reply(map[string]any{"cancelled": true, "descendants": len(targets), "loops": cancelled}, nil)
			})
		}
		one := func() {
			if left.Add(-1) == 0 {
				finish()
			}
		}
		// A descendant whose actor stopped meanwhile never answers: the
		// answer does not wait for it past cancelWait.
		timer = time.AfterFunc(cancelWait, finish)
		for _, t := range targets {
			// A descendant that ended meanwhile answers 1002: ended all the same.
			c.Send(t, ctl{op: "cancel", reply: func(any, error) { one() }})
		}
		c.Send(n.ref, ctl{op: msg.op, arg: msg.arg, reply: func(_ any, err error) {
			if err != nil {
				rootErr.Store(&err)
			}
			one()
		}})
	case "budget_children":
		// An ancestor passed its max_cost_usd: its live descendants end
		// budget_exceeded with it.
		for _, id := range s.descendants(msg.id) {
			if d := s.nodes[id]; !d.ref.IsZero() && !d.rec.Status.Terminal() {
				c.Send(d.ref, ctl{op: "cancel", arg: api.LoopErrBudgetExceeded})
			}
		}
		msg.reply(nil, nil)
	case "invalidate_children":
		for _, id := range s.descendants(msg.id) {
			if d := s.nodes[id]; !d.ref.IsZero() && !d.rec.Status.Terminal() {
				c.Send(d.ref, ctl{op: "invalidate"})
			}
		}
		msg.reply(nil, nil)
	default:
		if n.ref.IsZero() {
			msg.reply(nil, api.Errorf(api.CodeInvalidState, "loop %s is %s but not live in this daemon", msg.id, st))
			return
		}
		c.Send(n.ref, ctl{op: msg.op, arg: msg.arg, reply: msg.reply})
	}
}

// merge is loop.merge: a root waiting to merge into its base tries now; a
// root whose merge failed (git_failed) is live again and tries; any other
// loop is told what it is and which command applies.
func (s *sup) merge(c *actors.Context, n *node, msg control) {
	r := n.rec
	switch {
	case r.ParentID == nil && r.Stage == api.StageMergeWaiting && r.Status == api.LoopRunning && !n.ref.IsZero():
		c.Send(n.ref, ctl{op: "merge", reply: msg.reply})
	case r.MergeRetryable() && n.ref.IsZero() && !n.dying.IsZero():
		// Its actor, ended, is still stopping: the merge runs once it has.
		if n.merge != nil {
			msg.reply(nil, api.Errorf(api.CodeInvalidState, "loop %s's merge is already being tried again", r.ID))
			return
		}
		n.merge = &msg
	case r.MergeRetryable() && n.ref.IsZero():
		s.spawn(c, r, spawnMerge, func(rec api.LoopRecord, err error) {
			if err != nil {
				msg.reply(nil, err)
				return
			}
			msg.reply(rec, nil)
		})
	default:
		msg.reply(nil, mergeNotApplicable(r))
	}
}

// cancelWait bounds how long loop.cancel waits for the descendants'
// ends before it answers.
const cancelWait = 10 * time.Second

// allowed is the state table: may op be done to loop id in status st? If
// not, the error says so in the CLI's words.
func allowed(op, id string, st api.LoopStatus) error {
	ok := false
	switch op {
	case "start":
		ok = st == api.LoopPending || st == api.LoopPaused
	case "pause":
		ok = st == api.LoopPending || st == api.LoopRunning || st == api.LoopRebasing
	case "resume":
		ok = st == api.LoopPaused
	case "cancel":
		ok = !st.Terminal()
	case "delete":
		ok = st != api.LoopRunning && st != api.LoopRebasing
	case "invalidate_children", "budget_children":
		ok = true
	}
	if !ok {
		return api.Errorf(api.CodeInvalidState, "loop %s: %s", id, notAllowed(op, id, st))
	}
	return nil
}

// notAllowed says that op cannot be done to loop id in status st in the
// words of the CLI, with the commands that do apply: a person reads it
// (loop.delete is `orchestrd loop rm`).
func notAllowed(op, id string, st api.LoopStatus) string {
	cmd := op
	if op == "delete" {
		cmd = "rm"
	}
	s := fmt.Sprintf("orchestrd loop %s does not apply to a %s loop", cmd, st)
	switch {
	case st.Terminal():
		return s + fmt.Sprintf(": it has ended (orchestrd loop show %s says how; orchestrd loop rm %s deletes it)", id, id)
	case st == api.LoopRunning || st == api.LoopRebasing:
		return s + fmt.Sprintf(" (orchestrd loop pause %s lets its iteration finish; orchestrd loop cancel %s stops it now)", id, id)
	case st == api.LoopPaused:
		return s + fmt.Sprintf(" (orchestrd loop resume %s goes on; orchestrd loop cancel %s ends it)", id, id)
	case st == api.LoopPending:
		return s + fmt.Sprintf(" (orchestrd loop start %s starts it)", id)
	}
	return s
}

// deleteLoops removes the loops' worktrees and branches, then their
// records (on a goroutine of its own: git blocks).
func (m *Manager) deleteLoops(recs []api.LoopRecord, done func(error)) {
	// Deepest first: a child's worktree is beneath nothing of its parent's,
	// but its branch was made from its parent's.
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		m.awaitCleaning(r.ID)
		if r.Worktree != "" {
			if _, err := os.Lstat(r.Worktree); err == nil {
				if err := m.opts.Git.RemoveWorktree(r.Repo, r.Worktree); err != nil {
					m.bus.Emit(LoopGitFailed{ID: r.ID, Op: "remove_worktree"})
					m.log.Warn().Err(err).Str("loop_id", r.ID).Msg("removing a deleted loop's worktree")
				}
			}
		}
		if r.Branch != "" {
			if _, err := m.opts.Git.DeleteBranch(r.Repo, r.Branch); err != nil {
				m.log.Debug().Err(err).Str("loop_id", r.ID).Msg("deleting a deleted loop's branch")
			}
		}
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	if err := m.opts.Store.DeleteLoops(ids, done); err != nil {
		done(api.Errorf(api.CodeStoreUnavailable, "deleting loops from the state store: %v", err))
	}
}

// heldWork is the task and job a loop had under way when it ended.
type heldWork struct{ task, job string }

// heldEndWait bounds how long an ended loop's worktree waits for the task
// and job it had under way to end (a cancel stops both at once; a task's
// agent and a job's processes take a moment to die).
const heldEndWait = time.Minute

// worktreeLeft says whether an ended loop's worktree is still there (the
// daemon stopped before it was removed).
func worktreeLeft(r api.LoopRecord) bool {
	if r.Worktree == "" {
		return false
	}
	_, err := os.Lstat(r.Worktree)
	return err == nil
}

// cleanAfter cleans up after an ended loop (cleanEnded) once the task
// and job it had under way have ended: nothing of the loop's still runs
// in the worktree as it is removed. A daemon stopping meanwhile leaves
// the worktree to the next start's recovery.
func (m *Manager) cleanAfter(r api.LoopRecord, h heldWork) {
	ch := make(chan struct{})
	m.mu.Lock()
	m.cleaning[r.ID] = ch
	m.mu.Unlock()
	m.git.Go(func() {
		ok := m.awaitHeld(r.ID, h)
		m.mu.Lock()
		delete(m.cleaning, r.ID)
		m.mu.Unlock()
		close(ch)
		if ok {
			m.cleanEnded(r)
		}
	})
}

// awaitCleaning waits until the ended loop id's task and job have ended
// (cleanAfter), if it is waiting for them.
func (m *Manager) awaitCleaning(id string) {
	m.mu.Lock()
	ch := m.cleaning[id]
	m.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-m.quit:
	}
}

// awaitHeld waits until h's task and job have ended, at most heldEndWait;
// false when the manager was shut down first.
func (m *Manager) awaitHeld(id string, h heldWork) bool {
	ended := make(chan struct{}, 2)
	n := 0
	if h.task != "" {
		if err := m.opts.Agents.Wait(h.task, func(api.TaskRecord) { ended <- struct{}{} }); err == nil {
			n++
		} else {
			m.log.Debug().Err(err).Str("loop_id", id).Str("task_id", h.task).Msg("waiting for an ended loop's task")
		}
	}
	if h.job != "" {
		if forget, err := m.opts.Jobs.Wait(h.job, func() { ended <- struct{}{} }); err == nil {
			n++
			defer forget()
		} else {
			m.log.Debug().Err(err).Str("loop_id", id).Str("job_id", h.job).Msg("waiting for an ended loop's job")
		}
	}
	t := time.NewTimer(heldEndWait)
	defer t.Stop()
	for ; n > 0; n-- {
		select {
		case <-ended:
		case <-m.quit:
			return false
		case <-t.C:
			m.log.Warn().Str("loop_id", id).Str("task_id", h.task).Str("job_id", h.job).Dur("waited", heldEndWait).
				Msg("an ended loop's task or job has not ended: its worktree is removed anyway")
			return true
		}
	}
	return true
}

// cleanEnded removes an ended loop's worktree, then its branch once its
// work is merged (MergedInto) unless keep_branches. It blocks (git).
func (m *Manager) cleanEnded(r api.LoopRecord) {
	if r.Worktree != "" {
		if _, err := os.Lstat(r.Worktree); err == nil {
			if err := m.opts.Git.RemoveWorktree(r.Repo, r.Worktree); err != nil {
				m.bus.Emit(LoopGitFailed{ID: r.ID, Op: "remove_worktree"})
				m.log.Warn().Err(err).Str("loop_id", r.ID).Msg("removing an ended loop's worktree")
				return
			}
		}
	}
	if r.MergedInto == "" || m.cfg.KeepBranches || r.Branch == "" {
		return
	}
	deleted, err := m.opts.Git.DeleteBranch(r.Repo, r.Branch)
	if err != nil {
		m.bus.Emit(LoopGitFailed{ID: r.ID, Op: "delete_branch"})
		m.log.Warn().Err(err).Str("loop_id", r.ID).Msg("deleting a merged loop's branch")
		return
	}
	if deleted {
		m.bus.Emit(LoopBranchDeleted{ID: r.ID, Branch: r.Branch, Into: r.MergedInto})
	}
}
