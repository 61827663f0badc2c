package lanes

import (
	"bufio"
	"crypto/subtle"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/platform/sockserve"
	"github.com/orchestrd/orchestrd/supervisor"
	"github.com/orchestrd/orchestrd/wire"
)

// Messages a lane actor handles.
type (
	submitJob struct {
		rec  api.JobRecord
		spec api.JobSpec
		// reply, when set, answers job.submit: the job is not recorded
		// yet; its actor records it and answers once that is committed
		// (submitRecorded). Nil for a job already recorded (recovery).
		reply func(id string, err error)
		// out is the job's output stream, made with the job (readers may
		// be attached already).
		out *outStream
	}
	cancelJob struct {
		id    string
		force bool
		reply func(bool, error)
	}
	runnerConn struct {
		conn *net.UnixConn
		br   *bufio.Reader
		hs   wire.Handshake
		// peerPid is the connecting process as the kernel says
		// (SO_PEERCRED); hs.Pid is only what the runner claims.
		peerPid int
	}
	runnerUp struct {
		id      string
		ref     actors.Ref
		gen     int // the incarnation that is up
		pid     int
		slots   int
		spawned bool
		stdinOK bool // it takes streamed stdin (wire.CapStdinStream)
	}
	runnerDown    struct{ id string }
	runnerStable  struct{ id string }
	runnerStopped struct{ id string }
	runnerExited  struct {
		id     string
		gen    int
		uptime int64
		cause  string // why it is gone: runner.exited's cause, or spawn_failed
		ref    actors.Ref
	}
	slotFreed    struct{ id string }
	laneRecheck  struct{}
	laneShutdown struct{ done func() }
	laneForce    struct{}
)

// laneHandle is what the Manager keeps of a lane: its actor, its config and
// the numbers it must read without a round trip.
type laneHandle struct {
	name   string
	cfg    LaneConfig
	sh     *shared
	socket string
	// The listener and its server belong to the handle, not the lane
	// actor: they are made before anything starts (so a bad socket path
	// fails the daemon at once) and survive a lane actor's restart.
	ln      *net.UnixListener
	srvMu   sync.Mutex
	srv     *sockserve.Server // nil until the lane actor first starts
	closed  bool
	token   string // join token for bring-your-own runners; "" if the lane takes none
	ref     atomic.Pointer[actors.Ref]
	pending atomic.Int64 // jobs submitted and not yet dispatched or cancelled
	running atomic.Int64
	// capacity: the slots of the lane's ready, serving runners (the
	// fleet's FreeSlots).
	capacity atomic.Int64
	status   atomic.Pointer[api.LaneStatus]
	// memHeld: the node's available memory is below the lane's
	// min_free_memory; its jobs wait (minfree.go).
	memHeld atomic.Bool
	// byo: the bring-your-own runners' connections, as its front-end
	// lists them (Manager.Conns).
	byo runnerConns
}

func (h *laneHandle) laneRef() actors.Ref {
	if r := h.ref.Load(); r != nil {
		return *r
	}
	return actors.Ref{}
}

type runnerSlot struct {
	ref     actors.Ref
	gen     int // the incarnation that is up (runnerUp)
	status  api.RunnerStatus
	ready   bool
	serving bool // the lane dispatches to it; a ready spawned runner that does not serve is a spare
	active  int
	slots   int
	spawned bool
	stopped bool // process gone for good (daemon shutdown)
	stdinOK bool
}

type queuedJob struct {
	id   string
	ref  actors.Ref
	wire wire.Job
	// secrets are the job's secrets by name, looked up into wire's env at
	// dispatch (secrets.go); a job that bounced back has them there.
	secrets map[string]string
}

// laneActor owns a lane: its socket, its runners, its queue and its restart
// policy. Jobs wait in its bounded queue until a runner has a free slot.
type laneActor struct {
	sh      *shared
	h       *laneHandle
	tracker *supervisor.Tracker
	runners map[string]*runnerSlot
	order   []string
	queue   []queuedJob
	qhead   int
	jobs    map[string]actors.Ref // live jobs by id
	jobIDs  map[string]string     // job actor ref -> job id
	byoSeq  int
	recheck func()

	stopping bool
	forced   bool // the daemon was told to stop again: kill what has not stopped
	stopDone func()
}

