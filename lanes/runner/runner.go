// Package runner is the child side of a runner lane: the process the daemon
// spawns as `orchestrd runner --lane L --socket P --id ID`. It dials the
// lane's unix socket, speaks the Loopr daemon<->runner frame protocol (see
// package wire), runs each Job in its own process group and streams its
// output back.
//
// Goroutines: one reads frames (and answers Job/Cancel inline), one sends
// heartbeats, and each running job has one goroutine waiting for its process
// plus one per output pipe. Every frame goes out through send, which holds a
// mutex for the single Write, so frames never interleave.
package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/wire"
)

// Options configures Run.
type Options struct {
	Lane    string
	Socket  string // unix socket path of the lane (daemon listens there)
	ID      string // runner id given by the daemon, may be empty for bring-your-own
	Version string // sent in Handshake
	Logger  zerolog.Logger
	// HeartbeatInterval defaults to 1s; HandshakeAck.Config.HeartbeatIntervalMs
	// overrides it when > 0.
	HeartbeatInterval time.Duration
	// Conn, when set, is the connection to the daemon, already open: a
	// runner the daemon spawns gets its end of a socketpair (no one else can
	// reach it, so it needs no secret). Socket is then ignored.
	Conn *net.UnixConn
	// Token is sent in the Handshake: a bring-your-own runner's proof that
	// it may join the lane (the lane's join token).
	Token string
	// Sandbox is what the runner puts around its jobs; see Sandbox.
	Sandbox Sandbox
	// Routine is the level of the runner's routine lines (connected,
	// stopping); zerolog's zero value is debug. A runner the daemon
	// spawns says them at debug (the daemon's event log has its comings
	// and goings), one started by hand at info.
	Routine zerolog.Level
}

// Sandbox is what a runner puts around its jobs, beyond running each in
// its own process group without any capability and with no_new_privs
// (which every runner does).
type Sandbox struct {
	// Hide lists paths the jobs must not see (the daemon's home, with its
	// sockets): each gets an empty read-only tmpfs over it. The runner must
	// be in a mount namespace of its own, as the daemon starts it.
	Hide []string
	// Cgroup is the cgroup v2 directory the runner was started in (the
	// daemon made it). Each job then runs in a cgroup of its own below it,
	// so everything a job starts, daemonised or not, is found and killed
	// when it ends; "" tracks jobs by process group and Subreaper instead.
	Cgroup string
	// Subreaper makes the runner the child subreaper of its jobs'
	// descendants, so a process a job daemonises is re-parented to the
	// runner (and reaped by it) instead of escaping to PID 1. Only for a
	// process that is a runner and nothing else: it reaps children it did
	// not start itself.
	Subreaper bool
}

// Capabilities is what the runner announces in its Handshake.
var Capabilities = []string{
	"argv", "command", "cwd", "env", "worktree_dir", "file_paths",
	"cancel", "timeout", "output_chunk", "max_output_bytes", "heartbeat", "kill_grace",
	wire.CapOutputCredit, wire.CapStdinStream, wire.CapOutputRaw, wire.CapJobUsage,
}

const (
	defaultHeartbeat = time.Second
	maxHeartbeat     = 24 * time.Hour
	// handshakeTimeout bounds the wait for HandshakeAck.
	handshakeTimeout = 10 * time.Second
	// shutdownWriteGrace bounds the writes of the final Results on a clean
	// shutdown, so a daemon that stopped reading cannot hold Run open.
	shutdownWriteGrace = 5 * time.Second
	// chunkMax is the largest OutputChunk payload.
	chunkMax = 32 << 10
	// rawChunkMax is the largest OutputRaw chunk (the pipe's reads give at
	// most its buffer, 1 MiB grown (jobPipeSize) or 64 KiB, or what piled
	// up in it). Its frame's payload (the chunk, its stream and job id)
	// fits the daemon's 512 KiB buffer class (lanes' chunkPool). Every
	// frame wakes the daemon's reader, the stream's reader and the client:
	// 512 KiB chunks moved a job writing at full speed ~25% faster than 256
	// KiB (fewer wake-ups), with two in the 1 MiB output window.
	rawChunkMax = 512<<10 - 512
	// sockSendBuffer is the send buffer asked for the daemon's socket when
	// output goes as OutputRaw frames. The default (208 KiB) held less than
	// one 512 KiB chunk: each frame was written in three or four writev
	// calls, one of them refused (EAGAIN), each a wake-up of the runner and
	// the daemon's reader. With 1 MiB (measured, `run` of 256 MiB): writev
	// calls 2,650 -> 271-547, none refused; epoll waits 4,229 -> 2,131-2,947;
	// `run` 692-724 -> 838-955 MB/s.
	sockSendBuffer = 1 << 20
	// smallChunk is the read buffer a pump starts with; it takes one of
	// rawChunkMax once a read filled it (the job writes faster than the
	// runner reads), so a job writing little never touches a large one.
	smallChunk = 64 << 10
)

