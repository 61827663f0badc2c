package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"

	"golang.org/x/sys/unix"
)

// startConsoleDaemon starts `orchestrd serve` with its default console log
// on stderr, with ORCHESTRD_LOG_LEVEL set to level ("" for the default),
// and waits until its lanes are ready.
func startConsoleDaemon(t *testing.T, stderr io.Writer, level string) *testDaemon {
	t.Helper()
	home := shortTemp(t)
	// The HTTP API on a port of its own: the default one may be another
	// test daemon's, and its warning would be a line more.
	config := fastConfig + "\n[http]\nlisten = \"127.0.0.1:0\"\n"
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, home)
	cmd := exec.Command(binary, "serve", "--home", home)
	cmd.Stderr = stderr
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORCHESTRD_LOG_") {
			env = append(env, kv)
		}
	}
	if level != "" {
		env = append(env, "ORCHESTRD_LOG_LEVEL="+level)
	}
	// vibe-reachout's socket in the home: the test binary's is another
	// daemon's, and its warning would be a line more.
	cmd.Env = append(env, "XDG_RUNTIME_DIR="+home)
	d.launch(cmd)
	return d
}

// stopWith sends sig and waits for a clean exit.
func (d *testDaemon) stopWith(sig syscall.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
	d.waitCleanExit("the daemon did not exit after " + sig.String())
}

// A daemon's stderr that is not a terminal has no colour codes, its own
// lines nor its runners'; by default it says one line once it serves
// (socket and lanes) and one when it stops (issue 6: ANSI colours in a
// redirected log, nothing like "ready", nothing at Ctrl-C).
func TestConsoleLogRedirected(t *testing.T) {
	t.Parallel()
	t.Run("quiet by default", func(t *testing.T) {
		var stderr testio.SyncBuffer
		d := startConsoleDaemon(t, &stderr, "")
		d.stopWith(syscall.SIGINT)
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("stderr has %d lines, want 2 (ready, stopped):\n%s", len(lines), stderr.String())
		}
		ready, stopped := lines[0], lines[1]
		sock := filepath.Join(d.home, "daemon.sock")
		if !strings.Contains(ready, "orchestrd ready") || !strings.Contains(ready, "socket="+sock) ||
			!strings.Contains(ready, `lanes=["net","no-net"]`) || !strings.Contains(ready, "http=127.0.0.1:") {
			t.Errorf("first line %q, want orchestrd ready with socket=%s, the lanes and the HTTP API's address", ready, sock)
		}
		if !strings.Contains(stopped, "orchestrd stopped") || !strings.Contains(stopped, "by=interrupt") {
			t.Errorf("last line %q, want orchestrd stopped by=interrupt", stopped)
		}
		if strings.Contains(stderr.String(), "\x1b[") {
			t.Errorf("colour codes in a redirected log:\n%q", stderr.String())
		}
	})
	t.Run("runners too", func(t *testing.T) {
		var stderr testio.SyncBuffer
		d := startConsoleDaemon(t, &stderr, "debug") // runners say "runner connected"
		d.stopWith(syscall.SIGTERM)
		out := stderr.String()
		if !strings.Contains(out, "runner connected") || !strings.Contains(out, "by=terminated") {
			t.Fatalf("want the runners' info lines and the daemon's last line:\n%s", out)
		}
		if strings.Contains(out, "\x1b[") {
			t.Fatalf("colour codes in a redirected log:\n%q", out)
		}
	})
}

// openPty returns a new pseudo-terminal's master and slave.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("opening the pty's slave: %v", err)
	}
	return m, s
}

// On a terminal the log keeps its colours, the runners' lines too.
func TestConsoleLogOnATerminal(t *testing.T) {
	t.Parallel()
	master, slave := openPty(t)
	var out testio.SyncBuffer
	copied := make(chan struct{})
	go func() { io.Copy(&out, master); close(copied) }() // ends with EIO once every slave fd is closed
	t.Cleanup(func() { slave.Close(); master.Close(); <-copied })
	d := startConsoleDaemon(t, slave, "debug")
	d.stopWith(syscall.SIGTERM)
	slave.Close()
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Error("the pty's output did not end after the daemon exited")
	}
	master.Close()
	var ready, runner string
	for _, ln := range strings.Split(out.String(), "\n") {
		switch {
		case strings.Contains(ln, "orchestrd ready"):
			ready = ln
		case strings.Contains(ln, "runner connected"):
			runner = ln
		}
	}
	if !strings.Contains(ready, "\x1b[") || !strings.Contains(runner, "\x1b[") {
		t.Fatalf("want colour codes on a terminal in the daemon's and a runner's line:\nready:  %q\nrunner: %q\nall:\n%q", ready, runner, out.String())
	}
}
