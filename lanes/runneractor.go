package lanes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/orchestrd/orchestrd/api"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/platform/proc/proctree"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// Messages a runner actor handles. gen ties process and connection messages
// to one incarnation: late messages from a dead one are ignored.
type (
	procStarted struct {
		gen int
		pid int
		err error
	}
	procExited struct {
		gen  int
		exit proc.Exit
	}
	connAttach struct {
		gen     int // a spawned runner's incarnation (its socketpair); 0 for bring-your-own
		conn    *net.UnixConn
		br      *bufio.Reader
		hs      wire.Handshake
		peerPid int // SO_PEERCRED; 0 when the peer is in a pid namespace we cannot see
	}
	// memMeasured: the daemon's own measurement of a runner's process tree.
	memMeasured struct {
		gen   int
		bytes uint64
	}
	connFrame struct {
		gen int
		msg any // a decoded wire message
	}
	connClosed struct {
		gen int
		err error
	}
	connBadFrame struct {
		gen int
		err error
	}
	hbExpired struct{ gen, seq int }
	// hsExpired: a spawned runner has not handshaken in time.
	hsExpired   struct{ gen int }
	stableTimer struct{ gen int }
	respawn     struct{ gen int }
	restartIn   struct {
		gen   int
		delay time.Duration
	}
	assignJob struct {
		job actors.Ref
		gen int // the incarnation the lane chose
		w   wire.Job
		// out: the job's stream, where the connection's reader writes its
		// output (outRoutes); nil: through the actors.
		out *outStream
	}
	runnerShutdown struct{}
	shutdownKill   struct{ gen int }
	// runnerForce: the daemon is stopping and told to hurry; a runner not
	// yet stopped is killed now rather than at the shutdown timeout.
	runnerForce struct{}
)

// runnerActor supervises one runner: for a spawned runner, one slot whose
// process it starts, watches and (through the lane's restart policy)
// replaces; for a bring-your-own runner, one connection it serves until it
// ends.
type runnerActor struct {
	sh      *shared
	lane    actors.Ref
	laneN   string
	cfg     LaneConfig
	socket  string
	id      string
	spawned bool

	gen       int
	attempt   int
	proc      *proc.Incarnation // a spawned runner's current process
	pid       int
	alive     bool // process running (spawned) or connection up (byo)
	spawnedAt time.Time
	readyAt   time.Time
	down      bool // this incarnation was declared lost
	cause     string

	conn *net.UnixConn
	out  chan []byte
	// live is the connection as listed (its bytes queued); a byo runner's
	// is in conns while the actor holds the connection.
	live  *liveConn
	conns *runnerConns
	jobs  map[string]actors.Ref
	// routes: where the connection's reader writes its jobs' output
	// (a runner that sends OutputRaw frames); nil: through this actor.
	routes *outRoutes
	hbSeq  int
	hbStop func()
	// reportedMem is the runner's last heartbeat's memory_bytes;
	// measuredMem our last measurement of its tree (see measure).
	reportedMem, measuredMem uint64
	// measuring: a measurement of this incarnation's tree is under way.
	measuring bool
	// cgPath is the cgroup this incarnation was started in ("": none);
	// its jobs' cgroups are directly below it.
	cgPath  string
	stopReq bool // daemon shutdown
	killReq func()
	pending *connAttach // a byo runner's connection, attached at Started

	// What the connected runner announced: it takes output
	// acknowledgements (and got an output window), streamed stdin.
	credit, stdinOK bool
}

