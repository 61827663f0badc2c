package agent

import (
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is the agent process of one task: the executor's stop_task and
// cancel_task reach it whatever the adapter is doing. The process leads a
// group of its own, and dies with the executor (Pdeathsig).
type Proc struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
	killed  bool
}

// Start starts cmd in a new process group. A stop that came before it
// kills it at once.
func (p *Proc) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return fmt.Errorf("the task was stopped before its agent started")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	return nil
}

// Pipes are an agent process's standard streams, as StartPiped gives them.
type Pipes struct {
	Stdin  io.WriteCloser // nil when the caller set cmd.Stdin
	Stdout io.ReadCloser
	Stderr io.ReadCloser
}

// StartPiped starts cmd as Start does, with pipes to its stdout and
// stderr, and to its stdin unless cmd.Stdin is set. An error is the
// failed result to give: start_failed, saying what.
func (p *Proc) StartPiped(cmd *exec.Cmd) (Pipes, *Result) {
	var ps Pipes
	var err error
	if cmd.Stdin == nil {
		if ps.Stdin, err = cmd.StdinPipe(); err != nil {
			r := Failed("start_failed", "a pipe to %s's stdin: %v", cmd.Path, err)
			return ps, &r
		}
	}
	if ps.Stdout, err = cmd.StdoutPipe(); err != nil {
		r := Failed("start_failed", "a pipe from %s's stdout: %v", cmd.Path, err)
		return ps, &r
	}
	if ps.Stderr, err = cmd.StderrPipe(); err != nil {
		r := Failed("start_failed", "a pipe from %s's stderr: %v", cmd.Path, err)
		return ps, &r
	}
	if err := p.Start(cmd); err != nil {
		r := Failed("start_failed", "starting %s: %v", cmd.Args[0], err)
		return ps, &r
	}
	return ps, nil
}

// Signal sends sig to the agent's process group.
func (p *Proc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// Stop asks the agent to stop (SIGINT to its group) and kills the group
// after grace.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.Signal(syscall.SIGINT)
	time.AfterFunc(grace, func() { p.Signal(syscall.SIGKILL) })
}

// Kill kills the agent's group at once (cancel_task).
func (p *Proc) Kill() {
	p.mu.Lock()
	p.stopped, p.killed = true, true
	p.mu.Unlock()
	p.Signal(syscall.SIGKILL)
}

// Stopped reports whether the task was stopped or cancelled: its result
// is then cancelled, whatever the agent's exit said.
func (p *Proc) Stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}
