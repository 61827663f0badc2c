package main

// Escapes found by red-teaming the job sandbox (issue 6 sections 1 and 5).
// Each subtest fails on the code it was written against: a job reaches the
// daemon, another lane, a privilege, or outlives its end. Run as root (the
// non-root half runs as nobody).

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
	"unsafe"

	"github.com/orchestrd/orchestrd/daemon/control/client"

	"github.com/orchestrd/orchestrd/api"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/platform/proc"
)

// The test binary doubles as a small hostile tool a job runs:
// ORCHESTRD_REDTEAM=MODE <binary> ARGS...
func init() {
	if m := os.Getenv("ORCHESTRD_REDTEAM"); m != "" {
		os.Exit(redTool(m, os.Args[1:]))
	}
}

func redTool(mode string, args []string) int {
	switch mode {
	case "cgescape": // cgescape CGROUPDIR: start `sleep 300` straight into CGROUPDIR, in its own session
		fd, err := unix.Open(args[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Println("cannot open the cgroup tree:", err)
			return 0
		}
		cmd := exec.Command("sleep", "300")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd}
		if err := cmd.Start(); err != nil {
			fmt.Println("clone3 into", args[0], "refused:", err)
			return 0
		}
		fmt.Printf("ESCAPED=%d\n", cmd.Process.Pid)
		return 0
	case "tty": // open the controlling terminal and push input into it
		fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			fmt.Println("no controlling terminal:", err)
			return 0
		}
		fmt.Println("ESCAPE:daemon-tty")
		c := byte('\n')
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c))); e == 0 {
			fmt.Println("ESCAPE:tiocsti")
		}
		return 0
	case "submit": // submit SOCKET COMMAND: a job with no cwd, as an API client may send it
		c, err := client.Dial(args[0])
		if err != nil {
			fmt.Println(err)
			return 1
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var sub struct {
			JobID string `json:"job_id"`
		}
		if err := c.Call(ctx, "job.submit", api.JobSpec{Lane: "no-net", Command: args[1]}, &sub); err != nil {
			fmt.Println(err)
			return 1
		}
		var r struct{ Job api.JobRecord }
		if err := c.Call(ctx, "job.wait", map[string]any{"id": sub.JobID, "timeout_ms": 20000}, &r); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Print(r.Job.Output)
		return 0
	}
	return 2
}

// startRedDaemon is startSandboxDaemon with the daemon started as a user
// would start it by hand: from a shell in its home, on a terminal, with a
// descriptor it inherited.
func startRedDaemon(t *testing.T, cred *syscall.Credential) (*sandboxDaemon, string) {
	var tool string
	d := startSandboxDaemonWith(t, cred, "[lanes.byo]\nrunners = 0\nnetwork = \"host\"\n", func(top string, cmd *exec.Cmd) {
		tool = filepath.Join(top, "redtool")
		self, err := os.Executable()
		if err == nil {
			err = daemonrun.CopyFile(self, tool, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
		// A terminal, as `orchestrd serve` in the foreground of a shell has.
		ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			t.Skip("no pty:", err)
		}
		t.Cleanup(func() { ptmx.Close() })
		if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
			t.Fatal(err)
		}
		n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
		if err != nil {
			t.Fatal(err)
		}
		ptsPath := "/dev/pts/" + strconv.Itoa(n)
		if cred != nil {
			os.Chown(ptsPath, int(cred.Uid), int(cred.Gid))
		}
		pts, err := os.OpenFile(ptsPath, os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pts.Close() })
		// A descriptor the daemon inherits from whoever started it (fd 10).
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pr.Close(); pw.Close() })
		// Started from a shell in its home.
		cmd.Dir = filepath.Join(top, "h")
		cmd.Stdin = pts
		cmd.ExtraFiles = []*os.File{nil, nil, nil, nil, nil, nil, nil, pw}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true, Setctty: true, Ctty: 0}
	})
	return d, tool
}

// laneRunner is the pid of d's runner of lane.
func (d *sandboxDaemon) laneRunner(lane string) int {
	for _, p := range d.runnerPids() {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if bytes.Contains(b, []byte("--lane\x00"+lane+"\x00")) {
			return p
		}
	}
	d.t.Fatalf("no runner of lane %s", lane)
	return 0
}