func (r *runnerActor) Receive(c *actors.Context) {
	switch m := c.Message().(type) {
	case actors.Started:
		r.jobs = map[string]actors.Ref{}
		if r.spawned {
			r.spawn(c)
		} else if r.pending != nil {
			p := r.pending
			r.pending = nil
			r.gen = int(r.sh.gens.Add(1))
			r.alive = true
			r.pid = p.peerPid
			if r.pid <= 0 {
				r.pid = int(p.hs.Pid) // not visible to us: take its word
			}
			r.attach(c, p)
		}
	case procStarted:
		if m.gen != r.gen {
			return
		}
		if m.err != nil {
			r.sh.bus.Emit(RunnerSpawnFailed{Lane: r.laneN, RunnerID: r.id, Error: m.err.Error()})
			r.alive = false
			c.SetState("backoff")
			r.publish(c)
			c.Send(r.lane, runnerExited{id: r.id, gen: r.gen, uptime: 0, cause: "spawn_failed", ref: c.Self()})
			return
		}
		r.pid = m.pid
		c.After(handshakeTimeout(r.cfg.HeartbeatTimeout.Duration), hsExpired{gen: r.gen})
		r.sh.bus.Emit(RunnerSpawned{Lane: r.laneN, RunnerID: r.id, Pid: m.pid, Attempt: r.attempt, Network: r.cfg.Network})
		r.publish(c)
	case connAttach:
		if !r.spawned || !r.alive || r.conn != nil || m.gen != r.gen || r.down {
			m.conn.Close()
			return
		}
		if m.hs.Lane != r.laneN {
			r.sh.bus.Emit(eventlog.ConnProtocolError{Lane: r.laneN, Peer: "runner",
				Error: fmt.Sprintf("runner %s handshook for lane %q", r.id, m.hs.Lane), Fatal: true})
			m.conn.Close()
			return
		}
		r.attach(c, &m)
	case connFrame:
		if m.gen == r.gen && !r.down {
			r.frame(c, m.msg)
		}
	case connBadFrame:
		if m.gen == r.gen {
			r.sh.bus.Emit(eventlog.ConnProtocolError{Lane: r.laneN, Peer: "runner", Error: m.err.Error(), Fatal: false})
		}
	case connClosed:
		if m.gen != r.gen || r.down {
			return
		}
		cause, reason := "socket_closed", api.ErrRunnerLost
		if r.stopReq {
			reason = api.ErrDaemonShutdown
		}
		var tooBig *wire.FrameTooLargeError
		if errors.As(m.err, &tooBig) {
			cause = "protocol_error"
			r.sh.bus.Emit(eventlog.ConnProtocolError{Lane: r.laneN, Peer: "runner", Error: m.err.Error(), Fatal: true})
			r.sh.bus.Emit(RunnerKilled{Lane: r.laneN, RunnerID: r.id, Pid: r.pid, Reason: "protocol_error", Detail: m.err.Error()})
		}
		r.lost(c, cause, reason)
		r.retireExternal(c, cause)
	case procExited:
		if m.gen != r.gen {
			return
		}
		reason := api.ErrRunnerLost
		if r.stopReq {
			reason = api.ErrDaemonShutdown
		}
		r.lost(c, "exited", reason)
		r.alive = false
		if r.killReq != nil {
			r.killReq()
			r.killReq = nil
		}
		var code *int
		sig := ""
		if m.exit.Signal != 0 {
			sig = m.exit.Signal.String()
		} else {
			code = &m.exit.Code
		}
		uptime := r.exitedEvent(code, sig, r.cause, m.exit.Uptime)
		r.sh.reaper.Kick()
		if r.stopReq {
			c.SetState("stopped")
			r.publish(c)
			c.Send(r.lane, runnerStopped{id: r.id})
			return
		}
		r.sh.restarts.Add(1)
		c.SetState("backoff")
		r.publish(c)
		c.Send(r.lane, runnerExited{id: r.id, gen: r.gen, uptime: uptime, cause: r.cause, ref: c.Self()})
	case restartIn:
		if m.gen != r.gen || r.stopReq {
			return
		}
		if m.delay <= 0 {
			r.spawn(c)
		} else {
			c.After(m.delay, respawn{gen: r.gen})
		}
	case respawn:
		if m.gen == r.gen && !r.stopReq && !r.alive {
			r.spawn(c)
		}
	case hbExpired:
		if m.gen != r.gen || m.seq != r.hbSeq || r.down {
			return
		}
		timeout := r.cfg.HeartbeatTimeout.Duration
		if n := unreadBytes(r.conn); n > 0 {
			// The runner wrote and the daemon has not read it yet: the
			// daemon is behind (a burst of work starved its reader), not
			// the runner. Its heartbeat is likely among those bytes.
			r.sh.bus.Emit(RunnerHeartbeatBehind{Lane: r.laneN, RunnerID: r.id, Pid: r.pid, UnreadBytes: n,
				TimeoutMs: timeout.Milliseconds()})
			r.armHeartbeat(c)
			return
		}
		r.kill(c, "runner_unresponsive", fmt.Sprintf("no heartbeat for %s", timeout), api.ErrRunnerUnresponsive)
	case hsExpired:
		if m.gen != r.gen || r.down || r.conn != nil || !r.alive {
			return
		}
		r.kill(c, "runner_unresponsive", fmt.Sprintf("no handshake within %s of spawning",
			handshakeTimeout(r.cfg.HeartbeatTimeout.Duration)), api.ErrRunnerUnresponsive)
	case stableTimer:
		if m.gen == r.gen && r.alive && !r.down {
			c.Send(r.lane, runnerStable{id: r.id})
		}
	case assignJob:
		if r.down || r.conn == nil || m.gen != r.gen {
			// Gone before a byte of the job was written (or replaced by
			// another incarnation since the lane chose it): it never
			// reached a runner, so it goes back to the queue (not a retry).
			c.Send(r.lane, jobBounced{runnerID: r.id, gen: m.gen, job: m.job, w: m.w})
			return
		}
		if !r.stdinOK {
			m.w.StdinStream = false // it reads nothing (the job knew: jobDispatched.stdinOK)
		}
		r.jobs[m.w.JobID] = m.job
		if r.routes != nil && m.out != nil {
			r.routes.set(m.w.JobID, m.out)
		}
		if !r.send(c, wire.TypeJob, m.w) {
			return
		}
		r.publish(c)
	case memMeasured:
		r.measured(c, m)
	case outputAckMsg:
		r.runnerOutputAck(c, m)
	case toRunnerStdin:
		r.runnerStdin(c, m)
	case cancelOnRunner:
		if _, ok := r.jobs[m.jobID]; ok && !r.down {
			r.send(c, wire.TypeCancel, wire.Cancel{JobID: m.jobID, Force: m.force})
		}
	case runnerShutdown:
		r.stopReq = true
		c.SetState("stopping")
		if !r.alive {
			c.Send(r.lane, runnerStopped{id: r.id})
			return
		}
		if r.conn == nil && r.spawned && !r.down {
			// Not handshaken yet: it holds no jobs, so no need to wait.
			r.lost(c, "shutdown", api.ErrDaemonShutdown)
			return
		}
		if r.conn != nil && !r.down {
			r.send(c, wire.TypeShutdown, wire.Shutdown{})
		}
		r.killReq = c.After(r.sh.shutdownTimeout, shutdownKill{gen: r.gen})
	case shutdownKill:
		if m.gen != r.gen || !r.alive {
			return
		}
		r.killAtShutdown(c, "shutdown_timeout", fmt.Sprintf("still running %s after Shutdown", r.sh.shutdownTimeout))
	case runnerForce:
		if !r.stopReq || !r.alive {
			return
		}
		if r.killReq != nil {
			r.killReq()
			r.killReq = nil
		}
		r.killAtShutdown(c, "shutdown_forced", "the daemon was told to stop again while stopping")
	case actors.Stopped, actors.Restarting:
		// Last resort: whatever is still running dies with the actor
		// (daemon shutdown, or this actor panicked and is replaced).
		if r.alive && r.spawned && r.pid > 0 {
			r.proc.Kill()
		}
		r.dropListed()
		if r.conn != nil {
			r.conn.Close()
		}
		for _, j := range r.jobs {
			c.Send(j, jobLost{reason: api.ErrDaemonShutdown})
		}
	}
}

