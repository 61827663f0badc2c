package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/internal/fleetrun"
)

// readmeFleetConfig is the README's fleet config (the toml block of its
// guide "A three-node fleet") made to run alone on this machine: its routes left out (the
// other nodes are not there), its ports free ones; the [http] table
// listens on a free port as "[http] listen" turns the API on.
func readmeFleetConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)### A three-node fleet\n.*?```toml\n(\\[cluster\\]\n.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("no [cluster] toml block in README's fleet section")
	}
	block := string(m[1])
	// The shape this test is about: lanes of its own, none named net, no
	// exec_lane.
	if !strings.Contains(block, "[lanes.gpu]") || strings.Contains(block, "[lanes.net]") || strings.Contains(block, "exec_lane") {
		t.Fatalf("README's fleet config is no longer of the shape this test checks:\n%s", block)
	}
	var out []string
	for _, l := range strings.Split(block, "\n") {
		switch {
		case strings.HasPrefix(l, "routes"):
			continue
		case strings.HasPrefix(l, "listen"):
			l = fmt.Sprintf("listen = \"127.0.0.1:%d\"", fleetrun.FreePort(t))
		case strings.HasPrefix(l, "cluster_listen"):
			l = fmt.Sprintf("cluster_listen = \"127.0.0.1:%d\"", fleetrun.FreePort(t))
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n") + "\n[http]\nlisten = \"127.0.0.1:0\"\n"
}

// fleetHome is a home with node name's credentials (cluster init) and
// config.
func fleetHome(t *testing.T, name, config string) string {
	t.Helper()
	home, _ := fleetHomeSaid(t, name, config)
	return home
}

// fleetHomeSaid is fleetHome, with what cluster init printed.
func fleetHomeSaid(t *testing.T, name, config string) (home, said string) {
	t.Helper()
	home = shortTemp(t)
	said, errOut, code := runCLI(t, "cluster", "init", "--name", name, "--home", home)
	if code != 0 {
		t.Fatalf("cluster init: exit %d\n%s%s", code, said, errOut)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return home, said
}

// The README's fleet config (lanes of its own, no net lane) with [http]
// listen starts: /execute, whose exec_lane is left to its default "net",
// is off, said once in the log and as http.execute_disabled, and answers
// that it is off and which key turns it on. (It exited 2 once the fleet
// had started.)
func TestREADMEFleetConfigStarts(t *testing.T) {
	t.Parallel()
	home, said := fleetHomeSaid(t, "gpu-box", readmeFleetConfig(t))
	d := startDaemonAt(t, home, "")
	e := d.waitEvent("http.execute_disabled", nil)
	if e["exec_lane"] != "net" || fmt.Sprint(e["lanes"]) != "[gpu]" {
		t.Fatalf("http.execute_disabled: %v", e)
	}
	// The log reaches the test through a pipe, apart from the event log:
	// once the ready line, logged after the HTTP API started, is there,
	// every line logged before it is.
	ready := readyLine(t, d)
	// cluster init named the cluster as the ready line does.
	if c, _ := ready.raw["cluster"].(string); c == "" || !strings.Contains(said, "the cluster: "+c+" ") {
		t.Fatalf("the ready line names cluster %q; cluster init said:\n%s", c, said)
	}
	if n := strings.Count(d.stderr.String(), "/execute is off"); n != 1 {
		t.Fatalf("the warning is in the log %d times, want once:\n%s", n, tail(d.stderr.String(), 3000))
	}
	key, err := os.ReadFile(filepath.Join(home, "http.key"))
	if err != nil {
		t.Fatal(err)
	}
	addr := d.waitEvent("http.listening", nil)["addr"].(string)
	for _, path := range []string{"/execute", "/execute/stream"} {
		a := httpDo(t, "POST", "http://"+addr+"/api/v1"+path, strings.TrimSpace(string(key)), `{"command":"true"}`)
		wantHTTPError(t, a, 503, 3004)
		msg := a.body["error"].(map[string]any)["message"].(string)
		if !strings.Contains(msg, "Remote execution is off") || !strings.Contains(msg, "set [http] exec_lane") {
			t.Fatalf("POST %s: %q", path, msg)
		}
	}
	// The rest of the API is on.
	if a := httpDo(t, "GET", "http://"+addr+"/api/v1/status", strings.TrimSpace(string(key)), ""); a.status != 200 {
		t.Fatalf("GET /status: %d %s", a.status, a.raw)
	}
}

// An exec_lane the config file sets to no lane is a config error: serve
// exits 2 before it starts anything (no event log, no state store, no
// NATS: its JetStream directory <home>/cluster is never made), printing
// the error once, naming the key and the lanes there are.
func TestExecLaneNotALaneStopsBeforeStart(t *testing.T) {
	t.Parallel()
	home := fleetHome(t, "gpu-box", readmeFleetConfig(t)+"exec_lane = \"gpu2\"\n")
	cmd := serveCmd(home, nil)
	out, code := serveOutput(t, cmd)
	if code != 2 {
		t.Fatalf("serve: exit %d, want exit 2\n%s", code, out)
	}
	want := `http.exec_lane "gpu2" is not a lane (the lanes: gpu)`
	if n := strings.Count(out, want); n != 1 {
		t.Fatalf("the error is printed %d times, want once: %q", n, out)
	}
	if out != "orchestrd serve: "+filepath.Join(home, "config.toml")+": "+want+"\n" {
		t.Fatalf("serve printed %q", out)
	}
	for _, f := range []string{"cluster", "state.db", "events.ndjson", "daemon.sock"} {
		if _, err := os.Stat(filepath.Join(home, f)); !os.IsNotExist(err) {
			t.Errorf("%s was made (%v): the daemon started before its config was refused", f, err)
		}
	}
}

// What else the config names that is not right stops serve the same way,
// before NATS or any lane starts (exit 2, one line): a certificate of
// [http] that cannot be read, fleet credentials that do not let the node
// serve its shared lanes. Both were found once the fleet had started.
func TestConfigFilesStopBeforeFleet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, extra, lanes, want string
		absent                   []string // what the daemon must not have made
	}{
		{"cert", "exec_lane = \"gpu\"\ncert = \"/nonexistent/tls.pem\"\nkey = \"/nonexistent/tls.key\"\n", "",
			"the HTTP API ([http] listen) cannot read its certificate: reading [http] cert and key: open /nonexistent/tls.pem: no such file or directory",
			[]string{"cluster", "daemon.sock"}},
		{"lanes", "", "ci",
			"[cluster]: serving shared lane gpu in the fleet: node gpu-box's credentials",
			[]string{"cluster", "state.db", "events.ndjson", "daemon.sock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := shortTemp(t)
			args := []string{"cluster", "init", "--name", "gpu-box", "--home", home}
			if tc.lanes != "" {
				args = append(args, "--lanes", tc.lanes)
			}
			mustCLI(t, args...)
			if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(readmeFleetConfig(t)+tc.extra), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := serveCmd(home, nil)
			out, code := serveOutput(t, cmd)
			if code != 2 {
				t.Fatalf("serve: exit %d, want exit 2\n%s", code, out)
			}
			if !strings.HasPrefix(out, "orchestrd serve: "+tc.want) || strings.Count(out, "\n") != 1 {
				t.Fatalf("serve printed %q, want one line %q...", out, "orchestrd serve: "+tc.want)
			}
			for _, f := range tc.absent {
				if _, err := os.Stat(filepath.Join(home, f)); !os.IsNotExist(err) {
					t.Errorf("%s was made (%v): the daemon started before it was refused", f, err)
				}
			}
		})
	}
}
