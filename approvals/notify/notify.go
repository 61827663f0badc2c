// Package notify runs [approvals] notify_command for each new pending
// approval, with the approval as JSON on its stdin, so that a person can
// be told elsewhere (a phone through ntfy, a chat bot). A run is bounded in
// time and its failure is an event (approval.notify_failed); nothing a
// command does holds an approval up.
package notify

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Defaults of Options.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultQueueSize   = 256
	DefaultConcurrency = 4
	DefaultCloseGrace  = 2 * time.Second
	// StderrTail is how much of a failed command's stderr its event keeps
	// (the end).
	StderrTail = 512
	// EnvApprovalID names the approval's id in the command's environment.
	EnvApprovalID = "ORCHESTRD_APPROVAL_ID"
)

// Options configure a Notifier.
type Options struct {
	Command []string      // the argv; empty: Notify does nothing
	Timeout time.Duration // each run's bound, then its process group is killed; 0: DefaultTimeout
	// Reaper, if set (the daemon's), registers each command as it is
	// forked, so that the child subreaper never takes it for an orphan.
	Reaper *proc.Reaper
	Bus    *eventlog.Bus // approval.notify_failed; nil: none
	Logger zerolog.Logger
	// QueueSize bounds the approvals waiting for a run; Concurrency the
	// runs at once; CloseGrace how long Close lets running commands end
	// before it kills them. 0: the defaults.
	QueueSize   int
	Concurrency int
	CloseGrace  time.Duration
}

// Notifier runs the command for each approval it is given, at most
// Concurrency at once, the others waiting in a bounded queue.
type Notifier struct {
	opts  Options
	queue chan api.Approval
	stop  chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

// New starts a Notifier. Without a command it runs nothing (and starts no
// goroutine).
func New(opts Options) *Notifier {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.CloseGrace <= 0 {
		opts.CloseGrace = DefaultCloseGrace
	}
	n := &Notifier{opts: opts, stop: make(chan struct{})}
	if len(opts.Command) == 0 {
		return n
	}
	n.queue = make(chan api.Approval, opts.QueueSize)
	for range opts.Concurrency {
		n.wg.Add(1)
		go n.worker()
	}
	return n
}

// Notify queues a run of the command for a and returns at once: it never
// blocks. When the queue is full the run is dropped with an
// approval.notify_failed event. After Close it does nothing.
func (n *Notifier) Notify(a api.Approval) {
	if n.queue == nil {
		return
	}
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return
	}
	select {
	case n.queue <- a:
	default:
		n.failed(a.ID, fmt.Sprintf("queue full: %d approvals already wait for notify_command, this one is not notified",
			cap(n.queue)), nil, "", nil)
	}
}

// Close stops taking approvals, drops those still queued, gives the
// running commands CloseGrace to end and kills what is left of them, and
// returns once every run has been reaped.
func (n *Notifier) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.stop)
	n.mu.Unlock()
	n.wg.Wait()
	if n.queue == nil {
		return
	}
	dropped := 0
	for {
		select {
		case <-n.queue:
			dropped++
			continue
		default:
		}
		break
	}
	if dropped > 0 {
		n.opts.Logger.Warn().Int("dropped", dropped).Msg("notify_command not run for approvals still queued at shutdown")
	}
}

func (n *Notifier) worker() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		default:
		}
		select {
		case <-n.stop:
			return
		case a := <-n.queue:
			n.run(a)
		}
	}
}

// failed logs and emits a run's failure.
func (n *Notifier) failed(id, msg string, code *int, sig string, stderr []byte) {
	ev := ApprovalNotifyFailed{ID: id, Error: msg, ExitCode: code, Signal: sig}
	if len(stderr) > 0 {
		ev.StderrTail = strings.ToValidUTF8(string(stderr), "\uFFFD")
	}
	l := n.opts.Logger.Warn().Str("approval", id).Str("error", msg)
	if ev.StderrTail != "" {
		l = l.Str("stderr_tail", ev.StderrTail)
	}
	l.Msg("notify_command failed")
	if n.opts.Bus != nil {
		n.opts.Bus.Emit(ev)
	}
}