func (l *laneActor) Receive(c *actors.Context) {
	switch m := c.Message().(type) {
	case actors.Started:
		l.start(c)
	case submitJob:
		l.submit(c, m)
	case cancelJob:
		j, ok := l.jobs[m.id]
		if !ok {
			m.reply(false, api.Errorf(api.CodeInvalidState, "job %s already finished", m.id))
			return
		}
		c.Send(j, jobCancel{force: m.force, reply: m.reply})
	case dequeueJob:
		for i := l.qhead; i < len(l.queue); i++ {
			if l.queue[i].id == m.id {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				l.h.pending.Add(-1)
				c.Send(m.job, jobDequeued{})
				l.publish()
				return
			}
		}
		// Not queued any more: dispatch won the race, and the job, which
		// got jobDispatched before this, has sent the cancel to its runner.
	case requeueJob:
		l.requeue(c, m)
	case runnerConn:
		l.runnerConn(c, m)
	case runnerUp:
		s := l.runners[m.id]
		if s == nil {
			return
		}
		s.ready, s.active, s.slots, s.gen, s.stdinOK = true, 0, m.slots, m.gen, m.stdinOK
		l.assignRole(s)
		l.dispatch(c)
		l.publish()
	case runnerDown:
		if s := l.runners[m.id]; s != nil {
			l.h.running.Add(-int64(s.active))
			s.ready, s.active = false, 0
			l.lostServing(c, m.id, s)
			l.publish()
			if l.h.cfg.Shared {
				l.roomChanged() // less room: the fleet must not count on it
			}
		}
	case slotFreed:
		l.slotFreed(c, m.id)
	case jobBounced:
		// Forwarded by the lane, not the runner, so that it reaches the
		// job after the jobDispatched the lane sent it.
		c.Send(m.job, m)
		// The slot it held is the incarnation's it was meant for: one
		// that came up since (runnerUp reset the count) lost nothing.
		if s := l.runners[m.runnerID]; s != nil && s.gen == m.gen {
			l.slotFreed(c, m.runnerID)
		}
	case runnerExited:
		l.runnerExited(c, m)
	case runnerStable:
		if l.tracker.Stable(m.id, time.Now()) {
			l.sh.bus.Emit(LaneRecovered{Lane: l.h.name})
			l.publish()
		}
	case memCheck:
		l.checkMemory(c)
	case laneRecheck:
		l.recheck = nil
		rec, next := l.tracker.Recheck(time.Now())
		if rec {
			l.sh.bus.Emit(LaneRecovered{Lane: l.h.name})
			l.publish()
		}
		if next > 0 {
			l.recheck = c.After(next, laneRecheck{})
		}
	case api.RunnerStatus:
		if s := l.runners[m.ID]; s != nil {
			s.status = m
			l.publish()
		}
	case laneShutdown:
		l.shutdown(c, m.done)
	case laneForce:
		// May overtake laneShutdown (another sender): then shutdown
		// forces as soon as it starts.
		l.forced = true
		if l.stopping {
			l.force(c)
		}
	case runnerStopped:
		if s := l.runners[m.id]; s != nil {
			s.stopped = true
		}
		l.maybeStopped()
	case actors.Terminated:
		if id, ok := l.jobIDs[m.Who.String()]; ok {
			delete(l.jobIDs, m.Who.String())
			delete(l.jobs, id)
			return
		}
		for id, s := range l.runners {
			if s.ref.Equal(m.Who) {
				if s.active > 0 {
					l.h.running.Add(-int64(s.active))
				}
				l.lostServing(c, id, s)
				l.removeRunner(id)
				l.publish()
				l.maybeStopped()
				return
			}
		}
	}
}

