package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
)

// notifyListener is systemd's end of $NOTIFY_SOCKET: a unixgram socket the
// test reads the daemon's sd_notify messages from.
type notifyListener struct {
	t    *testing.T
	conn *net.UnixConn
	addr string // what NOTIFY_SOCKET says: a path, or @name for an abstract socket
}

func listenNotify(t *testing.T, addr string) *notifyListener {
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &notifyListener{t: t, conn: c, addr: addr}
}

// next returns the next message's lines, failing the test after within.
func (n *notifyListener) next(within time.Duration) []string {
	n.t.Helper()
	buf := make([]byte, 4096)
	n.conn.SetReadDeadline(time.Now().Add(within))
	k, err := n.conn.Read(buf)
	if err != nil {
		n.t.Fatalf("waiting for an sd_notify message: %v", err)
	}
	return strings.Split(string(buf[:k]), "\n")
}

// until reads messages until one has the line want, and returns every
// line read on the way, that message's included.
func (n *notifyListener) until(want string, within time.Duration) []string {
	n.t.Helper()
	deadline := time.Now().Add(within)
	var all []string
	for {
		lines := n.next(time.Until(deadline))
		all = append(all, lines...)
		for _, l := range lines {
			if l == want {
				return all
			}
		}
	}
}

func hasPrefixLine(lines []string, prefix string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// Run by systemd (Type=notify), the daemon says READY=1 only once its
// control socket answers, with a STATUS= line a person reads in
// `systemctl status`; STOPPING=1 and why when it stops; and neither its
// runners nor its jobs see $NOTIFY_SOCKET (they must not speak for it).
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	for _, abstract := range []bool{false, true} {
		name := "path"
		if abstract {
			name = "abstract"
		}
		t.Run(name, func(t *testing.T) {
			addr := filepath.Join(shortTemp(t), "notify")
			if abstract {
				addr = fmt.Sprintf("@orchestrd-test-%d-%s", os.Getpid(), newTag())
			}
			systemdNotify(t, listenNotify(t, addr))
		})
	}
}

func systemdNotify(t *testing.T, sd *notifyListener) {
	home := shortTemp(t)
	// The HTTP API on a port of its own: the default one may be another
	// daemon's, and STATUS= would say the API is off.
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(fastConfig+"\n[http]\nlisten = \"127.0.0.1:0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, home)
	cmd := daemonrun.Serve(binary, home)
	// Serve's environment keeps vibe-reachout's socket in the home: the
	// test binary's is any other daemon's, and STATUS= would say the hook
	// is off.
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+sd.addr)
	cmd.Stderr, cmd.Stdout = d.stderr, d.stderr
	p, err := daemonrun.Start(cmd, home)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd, d.proc, d.done = cmd, p, p.Done()
	t.Cleanup(d.stop)

	ready := sd.until("READY=1", 30*time.Second)
	// Whatever came first, the control socket exists now and answers at
	// the first try: no retry, no waiting for it to appear.
	if _, err := os.Stat(d.sock()); err != nil {
		t.Fatalf("READY=1 before the control socket exists: %v", err)
	}
	if err := d.callWithin(10*time.Second, "ping", nil, nil); err != nil {
		t.Fatalf("READY=1, but the control socket does not answer: %v\n%s", err, tail(d.stderr.String(), 3000))
	}
	status := hasPrefixLine(ready, "STATUS=")
	if status != "STATUS=serving 2 lanes (net, no-net), 3 runners" {
		t.Errorf("status with READY=1 is %q (message %q)", status, ready)
	}
	d.waitReady(readyTimeout)

	// No runner has NOTIFY_SOCKET in its environment, and no job.
	for _, l := range d.lanes() {
		for _, r := range l.Runners {
			env, err := os.ReadFile("/proc/" + strconv.Itoa(r.Pid) + "/environ")
			if err != nil {
				if os.Geteuid() != 0 {
					continue // a runner in a user namespace hides it from another user
				}
				t.Fatalf("runner %s: %v", r.ID, err)
			}
			if strings.Contains("\x00"+string(env), "\x00NOTIFY_SOCKET=") {
				t.Errorf("runner %s (pid %d) has NOTIFY_SOCKET in its environment", r.ID, r.Pid)
			}
		}
		rec := d.wait(d.submit(api.JobSpec{Lane: l.Name, Argv: []string{"sh", "-c", "env; echo env-done"}}))
		if rec.State != api.StateSucceeded || !strings.Contains(rec.Output, "env-done") {
			t.Fatalf("lane %s: env job: %+v", l.Name, rec)
		}
		if strings.Contains(rec.Output, "NOTIFY_SOCKET") {
			t.Errorf("lane %s: a job sees NOTIFY_SOCKET:\n%s", l.Name, rec.Output)
		}
	}

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopping := sd.until("STOPPING=1", 30*time.Second)
	if s := hasPrefixLine(stopping, "STATUS=stopping"); s != "STATUS=stopping: SIGTERM" {
		t.Errorf("status with STOPPING=1 is %q (messages %q)", s, stopping)
	}
	d.waitCleanExit("daemon did not exit on SIGTERM")
}

// The example unit's ExecStart, %h the user's home, starts a daemon on a
// home with no config file: the embedded defaults (issue 22 item 8: it
// passed --config ~/.orchestrd/config.toml, which README calls optional,
// and a missing file is exit 2).
func TestSystemdUnitWithoutConfig(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile("../../examples/orchestrd.service")
	if err != nil {
		t.Fatal(err)
	}
	var execStart string
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			if execStart != "" {
				t.Fatal("two ExecStart lines")
			}
			execStart = v
		}
	}
	userHome := shortTemp(t)
	argv := strings.Fields(strings.ReplaceAll(execStart, "%h", userHome))
	if len(argv) < 2 || argv[0] != userHome+"/go/bin/orchestrd" || argv[1] != "serve" {
		t.Fatalf("ExecStart=%s: want %%h/go/bin/orchestrd serve ...", execStart)
	}
	home := filepath.Join(userHome, ".orchestrd")
	d := newTestDaemon(t, home)
	cmd := serveCmd(home, nil)
	cmd.Args = append([]string{binary}, argv[1:]...)
	cmd.Env = append(cmd.Env, "HOME="+userHome)
	cmd.Stdout, cmd.Stderr = d.stderr, d.stderr
	d.launch(cmd)
	if _, err := os.Stat(filepath.Join(home, "config.toml")); err == nil {
		t.Fatal("a config file appeared")
	}
	names := map[string]bool{}
	for _, l := range d.lanes() {
		names[l.Name] = true
	}
	if len(names) != 3 || !names["no-net"] || !names["net"] || !names["heavy"] {
		t.Fatalf("lanes %v, want the defaults", names)
	}
	d.stopWith(syscall.SIGTERM)
}
