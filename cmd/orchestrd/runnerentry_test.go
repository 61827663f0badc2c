package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// `orchestrd runner` runs before the daemon's packages are initialised
// (internal/runnerentry): GODEBUG=inittrace=1 lists every package
// initialiser that ran, and none of the daemon's, the store's, the actors'
// or the metrics' is among them. An import added to lanes/runner that
// brings one of them in fails here.
func TestRunnerStartsBeforeDaemonInit(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "runner", "--help")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("orchestrd runner --help: %v\n%s", err, out)
	}
	inits := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "init" {
			inits[f[1]] = true
		}
	}
	if !inits["os"] || !inits["github.com/rs/zerolog"] {
		t.Fatalf("the init trace lacks os or zerolog, which a runner needs: %s", out)
	}
	for _, heavy := range []string{
		"github.com/orchestrd/orchestrd/daemon",
		"github.com/orchestrd/orchestrd/daemon/metrics",
		"github.com/orchestrd/orchestrd/supervisor/eventlog",
		"github.com/asynkron/protoactor-go/actor",
		"github.com/prometheus/client_golang/prometheus",
		"modernc.org/libc",
		"modernc.org/sqlite/lib",
		"net/http",
	} {
		if inits[heavy] {
			t.Errorf("%s was initialised before the runner started", heavy)
		}
	}
	if !strings.Contains(string(out), "usage: orchestrd runner") {
		t.Errorf("runner --help printed no usage: %s", out)
	}
}

// `orchestrd runner` run early and `orchestrd help runner` (through the
// command table) print the same usage; bad flags still exit 2.
func TestRunnerEntryUsage(t *testing.T) {
	t.Parallel()
	early, _, code := runCLI(t, "runner", "--help")
	if code != 0 {
		t.Fatalf("runner --help: exit %d", code)
	}
	viaTable, _, code := runCLI(t, "help", "runner")
	if code != 0 || viaTable != early {
		t.Errorf("help runner: exit %d, %q; runner --help: %q", code, viaTable, early)
	}
	_, errOut, code := runCLI(t, "runner", "--no-such-flag")
	if code != exitUsage || !strings.Contains(errOut, "usage: orchestrd runner") {
		t.Errorf("runner --no-such-flag: exit %d, stderr %q", code, errOut)
	}
}
