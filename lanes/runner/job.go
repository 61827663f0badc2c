package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/wire"
)

const (
	// defaultMaxOutput caps Result.output when the job gives max_output_bytes 0.
	defaultMaxOutput = 1 << 20
	// drainGrace is how long an output pipe may stay open, empty and
	// unwritten after the job and its leftovers were killed: only a process
	// that escaped both (its fd passed to a stranger) can still hold it,
	// and it does not get to hold the Result. A pipe that still has bytes
	// in it, or whose bytes are on their way to the daemon, is never cut:
	// a runner starved of CPU or a slow daemon delays the Result, it does
	// not lose the output's end.
	drainGrace = 250 * time.Millisecond
)

// killReason records why a job's group was killed; the first one wins.
type killReason uint8

const (
	reasonNone     killReason = iota
	reasonTimeout             // timeout_ms expired
	reasonCancel              // Cancel frame
	reasonShutdown            // Shutdown frame or ctx cancelled
	reasonLost                // the connection to the daemon failed
)

// job is one accepted Job.
type job struct {
	r       *runner
	id      string
	pidSeen atomic.Int64 // pid, read without mu (ownerOf)
	path    string       // executable
	argv    []string
	dir     string   // "" = the runner's cwd
	env     []string // nil = the runner's environment
	stdin   []byte   // written to the job's stdin; empty = /dev/null
	timeout time.Duration
	grace   time.Duration // from SIGTERM to SIGKILL when it is cancelled or times out
	limit   int           // cap on collected output
	// execErr: argv[0] is not in the job's PATH; the job is accepted and
	// ends as a shell would end it (127), without a process.
	execErr error

	// reading[s] is set while the pump of stream s waits in a read of its
	// pipe, not in sending what it read.
	reading [2]atomic.Bool

	mu  sync.Mutex
	pid int // process group id once started
	// outputCut: a pipe was cut while something still held it open
	// (drainGrace); Result.output_cut says so.
	outputCut bool
	exited    bool
	reason    killReason
	out       []byte
	truncated bool
	cg        *proc.Cgroup // the job's cgroup, nil without one
	cgKilled  bool         // its leftovers were killed through cgroup.kill
	// Stopping it: force says SIGKILL without a grace (a forced or second
	// cancel, the runner stopping); stopping, that SIGTERM went out and
	// graceTimer will send SIGKILL; stoppedBy, which of the two the job
	// got last (wire.StoppedBy*).
	force    bool
	stopping bool
	// cancelled: a Cancel came already. The next one kills at once, even
	// if the first found the job not yet started (pid 0: its SIGTERM then
	// waits for the start, and stopping is not set yet).
	cancelled  bool
	graceTimer *time.Timer
	stoppedBy  string
	// Flow control (credit.go): output sent and acknowledged, and the
	// stdin fed by StdinChunk frames (nil unless Job.stdin_stream).
	sent, acked int64
	credit      sync.Cond // on mu: acked grew, or the process exited
	in          *stdinStream
}

// stopLocked records reason and stops the job: SIGTERM to all of it and
// SIGKILL to its process group after its grace, or SIGKILL at once when
// force (or an earlier stop) asks for it or the grace is 0. A job not
// started yet is signalled as soon as it is (or not started at all). It
// reports whether the job was still running (not yet exited). j.mu is
// held, and exited is set under it before the process is reaped, so pid
// still names this job's group.
func (j *job) stopLocked(reason killReason, force bool) bool {
	if j.exited {
		return false
	}
	if j.reason == reasonNone {
		j.reason = reason
	}
	j.force = j.force || force
	if j.pid > 0 {
		j.signalLocked()
	}
	return true
}

