package lanes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/internal/testio"
)

// acceptChildHome, set, makes TestLaneSocketServesAfterEMFILE the child
// that serves a lane socket in that home with its descriptors used up.
const acceptChildHome = "ORCHESTRD_TEST_LANE_EMFILE_HOME"

// A lane's runner socket whose accept fails because the daemon is out of
// file descriptors backs off and logs it, and serves again once
// descriptors are free: running out does not end the lane's listener.
// The descriptor table is filled in a child process (this test binary run
// again), so no other test runs short of descriptors.
func TestLaneSocketServesAfterEMFILE(t *testing.T) {
	if home := os.Getenv(acceptChildHome); home != "" {
		laneEMFILEChild(t, home)
		return
	}
	home := testio.ShortTemp(t, "laneemfile")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestLaneSocketServesAfterEMFILE$", "-test.count=1")
	cmd.Env = append(os.Environ(), acceptChildHome+"="+home)
	var out, errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout := testio.StartPiped(t, cmd)
	var conn net.Conn
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if line != "emfile: full" {
			continue
		}
		// The child has no descriptor left: this connection waits in the
		// socket's backlog and the child's accept fails with EMFILE.
		conn, err = net.Dial("unix", filepath.Join(home, "runner-byo.sock"))
		if err != nil {
			t.Errorf("dialing the lane socket: %v", err)
			break
		}
		// No handshake: once accepted, the lane rejects it (runner.rejected).
		conn.(*net.UnixConn).CloseWrite()
	}
	io.Copy(&out, stdout)
	werr := cmd.Wait()
	if conn != nil {
		conn.Close()
	}
	if werr != nil || !strings.Contains(out.String(), "emfile: served") {
		t.Fatalf("the child (%v) did not show the lane serving after EMFILE:\n%s%s", werr, out.String(), errOut.String())
	}
}

// backoffLog notes the lane socket's "accept failed" warning of EMFILE.
type backoffLog struct {
	mu   sync.Mutex
	seen chan struct{}
	done bool
}

func (b *backoffLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done && bytes.Contains(p, []byte("lane byo: accept failed")) && bytes.Contains(p, []byte("too many open files")) {
		b.done = true
		close(b.seen)
	}
	return len(p), nil
}

func laneEMFILEChild(t *testing.T, home string) {
	if errs := ValidateLanes("lanes", map[string]LaneConfig{"byo": byoLaneConfig()}); len(errs) > 0 {
		t.Fatal(errs)
	}
	logs := &backoffLog{seen: make(chan struct{})}
	// The lane serves (its actor started its socket) before the
	// descriptors are used up.
	_, rejected := startByoLane(t, home, zerolog.New(logs))

	// Use up every descriptor: a low limit in this process only, then
	// /dev/null opened until the table is full.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur > 256 {
		lim.Cur = 256
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	var fds []int
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == unix.EMFILE {
			break
		}
		if err != nil {
			t.Fatalf("filling the descriptor table: %v", err)
		}
		fds = append(fds, fd)
	}
	fmt.Println("emfile: full")
	backedOff := false
	select {
	case <-logs.seen:
		backedOff = true
	case <-time.After(15 * time.Second):
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	if !backedOff {
		t.Error("no 'accept failed' warning of EMFILE from the lane's socket while the descriptors were used up")
	}
	// Descriptors are free again: the connection waiting since is accepted
	// and its (missing) handshake rejected.
	select {
	case rec := <-rejected:
		if r, ok := rec.Event.(RunnerRejected); !ok || r.Lane != "byo" {
			t.Fatalf("event %+v, want runner.rejected of lane byo", rec.Event)
		}
		fmt.Println("emfile: served")
	case <-time.After(15 * time.Second):
		t.Error("the lane's socket accepted nothing once descriptors were free: its listener ended")
	}
}
