// Package daemonrun runs the real orchestrd binary as a daemon on a home:
// it starts `orchestrd serve`, waits until every lane has all its runners
// ready, stops it (SIGTERM, a deadline, a goroutine dump when it hangs) and
// reads its event log. It is the one launch harness of cmd/orchbench and
// of the cmd/orchestrd tests; it returns errors and never fails a test
// itself (the tests' thin layer, cmd/orchestrd/harness_test.go, does).
//
// It is test and benchmark support: only cmd/ and tests import it.
package daemonrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"

	"github.com/orchestrd/orchestrd/api"
)

// ErrExited is wrapped by WaitReady's error when the daemon exited before
// its lanes were ready.
var ErrExited = errors.New("exited early")

// quitGrace is how long Stop waits after SIGQUIT (Go writes every
// goroutine's stack to stderr and exits) before it kills the daemon.
const quitGrace = 5 * time.Second

// Daemon is one daemon process started by Start.
type Daemon struct {
	Home string
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // Cmd.Wait's; set before done closes
}

// OwnHTTPPort is config (TOML) with, when it has no [http] table, one
// whose HTTP API listens on a port the kernel picks: the default,
// 127.0.0.1:19532, is the one the person's own daemon on this machine
// wants, and every other test's or benchmark's daemon too (whichever took
// it first had it). A daemon on the embedded defaults (no config) keeps
// them.
func OwnHTTPPort(config string) string {
	if config == "" || strings.Contains(config, "[http]") {
		return config
	}
	return config + "\n[http]\nlisten = \"127.0.0.1:0\"\n"
}

// Serve returns the command `bin serve --home HOME --log-format json`
// followed by args. The caller sets its output, environment and process
// attributes before Start. Its environment is this process's but for
// XDG_RUNTIME_DIR (the home) and XDG_CONFIG_HOME (HOME/xdg-config): the
// daemon's vibe-reachout hook socket, on by default, resolves its path
// from them, and a test or benchmark daemon must never take the user's
// (see PrivateXDG). A caller setting Env keeps these (append to cmd.Env).
func Serve(bin, home string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"serve", "--home", home, "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "xdg-config"))
	return cmd
}

// PrivateXDG points this process's XDG_RUNTIME_DIR and XDG_CONFIG_HOME at
// fresh directories under dir, so that every daemon it starts, however,
// resolves vibe-reachout's paths there and never to the user's (a test
// binary's TestMain calls it). The go command it runs (Build) keeps the
// user's go env file: GOENV is set to where it was found before.
func PrivateXDG(dir string) error {
	if os.Getenv("GOENV") == "" {
		if cfg, err := os.UserConfigDir(); err == nil {
			if err := os.Setenv("GOENV", filepath.Join(cfg, "go", "env")); err != nil {
				return fmt.Errorf("setting GOENV: %w", err)
			}
		}
	}
	for _, kv := range [][2]string{{"XDG_RUNTIME_DIR", "xdg-run"}, {"XDG_CONFIG_HOME", "xdg-config"}} {
		p := filepath.Join(dir, kv[1])
		if err := os.MkdirAll(p, 0o700); err != nil {
			return fmt.Errorf("making %s: %w", p, err)
		}
		if err := os.Setenv(kv[0], p); err != nil {
			return fmt.Errorf("setting %s: %w", kv[0], err)
		}
	}
	return nil
}