func (l *laneActor) start(c *actors.Context) {
	l.runners = map[string]*runnerSlot{}
	l.jobs = map[string]actors.Ref{}
	l.jobIDs = map[string]string{}
	l.tracker = supervisor.NewTracker(l.h.cfg.Restart.Policy(), nil)
	l.h.startAccepting(c.System(), c.Self())
	l.sh.bus.Emit(LaneStarted{Lane: l.h.name, Runners: l.h.cfg.Runners, Slots: l.h.cfg.Slots,
		Network: l.h.cfg.Network, Socket: l.h.socket})
	for i := 0; i < l.h.cfg.Runners+l.h.cfg.effectiveSpares(); i++ {
		id := l.h.name + "-" + strconv.Itoa(i)
		l.addRunner(c, id, true, nil)
	}
	l.checkMemory(c)
	l.publish()
}

func (l *laneActor) addRunner(c *actors.Context, id string, spawned bool, attach *connAttach) {
	ra := &runnerActor{sh: l.sh, lane: c.Self(), laneN: l.h.name, cfg: l.h.cfg, socket: l.h.socket,
		id: id, spawned: spawned, pending: attach, conns: &l.h.byo}
	ref, err := c.Spawn(actors.Props{Kind: "runner", ID: id, OnPanic: actors.Restart,
		New: func() actors.Actor {
			// Each incarnation starts from the pristine template; only the
			// first takes a byo runner's connection (a panic loses it).
			cp := *ra
			ra.pending = nil
			return &cp
		}})
	if err != nil {
		l.sh.bus.Emit(RunnerSpawnFailed{Lane: l.h.name, RunnerID: id, Error: err.Error()})
		if attach != nil {
			attach.conn.Close()
		}
		return
	}
	l.runners[id] = &runnerSlot{ref: ref, spawned: spawned, slots: l.h.cfg.Slots,
		status: api.RunnerStatus{ID: id, State: "starting", Spawned: spawned}}
	l.order = append(l.order, id)
}

func (l *laneActor) removeRunner(id string) {
	delete(l.runners, id)
	for i, o := range l.order {
		if o == id {
			l.order = append(l.order[:i], l.order[i+1:]...)
			break
		}
	}
	l.tracker.Forget(id)
}

func (l *laneActor) submit(c *actors.Context, m submitJob) {
	if l.stopping {
		l.h.pending.Add(-1)
		if m.reply != nil { // not recorded, not acknowledged: refused
			l.sh.store.remove(m.rec.ID)
			m.reply("", api.Errorf(api.CodeShuttingDown, "daemon is stopping; job not accepted"))
			return
		}
		rec := m.rec
		now := time.Now()
		rec.State, rec.Error, rec.WasCancelled, rec.FinishedAt = api.StateCancelled, api.ErrDaemonShutdown, true, &now
		l.sh.recordFinished(rec, func() { l.sh.store.finish(rec) })
		return
	}
	ja := &jobActor{sh: l.sh, lane: c.Self(), rec: m.rec, out: m.out}
	if ja.out == nil {
		ja.out = newOutStream(l.sh, m.rec.ID, int(m.spec.MaxOutputBytes))
	}
	if m.spec.StdinStream {
		ja.stdin = &stdinFeed{}
	}
	if m.reply != nil {
		ja.spec, ja.reply = m.spec, m.reply
	}
	ref, err := c.Spawn(actors.Props{Kind: "job", ID: m.rec.ID, OnPanic: actors.Stop,
		New: func() actors.Actor { return ja }})
	if err != nil {
		l.h.pending.Add(-1)
		if m.reply != nil {
			l.sh.store.remove(m.rec.ID)
			m.reply("", api.Errorf(api.CodeInternal, "job not accepted: spawning its actor: %v", err))
			return
		}
		rec := m.rec
		now := time.Now()
		rec.State, rec.Error, rec.FinishedAt = api.StateError, "spawning job actor: "+err.Error(), &now
		l.sh.recordFinished(rec, func() { l.sh.store.finish(rec) })
		return
	}
	l.jobs[m.rec.ID] = ref
	l.jobIDs[ref.String()] = m.rec.ID
	s := m.spec
	l.queue = append(l.queue, queuedJob{id: m.rec.ID, ref: ref, wire: wireJob(&s, m.rec.ID), secrets: s.Secrets})
	l.sh.bus.Emit(JobQueued{JobID: m.rec.ID, Lane: l.h.name, Queued: len(l.queue) - l.qhead})
	l.dispatch(c)
}

