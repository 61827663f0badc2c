package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemonrun"
)

// A lane's runner socket answers only the daemon's uid: a process of
// another uid that reaches it (its home and the socket opened here, so
// that the peer check is what refuses) is refused with conn.refused, is
// never a runner of the lane, and the lane goes on running jobs.
func TestRunnerSocketRefusesAnotherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	t.Parallel()
	d := startDaemon(t, "[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n")
	sock := filepath.Join(d.home, "runner-net.sock")
	if err := os.Chmod(d.home, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	// This test binary, where uid 65534 can run it.
	dir := shortTemp(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "peer")
	if err := daemonrun.CopyFile(testBinary(t), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, sock, `{"join":"a runner of another user"}`)
	cmd.Env = append(os.Environ(), "ORCHESTRD_TEST_HELPER=unixline")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "dial failed") {
		t.Fatalf("the peer of uid 65534 did not reach the socket: %v %q", err, out)
	}
	d.waitEvent("conn.refused", func(e map[string]any) bool { return e["socket"] == sock && e["uid"] == 65534.0 })
	for _, r := range d.lane("net").Runners {
		if !r.Spawned {
			t.Errorf("the lane has a runner it did not spawn: %+v", r)
		}
	}
	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"echo", "still serving"}}))
	if rec.State != api.StateSucceeded || rec.Output != "still serving\n" {
		t.Fatalf("the lane after the refusal: %+v", rec)
	}
}