// signalLocked sends what stopping the started job calls for next.
func (j *job) signalLocked() {
	if j.force || j.grace <= 0 {
		if j.stoppedBy != wire.StoppedBySIGKILL {
			j.stoppedBy = wire.StoppedBySIGKILL
			_ = unix.Kill(-j.pid, unix.SIGKILL)
			if j.graceTimer != nil {
				j.graceTimer.Stop()
			}
		}
		return
	}
	if j.stopping {
		return // SIGTERM went out; the grace runs (a timeout during a cancel's grace changes nothing)
	}
	j.stopping, j.stoppedBy = true, wire.StoppedBySIGTERM
	// As timeout(1) does: a stopped process gets SIGCONT to act on SIGTERM.
	_ = unix.Kill(-j.pid, unix.SIGTERM)
	_ = unix.Kill(-j.pid, unix.SIGCONT)
	for _, p := range j.r.strays(j.id, j.pid, j.cg) {
		_ = unix.Kill(p, unix.SIGTERM)
		_ = unix.Kill(p, unix.SIGCONT)
	}
	j.graceTimer = time.AfterFunc(j.grace, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if !j.exited {
			j.force = true
			j.signalLocked()
		}
	})
}

// handleJob validates a Job frame, reserves a slot, acknowledges it and
// starts it. Runs on the read loop.
func (r *runner) handleJob(f wire.Frame) {
	var spec wire.Job
	if err := wire.Unmarshal(f, &spec); err != nil {
		var idOnly struct {
			JobID string `json:"job_id"`
		}
		if json.Unmarshal(f.Payload, &idOnly) == nil && idOnly.JobID != "" {
			r.log.Warn().Err(err).Str("job_id", idOnly.JobID).Msg("rejecting undecodable Job")
			r.reject(idOnly.JobID, err.Error(), true)
			return
		}
		r.log.Warn().Err(err).Msg("ignoring undecodable Job frame")
		return
	}
	if spec.JobID == "" {
		r.reject("", "job_id is empty", false)
		return
	}
	j, msg := r.prepare(&spec)
	if msg != "" {
		r.log.Warn().Str("job_id", spec.JobID).Str("reason", msg).Msg("rejecting job")
		r.reject(spec.JobID, msg, true)
		return
	}
	withResult := true
	r.mu.Lock()
	switch {
	case r.closing:
		msg = "runner is shutting down"
	case r.jobs[spec.JobID] != nil:
		// A Result for a duplicate id would read as the running job's.
		msg, withResult = fmt.Sprintf("job %q is already running on this runner", spec.JobID), false
	case len(r.jobs) >= r.slots:
		msg = "no free slot"
	default:
		r.jobs[spec.JobID] = j
		r.wg.Add(1)
		r.ownersMu.Lock()
		if r.owners == nil {
			r.owners = map[string]*job{}
		}
		r.owners[spec.JobID] = j
		r.ownersMu.Unlock()
	}
	r.mu.Unlock()
	if msg != "" {
		r.log.Warn().Str("job_id", spec.JobID).Str("reason", msg).Msg("rejecting job")
		r.reject(spec.JobID, msg, withResult)
		return
	}
	_ = r.send(wire.TypeJobAck, wire.JobAck{JobID: spec.JobID, Accepted: true})
	// The whole job runs on a thread of the spawner: the process it starts
	// inherits that thread's lack of privileges, and no hop to another
	// thread sits between a Job frame and its fork.
	r.spawner.Go(j.run)
}

// reject answers a Job that will not run: JobAck{accepted:false} and, if
// withResult, a Result{status: Error} carrying the same message.
func (r *runner) reject(id, msg string, withResult bool) {
	_ = r.send(wire.TypeJobAck, wire.JobAck{JobID: id, Accepted: false, Error: &msg})
	if withResult {
		r.sendResult(wire.Result{JobID: id, Status: wire.StatusError, Output: msg})
	}
}

