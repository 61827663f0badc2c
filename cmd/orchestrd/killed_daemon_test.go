package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/orchestrd/orchestrd/platform/proc"
)

// Nothing of a daemon killed with SIGKILL keeps running (issue 8): its
// runners notice, kill their jobs and whatever those started, and exit.
// Each job, on a lane with no network and on one with the host's, leaves
// a grandchild in its process group, one in a session of its own that
// ignores SIGHUP and SIGTERM, and one daemonised the same way (re-parented
// away from the job); with the sandbox (pid namespaces) and without it, as
// root and as a non-root user.
func TestKilledDaemonLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, who := range []string{"root", "non-root"} {
		for _, sandbox := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/sandbox=%v", who, sandbox), func(t *testing.T) {
				killedDaemonLeavesNothing(t, credFor(t, who), sandbox)
			})
		}
	}
}

// stubbornScript is a job that forks a grandchild in its own process
// group (sleep TAG), a grandchild in a new session that ignores SIGHUP and
// SIGTERM (sleep STAG: ignored signals stay ignored across exec), a
// daemonised one that ignores them too (sleep DTAG), and then becomes
// sleep TAG itself.
func stubbornScript(tag, stag, dtag string) string {
	return fmt.Sprintf(`sleep %[1]s &
setsid sh -c 'trap "" HUP TERM; exec sleep %[2]s' &
setsid -f sh -c 'trap "" HUP TERM; exec sleep %[3]s'
exec sleep %[1]s`, tag, stag, dtag)
}

func killedDaemonLeavesNothing(t *testing.T, cred *syscall.Credential, sandbox bool) {
	// sandboxConfig with the sandbox as asked (its [daemon] table cannot
	// be extended by appending, so the file is written again before the
	// daemon starts).
	config := strings.Replace(sandboxConfig, "[daemon]\n", fmt.Sprintf("[daemon]\nsandbox = %v\n", sandbox), 1)
	d := startSandboxDaemonWith(t, cred, "", func(top string, _ *exec.Cmd) {
		if err := os.WriteFile(filepath.Join(top, "h", "config.toml"), []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	var clis []*exec.Cmd
	var watched []pidRef
	for _, lane := range []string{"net", "no-net"} {
		tag, stag, dtag := newTag(), newTag(), newTag()
		cmd := d.cliCmd("run", "--home", d.home, "--lane", lane, "--no-stdin", "--", "sh", "-c", stubbornScript(tag, stag, dtag))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		clis = append(clis, cmd)
		for _, tg := range []struct {
			tag string
			n   int
		}{{tag, 2}, {stag, 1}, {dtag, 1}} {
			watched = append(watched, holdTagged(t, tg.tag, waitTagged(t, tg.tag, tg.n))...)
		}
	}
	runners := childPids(d.cmd.Process.Pid)
	if len(runners) != 2 {
		t.Fatalf("runners %v: want one a lane", runners)
	}
	for _, p := range runners {
		r := holdPid(p, childOf(d.cmd.Process.Pid))
		t.Cleanup(r.release)
		watched = append(watched, r)
	}
	// If the test fails, what is left is killed so the daemon's harness
	// (which waits for its stderr, held by the runners) can finish: through
	// their pidfds, never a process that took a pid of theirs since.
	t.Cleanup(func() {
		for _, r := range watched {
			r.signal(syscall.SIGKILL)
		}
	})
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitAllGone(t, watched, "every runner, job and grandchild to die with the daemon", d.stderr.String)
	<-d.proc.Done()
	for _, c := range clis {
		c.Wait() // they lost the daemon
	}
}

// childPids lists the live children of pid (its runners, for a daemon).
func childPids(pid int) []int {
	var out []int
	for _, p := range proc.AllPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil || !alive(p) {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}