func (l *laneActor) slotFreed(c *actors.Context, id string) {
	if s := l.runners[id]; s != nil && s.active > 0 {
		s.active--
		l.h.running.Add(-1)
		l.dispatch(c)
	}
}

// requeue puts a job that bounced off a dead runner back at the head of
// the queue: it was admitted long ago, so the queue limit does not apply.
func (l *laneActor) requeue(c *actors.Context, m requeueJob) {
	if l.stopping {
		c.Send(m.job, jobShutdown{})
		return
	}
	q := queuedJob{id: m.id, ref: m.job, wire: m.w}
	if l.qhead > 0 {
		l.qhead--
		l.queue[l.qhead] = q
	} else {
		l.queue = append(l.queue, queuedJob{})
		copy(l.queue[1:], l.queue)
		l.queue[0] = q
	}
	l.h.pending.Add(1)
	l.dispatch(c)
	l.publish()
}

// testHookDispatch, when a test sets it, runs on the lane's goroutine
// between choosing a runner (by its pid) for a job and the job handing
// itself to it.
var testHookDispatch atomic.Pointer[func(pid int)]

// dispatch hands queued jobs to ready runners, least loaded first.
func (l *laneActor) dispatch(c *actors.Context) {
	for l.qhead < len(l.queue) && !l.h.memHeld.Load() {
		var best *runnerSlot
		var bestID string
		for _, id := range l.order {
			s := l.runners[id]
			if s.ready && s.serving && s.active < s.slots && (best == nil || s.slots-s.active > best.slots-best.active) {
				best, bestID = s, id
			}
		}
		if best == nil {
			break
		}
		q := l.queue[l.qhead]
		l.queue[l.qhead] = queuedJob{}
		l.qhead++
		if len(q.secrets) > 0 {
			env, missing := withSecrets(q.wire.Env, q.secrets, l.sh.secrets)
			if missing != "" {
				// Checked at submission; a job queued again after a
				// crash may meet a secrets.toml without it.
				l.h.pending.Add(-1)
				c.Send(q.ref, jobDequeued{failed: api.ErrSecretMissing})
				continue
			}
			q.wire.Env = env
		}
		best.active++
		l.h.pending.Add(-1)
		l.h.running.Add(1)
		// With a JobLog the job records its dispatch, then hands itself to
		// the runner (jobActor.assign): a job recorded as queued never
		// reached one. Without, the lane hands it over at once.
		direct := l.sh.jobs == nil
		d := jobDispatched{runner: best.ref, runnerID: bestID, pid: best.status.Pid, gen: best.gen, direct: direct, stdinOK: best.stdinOK}
		if !direct {
			d.w = q.wire
		}
		c.Send(q.ref, d)
		if h := testHookDispatch.Load(); h != nil {
			(*h)(best.status.Pid)
		}
		if direct {
			c.Send(best.ref, assignJob{job: q.ref, gen: best.gen, w: q.wire})
		}
	}
	if l.qhead > 1024 && l.qhead*2 > len(l.queue) {
		l.queue = append([]queuedJob(nil), l.queue[l.qhead:]...)
		l.qhead = 0
	}
	if l.h.cfg.Shared {
		l.roomChanged()
	}
}

func (l *laneActor) runnerExited(c *actors.Context, m runnerExited) {
	if l.stopping {
		return
	}
	now := time.Now()
	d := l.tracker.Exited(m.id, now, time.Duration(m.uptime)*time.Millisecond)
	l.sh.bus.Emit(RunnerRestartScheduled{Lane: l.h.name, RunnerID: m.id, DelayMs: d.Delay.Milliseconds(),
		RestartsInWindow: d.RestartsInWindow, Reason: m.cause, Policy: d.Reason})
	if d.BecameDegraded {
		p := l.tracker.Policy()
		l.sh.bus.Emit(LaneDegraded{Lane: l.h.name, RestartsInWindow: d.RestartsInWindow, MaxR: p.MaxR,
			MaxTMs: p.MaxT.Milliseconds()})
	}
	if d.Degraded && l.recheck == nil {
		if _, next := l.tracker.Recheck(now); next > 0 {
			l.recheck = c.After(next, laneRecheck{})
		}
	}
	c.Send(m.ref, restartIn{gen: m.gen, delay: d.Delay})
	l.publish()
}

