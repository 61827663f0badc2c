package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/api"
)

// The fault tests need what only root has (a read-only or full file
// system, a file the daemon's user may not read, whatever its uid): each
// runs the test binary again in a user and mount namespace of its own,
// where it is root over the caller's uid only, may mount tmpfs and
// remount it read-only, and has no power over files of other owners.
const nsEnv = "STATE_TEST_NS_DIR"

// inNamespace runs the test named run in the namespace with dir as its
// working directory, and fails t if it fails.
func inNamespace(t *testing.T, run, dir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), nsEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES) {
			t.Skipf("cannot make a user namespace here (%v): the fault needs one", err)
		}
		t.Fatal(err)
	}
	err := cmd.Wait()
	t.Logf("in the namespace:\n%s", out.String())
	if err != nil || !strings.Contains(out.String(), "--- PASS: "+run+" ") {
		t.Fatalf("%s failed in the namespace: %v", run, err)
	}
}

// nsDir is the directory of a test that runs in the namespace; outside it
// the test is skipped.
func nsDir(t *testing.T) string {
	dir := os.Getenv(nsEnv)
	if dir == "" {
		t.Skip("runs inside the namespace another test makes")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make mounts private: %v", err)
	}
	return dir
}

func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

func wantOpenError(t *testing.T, path, says string) {
	t.Helper()
	s, err := Open(path, testOpts)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded, want an error saying %q", path, says)
	}
	if !strings.HasPrefix(err.Error(), "state store "+path+": ") || !strings.Contains(err.Error(), says) ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open(%s): %v, want one line naming the file and saying %q", path, err, says)
	}
	t.Log(err)
}

func TestReadOnlyFilesystem(t *testing.T) { inNamespace(t, "TestNSReadOnlyFilesystem", t.TempDir()) }

func TestNSReadOnlyFilesystem(t *testing.T) {
	dir := nsDir(t)
	mountTmpfs(t, dir, "16m")
	path := filepath.Join(dir, "state.db")
	s, err := Open(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Jobs().Submit(ctx, submitted("j-1", "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	wantOpenError(t, path, "read-only file system")
	wantOpenError(t, filepath.Join(dir, "new.db"), "read-only file system")
}

func TestUnreadableFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s := openT(t, path, testOpts)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0); err != nil {
			t.Fatal(err)
		}
		wantOpenError(t, path, "permission denied")
		return
	}
	// Root reads any file; in the namespace it is root only over its own
	// uid, and this file belongs to another.
	if err := os.Chown(path, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	inNamespace(t, "TestNSUnreadableFile", dir)
}

func TestNSUnreadableFile(t *testing.T) {
	wantOpenError(t, filepath.Join(nsDir(t), "state.db"), "permission denied")
}

func TestFullDisk(t *testing.T) { inNamespace(t, "TestNSFullDisk", t.TempDir()) }

// fill writes zeros to path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			return
		}
	}
}

func TestNSFullDisk(t *testing.T) {
	dir := nsDir(t)
	mountTmpfs(t, dir, "4m")
	path := filepath.Join(dir, "state.db")
	s, err := Open(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	jobs := s.Jobs()
	if err := jobs.Submit(ctx, submitted("j-ok", "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fill(t, filler)

	// Writes fail with an error (no panic), and a submission that failed
	// is not recorded.
	out := strings.Repeat("x", 64<<10)
	var werr error
	var failedID string
	for i := 0; i < 200 && werr == nil; i++ {
		id := fmt.Sprintf("j-%d", i)
		if werr = jobs.Submit(ctx, submitted(id, "net", api.JobSpec{}, time.Now()), api.JobSpec{}); werr != nil {
			failedID = id
			break
		}
		werr = jobs.Finish(ctx, api.JobRecord{ID: id, State: api.StateSucceeded, Output: out})
	}
	if werr == nil {
		t.Fatal("200 jobs of 64 KiB fit on a full 4 MiB disk")
	}
	if !strings.HasPrefix(werr.Error(), "state store "+path+": record job ") || !strings.Contains(werr.Error(), "full") {
		t.Fatalf("write on a full disk: %v", werr)
	}
	t.Log(werr)
	if failedID != "" {
		if _, ok, err := jobs.Get(failedID); ok || err != nil {
			t.Fatalf("the refused submission %s is recorded (%v)", failedID, err)
		}
	}
	if rec, ok, err := jobs.Get("j-ok"); !ok || err != nil || rec.State != api.StateQueued {
		t.Fatalf("reads on a full disk: %+v %v %v", rec, ok, err)
	}

	// Room again: the store writes again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := jobs.Submit(ctx, submitted("j-after", "net", api.JobSpec{}, time.Now()), api.JobSpec{}); err != nil {
		t.Fatalf("write once there is room again: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Full at start: Open says so.
	fill(t, filler)
	wantOpenError(t, path, "full")
}
