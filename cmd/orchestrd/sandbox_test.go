package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/wire"
)

// joinToken is lane's join token, as `orchestrd lane token` prints it.
func (d *testDaemon) joinToken(lane string) string {
	d.t.Helper()
	tok, err := lanes.ReadJoinToken(d.home, lane)
	if err != nil {
		d.t.Fatal(err)
	}
	return tok
}

// The escapes a new user found, tried by a job as root and as a non-root
// user: the daemon's home (and so its sockets) is hidden from every job, a
// job has no capability and cannot gain one, so it can neither reach the
// control socket, nor join another lane as a runner, nor enter the
// daemon's network namespace. What a job leaves running dies with it, once
// each with an event naming the job; and a daemon killed with -9 leaves
// nothing running.
func TestJobSandbox(t *testing.T) {
	t.Parallel()
	for _, who := range []string{"root", "non-root"} {
		t.Run(who, func(t *testing.T) {
			d := startSandboxDaemon(t, credFor(t, who))
			t.Run("no way out", func(t *testing.T) { sandboxNoWayOut(t, d) })
			t.Run("leftovers die with the job", func(t *testing.T) { sandboxLeftovers(t, d) })
			t.Run("kill -9 of the daemon leaves nothing", func(t *testing.T) { sandboxDaemonKilled(t, d) })
		})
	}
}

// credFor is the credential a daemon of the test runs with as who, "root"
// or "non-root": nil for this test's own user; nobody for "non-root" when
// that is root. t skips "root" when it runs as another user.
func credFor(t *testing.T, who string) *syscall.Credential {
	t.Helper()
	switch {
	case who == "root" && os.Geteuid() != 0:
		t.Skip("needs root")
	case who == "non-root" && os.Geteuid() == 0:
		return &syscall.Credential{Uid: 65534, Gid: 65534} // nobody
	}
	return nil
}

func sandboxNoWayOut(t *testing.T, d *sandboxDaemon) {
	for _, lane := range []string{"no-net", "net"} {
		// Each probe prints a marker only if the escape works.
		probe := fmt.Sprintf(`
grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status
ls %[1]s >/dev/null 2>&1 && echo ESCAPE:home-visible
%[2]s run --home %[1]s --lane net -- true >/dev/null 2>&1 && echo ESCAPE:control-socket
timeout 5 %[2]s runner --lane net --socket %[1]s/runner-net.sock >/dev/null 2>&1 && echo ESCAPE:joined-lane
test -e /proc/%[3]d/root%[1]s/daemon.sock && echo ESCAPE:proc-root
nsenter --net=/proc/%[3]d/ns/net true 2>/dev/null && echo ESCAPE:nsenter
unshare -rm sh -c 'umount %[1]s && ls %[1]s' >/dev/null 2>&1 && echo ESCAPE:unmount
kill -0 %[3]d 2>/dev/null && echo ESCAPE:sees-daemon
for s in TERM INT HUP QUIT SEGV ABRT USR1 PIPE TSTP; do kill -$s 1; done
echo probe-done`, d.home, d.bin, d.cmd.Process.Pid)
		out, errOut, code := d.cli("run", "--home", d.home, "--lane", lane, "--", "sh", "-c", probe)
		if code != 0 || !strings.Contains(out, "probe-done") {
			t.Fatalf("lane %s: probe exit %d\nstdout: %s\nstderr: %s", lane, code, out, errOut)
		}
		if strings.Contains(out, "ESCAPE:") {
			t.Errorf("lane %s: a job escaped:\n%s", lane, out)
		}
		for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(out, want) {
				t.Errorf("lane %s: job status lacks %q:\n%s", lane, want, out)
			}
		}
		if os.Geteuid() == 0 && d.cred == nil && !strings.Contains(out, "CapBnd:\t0000000000000000") {
			t.Errorf("lane %s: a root job keeps a bounding set, so exec could give capabilities back:\n%s", lane, out)
		}
	}
	// Nothing reached the net lane but what the test itself submitted.
	out, errOut, code := d.cli("jobs", "--home", d.home, "--lane", "net", "--json")
	var jobs struct{ Jobs []api.JobRecord }
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil {
		t.Fatalf("jobs: exit %d %s %s", code, out, errOut)
	}
	for _, j := range jobs.Jobs {
		if len(j.Argv) == 0 || j.Argv[0] != "sh" {
			t.Errorf("a job submitted from inside a job ran: %+v", j)
		}
	}
	for _, e := range d.events() {
		if e["kind"] == "runner.ready" && e["spawned"] == false {
			t.Errorf("a job joined a lane as a runner: %v", e)
		}
		// Signalling pid 1, its runner, costs a job nothing.
		if e["kind"] == "runner.exited" {
			t.Errorf("a job stopped its runner: %v", e)
		}
	}
}

