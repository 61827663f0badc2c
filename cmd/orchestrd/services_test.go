package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/internal/testio"
)

// daemonServices are the daemon's services in the order they start.
var daemonServices = []string{"hook.listen", "http.listen", "metrics.listen", "sandbox", "lanes", "approvals", "chat",
	"executors", "loops", "clanker", "control", "http", "metrics", "hook", "pruning"}

// serviceLines reads status's SERVICE table: name and state, in order.
func serviceLines(out string) [][2]string {
	_, table, _ := strings.Cut(out, "SERVICE ")
	table, _, _ = strings.Cut(table, "\n\n")
	var rows [][2]string
	for _, l := range strings.Split(table, "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 2 {
			rows = append(rows, [2]string{f[0], strings.Join(f[1:], " ")})
		}
	}
	return rows
}

// serviceEvents are the service.* events of a home's log, as "kind name"
// in the order logged.
func serviceEvents(t *testing.T, home string) []string {
	var out []string
	for _, e := range readEvents(t, home) {
		if k, _ := e["kind"].(string); strings.HasPrefix(k, "service.") {
			out = append(out, k+" "+e["service"].(string))
		}
	}
	return out
}

// `orchestrd status` shows the daemon's services in the order they start,
// each running, or off and why where the config leaves it off (and status
// --json the same); the event log has each
// start in that order and, once the daemon stopped, each stop in reverse.
func TestStatusShowsServicesInOrder(t *testing.T) {
	t.Parallel()
	underRace(t) // the runner's status is read while it starts and stops
	d := startDaemonAt(t, startupHome(t, "[http]\nenabled = false\n"), "")
	out, errOut, code := runCLI(t, "status", "--home", d.home)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	// This config turns the HTTP API off and gives the metrics no
	// address: their services are off and say why; every other runs.
	off := map[string]string{"http.listen": "off: [http] enabled = false", "http": "off: [http] enabled = false",
		"metrics.listen": "off: [metrics] listen is not set", "metrics": "off: [metrics] listen is not set"}
	var names []string
	for _, r := range serviceLines(out) {
		names = append(names, r[0])
		want := "running"
		if w, ok := off[r[0]]; ok {
			want = w
		}
		if r[1] != want {
			t.Errorf("service %s is %q, want %q", r[0], r[1], want)
		}
	}
	if !slices.Equal(names, daemonServices) {
		t.Fatalf("status's services %q, want %q\n%s", names, daemonServices, out)
	}
	out, errOut, code = runCLI(t, "status", "--home", d.home, "--json")
	var js struct {
		Services []struct{ Name, State, Off string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js.Services) != len(daemonServices) ||
		js.Services[4].Name != "lanes" || js.Services[4].State != "running" ||
		js.Services[2].Name != "metrics.listen" || js.Services[2].State != "off" || js.Services[2].Off != "[metrics] listen is not set" {
		t.Fatalf("status --json: exit %d, services %+v: %s%s", code, js.Services, out, errOut)
	}

	d.stop()
	var want []string
	for _, n := range daemonServices {
		want = append(want, "service.started "+n)
	}
	for _, n := range slices.Backward(daemonServices) {
		want = append(want, "service.stopped "+n)
	}
	if got := serviceEvents(t, d.home); !slices.Equal(got, want) {
		t.Errorf("service events\n got  %q\n want %q", got, want)
	}
}

// A service that fails to start (here the control socket: its path is a
// directory that is not empty) stops the daemon: every service started
// before it stops, in reverse, no runner is left, and serve exits
// non-zero naming what failed.
func TestFailedStartStopsServicesInReverse(t *testing.T) {
	t.Parallel()
	home := startupHome(t, "")
	if err := os.MkdirAll(filepath.Join(home, "daemon.sock", "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := serveCmd(home, nil)
	var stdout, stderr testio.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := runExpectingExit(t, cmd)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() == 0 || !strings.Contains(stderr.String(), "control socket") {
		t.Fatalf("serve: %v, want a non-zero exit naming the control socket\nstdout %q\nstderr %q", err, stdout.String(), stderr.String())
	}
	failed := slices.Index(daemonServices, "control")
	var want []string
	for _, n := range daemonServices[:failed] {
		want = append(want, "service.started "+n)
	}
	want = append(want, "service.start_failed control")
	for _, n := range slices.Backward(daemonServices[:failed]) {
		want = append(want, "service.stopped "+n)
	}
	if got := serviceEvents(t, home); !slices.Equal(got, want) {
		t.Errorf("service events\n got  %q\n want %q", got, want)
	}
	for _, e := range readEvents(t, home) {
		switch e["kind"] {
		case "daemon.started":
			t.Errorf("the daemon said it started: %v", e)
		case "runner.spawned":
			if pid, ok := e["pid"].(float64); ok {
				waitGone(t, int(pid))
			}
		}
	}
}