// prepare turns a Job into a runnable job, or returns why it cannot run.
func (r *runner) prepare(spec *wire.Job) (*job, string) {
	j := &job{r: r, id: spec.JobID}
	j.credit.L = &j.mu
	if spec.StdinStream {
		j.in = newStdinStream()
	}
	if len(spec.Argv) == 0 && spec.Command == "" {
		return nil, "job has neither argv nor command"
	}
	env, pathEnv, err := buildEnv(r.baseEnv, spec.Env, spec.JobID)
	if err != nil {
		return nil, err.Error()
	}
	j.env = env
	dir, err := r.checkPaths(spec)
	if err != nil {
		return nil, err.Error()
	}
	j.dir = dir
	j.stdin = spec.Stdin
	if len(spec.Argv) > 0 {
		p, err := lookPath(spec.Argv[0], pathEnv)
		if errors.Is(err, errNotInPath) {
			j.execErr = err
		} else if err != nil {
			return nil, err.Error()
		}
		j.path, j.argv = p, spec.Argv
	} else {
		j.path, j.argv = "/bin/sh", []string{"sh", "-c", spec.Command}
	}
	j.limit = defaultMaxOutput
	if spec.MaxOutputBytes > 0 {
		j.limit = int(min(spec.MaxOutputBytes, math.MaxInt32))
	}
	if spec.TimeoutMs > 0 && spec.TimeoutMs < math.MaxInt64/uint64(time.Millisecond) {
		j.timeout = time.Duration(spec.TimeoutMs) * time.Millisecond
	}
	j.grace = wire.DefaultKillGraceMs * time.Millisecond
	if g := spec.KillGraceMs; g != nil {
		j.grace = time.Duration(min(*g, maxKillGraceMs)) * time.Millisecond
	}
	return j, ""
}

// EnvJobID names the job in its own environment. It is also how a runner
// without cgroups finds which job a daemonised process belongs to.
const EnvJobID = "ORCHESTRD_JOB_ID"

// EnvJoinToken is read (and removed from the environment) by a
// bring-your-own runner started by hand; jobs never see it.
const EnvJoinToken = "ORCHESTRD_JOIN_TOKEN"

// jobBaseEnv is the environment jobs start from: of the runner's own
// (env), the base variables and those the lane's inherit_env names
// (proc.CleanEnv), never the runner's own settings (its token, its
// logging, systemd's NOTIFY_SOCKET, which a bring-your-own runner run as
// a service has and its jobs must not speak through), then the lane's env
// (cfg.Env, sorted by key). The job's own env goes on top (buildEnv).
func jobBaseEnv(env []string, cfg wire.RunnerConfig) []string {
	clean := proc.CleanEnv(env, cfg.InheritEnv)
	out := make([]string, 0, len(clean)+len(cfg.Env))
	for _, kv := range clean {
		k, _, _ := strings.Cut(kv, "=")
		if k == EnvJoinToken || k == EnvJobID || strings.HasPrefix(k, "ORCHESTRD_LOG_") || k == EnvCPUProfile || k == "NOTIFY_SOCKET" {
			continue
		}
		if _, over := cfg.Env[k]; over {
			continue
		}
		out = append(out, kv)
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		if proc.CheckEnvEntry(k, cfg.Env[k]) == nil {
			out = append(out, k+"="+cfg.Env[k])
		}
	}
	return out
}

// buildEnv returns the job's environment: base with over on top and the
// job's id, and the PATH that argv[0] is looked up in.
func buildEnv(base []string, over map[string]string, id string) ([]string, string, error) {
	for k, v := range over {
		if k == "" || containsAny(k, "=\x00") || containsAny(v, "\x00") {
			return nil, "", fmt.Errorf("invalid environment entry %q", k)
		}
	}
	env := make([]string, 0, len(base)+len(over)+1)
	path := ""
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		if _, ok := over[k]; ok {
			continue
		}
		if k == "PATH" {
			path = v
		}
		env = append(env, kv)
	}
	for k, v := range over {
		env = append(env, k+"="+v)
	}
	if p, ok := over["PATH"]; ok {
		path = p
	}
	return append(env, EnvJobID+"="+id), path, nil
}

func containsAny(s, chars string) bool {
	for i := 0; i < len(s); i++ {
		for k := 0; k < len(chars); k++ {
			if s[i] == chars[k] {
				return true
			}
		}
	}
	return false
}

