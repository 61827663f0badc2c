package main

import (
	"bytes"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/api"
)

// `orchestrd events` against a real daemon: connection churn is kept in
// the log but shown only when asked for, --follow starts from now, and
// --help has the format of the other client commands.
func TestEventsCLIAgainstRealDaemon(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	d.lanes() // a connection: conn.opened, conn.closed
	d.waitEvent("conn.closed", nil)

	out, errOut, code := runCLI(t, "events", "--home", d.home)
	if code != 0 || !strings.Contains(out, "daemon.started") || strings.Contains(out, "conn.opened") || strings.Contains(out, "conn.closed") {
		t.Fatalf("events: code %d stderr %q\n%s", code, errOut, out)
	}
	out, _, code = runCLI(t, "events", "--home", d.home, "--kind", "conn.*")
	if code != 0 || !strings.Contains(out, "conn.opened") || !strings.Contains(out, "conn.closed") || strings.Contains(out, "daemon.started") {
		t.Fatalf("events --kind 'conn.*': code %d\n%s", code, out)
	}
	out, _, code = runCLI(t, "events", "--home", d.home, "-n", "1", "--kind", "runner.ready")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "runner.ready") {
		t.Fatalf("events -n 1: code %d\n%s", code, out)
	}

	// --follow prints what happens from now on, not the history.
	var fout, ferr testio.SyncBuffer
	follow := exec.Command(binary, "events", "--home", d.home, "--follow", "--json")
	follow.Stdout, follow.Stderr = &fout, &ferr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- follow.Wait() }()
	followExited := false
	defer func() {
		if !followExited {
			follow.Process.Kill()
			<-followDone
		}
	}()
	// The follower reads the clock when it starts, which this test cannot
	// see: run jobs until one of them shows up.
	eventually(t, 30*time.Second, "a job.finished on events --follow", func() bool {
		d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"true"}}))
		return strings.Contains(fout.String(), `"kind":"job.finished"`)
	})
	if err := follow.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-followDone:
		followExited = true
		if err != nil {
			t.Fatalf("events --follow after Ctrl-C: %v; stderr %q", err, ferr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("events --follow did not stop on SIGINT")
	}
	for _, k := range []string{"daemon.started", "lane.started", "runner.ready", "conn.opened"} {
		if strings.Contains(fout.String(), `"kind":"`+k+`"`) {
			t.Fatalf("events --follow printed %s, from before it started (or churn):\n%s", k, fout.String())
		}
	}

	// --help: "usage: ...", a blank line, "options:", as jobs --help.
	help, _, code := runCLI(t, "events", "--help")
	jobsHelp, _, _ := runCLI(t, "jobs", "--help")
	for name, h := range map[string]string{"events": help, "jobs": jobsHelp} {
		first, rest, _ := strings.Cut(h, "\n")
		if !strings.HasPrefix(first, "usage: orchestrd "+name+" ") || !strings.HasPrefix(rest, "\noptions:\n  -") {
			t.Errorf("%s --help (exit %d) does not read usage, blank line, options:\n%s", name, code, h)
		}
	}
	if !bytes.Contains([]byte(help), []byte("\n  -follow\n")) {
		t.Fatalf("events --help lists no -follow:\n%s", help)
	}
}