// Start starts cmd, a daemon serving home, and watches for its exit.
//
// The daemon dies with this process: a test binary killed by go test's
// -timeout, or by its user, takes its daemons with it instead of leaving
// them serving. Start sets Pdeathsig (SIGKILL; its runners, having lost
// it, kill their jobs and exit) on a copy of cmd's SysProcAttr. The kernel
// sends it when the thread that forked the daemon exits, not the process,
// and Go ends a thread when a goroutine locked to it returns; so the fork
// is made from a goroutine locked to its thread that waits for the daemon
// and unlocks only once the daemon has exited: that thread lives exactly
// as long as the daemon, whatever other goroutines do. Only this harness
// asks it: `orchestrd serve` run by a user or by systemd must not die with
// whatever started it.
func Start(cmd *exec.Cmd, home string) (*Daemon, error) {
	var attr syscall.SysProcAttr
	if cmd.SysProcAttr != nil {
		attr = *cmd.SysProcAttr
	}
	if attr.Pdeathsig == 0 {
		attr.Pdeathsig = syscall.SIGKILL
	}
	cmd.SysProcAttr = &attr
	d := &Daemon{Home: home, Cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		d.err = cmd.Wait()
		close(d.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	return d, nil
}

// Pid is the daemon's process id.
func (d *Daemon) Pid() int { return d.Cmd.Process.Pid }

// Done is closed once the daemon has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err is how the daemon exited (nil: status 0); valid once Done is closed.
func (d *Daemon) Err() error {
	select {
	case <-d.done:
		return d.err
	default:
		return nil
	}
}

// Socket is the path of the daemon's control socket.
func (d *Daemon) Socket() string { return filepath.Join(d.Home, "daemon.sock") }

// EventLog is the path of the daemon's event log.
func (d *Daemon) EventLog() string { return EventLog(d.Home) }

// EventLog is the path of the event log of a daemon on home.
func EventLog(home string) string { return filepath.Join(home, "events.ndjson") }

// Stop sends SIGTERM and waits up to within for the daemon to exit. A
// daemon that has not exited by then is sent SIGQUIT, for Go to write
// every goroutine's stack to its stderr, and SIGKILL 5 s later; Stop then
// says so in its error. Stop on a daemon that has exited does nothing; how
// it exited is Err.
func (d *Daemon) Stop(within time.Duration) error {
	select {
	case <-d.done:
		return nil
	default:
	}
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(within):
	}
	d.Quit()
	return fmt.Errorf("daemon (pid %d) did not exit within %s of SIGTERM", d.Pid(), within)
}

// Quit sends SIGQUIT, for Go to write every goroutine's stack to the
// program's stderr and exit, and SIGKILL quitGrace later if it has not;
// it returns once the program has exited.
func (d *Daemon) Quit() {
	_ = d.Cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-d.done:
	case <-time.After(quitGrace):
		_ = d.Cmd.Process.Kill()
		<-d.done
	}
}

// WaitReady polls the control socket (for setup, never while measuring)
// until every lane has all its runners ready (LanesReady), and returns the
// lanes as it found them then. It fails when the daemon exits first
// (wrapping ErrExited) or within passes.
func (d *Daemon) WaitReady(within time.Duration) ([]api.LaneStatus, error) {
	return WaitLanesReady(d.Home, d.done, func() error { return d.err }, within)
}

// WaitLanesReady is WaitReady for a daemon on home run any way (a process,
// or daemon.Run in this one): done is closed once it has stopped, and
// exitErr then says how.
func WaitLanesReady(home string, done <-chan struct{}, exitErr func() error, within time.Duration) ([]api.LaneStatus, error) {
	deadline := time.Now().Add(within)
	var lastErr error
	var poll Poller
	answered := false
	for {
		select {
		case <-done:
			return nil, fmt.Errorf("%w: %v", ErrExited, exitErr())
		default:
		}
		ls, err := laneList(filepath.Join(home, "daemon.sock"), deadline)
		if err == nil {
			answered = true
			if LanesReady(ls, ConfiguredRunners(home)) {
				return ls, nil
			}
		} else {
			lastErr = err
		}
		if time.Now().After(deadline) {
			if !answered {
				return nil, fmt.Errorf("control socket not up after %s: %w", within, lastErr)
			}
			return nil, fmt.Errorf("runners not ready after %s", within)
		}
		poll.Pause()
	}
}