// lookPath finds an executable in the job's PATH. Names with a slash are used
// as they are (relative ones resolve against the job's cwd at exec). Empty
// and relative PATH entries are skipped.
func lookPath(name, path string) (string, error) {
	if name == "" {
		return "", errors.New("argv[0] is empty")
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			return name, nil
		}
	}
	start := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != ':' {
			continue
		}
		dir := path[start:i]
		start = i + 1
		if dir == "" || dir[0] != '/' {
			continue
		}
		p := dir + "/" + name
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return name, fmt.Errorf("%s: %w", name, errNotInPath)
}

// errNotInPath: a job's argv[0] has no slash and is in no directory of its
// PATH. The words are a shell's.
var errNotInPath = errors.New("command not found")

// maxKillGraceMs bounds a Job frame's kill_grace_ms (the daemon refuses
// more; another daemon may send anything).
const maxKillGraceMs = 3_600_000

// run executes the job and sends its Result; the slot is freed first so the
// daemon may send the next Job as soon as it reads the Result.
func (j *job) run() {
	defer j.r.wg.Done()
	res := j.execute()
	j.r.mu.Lock()
	delete(j.r.jobs, j.id)
	j.r.mu.Unlock()
	j.r.ownersMu.Lock()
	delete(j.r.owners, j.id)
	j.r.ownersMu.Unlock()
	j.r.sendResult(res)
	j.r.releaseCgroup(j.cg, j.cgKilled)
	j.r.log.Debug().Str("job_id", j.id).Str("status", string(res.Status)).Uint64("duration_ms", res.DurationMs).Msg("job finished")
}

func (j *job) execute() wire.Result {
	j.mu.Lock()
	if j.reason != reasonNone {
		// Cancelled before it started.
		j.exited = true
		res := j.resultLocked(nil, 0)
		j.mu.Unlock()
		return res
	}
	j.mu.Unlock()
	if j.execErr != nil {
		return j.execFailed(127, j.execErr.Error())
	}

	in, err := j.openStdin()
	if err != nil {
		return j.startFailed(err)
	}
	defer in.stop()
	outR, outW, err := os.Pipe()
	if err != nil {
		return j.startFailed(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return j.startFailed(err)
	}
	if j.r.raw {
		growPipe(outR)
	}
	jcg := j.r.jobCgroup(j.id)
	// A pooled cgroup's counters carry on from job to job: the job's CPU
	// is what they grew by.
	var cpu0 [2]uint64
	cpuOK := false
	if jcg != nil && j.r.jobUsage {
		cpu0[0], cpu0[1], cpuOK = jcg.CPUStat()
	}
	start := time.Now()
	p, err := j.r.start(j.path, j.argv, &os.ProcAttr{
		Dir:   j.dir,
		Env:   j.env,
		Files: []*os.File{in.file(), outW, errW},
		Sys:   jobSysProcAttr(jcg),
	})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		j.r.removeCgroup(jcg)
		if code, why, ok := j.cannotExec(err); ok {
			return j.execFailed(code, why)
		}
		return j.startFailed(err)
	}
	in.started()
	pid := p.Pid

	j.mu.Lock()
	j.pid, j.cg = pid, jcg
	j.pidSeen.Store(int64(pid))
	if j.reason != reasonNone {
		j.signalLocked() // stopped while it was being started
	}
	j.mu.Unlock()
	if j.r.jobUsage {
		j.r.sendStarted(j.id, pid, jcg)
	}
	var timer *time.Timer
	if j.timeout > 0 {
		timer = time.AfterFunc(j.timeout, func() {
			j.mu.Lock()
			j.stopLocked(reasonTimeout, false)
			j.mu.Unlock()
		})
	}

	drained := make(chan struct{}, 2)
	go j.pump(outR, wire.Stdout, drained)
	go j.pump(errR, wire.Stderr, drained)

	// Wait for the exit without reaping, so the group id cannot be reused
	// before the group is killed.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	j.mu.Lock()
	j.exited = true
	if j.graceTimer != nil {
		j.graceTimer.Stop()
	}
	j.credit.Broadcast() // what is left in its pipes goes without waiting
	j.mu.Unlock()
	// Whatever the job left behind goes with it: its process group, its
	// cgroup, and what it daemonised out of both. The main process is a
	// zombie until Wait, so its pid still names its group.
	killed, cgKilled := j.r.killLeftovers(j.id, pid, jcg)
	state, werr := p.Wait()
	if j.r.reaper != nil {
		j.r.reaper.Unregister(pid)
	}
	j.cg, j.cgKilled = jcg, cgKilled // released once the Result is out: not on the job's critical path
	dur := time.Since(start)
	if timer != nil {
		timer.Stop()
	}

	// The job and its leftovers are dead, so the pipes reach EOF once they
	// are read to their end.
	j.drain([2]*os.File{outR, errR}, drained)
	outR.Close()
	errR.Close()

	if werr != nil {
		return j.startFailed(fmt.Errorf("waiting for the job: %w", werr))
	}
	ws, _ := state.Sys().(syscall.WaitStatus)
	var code *int32
	var sig string
	switch {
	case ws.Exited():
		c := int32(ws.ExitStatus())
		code = &c
	case ws.Signaled():
		sig = signalName(ws.Signal())
	}
	j.mu.Lock()
	res := j.resultLocked(code, dur)
	j.mu.Unlock()
	res.Killed = killed
	res.Signal = sig
	if j.r.jobUsage {
		res.Rusage = rusageOf(state)
		if cpuOK && res.Rusage != nil {
			// Every process of the cgroup is gone (killLeftovers): its
			// counters are final.
			if u, s, ok := jcg.CPUStat(); ok && u >= cpu0[0] && s >= cpu0[1] {
				res.Rusage.CgroupCPU = true
				res.Rusage.CgroupUserMicros, res.Rusage.CgroupSystemMicros = u-cpu0[0], s-cpu0[1]
			}
		}
	}
	return res
}