// spawn starts a new incarnation of the runner process. Start and Wait run
// on a goroutine that reports back; Receive never blocks on the process.
//
// The runner gets its connection to the daemon as an inherited end of a
// socketpair (fd 3): no other process can reach that connection, so a
// spawned runner needs no secret, and nothing connecting to the lane
// socket can pass for it. It starts in a cgroup of its own when the daemon
// has one (its jobs get cgroups below it), and hides the daemon's home from
// its jobs.
func (r *runnerActor) spawn(c *actors.Context) {
	r.gen = int(r.sh.gens.Add(1))
	r.attempt++
	r.down, r.cause, r.alive = false, "", true
	r.proc, r.pid, r.reportedMem, r.measuredMem = nil, 0, 0, 0
	r.spawnedAt = time.Now()
	c.SetState("starting")
	gen, self, sys := r.gen, c.Self(), c.System()
	fail := func(err error) {
		sys.Send(self, procStarted{gen: gen, err: fmt.Errorf("starting runner %s: %w", r.id, err)})
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fail(fmt.Errorf("making its socketpair: %w", err))
		return
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "runner-"+r.id), os.NewFile(uintptr(fds[1]), "daemon")
	args := []string{"runner", "--lane", r.laneN, "--fd", "3", "--id", r.id}
	if r.sh.sandbox {
		for _, h := range r.sh.hide {
			args = append(args, "--hide", h)
		}
	}
	var cg *proc.Cgroup
	r.cgPath = ""
	if r.sh.cgroup != nil {
		if cg, err = r.sh.cgroup.Mkdir(r.id + "." + strconv.Itoa(gen)); err == nil {
			r.cgPath = cg.Path
			args = append(args, "--cgroup", cg.Path)
		} else {
			r.sh.log.Warn().Err(err).Str("runner_id", r.id).Msg("runner starts without a cgroup: its jobs are tracked by process group")
		}
	}
	hsTimeout := handshakeTimeout(r.cfg.HeartbeatTimeout.Duration)
	r.proc = proc.Spawn(proc.Spec{
		Path:       "/proc/self/fd/" + strconv.Itoa(int(r.sh.exeFile.Fd())),
		Args:       append([]string{r.sh.exe}, args...),
		Env:        append(proc.CleanEnv(os.Environ(), r.cfg.InheritEnv), r.sh.runnerEnv...),
		Stderr:     r.sh.runnerStderr,
		ExtraFiles: []*os.File{theirs},
		Isolation:  runnerIsolation(r.cfg.Network, cg, r.sh.sandbox),
		Nice:       r.cfg.Nice,
		Reaper:     r.sh.reaper,
		OnStart: func(pid int, err error) {
			if err != nil {
				ours.Close()
				fail(proc.ExplainSpawnError(err))
				return
			}
			sys.Send(self, procStarted{gen: gen, pid: pid})
			go r.handshakeSpawned(sys, self, gen, pid, ours, hsTimeout)
		},
		OnExit: func(e proc.Exit) { sys.Send(self, procExited{gen: gen, exit: e}) },
		// Job processes a dead runner left are re-parented to the daemon,
		// whose reaper kills them with an event each; what the reaper has
		// not reached within the grace is killed with the cgroup.
		Warn: func(err error) { r.sh.log.Warn().Err(err).Msg("removing a runner's cgroup") },
	})
}

