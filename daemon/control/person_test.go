package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// callEnv makes the test binary a client this test process started:
// connect to the socket it names, send one test.person call, print the
// answer line, exit.
const callEnv = "ORCHESTRD_CONTROL_TEST_CALL"

func callClientMain(path string) int {
	nc, err := net.Dial("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "call:", err)
		return 2
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write([]byte(`{"id":1,"method":"test.person"}` + "\n")); err != nil {
		fmt.Fprintln(os.Stderr, "call: write:", err)
		return 3
	}
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, "call: read:", err)
		return 4
	}
	fmt.Print(line)
	return 0
}

// A method only a person may call answers a client that is not a process
// this one started, with its origin (control, the client's pid), and is
// refused (1003) to one that is, with conn.refused naming the method and
// the pid; the connection stays.
func TestPersonMethodRefusedToStartedProcess(t *testing.T) {
	h := newHarness(t, nil)
	var o api.Origin
	h.mustCall(h.client(), "test.person", nil, &o)
	if o.By != api.ByControl || o.Pid != int32(os.Getpid()) {
		t.Fatalf("test.person from the test: origin %+v, want control pid %d", o, os.Getpid())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), callEnv+"="+h.path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the child client: %v: %s", err, stderr.String())
	}
	want := `{"id":1,"error":{"code":1003,"message":"test.person is refused to this connection: only a person may answer an approval, and its peer is a process this daemon started"}}` + "\n"
	if string(out) != want {
		t.Fatalf("the child got %q, want %q", out, want)
	}
	ev := h.rec.Wait(t, "conn.refused", func(r *eventlog.Record) bool { return r.Kind == "conn.refused" }).Event.(eventlog.ConnRefused)
	if ev.Method != "test.person" || ev.Pid != int32(cmd.Process.Pid) || ev.Socket != h.path ||
		!strings.Contains(ev.Reason, "a process this daemon started") {
		t.Fatalf("conn.refused = %+v, want test.person by pid %d", ev, cmd.Process.Pid)
	}
}

// Invoke serves a method only a person may call only once its caller's
// Admit passed: none set, or one that fails, refuses it (1003, Admit's
// own api.Error as it is); passed, the method sees the caller's origin.
func TestInvokePersonMethodRunsAdmit(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	var ae *api.Error
	if _, err := h.srv.Invoke(ctx, api.Origin{By: api.ByUI, Session: "s1"}, "test.person", nil, nil); !errors.As(err, &ae) || ae.Code != api.CodeUnauthorized {
		t.Fatalf("without Admit: %v, want 1003", err)
	}
	admits := 0
	refuse := api.Origin{By: api.ByUI, Admit: func() error { admits++; return errors.New("peer pid 7 is a process this daemon started") }}
	if _, err := h.srv.Invoke(ctx, refuse, "test.person", nil, nil); !errors.As(err, &ae) || ae.Code != api.CodeUnauthorized ||
		!strings.Contains(ae.Message, "peer pid 7") || admits != 1 {
		t.Fatalf("Admit refusing: %v (%d runs), want 1003 with its reason", err, admits)
	}
	own := &api.Error{Code: api.CodeUnauthorized, Message: "refused as the front-end says"}
	if _, err := h.srv.Invoke(ctx, api.Origin{Admit: func() error { return own }}, "test.person", nil, nil); err != own {
		t.Fatalf("Admit's own error: %v", err)
	}
	pass := api.Origin{By: api.ByUI, Session: "s1", Admit: func() error { admits++; return nil }}
	res, err := h.srv.Invoke(ctx, pass, "test.person", nil, nil)
	if err != nil || string(res) != `{"by":"ui","session":"s1"}` || admits != 2 {
		t.Fatalf("Admit passing: %s, %v (%d runs)", res, err, admits)
	}
	// A method anyone may call never runs it.
	if _, err := h.srv.Invoke(ctx, refuse, "test.echo", textParams{Text: "hi"}, nil); err != nil || admits != 2 {
		t.Fatalf("test.echo with a refusing Admit: %v (%d runs)", err, admits)
	}
}
