package runner

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/wire"
)

// A working directory the job cannot run in is refused before anything
// starts, naming the directory as the job gave it, not the command.
func TestBadWorkingDirectoryIsNamed(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(base+"/wt/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+"/file", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := startRunner(t, okAck(1))
	for i, tc := range []struct {
		job  wire.Job
		want string
	}{
		{wire.Job{Argv: []string{"true"}, Cwd: "/nonexistent"}, `working directory "/nonexistent" does not exist`},
		{wire.Job{Argv: []string{"true"}, Cwd: base + "/file"}, fmt.Sprintf(`working directory %q is not a directory`, base+"/file")},
		{wire.Job{Argv: []string{"true"}, Cwd: base + "/file/x"}, "does not exist: a part of it is not a directory"},
		{wire.Job{Argv: []string{"true"}, WorktreeDir: base + "/wt", Cwd: "missing"},
			fmt.Sprintf(`working directory "missing" (%s/wt/missing) does not exist`, base)},
		{wire.Job{Argv: []string{"true"}, WorktreeDir: base + "/gone"}, fmt.Sprintf(`worktree_dir %q does not exist`, base+"/gone")},
	} {
		tc.job.JobID = fmt.Sprintf("d%d", i)
		o := d.run(tc.job)
		if o.ack.Accepted || !strings.Contains(deref(o.ack.Error), tc.want) {
			t.Errorf("%+v: ack %+v (%s), want a refusal with %q", tc.job, o.ack, deref(o.ack.Error), tc.want)
		}
		if o.res.Status != wire.StatusError || !strings.Contains(o.res.Output, tc.want) {
			t.Errorf("%+v: result %+v, want Error with %q", tc.job, o.res, tc.want)
		}
	}
}

// A cwd is walked the way the kernel walks it: "up/.." with up a symlink
// climbs from the link's target, never folded away by text.
func TestCwdDotDotAfterSymlink(t *testing.T) {
	base := testio.UpLinkTree(t, t.TempDir())
	d := startRunner(t, okAck(1))
	o := d.run(wire.Job{JobID: "k", Command: "pwd -P", Cwd: base + "/wt/sub/up/../outside"})
	if o.res.Status != wire.StatusSuccess || strings.TrimSpace(o.stdout) != base+"/x/outside" {
		t.Fatalf("result %+v stdout %q, want it run in %s", o.res, o.stdout, base+"/x/outside")
	}
	// Inside a worktree the same path is an escape.
	o = d.run(wire.Job{JobID: "w", Command: "true", WorktreeDir: base + "/wt", Cwd: base + "/wt/sub/up/../outside"})
	if o.ack.Accepted || !strings.Contains(deref(o.ack.Error), "outside worktree_dir") {
		t.Fatalf("ack %+v (%s), want an escape refused", o.ack, deref(o.ack.Error))
	}
}

// Job.stdin_b64 reaches the job's stdin byte for byte and is closed after
// it; without it the job reads /dev/null.
func TestJobStdin(t *testing.T) {
	d := startRunner(t, okAck(1))
	o := d.run(wire.Job{JobID: "s1", Argv: []string{"cat"}, Stdin: []byte("hi\nthere")})
	if o.res.Status != wire.StatusSuccess || o.stdout != "hi\nthere" {
		t.Fatalf("result %+v stdout %q", o.res, o.stdout)
	}
	data := make([]byte, 300<<10) // more than a pipe buffer holds
	rand.Read(data)
	sum := sha256.Sum256(data)
	o = d.run(wire.Job{JobID: "s2", Argv: []string{"sha256sum"}, Stdin: data})
	if o.res.Status != wire.StatusSuccess || !strings.HasPrefix(o.stdout, hex.EncodeToString(sum[:])+" ") {
		t.Fatalf("result %+v stdout %q, want sha256 %x", o.res, o.stdout, sum)
	}
	o = d.run(wire.Job{JobID: "s3", Command: "wc -c"})
	if strings.TrimSpace(o.stdout) != "0" {
		t.Fatalf("without stdin the job read %q bytes", o.stdout)
	}
}

// A job that never reads its stdin, or stops early, finishes as if it had
// none: the runner's writer neither hangs the job nor fails it.
func TestUnreadStdinDoesNotHang(t *testing.T) {
	d := startRunner(t, okAck(2))
	big := bytes.Repeat([]byte("y\n"), 200<<10) // far more than a pipe buffer holds
	for i, tc := range []struct {
		job    wire.Job
		stdout string
	}{
		{wire.Job{Argv: []string{"true"}}, ""},
		{wire.Job{Command: "head -c 3"}, "y\ny"},
	} {
		tc.job.JobID = fmt.Sprintf("u%d", i)
		tc.job.Stdin = big
		o := d.run(tc.job)
		if o.res.Status != wire.StatusSuccess || o.stdout != tc.stdout {
			t.Errorf("%+v: result %+v stdout %q, want success with %q", tc.job.Command, o.res, o.stdout, tc.stdout)
		}
	}
	// The input outlives the job: a process that left the job's group holds
	// the pipe without reading it. The job still ends with its Result.
	f := d.dir + "/escaped"
	o := d.run(wire.Job{JobID: "esc", Stdin: big,
		Command: "setsid sh -c 'echo $$ > " + f + "; exec sleep 30' & while [ ! -s " + f + " ]; do sleep 0.01; done; cat " + f})
	pid := atoiLine(t, o.stdout)
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
	if o.res.Status != wire.StatusSuccess {
		t.Fatalf("result %+v", o.res)
	}
}