// errShutdown is returned by the read loop when a Shutdown frame arrives.
var errShutdown = errors.New("shutdown requested by the daemon")

type runner struct {
	opts    Options
	log     zerolog.Logger
	started time.Time
	cwd     string // the runner's working directory, for relative paths
	// hidden is what the sandbox covers for every job (Sandbox.Hide and
	// the cgroup tree): a working directory inside it is refused by name.
	hidden  []string
	devNull *os.File

	conn *net.UnixConn
	// spawner forks jobs from a thread without privileges; reaper (may be
	// nil) reaps what they leave; cg (may be nil) holds one cgroup per job.
	spawner *proc.Spawner
	reaper  *proc.Reaper
	cg      *proc.Cgroup
	baseEnv []string // what every job's environment starts from (jobBaseEnv)
	// init: the runner is pid 1 of a pid namespace of its own; its jobs'
	// pids are that namespace's, and hostProc (a descriptor of the /proc
	// it was started with) turns them into the pids the daemon knows.
	init     bool
	hostProc int
	// cgPool holds emptied job cgroups for reuse, cgSeq names new ones
	// (both under mu).
	cgPool []*proc.Cgroup
	cgSeq  int
	slots  int
	maxOut int // largest frame payload the daemon accepts
	chunk  int // largest OutputChunk data per frame
	// window is the output a job may have sent beyond what the daemon
	// acknowledged (RunnerConfig.OutputWindow); 0: no flow control (a
	// daemon that knows none, such as Loopr's).
	window int64
	// raw: the daemon takes job output as OutputRaw frames
	// (RunnerConfig.OutputRaw).
	raw bool
	// jobUsage: the daemon takes each job's root (JobStarted) and its
	// wait's rusage (Result.rusage) (RunnerConfig.JobUsage).
	jobUsage bool

	wmu  sync.Mutex
	werr error // first write error; later sends fail fast

	mu      sync.Mutex
	closing bool
	jobs    map[string]*job
	wg      sync.WaitGroup // one per registered job

	// owners mirrors jobs for ownerOf, under a lock of its own taken last
	// (nothing else is locked while it is held): ownerOf runs with a job's
	// mu held (a stop's strays), and mu is taken before a job's mu
	// elsewhere (the heartbeat), so ownerOf may take neither.
	ownersMu sync.Mutex
	owners   map[string]*job
}

