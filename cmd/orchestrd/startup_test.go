package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"
)

// readyLine waits until the daemon's JSON log has its ready line and
// returns it.
func readyLine(t *testing.T, d *testDaemon) stderrLine {
	t.Helper()
	var ready stderrLine
	eventually(t, 20*time.Second, "the ready line", func() bool {
		for _, l := range strings.Split(d.stderr.String(), "\n") {
			if strings.Contains(l, `"orchestrd ready"`) {
				ready = stderrLines(t, l)[0]
				return true
			}
		}
		return false
	})
	return ready
}

// A second daemon, on another home, with the defaults: the HTTP API's
// port and vibe-reachout's socket are the first one's. It serves without
// them, and says so: a warning each, `off: REASON` in its ready line, in
// `orchestrd status` and in systemd's STATUS=. Given either explicitly
// in its config, it does not start: exit 2 and one line (issue 22 item
// 8: it started with warnings, and its ready line did not say what it
// lacked).
func TestSecondDaemonFrontEndsOff(t *testing.T) {
	xdg := shortTemp(t) // one XDG_RUNTIME_DIR for both: one default hook path
	start := func(home string, env []string, extra ...string) *testDaemon {
		d := newTestDaemon(t, home)
		cmd := serveCmd(home, env, append([]string{"--log-format", "json"}, extra...)...)
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+xdg)
		cmd.Stdout, cmd.Stderr = d.stderr, d.stderr
		d.launch(cmd)
		return d
	}
	first := start(startupHome(t, ""), nil)
	hook := filepath.Join(xdg, "vibe-reachout.sock")
	r := readyLine(t, first)
	if r.raw["hook"] != hook {
		t.Fatalf("the first daemon's ready line: hook %v, want %s: %v", r.raw["hook"], hook, r.raw)
	}
	// The default port stays taken while this test runs: by the first
	// daemon, or else by the test, once whoever had it (another test's
	// daemon, which may end any time) lets it go.
	if on, _ := r.raw["http"].(string); strings.HasPrefix(on, "off: ") {
		eventually(t, 3*time.Minute, "the HTTP API's default port, 127.0.0.1:19532, free for this test to hold", func() bool {
			ln, err := net.Listen("tcp", "127.0.0.1:19532")
			if err == nil {
				t.Cleanup(func() { ln.Close() })
			}
			return err == nil
		})
	}

	sd := listenNotify(t, filepath.Join(shortTemp(t), "notify"))
	second := start(startupHome(t, ""), []string{"NOTIFY_SOCKET=" + sd.addr})
	r = readyLine(t, second)
	httpOff, _ := r.raw["http"].(string)
	hookOff, _ := r.raw["hook"].(string)
	if !strings.HasPrefix(httpOff, "off: ") || !strings.Contains(httpOff, "in use") ||
		!strings.HasPrefix(hookOff, "off: ") || !strings.Contains(hookOff, "in use") {
		t.Fatalf("the second daemon's ready line: http %q, hook %q; want both off: ... in use\n%v", httpOff, hookOff, r.raw)
	}
	if r.raw["socket"] != filepath.Join(second.home, "daemon.sock") {
		t.Errorf("ready line: socket %v", r.raw["socket"])
	}
	warned := map[string]bool{}
	for _, l := range stderrLines(t, second.stderr.String()) {
		if l.Level == "warn" {
			warned[strings.SplitN(l.Message, ":", 2)[0]] = true
		}
	}
	if !warned["http"] || !warned["reachout"] {
		t.Errorf("want a warning for the HTTP API and one for the hook socket:\n%s", second.stderr.String())
	}
	status := hasPrefixLine(sd.until("READY=1", 30*time.Second), "STATUS=")
	if !strings.Contains(status, "http off") || !strings.Contains(status, "hook off") {
		t.Errorf("STATUS= line %q does not say the HTTP API and the hook socket are off", status)
	}

	out, errOut, code := runCLI(t, "status", "--home", second.home)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	fe := frontEndLines(out)
	if !strings.HasPrefix(fe["http"], "off: ") || !strings.Contains(fe["http"], "in use") ||
		!strings.HasPrefix(fe["hook"], "off: ") || !strings.Contains(fe["hook"], "in use") ||
		fe["control"] != filepath.Join(second.home, "daemon.sock") {
		t.Errorf("status's front-ends %q; want control at its socket, http and hook off: ... in use\n%s", fe, out)
	}
	out, _, _ = runCLI(t, "status", "--home", first.home)
	if fe := frontEndLines(out); fe["hook"] != hook {
		t.Errorf("the first daemon's status: hook %q, want %s\n%s", fe["hook"], hook, out)
	}

	// Turned on explicitly, a front-end that cannot start stops the
	// daemon before it starts anything.
	for _, tc := range []struct{ name, config, want string }{
		{"http", "[http]\nlisten = \"127.0.0.1:19532\"\n", "orchestrd serve: the HTTP API ([http] listen) cannot listen on 127.0.0.1:19532: "},
		{"hook", "[approvals.reachout]\nenabled = true\n", "orchestrd serve: vibe-reachout's hook socket ([approvals.reachout] enabled) cannot be made at " + hook + ": "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := startupHome(t, tc.config)
			cmd := serveCmd(home, nil)
			cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+xdg)
			var stdout, stderr testio.SyncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := runExpectingExit(t, cmd)
			ee, ok := err.(*exec.ExitError)
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if !ok || ee.ExitCode() != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) || !strings.Contains(lines[0], "in use") {
				t.Fatalf("serve: %v\nstdout %q\nstderr %q\nwant exit 2 and one line %q... in use", err, stdout.String(), stderr.String(), tc.want)
			}
			for _, e := range readEvents(t, home) {
				if e["kind"] == "runner.spawned" || e["kind"] == "daemon.started" {
					t.Errorf("the daemon started something: %v", e)
				}
			}
		})
	}
}

