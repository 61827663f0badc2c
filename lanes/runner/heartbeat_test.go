package runner

import (
	"bytes"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

func TestJobsRSSCountsDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 300 & sleep 300 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	deadline := time.Now().Add(waitFor)
	for len(bytes.Fields(readChildren(nil, pid))) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("children of %d: %q", pid, readChildren(nil, pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	alone := rss(&process.Process{Pid: int32(pid)})
	all := jobsRSS([]int{pid})
	if alone == 0 || all <= alone {
		t.Fatalf("sh alone %d bytes, with its children %d", alone, all)
	}
	if got := jobsRSS([]int{1 << 30}); got != 0 {
		t.Fatalf("RSS of a missing pid: %d", got)
	}
}