// Run connects, handshakes and serves jobs until ctx is cancelled (a clean
// shutdown, as for a Shutdown frame), a Shutdown frame arrives (returns nil),
// or the socket fails (returns a wrapped error). It never leaves a job process
// behind when it returns.
func Run(ctx context.Context, opts Options) error {
	if opts.Socket == "" && opts.Conn == nil {
		return errors.New("runner: no socket path")
	}
	if opts.Conn != nil {
		defer opts.Conn.Close()
	}
	r := &runner{opts: opts, log: opts.Logger, started: time.Now(), jobs: make(map[string]*job)}
	if ctx.Err() != nil {
		return nil
	}
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("runner: reading working directory: %w", err)
	}
	r.cwd = cwd
	r.devNull, err = os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("runner: opening %s: %w", os.DevNull, err)
	}
	defer r.devNull.Close()
	if err := r.setUp(); err != nil {
		return err
	}
	defer r.tearDown()

	if opts.Conn != nil {
		r.conn = opts.Conn
	} else {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", opts.Socket)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("runner: connecting to %s: %w", opts.Socket, err)
		}
		r.conn = c.(*net.UnixConn)
	}
	defer r.conn.Close()

	br := bufio.NewReaderSize(r.conn, 64<<10)
	ack, err := r.handshake(ctx, br)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	r.baseEnv = jobBaseEnv(os.Environ(), ack.Config)
	r.slots = ack.Slots
	if r.slots <= 0 {
		r.log.Warn().Int("slots", ack.Slots).Msg("HandshakeAck gave no slots; running one job at a time")
		r.slots = 1
	}
	if err := r.startSpawner(); err != nil {
		return err
	}
	r.maxOut = wire.DefaultMaxFrame
	if ack.Config.MaxFrameBytes > 0 {
		r.maxOut = int(ack.Config.MaxFrameBytes)
	}
	// A chunk byte costs up to 4 bytes of JSON ("255,").
	r.chunk = min(chunkMax, max(256, (r.maxOut-512)/4))
	r.window = int64(min(ack.Config.OutputWindow, 1<<40))
	r.raw = ack.Config.OutputRaw
	if r.raw {
		// Best effort: net.core.wmem_max caps it (the kernel doubles it).
		_ = r.conn.SetWriteBuffer(sockSendBuffer)
	}
	r.jobUsage = ack.Config.JobUsage
	if r.raw {
		r.chunk = min(rawChunkMax, max(256, r.maxOut-512))
	}
	hb := opts.HeartbeatInterval
	if hb <= 0 {
		hb = defaultHeartbeat
	}
	if ms := ack.Config.HeartbeatIntervalMs; ms > 0 {
		hb = time.Duration(min(ms, uint64(maxHeartbeat/time.Millisecond))) * time.Millisecond
	}
	r.log.WithLevel(opts.Routine).Str("socket", opts.Socket).Bool("inherited_connection", opts.Conn != nil).Int("slots", r.slots).Dur("heartbeat", hb).Msg("runner connected")

	readDone := make(chan error, 1)
	go func() { readDone <- r.readLoop(wire.NewFrameReader(br, ack.Config.MaxFrameBytes)) }()
	hbStop, hbDone := make(chan struct{}), make(chan struct{})
	go r.heartbeatLoop(hb, hbStop, hbDone)

	var readErr error
	readerRunning := true
	select {
	case <-ctx.Done():
		r.log.WithLevel(r.opts.Routine).Msg("runner stopping: context cancelled")
	case readErr = <-readDone:
		readerRunning = false
		if errors.Is(readErr, errShutdown) {
			r.log.WithLevel(r.opts.Routine).Msg("runner stopping: Shutdown frame")
			readErr = nil
		}
	}

	if readErr == nil {
		// Clean shutdown: cancel the running jobs and let them report.
		_ = r.conn.SetWriteDeadline(time.Now().Add(shutdownWriteGrace))
		r.stopJobs(reasonShutdown)
		r.wg.Wait()
		close(hbStop)
		<-hbDone
		_ = r.conn.CloseWrite()
		r.conn.Close()
		if readerRunning {
			<-readDone
		}
		return nil
	}

	// The connection failed: no one can hear the Results any more.
	r.conn.Close()
	r.stopJobs(reasonLost)
	r.wg.Wait()
	close(hbStop)
	<-hbDone
	r.wmu.Lock()
	werr := r.werr
	r.wmu.Unlock()
	if werr != nil && errors.Is(readErr, net.ErrClosed) {
		return fmt.Errorf("runner: writing to the daemon%s: %w", r.where(), werr)
	}
	if errors.Is(readErr, io.EOF) {
		return fmt.Errorf("runner: the daemon closed the connection%s: %w", r.where(), readErr)
	}
	return fmt.Errorf("runner: reading from the daemon%s: %w", r.where(), readErr)
}

// handshake sends Handshake and reads HandshakeAck, giving up when ctx ends
// or after handshakeTimeout.
func (r *runner) handshake(ctx context.Context, br *bufio.Reader) (wire.HandshakeAck, error) {
	var ack wire.HandshakeAck
	_ = r.conn.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = r.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	hs := wire.Handshake{
		Lane:         r.opts.Lane,
		Pid:          uint32(os.Getpid()),
		Version:      r.opts.Version,
		Capabilities: Capabilities,
		Token:        r.opts.Token,
	}
	if err := wire.WriteFrame(r.conn, wire.TypeHandshake, hs); err != nil {
		return ack, fmt.Errorf("runner: handshake%s: %w", r.where(), err)
	}
	f, err := wire.NewFrameReader(br, 0).Next()
	if err != nil {
		return ack, fmt.Errorf("runner: waiting for HandshakeAck%s: %w", r.where(), err)
	}
	if f.Type != wire.TypeHandshakeAck {
		return ack, fmt.Errorf("runner: expected HandshakeAck%s, got a %s frame", r.where(), f.Type)
	}
	if err := wire.Unmarshal(f, &ack); err != nil {
		return ack, fmt.Errorf("runner: handshake%s: %w", r.where(), err)
	}
	if !ack.Accepted {
		reason := ack.Config.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return ack, fmt.Errorf("runner: the daemon refused lane %q: %s", r.opts.Lane, reason)
	}
	if !stop() {
		return ack, ctx.Err()
	}
	if err := r.conn.SetDeadline(time.Time{}); err != nil {
		return ack, fmt.Errorf("runner: %w", err)
	}
	return ack, nil
}