// laneList asks the daemon on socket for lane.list on a connection of its
// own.
func laneList(socket string, deadline time.Time) ([]api.LaneStatus, error) {
	c, err := client.Dial(socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var r struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
	if err := c.Call(ctx, "lane.list", nil, &r); err != nil {
		return nil, fmt.Errorf("lane.list: %w", err)
	}
	return r.Lanes, nil
}

// LanesReady reports whether every lane has all its runners ready: every
// runner listed, and as many as configured (the lane.started events'
// counts) plus the lane's spares. A lane that has not published its status
// yet is listed with no runners at all.
func LanesReady(ls []api.LaneStatus, configured map[string]int) bool {
	if len(ls) == 0 {
		return false
	}
	for _, l := range ls {
		n := 0
		for _, rn := range l.Runners {
			if rn.State == "ready" {
				n++
			}
		}
		want, started := configured[l.Name]
		if !started || n < countSpawned(l) || n < want+l.Spares {
			return false
		}
	}
	return true
}

func countSpawned(l api.LaneStatus) int {
	n := 0
	for _, r := range l.Runners {
		if r.Spawned {
			n++
		}
	}
	return n
}

// CopyFile copies src to dst, created (or truncated) with mode: the way
// the tests and benchmarks write a program they then run (a copy of a
// binary, a script). dst is open for writing only while syscall.ForkLock
// is held for reading, so no process this one forks meanwhile (every fork
// holds it for writing) inherits that descriptor: a child holds its copy
// until it execs, and the kernel refuses to exec a file open for writing
// anywhere (ETXTBSY, golang/go#22315), so a test that ran the file just
// written failed when another test's goroutine forked at that moment.
// Once CopyFile has returned, no process holds dst open for writing.
func CopyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return WriteExecutable(dst, in, mode)
}

// WriteExecutable writes what r reads to path, created (or truncated)
// with mode, holding syscall.ForkLock for reading while path is open for
// writing (see CopyFile): a file written so can be executed at once,
// whatever other goroutines start meanwhile. r must not wait on a process
// this one starts (a fork waits for WriteExecutable to return).
func WriteExecutable(path string, r io.Reader, mode os.FileMode) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// ShortTempDir makes a new directory directly in the system's temporary
// directory, for daemon homes: a unix socket path is limited to 108 bytes,
// and a test's t.TempDir() can be longer than that with the socket's name.
// The caller removes it.
func ShortTempDir(prefix string) (string, error) { return os.MkdirTemp("", prefix) }

// Build compiles the package pkg (a path relative to dir, or an import
// path) into out with go build and the extra flags; dir "" is the current
// directory.
//
// With $ORCHESTRD_TEST_PREBUILT set to a directory, nothing is built: the
// binary named PrebuiltName(dir, pkg, flags) there is copied to out. CI
// runs the end-to-end tests a second time as an ordinary user, who has no
// Go toolchain of its own (.ci/as-user builds them first, as root).
func Build(dir, pkg, out string, flags ...string) error {
	if pre := os.Getenv("ORCHESTRD_TEST_PREBUILT"); pre != "" {
		name, err := PrebuiltName(dir, pkg, flags...)
		if err != nil {
			return err
		}
		if err := CopyFile(filepath.Join(pre, name), out, 0o755); err != nil {
			return fmt.Errorf("taking the prebuilt %s from $ORCHESTRD_TEST_PREBUILT: %w", name, err)
		}
		return nil
	}
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", pkg, err, msg)
	}
	return nil
}

// PrebuiltName is the file name Build takes from $ORCHESTRD_TEST_PREBUILT
// for pkg built in dir with flags: the package directory's name, and
// "-race" when flags ask for the race detector.
func PrebuiltName(dir, pkg string, flags ...string) (string, error) {
	p := pkg
	if !filepath.IsAbs(p) {
		base, err := filepath.Abs(dir)
		if err != nil {
			return "", err
		}
		p = filepath.Join(base, pkg)
	}
	name := filepath.Base(p)
	if slices.Contains(flags, "-race") {
		name += "-race"
	}
	return name, nil
}

// Builds builds programs a test needs beside the daemon (a test executor,
// a hook), each once, into Dir: the first Build of a package builds it,
// the others wait for it and share its result. Set Dir before the first
// Build.
type Builds struct {
	Dir  string
	mu   sync.Mutex
	pkgs map[string]*builtPkg
}

type builtPkg struct {
	once sync.Once
	path string
	err  error
}

// Build is the program of package pkg (an import path), built once into
// Dir under the package's last element.
func (b *Builds) Build(pkg string) (string, error) {
	b.mu.Lock()
	if b.pkgs == nil {
		b.pkgs = map[string]*builtPkg{}
	}
	p, ok := b.pkgs[pkg]
	if !ok {
		p = &builtPkg{path: filepath.Join(b.Dir, filepath.Base(pkg))}
		b.pkgs[pkg] = p
	}
	b.mu.Unlock()
	p.once.Do(func() { p.err = Build("", pkg, p.path) })
	return p.path, p.err
}