// handshakeSpawned reads a spawned runner's Handshake off its socketpair
// and hands the connection to the runner actor, tagged with its
// incarnation. On failure the connection is closed: the runner exits, and
// its exit (or the handshake timer) drives what follows.
func (r *runnerActor) handshakeSpawned(sys *actors.System, self actors.Ref, gen, pid int, f *os.File, timeout time.Duration) {
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		r.sh.bus.Emit(RunnerRejected{Lane: r.laneN, Pid: pid, Reason: "socketpair: " + err.Error()})
		return
	}
	conn := fc.(*net.UnixConn)
	hs, br, err := readHandshake(conn, r.sh.maxFrame, timeout)
	if err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
			r.sh.bus.Emit(eventlog.ConnProtocolError{Lane: r.laneN, Peer: "runner", Error: err.Error(), Fatal: true})
		}
		conn.Close()
		return
	}
	sys.Send(self, connAttach{gen: gen, conn: conn, br: br, hs: hs, peerPid: pid})
}

// attach takes over a handshaken connection: ack it, start its reader and
// writer, and tell the lane the runner is ready.
func (r *runnerActor) attach(c *actors.Context, a *connAttach) {
	r.conn = a.conn
	r.out = make(chan []byte, 1024)
	r.live = &liveConn{id: r.id, pid: int32(r.pid), since: time.Now()}
	if !r.spawned && r.conns != nil {
		r.conns.add(r.live)
	}
	gen, self, sys := r.gen, c.Self(), c.System()
	r.credit = slices.Contains(a.hs.Capabilities, wire.CapOutputCredit)
	r.stdinOK = slices.Contains(a.hs.Capabilities, wire.CapStdinStream)
	cfg := wire.RunnerConfig{Lane: r.laneN, HeartbeatIntervalMs: heartbeatInterval(r.cfg.HeartbeatTimeout.Duration),
		MaxFrameBytes: r.sh.maxFrame, Env: r.cfg.Env, InheritEnv: r.cfg.InheritEnv}
	if r.credit {
		cfg.OutputWindow = OutputWindow
		cfg.OutputRaw = slices.Contains(a.hs.Capabilities, wire.CapOutputRaw)
	}
	r.routes = nil
	if cfg.OutputRaw {
		r.routes = newOutRoutes()
	}
	cfg.JobUsage = slices.Contains(a.hs.Capabilities, wire.CapJobUsage)
	ack, err := wire.Marshal(wire.TypeHandshakeAck, wire.HandshakeAck{Accepted: true, Slots: r.cfg.Slots, Config: cfg})
	if err == nil {
		r.live.queued.Add(int64(len(ack)))
		r.out <- ack
	}
	go writeLoop(a.conn, r.out, &r.live.queued)
	go readLoop(sys, self, gen, a.br, r.sh.maxFrame, r.routes, r.sh)
	r.readyAt = time.Now()
	startMs := int64(0)
	if r.spawned {
		startMs = r.readyAt.Sub(r.spawnedAt).Milliseconds()
	}
	r.sh.bus.Emit(RunnerReady{Lane: r.laneN, RunnerID: r.id, Pid: r.pid, Slots: r.cfg.Slots,
		Spawned: r.spawned, Version: a.hs.Version, StartMs: startMs})
	c.SetState("ready")
	r.armHeartbeat(c)
	c.After(r.cfg.Restart.Stable.Duration, stableTimer{gen: gen})
	c.Send(r.lane, runnerUp{id: r.id, ref: c.Self(), gen: r.gen, pid: r.pid, slots: r.cfg.Slots, spawned: r.spawned, stdinOK: r.stdinOK})
	r.publish(c)
}