// tagSeq makes each leftover job's processes findable on the host by a
// unique argument: jobs live in pid namespaces of their own, so the pids
// they could print are not the host's.
var tagSeq atomic.Int64

func newTag() string { return fmt.Sprintf("300.%d%04d", os.Getpid()%100000, tagSeq.Add(1)) }

// leftoverScript starts a background child in the job's process group and
// a daemonised one (setsid -f: its own session, re-parented away), both
// running "sleep TAG", waits until both run, says "ready", waits for the
// file go to exist in dir, then runs tail.
func leftoverScript(dir, tag, tail string) string {
	return fmt.Sprintf(`cd %[1]s || exit 1
sleep %[2]s &
setsid -f sh -c 'touch ready2; exec sleep %[2]s'
while [ ! -e ready2 ]; do :; done
echo ready
while [ ! -e go ]; do sleep 0.01; done
%[3]s`, dir, tag, tail)
}

// tagged lists the live host pids running exactly "sleep TAG".
func tagged(tag string) []int {
	var out []int
	for _, p := range proc.AllPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if err == nil && string(b) == "sleep\x00"+tag+"\x00" && alive(p) {
			out = append(out, p)
		}
	}
	return out
}

// waitTagged waits until n processes run "sleep TAG", and returns them.
func waitTagged(t *testing.T, tag string, n int) []int {
	t.Helper()
	var pids []int
	eventually(t, 20*time.Second, fmt.Sprintf("%d processes running sleep %s", n, tag), func() bool {
		pids = tagged(tag)
		return len(pids) == n
	})
	return pids
}

