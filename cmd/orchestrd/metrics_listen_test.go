package main

// serve refuses a [metrics] listen it must not or cannot take: the binary
// as a process (its exit status and its one line). The metrics themselves
// are tested in daemon/metrics, on a daemon in the test's process.

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := runExpectingExit(t, cmd)
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "orchestrd serve: ") ||
			!strings.Contains(lines[0], c.want) {
			t.Errorf("listen %q: %v\n%s\nwant exit 2 and one line with %q", c.listen, err, out.String(), c.want)
		}
	}
}
