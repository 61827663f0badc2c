package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/internal/daemonrun"
)

// helloMsg is one "hello PID" received, stamped on arrival.
type helloMsg struct {
	pid int
	at  time.Time
}

// helloServer is the unix socket the hello program says hello on. It keeps
// every connection open (a hello program exits when its connection closes).
type helloServer struct {
	ln    *net.UnixListener
	ch    chan helloMsg
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newHelloServer(path string) (*helloServer, error) {
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	h := &helloServer{ln: ln, ch: make(chan helloMsg, 64)}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				line, err := bufio.NewReader(c).ReadString('\n')
				at := time.Now()
				if err != nil {
					return
				}
				pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "hello "))
				if err != nil {
					return
				}
				h.ch <- helloMsg{pid: pid, at: at}
				_, _ = io.Copy(io.Discard, c) // until the hello program dies or we close
			}()
		}
	}()
	return h, nil
}

// next waits for a hello from a pid other than not.
func (h *helloServer) next(timeout time.Duration, not int) (helloMsg, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case m := <-h.ch:
			if m.pid != not {
				return m, nil
			}
		case <-t.C:
			return helloMsg{}, fmt.Errorf("no hello within %s", timeout)
		}
	}
}

func (h *helloServer) close() {
	h.ln.Close()
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// measureFloor is the bare floor of a restart: the harness as an ideal
// supervisor of the hello program. Each trial SIGKILLs it, reaps it,
// fork/execs a new one and waits for its hello.
func (b *bench) measureFloor(n int) ([]time.Duration, error) {
	dir := filepath.Join(b.tmp, "floor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "hello.sock")
	hs, err := newHelloServer(sock)
	if err != nil {
		return nil, err
	}
	defer hs.close()
	start := func() (*exec.Cmd, error) {
		cmd := exec.Command(b.hello, sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd, cmd.Start()
	}
	cmd, err := start()
	if err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	m, err := hs.next(10*time.Second, 0)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := 0; i < n; i++ {
		// Let the previous one settle, as a supervised program would.
		time.Sleep(20 * time.Millisecond)
		old := m.pid
		t0 := time.Now()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if cmd, err = start(); err != nil {
			return nil, err
		}
		if m, err = hs.next(10*time.Second, old); err != nil {
			return nil, err
		}
		out = append(out, m.at.Sub(t0))
	}
	return out, nil
}

// classicSV is a classic supervisor the restart scenario compares with.
type classicSV struct {
	id, name string
	binary   string // looked up on PATH
	// command returns the supervisor's command line for service dir svc
	// (which holds ./run, the hello program).
	command func(svc, bin string) ([]string, error)
}

func (s classicSV) installed() bool {
	_, err := exec.LookPath(s.binary)
	return err == nil
}

func classicSupervisors() []classicSV {
	return []classicSV{
		{id: "s6", name: "s6 (s6-supervise)", binary: "s6-supervise",
			command: func(svc, bin string) ([]string, error) { return []string{bin, svc}, nil }},
		{id: "runit", name: "runit (runsv)", binary: "runsv",
			command: func(svc, bin string) ([]string, error) { return []string{bin, svc}, nil }},
		{id: "daemontools", name: "daemontools (supervise)", binary: "supervise",
			command: func(svc, bin string) ([]string, error) { return []string{bin, svc}, nil }},
		{id: "supervisord", name: "supervisord", binary: "supervisord",
			command: func(svc, bin string) ([]string, error) {
				conf := filepath.Join(filepath.Dir(svc), "supervisord.conf")
				text := fmt.Sprintf(`[supervisord]
nodaemon=true
logfile=%[1]s/supervisord.log
pidfile=%[1]s/supervisord.pid
childlogdir=%[1]s
loglevel=warn

[program:hello]
command=%[2]s/run
directory=%[2]s
autostart=true
autorestart=true
startsecs=0
startretries=1000000
stdout_logfile=NONE
stderr_logfile=NONE
`, filepath.Dir(svc), svc)
				if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
					return nil, err
				}
				return []string{bin, "-n", "-c", conf}, nil
			}},
	}
}

// measureClassic runs the hello program as a service of sv (its ./run is
// the hello binary itself: no shell in between) and times SIGKILL -> the
// next hello, n times, killing only a hello that has been up over upFor
// (runit, daemontools and s6 deliberately wait before restarting a service
// that ran for less than a second).
func (b *bench) measureClassic(sv classicSV, n int, upFor time.Duration) ([]time.Duration, error) {
	base := filepath.Join(b.tmp, "classic-"+sv.id)
	svc := filepath.Join(base, "svc")
	if err := os.MkdirAll(svc, 0o755); err != nil {
		return nil, err
	}
	if err := daemonrun.CopyFile(b.hello, filepath.Join(svc, "run"), 0o755); err != nil {
		return nil, err
	}
	hs, err := newHelloServer(filepath.Join(svc, "hello.sock"))
	if err != nil {
		return nil, err
	}
	defer hs.close()
	bin, _ := exec.LookPath(sv.binary)
	argv, err := sv.command(svc, bin)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(base, "supervisor.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = base
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var cur int
	defer func() {
		// The supervisor first, so nothing restarts the hello we kill next.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if cur > 0 {
			_ = syscall.Kill(cur, syscall.SIGKILL)
		}
	}()
	m, err := hs.next(10*time.Second, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: first start: %w", sv.name, err)
	}
	cur = m.pid
	var out []time.Duration
	for i := 0; i < n; i++ {
		if w := upFor - time.Since(m.at); w > 0 {
			time.Sleep(w)
		}
		old := m.pid
		t0 := time.Now()
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("%s: kill %d: %w", sv.name, old, err)
		}
		if m, err = hs.next(10*time.Second, old); err != nil {
			return nil, fmt.Errorf("%s: trial %d: %w", sv.name, i+1, err)
		}
		cur = m.pid
		out = append(out, m.at.Sub(t0))
		b.debugf("%s trial %d: %s", sv.name, i+1, m.at.Sub(t0))
	}
	return out, nil
}
