package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// A second `orchestrd serve` on a live home says which daemon holds it, in
// one line, exits 1 and touches nothing of the live daemon: its sockets
// stay, its event log gets no line from the intruder, and it keeps serving.
func TestSecondDaemonOnLiveHome(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	socks, err := filepath.Glob(filepath.Join(d.home, "*.sock"))
	if err != nil || len(socks) < 3 {
		t.Fatalf("sockets in the home: %v %v", socks, err)
	}
	before := map[string]os.FileInfo{}
	for _, s := range socks {
		st, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		before[s] = st
	}
	// Its lanes are ready before its last services (HTTP, the hook...)
	// have started: the log is read once it has said it started.
	d.started(d.cmd.Process.Pid)
	logBefore, err := os.ReadFile(filepath.Join(d.home, "events.ndjson"))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	second := exec.CommandContext(ctx, binary, "serve", "--home", d.home, "--log-format", "json")
	second.Stdout, second.Stderr = &stdout, &stderr
	err = second.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("second serve: %v, want exit status 1; stderr %q", err, stderr.String())
	}
	want := fmt.Sprintf("orchestrd serve: a daemon (pid %d) is already running on %s\n", d.cmd.Process.Pid, d.home)
	if stderr.String() != want || stdout.Len() != 0 {
		t.Fatalf("second serve said\nstdout %q\nstderr %q\nwant stderr %q", stdout.String(), stderr.String(), want)
	}

	for s, st := range before {
		now, err := os.Stat(s)
		if err != nil || !os.SameFile(st, now) {
			t.Errorf("socket %s was removed or replaced (%v)", filepath.Base(s), err)
		}
	}
	// The live daemon keeps serving: a job runs.
	if rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"echo", "still here"}})); rec.State != api.StateSucceeded {
		t.Fatalf("live daemon after the second serve: %+v", rec)
	}
	d.waitEvent("job.finished", nil)
	// Its log is what it was plus the live daemon's own lines since:
	// nothing the second one wrote (a daemon.started, a lane.started, a
	// runner.rejected for its runners...).
	logAfter, err := os.ReadFile(filepath.Join(d.home, "events.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(logAfter, logBefore) {
		t.Fatalf("the event log was rewritten:\nbefore:\n%s\nafter:\n%s", logBefore, logAfter)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(logAfter[len(logBefore):])), "\n") {
		var e map[string]any
		if err := jsonUnmarshal([]byte(line), &e); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		switch e["kind"] {
		case "conn.opened", "conn.closed", "job.queued", "job.dispatched", "job.finished":
		default:
			t.Errorf("the live daemon's log got %s: %s", e["kind"], line)
		}
	}
}

// The lock a daemon killed with SIGKILL leaves behind does not stop the
// next daemon on the same home; the lock file names the new one.
func TestLockOfADeadDaemonIsRetaken(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	first := startDaemonAt(t, home, fastConfig)
	first.lanes() // note its runners: they must die with it
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	first.waitRunnersGone() // Pdeathsig: nothing of the first one runs on
	lockPid := func() int {
		b, err := os.ReadFile(filepath.Join(home, "daemon.lock"))
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid
	}
	if pid := lockPid(); pid != first.cmd.Process.Pid {
		t.Fatalf("daemon.lock holds %d, want the first daemon's pid %d", pid, first.cmd.Process.Pid)
	}

	second := startDaemonAt(t, home, fastConfig)
	if pid := lockPid(); pid != second.cmd.Process.Pid {
		t.Fatalf("daemon.lock holds %d, want the second daemon's pid %d", pid, second.cmd.Process.Pid)
	}
	if rec := second.wait(second.submit(api.JobSpec{Lane: "net", Argv: []string{"true"}})); rec.State != api.StateSucceeded {
		t.Fatalf("second daemon: %+v", rec)
	}
	st, err := os.Stat(filepath.Join(home, "daemon.lock"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("daemon.lock: %v %v, want mode 0600", st.Mode(), err)
	}
}

// An event log that exists with mode 0666 when the daemon starts is made
// 0600 (issue 6: it kept its mode).
func TestExistingEventLogIsMadePrivate(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	path := filepath.Join(home, "events.ndjson")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(path, 0o666); err != nil { // not left to the umask
		t.Fatal(err)
	}
	d := startDaemonAt(t, home, fastConfig)
	d.waitEvent("daemon.started", nil)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("events.ndjson: mode %#o, want 0600", st.Mode().Perm())
	}
}

// A home the daemon cannot use stops serve with exit 2 and one line
// naming it, as a bad config does: restarting will not fix it, and the
// unit's RestartPreventExitStatus=2 then leaves it stopped (issue 22
// item 8: it was exit 1, and systemd restarted it in a loop). So does a
// secrets.toml others can read (exit 1 and a log line before).
func TestServeUnusableHome(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	others := filepath.Join(dir, "others")
	if err := os.Mkdir(others, 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, home, want string
	}{
		{"cannot be created", filepath.Join(file, "home"), "not a directory"},
		{"not a directory", file, "is not a directory"},
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(others, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, home, want string }{"another user's", others, "is owned by uid 65534"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := serveCmd(tc.home, nil)
			var stdout, stderr testio.SyncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := runExpectingExit(t, cmd)
			ee, ok := err.(*exec.ExitError)
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if !ok || ee.ExitCode() != 2 || len(lines) != 1 || stdout.String() != "" ||
				!strings.HasPrefix(lines[0], "orchestrd serve: home "+tc.home) || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("serve --home %s: %v\nstdout %q\nstderr %q\nwant exit 2 and one line: orchestrd serve: home %s ... %s",
					tc.home, err, stdout.String(), stderr.String(), tc.home, tc.want)
			}
		})
	}
	// A secrets file others can read is refused the same way.
	readable := shortTemp(t)
	if err := os.WriteFile(filepath.Join(readable, "secrets.toml"), []byte("a = \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := serveCmd(readable, nil)
	out, code := serveOutput(t, cmd)
	want := "orchestrd serve: secrets file " + filepath.Join(readable, "secrets.toml") + " is readable by others (mode 0644): chmod 600 "
	if code != 2 || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1 {
		t.Fatalf("serve with a secrets.toml others can read: exit %d, output %q; want exit 2 and one line %q...", code, out, want)
	}
}