// run runs the command once for a and waits for it.
func (n *Notifier) run(a api.Approval) {
	body, err := json.Marshal(a)
	if err != nil {
		n.failed(a.ID, fmt.Sprintf("encoding the approval: %v", err), nil, "", nil)
		return
	}
	path, err := exec.LookPath(n.opts.Command[0])
	if err != nil {
		n.failed(a.ID, fmt.Sprintf("start %s: %v", n.opts.Command[0], err), nil, "", nil)
		return
	}
	stdin, err := memFile(body)
	if err != nil {
		n.failed(a.ID, fmt.Sprintf("start %s: the approval for its stdin: %v", n.opts.Command[0], err), nil, "", nil)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		n.failed(a.ID, fmt.Sprintf("start %s: a pipe for its stderr: %v", n.opts.Command[0], err), nil, "", nil)
		return
	}
	tail := &tailBuffer{max: StderrTail}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(tail, errR)
	}()

	started := make(chan error, 1)
	exited := make(chan proc.Exit, 1)
	env := append(os.Environ(), EnvApprovalID+"="+a.ID)
	in := proc.Spawn(proc.Spec{Path: path, Args: n.opts.Command, Env: env, Stdin: stdin, Stderr: errW,
		Isolation: proc.Isolation{DeathSignal: syscall.SIGKILL}, Reaper: n.opts.Reaper,
		OnStart: func(_ int, err error) { started <- err },
		OnExit:  func(ex proc.Exit) { exited <- ex }})
	startErr := <-started
	// The child has its copies (or never started).
	stdin.Close()
	errW.Close()
	finishStderr := func() []byte {
		// The group is killed before the exit is reported; only a process
		// that left it (setsid) can still hold the pipe.
		select {
		case <-readDone:
		case <-time.After(time.Second):
			errR.Close()
			<-readDone
		}
		errR.Close()
		return tail.Bytes()
	}
	if startErr != nil {
		finishStderr()
		n.failed(a.ID, fmt.Sprintf("start %s: %v", n.opts.Command[0], startErr), nil, "", nil)
		return
	}

	timeout := time.NewTimer(n.opts.Timeout)
	defer timeout.Stop()
	var ex proc.Exit
	var why string // why we killed it
	stop := n.stop
	var grace <-chan time.Time
wait:
	for {
		select {
		case ex = <-exited:
			break wait
		case <-timeout.C:
			if why == "" {
				why = fmt.Sprintf("timed out after %s (notify_timeout): killed", n.opts.Timeout)
			}
			in.Kill()
		case <-stop:
			stop = nil
			g := time.NewTimer(n.opts.CloseGrace)
			defer g.Stop()
			grace = g.C
		case <-grace:
			if why == "" {
				why = "the daemon is stopping: killed"
			}
			in.Kill()
		}
	}
	stderr := finishStderr()
	var code *int
	sig := ""
	if ex.Signal != 0 {
		sig = unix.SignalName(ex.Signal)
		if sig == "" {
			sig = ex.Signal.String()
		}
	} else {
		c := ex.Code
		code = &c
	}
	switch {
	case why != "":
		n.failed(a.ID, why, code, sig, stderr)
	case sig != "":
		n.failed(a.ID, "killed by "+sig, nil, sig, stderr)
	case ex.Code != 0:
		n.failed(a.ID, fmt.Sprintf("exited with status %d", ex.Code), code, "", stderr)
	default:
		n.opts.Logger.Debug().Str("approval", a.ID).Dur("took", ex.Uptime).Msg("notify_command ran")
	}
}

// memFile is an anonymous file holding b, at offset 0: a command's stdin
// that never blocks us however much it holds or however little the
// command reads.
func memFile(b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("orchestrd-approval", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "orchestrd-approval")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}