// sendStarted tells the daemon the job's root process (wire.JobStarted):
// its pid as the runner sees it and its start time, which the daemon
// finds it by among the runner's children, and the job's cgroup if it has
// one. A root already gone (its stat unreadable) is not named: the daemon
// then measures no tree, and the Result's rusage has what it used.
func (r *runner) sendStarted(id string, pid int, cg *proc.Cgroup) {
	st, ok := proc.ReadStat(pid)
	if !ok {
		return
	}
	s := wire.JobStarted{JobID: id, Pid: pid, StartTicks: st.StartTime}
	if cg != nil {
		s.Cgroup = cg.Path
	}
	_ = r.send(wire.TypeJobStarted, s)
}

// rusageOf is what the job's root used, with the descendants it waited
// for, as wait4 returned it.
func rusageOf(state *os.ProcessState) *wire.JobRusage {
	ru, ok := state.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return nil
	}
	micros := func(tv syscall.Timeval) uint64 { return uint64(max(int64(tv.Sec)*1e6+int64(tv.Usec), 0)) }
	return &wire.JobRusage{UserMicros: micros(ru.Utime), SystemMicros: micros(ru.Stime), MaxRSSKiB: uint64(max(ru.Maxrss, 0))}
}

// drain waits for both pumps to reach their pipes' EOF. A pipe is cut
// (its read deadline set in the past) only once it was found empty, with
// its pump waiting in a read, at two checks drainGrace apart: something
// outside the job holds it open and has written nothing for that long.
// The cut is told in Result.output_cut, since that holder might have
// written more.
func (j *job) drain(pipes [2]*os.File, drained <-chan struct{}) {
	n := 0
	select { // the common case: both at EOF already, no timer
	case <-drained:
		n++
		select {
		case <-drained:
			n++
		default:
		}
	default:
	}
	if n == 2 {
		return
	}
	tick := time.NewTicker(drainGrace)
	defer tick.Stop()
	var idle, cut [2]bool
	for n < 2 {
		select {
		case <-drained:
			n++
		case <-tick.C:
			for s, f := range pipes {
				if cut[s] {
					continue
				}
				empty := j.reading[s].Load() && heldIdle(f)
				if empty && idle[s] {
					cut[s] = true
					j.mu.Lock()
					j.outputCut = true
					j.mu.Unlock()
					_ = f.SetReadDeadline(time.Unix(1, 0))
				}
				idle[s] = empty
			}
		}
	}
}

