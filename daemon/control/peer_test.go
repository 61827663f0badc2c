package control

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// peerEnv makes the test binary act as a client: connect to the socket it
// names, print the first line the daemon sends, exit.
const peerEnv = "ORCHESTRD_CONTROL_TEST_PEER"

func peerClientMain(path string) int {
	nc, err := net.Dial("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 2
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer: read:", err)
		return 3
	}
	// The daemon closes after the refusal.
	if n, err := nc.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		fmt.Fprintln(os.Stderr, "peer: connection not closed after the refusal:", n, err)
		return 4
	}
	fmt.Print(line)
	return 0
}

func TestPeerWithAnotherUIDIsRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	const uid = 65534
	// Everything the other user needs must be reachable by it: a 0755
	// directory holding a copy of the test binary and the daemon's home.
	dir := testio.ShortTemp(t, "ctl")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "peer.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, nil)
	// The server made its directory 0700 and the socket 0600, which alone
	// keeps other users out; open them up so the uid check is what refuses.
	if err := os.Chmod(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(h.path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(h.path, 0o666); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"="+h.path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("peer client: %v; stderr: %s", err, stderr.String())
	}
	var cl wire.ClientLine
	if err := json.Unmarshal(out, &cl); err != nil {
		t.Fatalf("peer got %q: %v", out, err)
	}
	want := fmt.Sprintf("refused: peer uid %d is not the daemon's uid %d", uid, os.Getuid())
	if cl.ID == nil || *cl.ID != 0 || cl.Error == nil || cl.Error.Code != wire.CodeUnauthorized || cl.Error.Message != want {
		t.Fatalf("peer got %s, want id 0, code 1003, message %q", out, want)
	}
	if string(out) != `{"id":0,"error":{"code":1003,"message":"`+want+`"}}`+"\n" {
		t.Fatalf("refusal line %q", out)
	}
	ev := h.rec.Wait(t, "conn.refused", func(r *eventlog.Record) bool { return r.Kind == "conn.refused" }).Event.(eventlog.ConnRefused)
	if ev.UID != uid || ev.Pid == 0 || ev.Socket != h.path {
		t.Fatalf("conn.refused = %+v", ev)
	}
	if m := h.srv.Metrics(); m.Connections != 0 || m.ConnectionsSeen != 0 {
		t.Fatalf("a refused peer was counted: %+v", m)
	}
	// Our own uid is still welcome.
	h.mustCall(h.client(), "ping", nil, nil)
}