func sandboxLeftovers(t *testing.T, d *sandboxDaemon) {
	dir := d.scratch(t)
	tag := newTag()
	cmd := d.cliCmd("run", "--home", d.home, "--lane", "net", "--", "sh", "-c", leftoverScript(dir, tag, "echo main-done"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := waitTagged(t, tag, 2)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "main-done") {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	eventually(t, 10*time.Second, "the job's leftovers to die", func() bool { return len(tagged(tag)) == 0 })
	// One process.orphan_killed each, with its host pid, naming the job.
	jobID := d.jobWith(t, tag)
	eventually(t, 10*time.Second, "process.orphan_killed for both leftovers", func() bool {
		n := map[int]int{}
		for _, e := range d.events() {
			if e["kind"] != "process.orphan_killed" || e["job_id"] != jobID {
				continue
			}
			if e["reason"] != "job_ended" || e["lane"] != "net" {
				t.Fatalf("event = %v", e)
			}
			n[int(e["pid"].(float64))]++
		}
		for p, c := range n {
			if c > 1 {
				t.Fatalf("pid %d killed %d times", p, c)
			}
		}
		return len(n) == 2 && n[pids[0]] == 1 && n[pids[1]] == 1
	})
	// The runner goes on: the jobs after it run as any other (a cgroup
	// whose leftovers were killed is not reused).
	for i := 0; i < 3; i++ {
		if out, errOut, code := d.cli("run", "--home", d.home, "--lane", "net", "--", "echo", "next"); code != 0 || out != "next\n" {
			t.Fatalf("job after the leftovers: exit %d %q %q", code, out, errOut)
		}
	}
}

func sandboxDaemonKilled(t *testing.T, d *sandboxDaemon) {
	// Two jobs, one per lane, each with a child in its group, a daemonised
	// one and a main process that keeps running.
	var clis []*exec.Cmd
	var watched []pidRef
	for _, lane := range []string{"net", "no-net"} {
		dir, tag := d.scratch(t), newTag()
		os.WriteFile(filepath.Join(dir, "go"), nil, 0o666)
		cmd := d.cliCmd("run", "--home", d.home, "--lane", lane, "--", "sh", "-c", leftoverScript(dir, tag, "exec sleep "+tag))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		clis = append(clis, cmd)
		watched = append(watched, holdTagged(t, tag, waitTagged(t, tag, 3))...)
	}
	for _, p := range d.runnerPids() {
		r := holdPid(p, childOf(d.cmd.Process.Pid))
		t.Cleanup(r.release)
		watched = append(watched, r)
	}
	if len(watched) < 6+2 {
		t.Fatalf("watching %v: want 6 job processes and the runners", watched)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.proc.Done()
	waitAllGone(t, watched, "every runner and job process to die with the daemon", nil)
	for _, c := range clis {
		c.Wait() // they lost the daemon
	}
}

// sandboxDaemon is the real daemon run as a given user, driven only
// through the CLI (run as the same user: the daemon refuses other uids)
// and its event log.
type sandboxDaemon struct {
	t      *testing.T
	cred   *syscall.Credential // nil: this test's own user
	bin    string              // the binary, where that user can run it
	home   string
	cmd    *exec.Cmd
	proc   *daemonrun.Daemon
	stderr *testio.SyncBuffer
}

func startSandboxDaemon(t *testing.T, cred *syscall.Credential) *sandboxDaemon {
	return startSandboxDaemonWith(t, cred, "", nil)
}

// sandboxConfig is the config of every sandboxDaemon: two lanes with one
// runner each and no spares, plus extra.
const sandboxConfig = `
[daemon]
shutdown_timeout = "2s"
[lanes.no-net]
runners = 1
spares = 0
network = "none"
[lanes.net]
runners = 1
spares = 0
network = "host"
`

// startSandboxDaemonWith starts the daemon with sandboxConfig and extra
// config, in a directory its user can reach; prepare, if not nil, adjusts
// the serve command before it starts (how it is started: terminal,
// descriptors, working directory).
func startSandboxDaemonWith(t *testing.T, cred *syscall.Credential, extra string, prepare func(top string, cmd *exec.Cmd)) *sandboxDaemon {
	top := shortTemp(t)
	os.Chmod(top, 0o755)
	d := &sandboxDaemon{t: t, cred: cred, bin: filepath.Join(top, "orchestrd"), home: filepath.Join(top, "h"),
		stderr: &testio.SyncBuffer{}}
	if err := daemonrun.CopyFile(binary, d.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.home, "config.toml"), []byte(sandboxConfig+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	d.chown(d.home, filepath.Join(d.home, "config.toml"))
	d.cmd = d.cliCmd("serve", "--home", d.home, "--log-format", "json")
	d.cmd.Stderr = d.stderr
	if prepare != nil {
		prepare(top, d.cmd)
	}
	p, err := daemonrun.Start(d.cmd, d.home)
	if err != nil {
		t.Fatal(err)
	}
	d.proc = p
	t.Cleanup(func() {
		if err := d.proc.Stop(30 * time.Second); err != nil {
			t.Errorf("daemon did not stop on SIGTERM\n%s", tail(d.stderr.String(), 3000))
		}
		eventually(t, 10*time.Second, "no process of the daemon left", func() bool { return len(d.runnerPids()) == 0 })
	})
	eventuallyOr(t, readyTimeout, "both runners ready", func() bool {
		return countEvents(d.events(), "runner.ready", nil) >= 2
	}, func() string { return tail(d.stderr.String(), 3000) })
	return d
}

func (d *sandboxDaemon) chown(paths ...string) {
	if d.cred == nil {
		return
	}
	for _, p := range paths {
		if err := os.Chown(p, int(d.cred.Uid), int(d.cred.Gid)); err != nil {
			d.t.Fatal(err)
		}
	}
}

// scratch is a directory the daemon's user and its jobs can write.
func (d *sandboxDaemon) scratch(t *testing.T) string {
	dir := shortTemp(t)
	os.Chmod(dir, 0o777)
	return dir
}

func (d *sandboxDaemon) cliCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(d.bin, args...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "HOME=/nonexistent")
	if d.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.cred}
	}
	return cmd
}

func (d *sandboxDaemon) cli(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	cmd := d.cliCmd(args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return o.String(), err.Error(), -1
	}
	return o.String(), e.String(), code
}

func (d *sandboxDaemon) events() []map[string]any {
	out, _ := daemonrun.ReadEvents(daemonrun.EventLog(d.home))
	return out
}

// jobWith is the id of the job whose command has s.
func (d *sandboxDaemon) jobWith(t *testing.T, s string) string {
	out, errOut, code := d.cli("jobs", "--home", d.home, "--json")
	var jobs struct{ Jobs []api.JobRecord }
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil {
		t.Fatalf("jobs: exit %d %s %s", code, out, errOut)
	}
	for _, j := range jobs.Jobs {
		if strings.Contains(strings.Join(j.Argv, " ")+j.Command, s) {
			return j.ID
		}
	}
	t.Fatalf("no job with %q in %s", s, out)
	return ""
}

func (d *sandboxDaemon) jobRecord(t *testing.T, id string) []byte {
	out, errOut, code := d.cli("jobs", "--home", d.home, "--json")
	var jobs struct{ Jobs []json.RawMessage }
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil {
		t.Fatalf("jobs: exit %d %s %s", code, out, errOut)
	}
	for _, j := range jobs.Jobs {
		var r struct{ ID string }
		if json.Unmarshal(j, &r) == nil && r.ID == id {
			return j
		}
	}
	t.Fatalf("no job %s in %s", id, out)
	return nil
}

// runnerPids lists this daemon's runners: the processes told to hide its
// home.
func (d *sandboxDaemon) runnerPids() []int {
	var out []int
	for _, p := range proc.AllPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if err == nil && bytes.Contains(b, []byte("--hide\x00"+d.home+"\x00")) && alive(p) {
			out = append(out, p)
		}
	}
	return out
}