// heldIdle tells whether pipe f is empty and still held open by a writer:
// no data to read and no end of file (POLLHUP: every writer closed it) to
// see. A pump that has not been scheduled to read its EOF yet (a starved
// runner) is not cut for it.
func heldIdle(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	var perr error
	fds := []unix.PollFd{{Events: unix.POLLIN}}
	cerr := rc.Control(func(fd uintptr) {
		fds[0].Fd = int32(fd)
		n, perr = unix.Poll(fds, 0)
	})
	return cerr == nil && perr == nil && n == 0
}

// signalName names a signal as Result.signal carries it: "SIGSEGV", or
// "SIG" and its number for one without a name (real-time signals).
func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}

// resultLocked builds the Result from the kill reason, exit code and output.
func (j *job) resultLocked(code *int32, dur time.Duration) wire.Result {
	res := wire.Result{JobID: j.id, ExitCode: code, DurationMs: uint64(dur / time.Millisecond)}
	switch {
	case j.reason == reasonTimeout:
		res.Status, res.WasTimeout = wire.StatusTimeout, true
	case j.reason != reasonNone:
		res.Status, res.WasCancelled = wire.StatusCancelled, true
	case code != nil && *code == 0:
		res.Status = wire.StatusSuccess
	default:
		res.Status = wire.StatusFailed
	}
	out := j.out
	if j.truncated {
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(out, "[orchestrd: output truncated at "...)
		out = strconv.AppendInt(out, int64(j.limit), 10)
		out = append(out, " bytes]"...)
	}
	res.Output = string(out)
	if j.reason != reasonNone {
		res.StoppedBy = j.stoppedBy
	}
	res.OutputCut = j.outputCut
	return res
}

// cannotExec tells whether a start error is exec's refusal of the command
// (rather than the runner's trouble), and words it as a shell would: 127
// when the file is not there, 126 when it is but cannot be executed.
func (j *job) cannotExec(err error) (code int32, why string, ok bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return 0, "", false
	}
	name, path := j.argv[0], j.path
	if !strings.HasPrefix(path, "/") {
		dir := j.dir
		if dir == "" {
			dir = j.r.cwd
		}
		path = dir + "/" + path
	}
	st, serr := os.Stat(path)
	switch errno {
	case unix.ENOENT:
		if serr != nil {
			return 127, name + ": no such file or directory", true
		}
		// The file is there: what is missing is its interpreter.
		if interp := interpreter(path); interp != "" {
			return 126, name + ": bad interpreter " + interp + ": no such file or directory", true
		}
		return 0, "", false
	case unix.EACCES:
		if serr == nil && st.IsDir() {
			return 126, name + ": is a directory", true
		}
		return 126, name + ": permission denied", true
	case unix.ENOEXEC, unix.EISDIR, unix.ENOTDIR, unix.ELOOP, unix.ENAMETOOLONG, unix.ETXTBSY:
		return 126, name + ": " + errno.Error(), true
	}
	return 0, "", false
}

// interpreter is the program a script's "#!" line names, or "".
func interpreter(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := f.Read(b)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	if f := strings.Fields(rest); len(f) > 0 {
		return f[0]
	}
	return ""
}

// execFailed is the Result of a job whose command could not be run: Error
// with the shell's exit code (127, 126) and why, in a shell's words
// ("/x: no such file or directory", "x: command not found").
func (j *job) execFailed(code int32, why string) wire.Result {
	j.mu.Lock()
	j.exited = true
	j.mu.Unlock()
	j.r.log.Info().Str("job_id", j.id).Int32("exit_code", code).Str("reason", why).Msg("job's command could not be run")
	return wire.Result{JobID: j.id, Status: wire.StatusError, Output: why, ExitCode: &code}
}

func (j *job) startFailed(err error) wire.Result {
	j.mu.Lock()
	j.exited = true
	j.mu.Unlock()
	j.r.log.Warn().Err(err).Str("job_id", j.id).Msg("job could not run")
	return wire.Result{JobID: j.id, Status: wire.StatusError, Output: "orchestrd runner: " + err.Error()}
}

