package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// oneRunnerConfig is the smallest daemon: one lane, one runner, no spare.
const oneRunnerConfig = `
[daemon]
shutdown_timeout = "2s"
[lanes.net]
runners = 1
spares = 0
slots = 2
network = "host"
`

// serveCmd is `orchestrd serve --home HOME args...` with this process's
// environment but for ORCHESTRD_LOG_* (env adds some back), and
// vibe-reachout's XDG paths in the home, as daemonrun.Serve gives them.
func serveCmd(home string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, append([]string{"serve", "--home", home}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORCHESTRD_LOG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "xdg-config"))
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// runExpectingExit runs cmd, a serve expected to exit at once, and
// returns how it exited; one still running after 60 s is killed and
// fails the test.
func runExpectingExit(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return waitCmd(t, cmd)
}

// waitCmd waits up to 60 s for cmd, started, and returns how it exited;
// one still running then is killed and fails the test.
func waitCmd(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not exit within 60 s", strings.Join(cmd.Args, " "))
		return nil
	}
}

// serveOutput runs cmd, a serve expected to exit at once (runExpectingExit),
// and returns what it printed, stdout and stderr together, and its exit
// code.
func serveOutput(t *testing.T, cmd *exec.Cmd) (out string, code int) {
	t.Helper()
	var b testio.SyncBuffer
	cmd.Stdout, cmd.Stderr = &b, &b
	code = exitCode(t, runExpectingExit(t, cmd))
	return b.String(), code
}

// stderrLine is one line of a JSON log, the daemon's or a runner's.
type stderrLine struct {
	Level     string `json:"level"`
	Message   string `json:"message"`
	Component string `json:"component"`
	raw       map[string]any
}

// stderrLines parses every line of a JSON log, failing on one that is not.
func stderrLines(t *testing.T, out string) []stderrLine {
	t.Helper()
	var lines []stderrLine
	for _, s := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if s == "" {
			continue
		}
		var l stderrLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("a log line that is not JSON: %q\n%s", s, out)
		}
		_ = json.Unmarshal([]byte(s), &l.raw)
		lines = append(lines, l)
	}
	return lines
}

// levelRun starts a daemon with a hook socket and one runner, logging JSON
// with env and args, has a hook go away while it waits (the daemon logs
// that at debug), stops it and returns its log.
func levelRun(t *testing.T, env []string, args ...string) []stderrLine {
	t.Helper()
	home := shortTemp(t)
	sock := filepath.Join(home, "hook.sock")
	if err := os.WriteFile(filepath.Join(home, "config.toml"),
		[]byte(oneRunnerConfig+fmt.Sprintf("[http]\nlisten = \"127.0.0.1:0\"\n[approvals.reachout]\nsocket = %q\n", sock)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, home)
	cmd := serveCmd(home, env, append([]string{"--log-format", "json"}, args...)...)
	cmd.Stdout, cmd.Stderr = d.stderr, d.stderr
	d.launch(cmd)
	h := startHook(t, sock, nil)
	a := d.pendingApproval(h.requestID(t))
	if err := h.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.waitEvent("approval.cancelled", func(e map[string]any) bool {
		return e["id"] == a.ID && e["reason"] == api.CancelRequesterGone
	})
	d.stopWith(syscall.SIGTERM)
	return stderrLines(t, d.stderr.String())
}

// has reports whether a line of level says msg (a runner's when runner).
func has(lines []stderrLine, level, msg string, runner bool) bool {
	for _, l := range lines {
		if l.Level == level && strings.Contains(l.Message, msg) && (l.Component == "runner") == runner {
			return true
		}
	}
	return false
}

// One level for the daemon and its runners: --log-level, else
// $ORCHESTRD_LOG_LEVEL, else info (issue 22 item 7: the daemon printed
// debug lines by default, and ORCHESTRD_LOG_LEVEL reached only runners).
// A runner's routine lines (connected, stopping, stopped) are debug: the
// event log has its comings and goings.
func TestLogLevel(t *testing.T) {
	t.Parallel()
	t.Run("default info", func(t *testing.T) {
		lines := levelRun(t, nil)
		var levels []string
		for _, l := range lines {
			levels = append(levels, l.Level+" "+l.Message)
			if l.Level != "info" && l.Level != "warn" && l.Level != "error" {
				t.Errorf("a %s line at the default level: %v", l.Level, l.raw)
			}
		}
		if len(lines) != 2 || !has(lines, "info", "orchestrd ready", false) || !has(lines, "info", "orchestrd stopped", false) {
			t.Errorf("want the ready and stopped lines alone, got %q", levels)
		}
	})
	debugSeen := func(t *testing.T, lines []stderrLine) {
		t.Helper()
		if !has(lines, "debug", "the hook went away before its answer", false) {
			t.Errorf("no debug line of the daemon's:\n%v", lines)
		}
		if !has(lines, "debug", "runner connected", true) || !has(lines, "debug", "runner stopped", true) {
			t.Errorf("no runner's debug lines (connected, stopped):\n%v", lines)
		}
	}
	t.Run("--log-level debug", func(t *testing.T) { debugSeen(t, levelRun(t, nil, "--log-level", "debug")) })
	t.Run("ORCHESTRD_LOG_LEVEL=debug", func(t *testing.T) {
		debugSeen(t, levelRun(t, []string{"ORCHESTRD_LOG_LEVEL=debug"}))
	})
	t.Run("the flag over the variable", func(t *testing.T) {
		for _, l := range levelRun(t, []string{"ORCHESTRD_LOG_LEVEL=debug"}, "--log-level", "warn") {
			if l.Level != "warn" && l.Level != "error" {
				t.Errorf("a %s line at --log-level warn: %v", l.Level, l.raw)
			}
		}
	})
	t.Run("a bad level", func(t *testing.T) {
		for _, tc := range []struct {
			env  []string
			args []string
			want string
		}{
			{nil, []string{"--log-level", "verbose"}, `orchestrd serve: --log-level must be trace, debug, info, warn or error, got "verbose"` + "\n"},
			{[]string{"ORCHESTRD_LOG_LEVEL=loud"}, nil, `orchestrd serve: $ORCHESTRD_LOG_LEVEL must be trace, debug, info, warn or error, got "loud"` + "\n"},
		} {
			home := shortTemp(t)
			cmd := serveCmd(home, tc.env, tc.args...)
			if out, code := serveOutput(t, cmd); code != 2 || out != tc.want {
				t.Errorf("serve %q with %q: exit %d, output %q; want exit 2 and %q", tc.args, tc.env, code, out, tc.want)
			}
			if _, err := os.Stat(filepath.Join(home, "daemon.sock")); err == nil {
				t.Errorf("serve %q with %q started", tc.args, tc.env)
			}
		}
	})
}
