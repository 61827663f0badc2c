package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/orchestrd/orchestrd/platform/proc"
)

// A non-root daemon in a delegated cgroup (what systemd's Delegate=yes
// gives a user service: a cgroup directory and its cgroup.procs,
// cgroup.threads and cgroup.subtree_control owned by the user) runs each
// job in a cgroup of its own below it, with the sandbox on.
func TestDelegatedCgroupGivesJobsCgroups(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to delegate a cgroup to another user")
	}
	own, err := proc.OwnCgroupDir()
	if err != nil {
		t.Skipf("no cgroup v2: %v", err)
	}
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	dir := filepath.Join(own, fmt.Sprintf("orchestrd-test-delegated-%d-%s", os.Getpid(), newTag()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup to delegate: %v", err)
	}
	t.Cleanup(func() { removeCgroupTree(t, dir) })
	for _, p := range []string{dir, dir + "/cgroup.procs", dir + "/cgroup.threads", dir + "/cgroup.subtree_control"} {
		if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	cg, err := proc.OpenCgroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	d := startSandboxDaemonWith(t, cred, "", func(_ string, cmd *exec.Cmd) {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.FD()
	})
	want := strings.TrimPrefix(dir, mustCgroupMount(t)) + fmt.Sprintf("/orchestrd-%d/", d.cmd.Process.Pid)
	for _, lane := range []string{"net", "no-net"} {
		out, errOut, code := d.cli("run", "--home", d.home, "--lane", lane, "--no-stdin", "--", "cat", "/proc/self/cgroup")
		if code != 0 {
			t.Fatalf("lane %s: exit %d %s", lane, code, errOut)
		}
		// 0::/<delegated>/orchestrd-PID/<runner>.<gen>/job-N
		var v2 string
		for _, l := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(l, "0::"); ok {
				v2 = rest
			}
		}
		if !strings.HasPrefix(v2, want) || !strings.Contains(v2, "/job-") {
			t.Errorf("lane %s: the job's cgroup is %q, want one below %sRUNNER/job-N\n%s", lane, v2, want, d.stderr.String())
		}
	}
}

func mustCgroupMount(t *testing.T) string {
	m, err := proc.Cgroup2MountPoint()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// removeCgroupTree removes dir and the cgroups below it, deepest first.
func removeCgroupTree(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(t, filepath.Join(dir, e.Name()))
		}
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		t.Errorf("removing cgroup %s: %v", dir, err)
	}
}