// jobPipeSize is what a job's stdout pipe is grown to for a daemon that
// takes OutputRaw frames: a job writing at full speed fills larger reads
// (fewer frames, fewer wake-ups on every hop). Best effort: a user over
// its pipe quota (fs.pipe-user-pages-soft) keeps the default 64 KiB.
const jobPipeSize = 1 << 20

// growPipe grows pipe f's buffer to jobPipeSize, if the kernel lets it.
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, jobPipeSize)
	})
}

// Read buffers of the pumps: small ones to start with, large ones for a
// job writing at full speed (smallChunk).
var (
	smallBufPool = sync.Pool{New: func() any { b := make([]byte, smallChunk); return &b }}
	bufPool      = sync.Pool{New: func() any { b := make([]byte, rawChunkMax); return &b }}
)

// pump reads one output pipe until EOF (or the drain deadline), streaming
// all of it and collecting up to the job's output cap.
func (j *job) pump(f *os.File, s wire.Stream, done chan<- struct{}) {
	pool := &smallBufPool
	bp := pool.Get().(*[]byte)
	buf := (*bp)[:min(smallChunk, j.r.chunk)]
	reading := &j.reading[0]
	if s == wire.Stderr {
		reading = &j.reading[1]
	}
	for {
		j.waitCredit()
		reading.Store(true)
		n, err := f.Read(buf)
		reading.Store(false)
		if n > 0 {
			j.emit(s, buf[:n]) // sent (or copied) before it returns
		}
		if err != nil {
			break
		}
		if n == len(buf) && pool == &smallBufPool && j.r.chunk > len(buf) {
			pool.Put(bp)
			pool = &bufPool
			bp = pool.Get().(*[]byte)
			buf = (*bp)[:j.r.chunk]
		}
	}
	pool.Put(bp)
	done <- struct{}{}
}

// emit streams all of p and collects it up to the cap for Result.output.
// (Only for a daemon that reads Result.output: a Loopr one.) The cap
// bounds what the runner keeps in memory, not what it streams: the
// daemon keeps its own capped copy from the chunks, and a client following
// the job gets every byte. A daemon that reads slowly slows the job down
// (send blocks, the pipe fills), and one that gives no credit stops pump
// reading (waitCredit), so nothing piles up here.
func (j *job) emit(s wire.Stream, p []byte) {
	j.mu.Lock()
	// orchestrd's daemon (it gave an output window) keeps its copy from
	// the chunks and never reads Result.output: keeping one here too, and
	// sending it again in the Result (a 1 MiB output of NULs is 6 MiB of
	// JSON), would only cost.
	if j.r.window <= 0 {
		take := max(0, min(len(p), j.limit-len(j.out)))
		if take < len(p) {
			j.truncated = true
		}
		if take > 0 {
			j.out = append(j.out, p[:take]...)
		}
	}
	j.sent += int64(len(p))
	j.mu.Unlock()
	j.r.sendChunk(&wire.OutputChunk{JobID: j.id, Chunk: p, Stream: s})
}

// sendResult writes a Result, cutting its output further if the frame would
// exceed the daemon's frame limit.
func (r *runner) sendResult(res wire.Result) {
	shrunk := false
	for {
		b, err := wire.Marshal(wire.TypeResult, res)
		if err != nil {
			r.log.Error().Err(err).Str("job_id", res.JobID).Msg("encoding Result")
			return
		}
		payload := len(b) - wire.HeaderSize
		if payload <= r.maxOut || res.Output == "" {
			_ = r.sendRaw(wire.TypeResult, b)
			return
		}
		if shrunk {
			res.Output = "" // the limit is too small even for the notice
			continue
		}
		cut := int(int64(len(res.Output)) * int64(r.maxOut) / int64(payload) * 9 / 10)
		cut = max(0, min(cut, len(res.Output)-1))
		res.Output = res.Output[:cut] + "\n[orchestrd: output truncated at " + strconv.Itoa(cut) + " bytes to fit the frame limit]"
		shrunk = cut == 0
	}
}
