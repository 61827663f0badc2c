package main

// clanker's behaviour through a whole daemon is tested beside its code
// (clanker/daemon_test.go, daemon_files_test.go: the daemon in the test's
// process); here what needs the daemon as a process of its own.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// A daemon killed with SIGKILL in the middle of a drain resumes it after
// its restart: no spool line is lost and none is applied twice.
func TestClankerDrainKilled(t *testing.T) {
	underRace(t)
	t.Parallel()
	repo := shortTemp(t)
	if err := os.MkdirAll(filepath.Join(repo, ".clanker"), 0o755); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	var spool strings.Builder
	for i := range 2000 {
		id := fmt.Sprintf("k-%d", i)
		ids[id] = true
		spool.WriteString(daemontest.SpoolLine("task_create", map[string]any{"task": map[string]any{"id": id, "prompt": "p"}}))
	}
	if err := os.WriteFile(filepath.Join(repo, ".clanker", "ipc-spool.ndjson"), []byte(spool.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	home := shortTemp(t)
	// 200 lines a tick, a tick every 300 ms: the drain takes 10 ticks, time
	// enough to kill it in the middle.
	d := startDaemonAt(t, home, strings.Replace(daemontest.ClankerConfig(repo, ""), `tick = "50ms"`, `tick = "300ms"`, 1))
	d.waitEvent("clanker.spool_drained", func(e map[string]any) bool { return e["more"] == true })
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	if _, err := os.Stat(filepath.Join(repo, ".clanker", "ipc-spool.draining.ndjson")); err != nil {
		t.Logf("the drain ended before the kill (%v); the test proves less", err)
	}
	d2 := startDaemonAt(t, home, "")
	// The drain syncs each task file: on a disk another test is filling
	// it is slow, so the wait is on progress, not on a total time.
	daemontest.WhileProgressing(t, time.Minute, "every spooled task created", func() int { return daemontest.TaskFiles(repo) }, len(ids), nil)
	eventually(t, 20*time.Second, "the taken spool removed", func() bool {
		_, err := os.Stat(filepath.Join(repo, ".clanker", "ipc-spool.draining.ndjson"))
		return os.IsNotExist(err)
	})
	daemontest.CreatedOnce(t, repo, ids)
	if _, err := os.Stat(filepath.Join(repo, ".clanker", "ipc-spool.dead.ndjson")); !os.IsNotExist(err) {
		t.Fatalf("dead letters after the restart: %s", testio.ReadFile(t, filepath.Join(repo, ".clanker", "ipc-spool.dead.ndjson")))
	}
	_ = d2
}