// readLoop reads frames until the stream fails or a Shutdown frame arrives
// (errShutdown). Job and Cancel are answered here.
func (r *runner) readLoop(fr *wire.FrameReader) error {
	for {
		f, err := fr.Next()
		if err != nil {
			return err
		}
		switch f.Type {
		case wire.TypeJob:
			r.handleJob(f)
		case wire.TypeCancel:
			var c wire.Cancel
			if err := wire.Unmarshal(f, &c); err != nil {
				r.log.Warn().Err(err).Msg("ignoring undecodable Cancel frame")
				continue
			}
			r.handleCancel(c.JobID, c.Force)
		case wire.TypeOutputAck:
			var a wire.OutputAck
			if err := wire.Unmarshal(f, &a); err != nil {
				r.log.Warn().Err(err).Msg("ignoring undecodable OutputAck frame")
				continue
			}
			r.outputAcked(a)
		case wire.TypeStdinChunk:
			var c wire.StdinChunk
			if err := wire.Unmarshal(f, &c); err != nil {
				r.log.Warn().Err(err).Msg("ignoring undecodable StdinChunk frame")
				continue
			}
			r.stdinChunk(c)
		case wire.TypeShutdown:
			return errShutdown
		case wire.TypeHeartbeatAck:
		default:
			r.log.Warn().Stringer("type", f.Type).Int("len", len(f.Payload)).Msg("ignoring unexpected frame")
		}
	}
}

// send encodes and writes one frame. After the first write error the
// connection is closed (so the read loop notices) and every later send fails.
func (r *runner) send(t wire.MsgType, v any) error {
	b, err := wire.Marshal(t, v)
	if err != nil {
		r.log.Error().Err(err).Msg("encoding frame")
		return err
	}
	return r.sendRaw(t, b)
}

func (r *runner) sendRaw(t wire.MsgType, b []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.werr != nil {
		return r.werr
	}
	if _, err := r.conn.Write(b); err != nil {
		return r.lostDaemon(fmt.Errorf("writing %s frame: %w", t, err))
	}
	return nil
}

// lostDaemon takes the first write error (r.wmu held): the connection is
// closed, so the read loop notices, and every later send fails with it.
func (r *runner) lostDaemon(err error) error {
	r.werr = err
	r.conn.Close()
	return err
}

// stopJobs refuses further jobs and kills every running job's group at
// once (no grace: the runner is stopping or has lost the daemon).
func (r *runner) stopJobs(reason killReason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = true
	for _, j := range r.jobs {
		j.mu.Lock()
		j.stopLocked(reason, true)
		j.mu.Unlock()
	}
}

// handleCancel stops a job: SIGTERM, then SIGKILL after its grace; at once
// when force, or when it is being stopped already (a second cancel).
func (r *runner) handleCancel(id string, force bool) {
	r.mu.Lock()
	j := r.jobs[id]
	r.mu.Unlock()
	if j == nil {
		_ = r.send(wire.TypeCancelAck, wire.CancelAck{JobID: id, WasRunning: false})
		return
	}
	// j.mu is held across the CancelAck so the job's Result, which is built
	// under j.mu, cannot overtake it.
	j.mu.Lock()
	defer j.mu.Unlock()
	running := j.stopLocked(reasonCancel, force || j.stopping || j.cancelled)
	j.cancelled = true
	_ = r.send(wire.TypeCancelAck, wire.CancelAck{JobID: id, WasRunning: running})
}

// where names the daemon end for messages: " at SOCKET", or "" for a
// spawned runner's socketpair.
func (r *runner) where() string {
	if r.opts.Conn != nil || r.opts.Socket == "" {
		return ""
	}
	return " at " + r.opts.Socket
}