// measure starts the daemon's own measurement of the runner's process tree
// (the runner and every descendant, its jobs included), one at a time, off
// the actor's goroutine. A runner's memory_bytes is its own word; the limit
// is enforced on what we see.
func (r *runnerActor) measure(c *actors.Context) {
	if r.measuring || r.pid <= 0 {
		return
	}
	r.measuring = true
	pid, gen, self, sys := r.pid, r.gen, c.Self(), c.System()
	go func() { sys.Send(self, memMeasured{gen: gen, bytes: proctree.RSS(pid)}) }()
}

func (r *runnerActor) measured(c *actors.Context, m memMeasured) {
	r.measuring = false
	if m.gen != r.gen || r.down || r.conn == nil {
		return
	}
	r.measuredMem = m.bytes
	if lim := r.cfg.MaxRunnerMemoryBytes; lim > 0 && m.bytes > lim {
		r.kill(c, "memory_limit", fmt.Sprintf("runner's process tree measured at %d bytes (it reports %d), over max_runner_memory_bytes %d",
			m.bytes, r.reportedMem, lim), api.ErrRunnerMemory)
	}
}

// unreadBytes is how many bytes wait unread in conn's receive queue (0
// for none, or when it cannot be told).
func unreadBytes(conn *net.UnixConn) int {
	if conn == nil {
		return 0
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return n
}

func (r *runnerActor) armHeartbeat(c *actors.Context) {
	if r.hbStop != nil {
		r.hbStop()
	}
	r.hbSeq++
	r.hbStop = c.After(r.cfg.HeartbeatTimeout.Duration, hbExpired{gen: r.gen, seq: r.hbSeq})
}

func (r *runnerActor) frame(c *actors.Context, msg any) {
	switch m := msg.(type) {
	case wire.JobAck:
		j, ok := r.jobs[m.JobID]
		if !ok {
			return
		}
		if m.Accepted {
			c.Send(j, jobAcked{})
			return
		}
		// A refusal is followed by a Result; if it is not, the job would
		// hang, so end it here and let a late Result find nobody.
		reason := "rejected by runner"
		if m.Error != nil {
			reason = *m.Error
		}
		r.dropJob(m.JobID)
		c.Send(j, jobRejected{reason: reason})
		c.Send(r.lane, slotFreed{id: r.id})
		r.publish(c)
	case wire.OutputChunk:
		if j, ok := r.jobs[m.JobID]; ok {
			c.Send(j, jobOutput{stream: m.Stream, data: m.Chunk})
		}
	case outputWritten:
		if j, ok := r.jobs[m.jobID]; ok {
			c.Send(j, jobOutput{stream: m.stream, data: m.data, written: true})
		}
	case wire.Result:
		j, ok := r.jobs[m.JobID]
		if !ok {
			return
		}
		r.dropJob(m.JobID)
		for _, k := range m.Killed {
			r.sh.bus.Emit(OrphanKilled{Pid: k.Pid, JobID: m.JobID, Lane: r.laneN, Command: k.Comm, Reason: "job_ended"})
		}
		if r.stopReq && m.Status == wire.StatusCancelled {
			c.Send(j, jobLost{reason: api.ErrDaemonShutdown})
		} else {
			c.Send(j, jobResult{res: m})
		}
		c.Send(r.lane, slotFreed{id: r.id})
		r.publish(c)
	case wire.JobStarted:
		if dir, name := path.Split(m.Cgroup); r.cgPath == "" || dir != r.cgPath+"/" || name == "" {
			m.Cgroup = "" // only a cgroup below this incarnation's own is the job's
		}
		if j, ok := r.jobs[m.JobID]; ok {
			c.Send(j, jobRoot{runnerPid: r.pid, root: m, maxMem: r.cfg.MaxMemoryBytes, maxCPU: r.cfg.MaxCPUSeconds})
		}
	case wire.StdinAck:
		if j, ok := r.jobs[m.JobID]; ok {
			c.Send(j, jobStdinAcked{bytes: m.Bytes})
		}
	case wire.CancelAck:
	case wire.Heartbeat:
		r.reportedMem = m.MemoryBytes
		r.armHeartbeat(c)
		r.send(c, wire.TypeHeartbeatAck, wire.HeartbeatAck{Timestamp: uint64(time.Now().UnixMilli())})
		if lim := r.cfg.MaxRunnerMemoryBytes; lim > 0 {
			if m.MemoryBytes > lim {
				r.kill(c, "memory_limit", fmt.Sprintf("runner reports %d bytes, over max_runner_memory_bytes %d", m.MemoryBytes, lim), api.ErrRunnerMemory)
				return
			}
			r.measure(c)
		}
		r.publish(c)
	case wire.Handshake:
		r.sh.bus.Emit(eventlog.ConnProtocolError{Lane: r.laneN, Peer: "runner", Error: "second Handshake ignored", Fatal: false})
	}
}

// send queues a frame for the writer. A runner that has stopped reading
// until 1024 frames are queued is treated as unresponsive.
func (r *runnerActor) send(c *actors.Context, t wire.MsgType, v any) bool {
	if r.out == nil {
		return false
	}
	b, err := wire.Marshal(t, v)
	if err != nil {
		return false
	}
	r.live.queued.Add(int64(len(b)))
	select {
	case r.out <- b:
		return true
	default:
		r.live.queued.Add(-int64(len(b)))
		r.kill(c, "runner_unresponsive", "runner stopped reading its socket", api.ErrRunnerUnresponsive)
		return false
	}
}

// kill replaces an unhealthy runner: the event says why, its jobs fail with
// jobErr, its process group gets SIGKILL, and procExited does the rest.
func (r *runnerActor) kill(c *actors.Context, reason, detail, jobErr string) {
	r.sh.bus.Emit(RunnerKilled{Lane: r.laneN, RunnerID: r.id, Pid: r.pid, Reason: reason, Detail: detail})
	r.lost(c, "killed_"+reason, jobErr)
	r.retireExternal(c, "killed_"+reason)
}

// killAtShutdown ends a runner that has not stopped by itself after
// Shutdown: its jobs end cancelled (daemon_shutdown), a spawned runner's
// group is killed, a bring-your-own runner is disconnected.
func (r *runnerActor) killAtShutdown(c *actors.Context, reason, detail string) {
	r.sh.bus.Emit(RunnerKilled{Lane: r.laneN, RunnerID: r.id, Pid: r.pid, Reason: reason, Detail: detail})
	r.sh.killedOnShutdown.Add(1)
	r.lost(c, reason, api.ErrDaemonShutdown)
	if r.spawned {
		// lost spares a runner that closed its socket at shutdown; now its
		// group dies regardless (if it is still being started, as soon as
		// it has; nil: its start failed before a process was asked for).
		if r.proc != nil {
			r.proc.Kill()
		}
	} else {
		c.Send(r.lane, runnerStopped{id: r.id})
		r.retireExternal(c, reason)
	}
}

// retireExternal ends a bring-your-own runner's actor once its connection
// is gone: it cannot be restarted, so it leaves the lane. A no-op for
// spawned runners, whose process exit (procExited) drives what follows.
func (r *runnerActor) retireExternal(c *actors.Context, cause string) {
	if r.spawned {
		return
	}
	var uptime time.Duration
	if !r.readyAt.IsZero() {
		uptime = time.Since(r.readyAt)
	}
	r.exitedEvent(nil, "", cause, uptime)
	c.StopSelf()
}

// lost declares the current incarnation gone: its jobs end at once with
// jobErr (never retried), the lane stops dispatching to it, its connection
// closes and its process group is killed.
func (r *runnerActor) lost(c *actors.Context, cause, jobErr string) {
	if r.down {
		return
	}
	r.down = true
	r.cause = cause
	for id, j := range r.jobs {
		c.Send(j, jobLost{reason: jobErr})
		delete(r.jobs, id)
	}
	if r.routes != nil {
		r.routes.clear()
		r.routes = nil
	}
	c.Send(r.lane, runnerDown{id: r.id})
	if r.hbStop != nil {
		r.hbStop()
		r.hbStop = nil
	}
	if r.conn != nil {
		r.dropListed()
		r.conn.Close()
		close(r.out)
		r.conn, r.out = nil, nil
	}
	// At shutdown a runner closing its socket is exiting as asked: give it
	// until the shutdown timer (shutdownKill) before the group is killed.
	graceful := r.stopReq && cause == "socket_closed"
	if r.spawned && r.alive && r.pid > 0 && !graceful {
		r.proc.Kill()
	}
	c.SetState("down")
}

// exitedEvent logs the end of an incarnation (a spawned runner's process,
// a bring-your-own runner's connection), up for uptime, and returns the
// uptime in milliseconds.
func (r *runnerActor) exitedEvent(code *int, sig, cause string, uptime time.Duration) int64 {
	if cause == "" {
		cause = "exited"
	}
	ms := uptime.Milliseconds()
	r.sh.bus.Emit(RunnerExited{Lane: r.laneN, RunnerID: r.id, Pid: r.pid, ExitCode: code, Signal: sig,
		UptimeMs: ms, Cause: cause, Spawned: r.spawned})
	return ms
}

func (r *runnerActor) publish(c *actors.Context) {
	st := api.RunnerStatus{ID: r.id, Pid: r.pid, State: "", Restarts: max(r.attempt-1, 0), ActiveJobs: len(r.jobs),
		MemoryBytes: max(r.reportedMem, r.measuredMem), Spawned: r.spawned}
	switch {
	case r.stopReq:
		st.State = "stopping"
	case r.down || !r.alive:
		st.State = "backoff"
	case r.conn != nil:
		st.State = "ready"
		st.UptimeMs = time.Since(r.readyAt).Milliseconds()
	default:
		st.State = "starting"
	}
	if st.State == "backoff" || !r.alive {
		st.Pid, st.LastPid = 0, r.pid // a dead process's pid is not the runner's
	}
	c.Send(r.lane, st)
}

// dropJob: the runner no longer holds job id.
func (r *runnerActor) dropJob(id string) {
	delete(r.jobs, id)
	if r.routes != nil {
		r.routes.del(id)
	}
}

// runnerFrames decodes the frames a runner may send into the wire structs
// the runner actor handles.
var runnerFrames = map[wire.MsgType]func(wire.Frame) (any, error){
	wire.TypeJobAck:      decodeFrame[wire.JobAck],
	wire.TypeOutputChunk: decodeFrame[wire.OutputChunk],
	wire.TypeResult:      decodeFrame[wire.Result],
	wire.TypeCancelAck:   decodeFrame[wire.CancelAck],
	wire.TypeHeartbeat:   decodeFrame[wire.Heartbeat],
	wire.TypeHandshake:   decodeFrame[wire.Handshake],
	wire.TypeStdinAck:    decodeFrame[wire.StdinAck],
	wire.TypeOutputRaw:   decodeOutputRaw,
	wire.TypeJobStarted:  decodeJobStarted,
}

// decodeJobStarted decodes a JobStarted frame (CapJobUsage), refusing one
// that names no process.
func decodeJobStarted(f wire.Frame) (any, error) {
	var s wire.JobStarted
	if err := wire.Unmarshal(f, &s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeOutputRaw decodes an OutputRaw frame (CapOutputRaw) into the
// OutputChunk it carries.
func decodeOutputRaw(f wire.Frame) (any, error) { return wire.DecodeOutputRaw(f.Payload) }

func decodeFrame[T any](f wire.Frame) (any, error) {
	var v T
	err := wire.Unmarshal(f, &v)
	return v, err
}

// readLoop decodes frames off a runner connection into messages for the
// runner actor. It ends when the connection does.
func readLoop(sys *actors.System, self actors.Ref, gen int, br *bufio.Reader, maxFrame uint32, routes *outRoutes, sh *shared) {
	fr := wire.NewFrameReader(br, maxFrame)
	if routes != nil {
		fr.Alloc = allocFrame
	}
	for {
		f, err := fr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = nil
			}
			sys.Send(self, connClosed{gen: gen, err: err})
			return
		}
		var msg any
		if f.Type == wire.TypeOutputRaw && routes != nil {
			owned := fr.Alloc != nil && len(f.Payload) >= chunkPoolMin
			if msg, err = routes.routeOutputRaw(sh, f.Payload, owned); err == nil && msg == nil {
				continue // written into the job's stream
			}
		} else if dec, ok := runnerFrames[f.Type]; ok {
			msg, err = dec(f)
		} else {
			err = fmt.Errorf("unexpected frame %s from runner", f.Type)
		}
		if err != nil {
			sys.Send(self, connBadFrame{gen: gen, err: err})
			continue
		}
		sys.Send(self, connFrame{gen: gen, msg: msg})
	}
}

// dropListed unlists the connection the actor lets go of.
func (r *runnerActor) dropListed() {
	if r.live != nil && r.conns != nil {
		r.conns.remove(r.live)
	}
	r.live = nil
}

// writeLoop writes queued frames, coalescing what is queued into one write;
// queued counts the bytes not yet taken by the socket.
func writeLoop(conn *net.UnixConn, out <-chan []byte, queued *atomic.Int64) {
	var buf []byte
	for b := range out {
		buf = append(buf[:0], b...)
	more:
		for len(buf) < 256<<10 {
			select {
			case nb, ok := <-out:
				if !ok {
					break more
				}
				buf = append(buf, nb...)
			default:
				break more
			}
		}
		if _, err := conn.Write(buf); err != nil {
			for range out { // drain until the actor closes the channel
			}
			return
		}
		queued.Add(-int64(len(buf)))
	}
}

// heartbeatInterval is what a runner is told to use: once a second, or
// often enough that three beats fit in the lane's heartbeat timeout, so one
// late beat never costs a runner its life.
func heartbeatInterval(timeout time.Duration) uint64 {
	iv := min(time.Second, timeout/3)
	return uint64(max(iv.Milliseconds(), 10))
}

// handshakeTimeout is how long a spawned runner has to connect and
// handshake: generous, since a loaded machine can be slow to start one.
func handshakeTimeout(heartbeat time.Duration) time.Duration {
	return max(10*time.Second, 2*heartbeat)
}