// runJob runs sh -c script as a job of lane and returns its stdout.
func (d *sandboxDaemon) runJob(t *testing.T, lane, script string) string {
	t.Helper()
	out, errOut, code := d.cli("run", "--home", d.home, "--lane", lane, "--", "sh", "-c", script)
	if code != 0 {
		// The daemon's log says why (a runner lost: its exit, its cause).
		t.Fatalf("job exit %d\nstdout: %s\nstderr: %s\ndaemon log tail:\n%s", code, out, errOut, tail(d.stderr.String(), 6000))
	}
	return out
}

// startJob starts sh -c script as a job of lane in the background and
// waits until it has created file ready.
func (d *sandboxDaemon) startJob(t *testing.T, lane, ready, script string, env ...string) {
	t.Helper()
	args := []string{"run", "--home", d.home, "--lane", lane}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	cmd := d.cliCmd(append(args, "--", "sh", "-c", script)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	eventually(t, 20*time.Second, "the background job to start", func() bool { _, err := os.Stat(ready); return err == nil })
}

func noEscape(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(out, "ESCAPE") {
		t.Errorf("a job escaped:\n%s", out)
	}
}

func TestRedTeam(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the non-root half runs as nobody)")
	}
	for _, who := range []string{"root", "non-root"} {
		t.Run(who, func(t *testing.T) {
			cred := credFor(t, who) // the test runs as root: nobody for non-root
			d, tool := startRedDaemon(t, cred)
			red := "ORCHESTRD_REDTEAM"

			// kill(2) needs only the same uid: no capability, no ptrace right.
			t.Run("a job cannot signal the daemon or another lane's runner", func(t *testing.T) {
				noEscape(t, d.runJob(t, "no-net", fmt.Sprintf(
					"kill -0 %d 2>/dev/null && echo ESCAPE:signal-daemon; kill -0 %d 2>/dev/null && echo ESCAPE:signal-net-runner; true",
					d.cmd.Process.Pid, d.laneRunner("net"))))
			})

			// Runners share the daemon's session, so /dev/tty is the
			// terminal `orchestrd serve` runs on: TIOCSTI types commands
			// into the user's shell, run when the daemon exits.
			t.Run("a job cannot reach the daemon's terminal", func(t *testing.T) {
				noEscape(t, d.runJob(t, "no-net", red+"=tty "+tool))
			})

			t.Run("a job inherits no descriptor but its stdio", func(t *testing.T) {
				out := d.runJob(t, "no-net", "exec ls /proc/self/fd")
				if fds := strings.Fields(out); len(fds) != 4 { // 0 1 2 and ls's own
					t.Errorf("a job holds descriptors it was never given (the daemon's inherited fd 10): %v", fds)
				}
			})

			// A job without cwd runs in the runner's working directory, the
			// daemon's: opened before the mask was mounted over the home.
			t.Run("a job submitted without cwd does not run in the home", func(t *testing.T) {
				cmd := exec.Command(tool, d.home+"/daemon.sock", "ls -a; cat tokens/byo 2>/dev/null && echo ESCAPE:token")
				cmd.Env = append(os.Environ(), red+"=submit")
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				if strings.Contains(string(out), "daemon.sock") || strings.Contains(string(out), "ESCAPE") {
					t.Errorf("the job ran inside the daemon's home:\n%s", out)
				}
			})

			// Bring-your-own runners make no mount namespace: their jobs
			// see the home, its sockets and every join token.
			t.Run("a bring-your-own runner's job cannot see the home", func(t *testing.T) {
				tok := lanes.JoinTokenPath(d.home, "byo")
				r := d.cliCmd("runner", "--lane", "byo", "--socket", filepath.Join(d.home, "runner-byo.sock"), "--token-file", tok)
				if err := r.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { r.Process.Signal(syscall.SIGTERM); r.Wait() }()
				out := d.runJob(t, "byo", fmt.Sprintf("test -r %s && echo ESCAPE:token; test -S %s/daemon.sock && echo ESCAPE:control-socket; true", tok, d.home))
				noEscape(t, out)
			})

			// With cgroups (as root here) a job's processes are its
			// cgroup's, whatever their environment says: one that claims a
			// running job's id still dies with its own job. Without them
			// (non-root here) the runner knows a daemonised process's job
			// only by its ORCHESTRD_JOB_ID: one that claims another running
			// job's id lives until that job ends, and no longer. (It does
			// not hold the job's output: one that did would outlive the job
			// holding it, and the job's output would be cut and reported
			// so, exit 1: TestEscapedChildDoesNotHoldResult.)
			t.Run("a process claiming another job's id dies with a job", func(t *testing.T) {
				dir, tag := d.scratch(t), newTag()
				d.startJob(t, "no-net", dir+"/a", "touch "+dir+"/a; while [ ! -e "+dir+"/end ]; do sleep 0.05; done")
				d.runJob(t, "no-net", fmt.Sprintf(`cd %s
v=$(for f in /proc/[0-9]*/environ; do tr '\0' '\n' < $f 2>/dev/null | grep '^ORCHESTRD_JOB_ID='; done | grep -v "=$ORCHESTRD_JOB_ID\$" | head -1)
[ -n "$v" ] || v=ORCHESTRD_JOB_ID=j-000000-1
env "$v" setsid -f sh -c 'touch p && exec sleep %s' </dev/null >/dev/null 2>&1
while [ ! -e p ]; do :; done`, dir, tag))
				if os.Geteuid() == 0 && cred == nil {
					eventually(t, 10*time.Second, "the borrower to die with its own job", func() bool { return len(tagged(tag)) == 0 })
					return
				}
				os.WriteFile(filepath.Join(dir, "end"), nil, 0o666) // the borrowed job ends
				eventually(t, 10*time.Second, "the borrower to die with the job whose id it took", func() bool { return len(tagged(tag)) == 0 })
			})

			if who != "root" {
				return
			}

			// Jobs run as uid 0: without capabilities, but as root they can
			// still ptrace and read any process of uid 0 whose capabilities
			// are no more than theirs: the jobs of every other lane.
			t.Run("a job cannot read a job of another lane", func(t *testing.T) {
				dir := d.scratch(t)
				d.startJob(t, "net", dir+"/b", "touch "+dir+"/b; sleep 25", "RED_SECRET=hunter2")
				noEscape(t, d.runJob(t, "no-net",
					"grep -l RED_SECRET=hunter2 /proc/[0-9]*/environ 2>/dev/null | grep -v self && echo ESCAPE:other-lane-environ; true"))
			})

			// cgroup v2 checks a clone3(CLONE_INTO_CGROUP) against the
			// target's cgroup.procs inode (owned by root), not against the
			// read-only bind mount the runner put over the tree.
			t.Run("a job cannot start a process outside its cgroup", func(t *testing.T) {
				mnt, err := proc.Cgroup2MountPoint()
				if err != nil {
					t.Skip(err)
				}
				out := d.runJob(t, "no-net", red+"="+"cgescape "+tool+" "+mnt)
				if strings.Contains(out, "ESCAPED=") {
					t.Errorf("a job started a process in cgroup %s, outside its own: %s", mnt, out)
				}
			})

			// uid 0 owns the directory the daemon starts its runners from:
			// a job replaces the binary and kills its runner, and the daemon
			// starts the job's program with every capability.
			t.Run("a job cannot plant the next runner", func(t *testing.T) {
				mark := filepath.Join(d.scratch(t), "planted")
				defer func() {
					if _, err := os.Stat(d.bin + ".real"); err == nil {
						os.Rename(d.bin+".real", d.bin)
					}
				}()
				// The job puts its program where the binary was; then its
				// runner dies (the job cannot kill it: it is their pid
				// namespace's init) and the daemon starts a new one.
				d.cli("run", "--home", d.home, "--lane", "no-net", "--", "sh", "-c", fmt.Sprintf(`mv %[1]s %[1]s.real 2>/dev/null || exit 0
printf '#!/bin/sh\ngrep CapEff /proc/self/status > %[2]s\nexec %[1]s.real "$@"\n' > %[1]s && chmod 755 %[1]s`, d.bin, mark))
				ready := func() int {
					return countEvents(d.events(), "runner.ready", func(e map[string]any) bool { return e["lane"] == "no-net" })
				}
				before := ready()
				killChild(d.cmd.Process.Pid, d.laneRunner("no-net"))
				eventually(t, 20*time.Second, "the no-net runner's replacement", func() bool { return ready() > before })
				if b, err := os.ReadFile(mark); err == nil {
					t.Errorf("a job's program ran as the next runner: %s", b)
				}
			})
		})
	}
}