func (l *laneActor) runnerConn(c *actors.Context, m runnerConn) {
	reject := func(reason string) {
		l.sh.bus.Emit(RunnerRejected{Lane: l.h.name, Pid: int(m.hs.Pid), Reason: reason})
		_ = m.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = wire.WriteFrame(m.conn, wire.TypeHandshakeAck, wire.HandshakeAck{Accepted: false,
			Config: wire.RunnerConfig{Lane: l.h.name, Reason: reason}})
		m.conn.Close()
	}
	switch {
	case l.stopping:
		reject("daemon is stopping")
		return
	case m.hs.Lane != l.h.name:
		reject(fmt.Sprintf("handshake names lane %q but this socket serves lane %q", m.hs.Lane, l.h.name))
		return
	}
	// Runners the daemon spawns never come here: each has a socketpair of
	// its own. Whoever connects to the lane socket is a bring-your-own
	// runner, and joins only a lane that takes them, with its join token.
	if !l.h.cfg.AcceptsExternal() {
		reject(fmt.Sprintf("lane %q does not take bring-your-own runners (external_runners = false)", l.h.name))
		return
	}
	if m.hs.Token == "" {
		reject(fmt.Sprintf("no join token: a bring-your-own runner needs lane %q's token (orchestrd lane token %s)", l.h.name, l.h.name))
		return
	}
	if subtle.ConstantTimeCompare([]byte(m.hs.Token), []byte(l.h.token)) != 1 {
		reject(fmt.Sprintf("wrong join token for lane %q", l.h.name))
		return
	}
	// Not one of ours: a bring-your-own runner joins the lane.
	l.byoSeq++
	id := fmt.Sprintf("%s-byo-%d", l.h.name, l.byoSeq)
	l.addRunner(c, id, false, &connAttach{conn: m.conn, br: m.br, hs: m.hs, peerPid: m.peerPid})
	l.publish()
}

func (l *laneActor) shutdown(c *actors.Context, done func()) {
	l.stopping = true
	l.stopDone = done
	l.h.closeListener()
	for i := l.qhead; i < len(l.queue); i++ {
		c.Send(l.queue[i].ref, jobShutdown{})
		l.h.pending.Add(-1)
	}
	l.queue, l.qhead = nil, 0
	if l.recheck != nil {
		l.recheck()
	}
	for _, s := range l.runners {
		c.Send(s.ref, runnerShutdown{})
	}
	if l.forced {
		l.force(c)
	}
	l.maybeStopped()
}

// roomChanged tells the fleet a shared lane may have room now.
func (l *laneActor) roomChanged() {
	var n int64
	for _, s := range l.runners {
		if s.ready && s.serving {
			n += int64(s.slots)
		}
	}
	l.h.capacity.Store(n)
	if fn := l.sh.room.Load(); fn != nil {
		(*fn)()
	}
}

func (l *laneActor) force(c *actors.Context) {
	for _, s := range l.runners {
		c.Send(s.ref, runnerForce{})
	}
}

func (l *laneActor) maybeStopped() {
	if !l.stopping || l.stopDone == nil {
		return
	}
	for _, s := range l.runners {
		if !s.stopped {
			return
		}
	}
	l.stopDone()
	l.stopDone = nil
}

func (l *laneActor) publish() {
	st := &api.LaneStatus{Name: l.h.name, Network: l.h.cfg.Network, Slots: l.h.cfg.Slots, Spares: l.h.cfg.effectiveSpares(),
		QueueLimit: l.h.cfg.QueueLimit, Queued: int(l.h.pending.Load()), Running: int(l.h.running.Load()),
		Degraded: l.tracker != nil && l.tracker.Degraded(), Runners: make([]api.RunnerStatus, 0, len(l.order))}
	for _, id := range l.order {
		s := l.runners[id]
		rs := s.status
		rs.ActiveJobs = s.active
		rs.Spare = s.ready && !s.serving
		st.Runners = append(st.Runners, rs)
	}
	l.h.status.Store(st)
}