// startupHome is a home with oneRunnerConfig and extra as its config.
func startupHome(t *testing.T, extra string) string {
	t.Helper()
	home := shortTemp(t)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(oneRunnerConfig+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// readEvents reads a home's event log, if there is one.
func readEvents(t *testing.T, home string) []map[string]any {
	t.Helper()
	if _, err := os.Stat(filepath.Join(home, "events.ndjson")); err != nil {
		return nil
	}
	return (&testDaemon{t: t, daemonProc: &daemonProc{home: home}}).events()
}

// frontEndLines reads status's FRONT-END table: address or off: reason,
// by front-end.
func frontEndLines(out string) map[string]string {
	fe := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	in := false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "FRONT-END"):
			in = true
		case in && strings.TrimSpace(l) == "":
			return fe
		case in:
			// Columns are two spaces or more apart; a name may have one.
			if i := strings.Index(l, "  "); i > 0 {
				fe[l[:i]] = strings.TrimSpace(l[i:])
			}
		}
	}
	return fe
}

// metricsLanes is a small daemon: one lane of one runner.
const metricsLanes = "[daemon]\nshutdown_timeout = \"2s\"\n[lanes.net]\nrunners = 1\nslots = 4\nspares = 0\nnetwork = \"host\"\n"

// [metrics] listen refuses an address that is not loopback (a config
// error: exit 2, one line) and one another process holds (the front-end
// the config turns on cannot start: exit 2, one line).
func TestMetricsListenRefused(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct{ listen, want string }{
		{"0.0.0.0:9464", `metrics.listen must be a loopback address (127.0.0.1, ::1 or localhost): "0.0.0.0:9464" is served without a key`},
		{":9464", `metrics.listen must be a loopback address`},
		{"192.168.7.7:9464", `metrics.listen must be a loopback address`},
		{taken.Addr().String(), "the metrics listener ([metrics] listen) cannot listen on " + taken.Addr().String() + ": in use by another process"},
	} {
		home := shortTemp(t)
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(metricsLanes+"[http]\nenabled = false\n[metrics]\nlisten = \""+c.listen+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := serveCmd(home, nil)
		out, code := serveOutput(t, cmd)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "orchestrd serve: ") ||
			!strings.Contains(lines[0], c.want) {
			t.Errorf("listen %q: exit %d\n%s\nwant exit 2 and one line with %q", c.listen, code, out, c.want)
		}
	}
}