// Bring-your-own runners join only lanes that take them, and only with
// the lane's join token; everyone else is refused with a reason, an event,
// and nothing else disturbed.
func TestExternalRunnersNeedTheLaneToken(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig+"[lanes.byo]\nrunners = 0\nnetwork = \"host\"\n")
	handshake := func(lane, token string) (wire.HandshakeAck, *net.UnixConn) {
		t.Helper()
		c, err := net.Dial("unix", filepath.Join(d.home, "runner-"+lane+".sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if err := wire.WriteFrame(c, wire.TypeHandshake, wire.Handshake{Lane: lane, Pid: 1, Version: "t", Token: token}); err != nil {
			t.Fatal(err)
		}
		f, err := wire.NewFrameReader(c, 0).Next()
		var ack wire.HandshakeAck
		if err != nil || f.Type != wire.TypeHandshakeAck || wire.Unmarshal(f, &ack) != nil {
			t.Fatalf("handshake on %s: %v %v", lane, f.Type, err)
		}
		return ack, c.(*net.UnixConn)
	}
	byoTok := d.joinToken("byo")
	for _, tc := range []struct{ lane, token, reason string }{
		{"net", byoTok, "does not take bring-your-own runners (external_runners = false)"},
		{"byo", "", "no join token"},
		{"byo", strings.Repeat("0", 64), "wrong join token"},
	} {
		ack, _ := handshake(tc.lane, tc.token)
		if ack.Accepted || !strings.Contains(ack.Config.Reason, tc.reason) {
			t.Errorf("lane %s token %.8q: ack = %+v, want refused with %q", tc.lane, tc.token, ack, tc.reason)
		}
		d.waitEvent("runner.rejected", func(e map[string]any) bool {
			r, _ := e["reason"].(string)
			return e["lane"] == tc.lane && strings.Contains(r, tc.reason)
		})
	}
	if ack, _ := handshake("byo", byoTok); !ack.Accepted {
		t.Fatalf("the right token was refused: %+v", ack)
	}
	eventually(t, 10*time.Second, "the runner with the token joined", func() bool { return len(d.lane("byo").Runners) == 1 })
	if n := len(d.lane("net").Runners); n != 2+1 {
		t.Errorf("net lane has %d runners, want its 2 and a spare", n)
	}

	// The token is private, and the CLI prints it.
	for path, mode := range map[string]os.FileMode{filepath.Join(d.home, "tokens"): 0o700, lanes.JoinTokenPath(d.home, "byo"): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, mode %v, want %v", path, err, fi.Mode().Perm(), mode)
		}
	}
	if out, _, code := runCLI(t, "lane", "token", "--home", d.home, "byo"); code != 0 || strings.TrimSpace(out) != byoTok {
		t.Errorf("lane token byo: exit %d, %q", code, out)
	}
	if _, errOut, code := runCLI(t, "lane", "token", "--home", d.home, "net"); code != 1 || !strings.Contains(errOut, "external_runners") {
		t.Errorf("lane token net: exit %d, %q", code, errOut)
	}
}

// A runner killed under a job: the job fails runner_lost, and what the job
// had started (a child in its group, a daemonised one) dies with the
// runner, which is the init of their pid namespace.
func TestRunnerDeathTakesItsJobsProcesses(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	dir, tag := shortTemp(t), newTag()
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o666)
	id := d.submit(api.JobSpec{Lane: "net", Command: leftoverScript(dir, tag, "exec sleep "+tag)})
	pids := waitTagged(t, tag, 3)
	var rec struct{ Job api.JobRecord }
	d.mustCall("job.get", map[string]any{"id": id}, &rec)
	if !killChild(d.proc.Pid(), rec.Job.RunnerPid) {
		t.Fatalf("runner %d gone before it was killed", rec.Job.RunnerPid)
	}
	if r := d.wait(id); r.State != api.StateFailed || r.Error != api.ErrRunnerLost {
		t.Fatalf("record = %+v", r)
	}
	eventually(t, 10*time.Second, "the job's processes to die", func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	})
	d.lanes() // the replacement runner, for the leak check at stop
}

// waitAllGone waits until none of pids is alive, failing with the command
// lines of those left (and the tail of log(), if given) after a deadline.
func waitAllGone(t *testing.T, refs []pidRef, what string, log func() string) {
	t.Helper()
	eventuallyOr(t, 10*time.Second, what, func() bool {
		for _, r := range refs {
			if !r.exited() {
				return false
			}
		}
		return true
	}, func() string {
		var left []string
		for _, r := range refs {
			if !r.exited() {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(r.pid) + "/cmdline")
				left = append(left, fmt.Sprintf("%d %q", r.pid, bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
			}
		}
		msg := "still running: " + strings.Join(left, ", ")
		if log != nil {
			msg += "\n" + tail(log(), 3000)
		}
		return msg
	})
}