// startAccepting starts serving the socket once (sockserve: the accept
// loop with backoff, the peer check, conn.refused); later calls (a
// restarted lane actor) find it serving and keep it, since it sends to
// the lane's Ref, which a restart does not change.
func (l *laneHandle) startAccepting(sys *actors.System, self actors.Ref) {
	l.srvMu.Lock()
	defer l.srvMu.Unlock()
	if l.srv != nil || l.closed {
		return
	}
	// Each connection is a "handshake" actor under "handshakes/LANE" while
	// its handshake is read; then a runner actor owns it.
	srv, err := sockserve.New(sockserve.Options{Path: l.socket, Component: "lane " + l.name,
		Serve:       func(c *sockserve.Conn) { l.handshake(sys, self, c) },
		ServeCloses: true, // a runner's connection outlives its handshake: the lane actor has it
		Interrupt:   interruptHandshake,
		Bus:         l.sh.bus, Logger: l.sh.log,
		System: sys, Supervisor: "handshakes", SupervisorID: l.name, Kind: "handshake"})
	if err != nil {
		l.sh.log.Error().Err(err).Str("lane", l.name).Msg("lanes: the runner socket is not served")
		return
	}
	l.srv = srv
	l.srv.Serve(l.ln)
}

// closeListener stops accepting, drops half-handshaken connections and
// waits for the accept and handshake goroutines. Safe to call more than
// once.
func (l *laneHandle) closeListener() {
	l.srvMu.Lock()
	if l.closed {
		l.srvMu.Unlock()
		return
	}
	l.closed = true
	srv := l.srv
	l.srvMu.Unlock()
	if srv == nil {
		l.ln.Close()
		return
	}
	srv.Close()
}

// handshaking is a runner connection's state while its handshake is read:
// once handed to the lane actor, closing the lane's socket leaves it alone.
type handshaking struct {
	mu     sync.Mutex
	handed bool
}

// interruptHandshake drops a connection still handshaking when the lane's
// socket closes.
func interruptHandshake(c *sockserve.Conn) {
	st, _ := c.Value.Load().(*handshaking)
	if st == nil {
		c.NC.Close()
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.handed {
		c.NC.Close()
	}
}

// handshake reads an admitted runner connection's handshake (bounded by a
// deadline, on the connection's own goroutine, so a silent peer blocks
// nobody) and hands the connection to the lane actor.
func (l *laneHandle) handshake(sys *actors.System, self actors.Ref, c *sockserve.Conn) {
	st := &handshaking{}
	c.Value.Store(st)
	hs, br, err := readHandshake(c.NC, l.sh.maxFrame, 5*time.Second)
	if err != nil {
		l.sh.bus.Emit(RunnerRejected{Lane: l.name, Reason: err.Error()})
		c.NC.Close()
		return
	}
	st.mu.Lock()
	st.handed = true
	st.mu.Unlock()
	sys.Send(self, runnerConn{conn: c.NC, br: br, hs: hs, peerPid: int(c.Peer.Pid)})
}

func readHandshake(conn *net.UnixConn, maxFrame uint32, timeout time.Duration) (wire.Handshake, *bufio.Reader, error) {
	var hs wire.Handshake
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	br := bufio.NewReaderSize(conn, 16<<10)
	f, err := wire.NewFrameReader(br, maxFrame).Next()
	if err != nil {
		return hs, nil, fmt.Errorf("reading handshake: %w", err)
	}
	if f.Type != wire.TypeHandshake {
		return hs, nil, fmt.Errorf("first frame is %s, want Handshake", f.Type)
	}
	if err := wire.Unmarshal(f, &hs); err != nil {
		return hs, nil, err
	}
	_ = conn.SetReadDeadline(time.Time{})
	return hs, br, nil
}