// setUp builds the sandbox before the runner takes any job. With paths to
// hide (the runner is then in a mount namespace of its own) it hides them
// and the whole cgroup tree (the runner keeps its own descriptor to write
// through), mounts a /proc of its pid namespace when it is that
// namespace's init, and moves to its working directory again through the
// new mounts (one inside a hidden path becomes /). It becomes undumpable
// (so a job cannot ptrace it or read its descriptors and memory), the
// subreaper when asked, and starts the spawner thread that forks jobs
// without privileges. Any failure is fatal: a runner never runs a job with
// less isolation than it was started for.
func (r *runner) setUp() error {
	sb := r.opts.Sandbox
	// Descriptors the runner inherited by accident (whatever started the
	// daemon held) must not reach a job.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if sb.Cgroup != "" {
		cg, err := proc.OpenCgroup(sb.Cgroup)
		if err != nil {
			return fmt.Errorf("runner: %w", err)
		}
		r.cg = cg
	}
	r.init = os.Getpid() == 1
	if len(sb.Hide) > 0 {
		if r.init {
			// The /proc of the daemon's pid namespace, kept to name our
			// jobs' processes by the pids the host knows.
			fd, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("runner: opening /proc: %w", err)
			}
			r.hostProc = fd
		}
		r.hidden = proc.WithCgroupRoot(sb.Hide)
		if err := proc.HidePaths(r.hidden...); err != nil {
			return fmt.Errorf("runner: sandboxing jobs: %w", err)
		}
		if r.init {
			if err := proc.MountProc(); err != nil {
				return fmt.Errorf("runner: sandboxing jobs: %w", err)
			}
		}
		if err := os.Chdir(r.cwd); err != nil {
			r.cwd = "/"
			if err := os.Chdir("/"); err != nil {
				return fmt.Errorf("runner: changing to /: %w", err)
			}
		}
	}
	if err := proc.SetNotDumpable(); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	if sb.Subreaper || r.init {
		rp, err := proc.NewReaper(nil)
		if err != nil {
			return fmt.Errorf("runner: %w", err)
		}
		r.reaper = rp
	}
	return nil
}

// startSpawner starts the threads jobs run on, one per slot: each job runs
// whole (start, wait, report) on one of them.
func (r *runner) startSpawner() error {
	sp, err := proc.NewSpawner(r.slots)
	if err != nil {
		return fmt.Errorf("runner: preparing the job spawner: %w", err)
	}
	r.spawner = sp
	return nil
}

// InitSignals is every signal a job could send its runner, the init of
// their pid namespace (see AbsorbInitSignals), but SIGCHLD (its reaper
// needs it), SIGCONT and the Go runtime's own SIGURG and SIGPROF.
var InitSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
	syscall.SIGABRT, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGUSR1, syscall.SIGSEGV, syscall.SIGUSR2,
	syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTERM, syscall.SIGSTKFLT, syscall.SIGTSTP, syscall.SIGTTIN,
	syscall.SIGTTOU, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGWINCH, syscall.SIGIO,
	syscall.SIGPWR, syscall.SIGSYS}

// AbsorbInitSignals takes and drops every signal in InitSignals. The init
// of a pid namespace gets from inside it only the signals it handles, and
// Go handles them all: unhandled, a job's `kill -TERM 1` would stop its
// runner (and every job on it). They are caught, not ignored: an ignored
// signal stays ignored across exec, in every job. The daemon only ever
// sends a runner SIGKILL, which nothing absorbs.
func AbsorbInitSignals() {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, InitSignals...)
	go func() {
		for range ch {
		}
	}()
}

// tearDown kills whatever the jobs left (Run has ended every job by now)
// and releases the sandbox.
func (r *runner) tearDown() {
	if r.reaper != nil {
		// Anything still re-parented to us belongs to no live job.
		for _, o := range r.reaper.Orphans() {
			_ = syscall.Kill(-o.Pgid, syscall.SIGKILL)
			_ = syscall.Kill(o.Pid, syscall.SIGKILL)
		}
		r.reaper.Stop()
		r.reaper = nil
	}
	r.mu.Lock()
	for _, cg := range r.cgPool {
		cg.Close()
	}
	r.cgPool = nil
	r.mu.Unlock()
	if r.cg != nil {
		for _, n := range r.cg.Children() {
			if ch, err := r.cg.Child(n); err == nil {
				_ = ch.Kill()
				ch.WaitEmpty(time.Second)
				_ = ch.Remove()
				ch.Close()
			}
		}
		r.cg.Close()
		r.cg = nil
	}
	if r.spawner != nil {
		r.spawner.Close()
		r.spawner = nil
	}
	if r.hostProc > 0 {
		unix.Close(r.hostProc)
		r.hostProc = 0
	}
}
