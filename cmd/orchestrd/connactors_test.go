package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
	"github.com/orchestrd/orchestrd/lanes"
)

// A hook waiting on its approval is a connection actor: frontend.list
// shows it under the hook front-end (kind, the hook's pid, its age, bytes
// queued), the actor tree under "hooks", status prints it; the control
// socket's own connection is listed under control.
func TestConnectionsListed(t *testing.T) {
	t.Parallel()
	d, sock := reachoutDaemon(t, "")
	hook := startHook(t, sock, nil)
	a := d.pendingApproval(hook.requestID(t))
	hookFE, controlFE := d.frontEnd("hook"), d.frontEnd("control")
	if hookFE.ConnsOpen != 1 || len(hookFE.Conns) != 1 || hookFE.Conns[0].Kind != "hook" ||
		int(hookFE.Conns[0].Pid) != hook.Cmd.Process.Pid || hookFE.Conns[0].Since.IsZero() {
		t.Fatalf("hook front-end %+v, want the hook (pid %d) listed", hookFE, hook.Cmd.Process.Pid)
	}
	if controlFE.ConnsOpen < 1 || len(controlFE.Conns) < 1 || controlFE.Conns[0].Kind != "conn" || controlFE.Conns[0].Pid == 0 {
		t.Fatalf("control front-end %+v, want this client listed", controlFE)
	}
	var tr struct {
		Tree []actors.TreeNode `json:"tree"`
	}
	d.mustCall("tree.get", nil, &tr)
	var hooks *actors.TreeNode
	for i := range tr.Tree {
		if tr.Tree[i].Kind == "hooks" {
			hooks = &tr.Tree[i]
		}
	}
	if hooks == nil || len(hooks.Children) != 1 || hooks.Children[0].Kind != "hook" || hooks.Children[0].Info == nil {
		t.Fatalf("hooks in the tree: %+v", hooks)
	}
	out, _, code := runCLI(t, "status", "--home", d.home)
	if code != 0 {
		t.Fatalf("status exit %d", code)
	}
	if !strings.Contains(out, "hook/"+hookFE.Conns[0].ID) || !strings.Contains(out, "CONNECTION") {
		t.Fatalf("status does not list the hook's connection:\n%s", out)
	}
	d.mustCall("approval.resolve", map[string]any{"id": a.ID, "decision": "Allow"}, nil)
	hook.answered(t, "hook")
	eventually(t, 20*time.Second, "the hook's connection gone from the list", func() bool {
		var fe api.FrontEndList // fresh: an absent conns_open leaves a reused one's
		d.mustCall("frontend.list", nil, &fe)
		for _, f := range fe.FrontEnds {
			if f.Name == "hook" {
				return f.ConnsOpen == 0
			}
		}
		return false
	})
}

// A running /execute/stream is a "stream" actor under "http-streams":
// frontend.list shows it under http with the client's address; once the
// stream ends it is gone.
func TestHTTPStreamListed(t *testing.T) {
	t.Parallel()
	d, base, key := httpDaemon(t, "")
	resp := startStream(t, context.Background(), base, key, `{"command":"sh","args":["-c","echo started; exec sleep 60"]}`)
	job := readSSE(t, resp.Body, 1)[0].JobID
	f := d.frontEnd("http")
	if f.ConnsOpen != 1 || len(f.Conns) != 1 || f.Conns[0].Kind != "stream" || !strings.HasPrefix(f.Conns[0].Address, "127.0.0.1:") {
		t.Fatalf("http front-end %+v, want the stream listed", f)
	}
	if a := httpDo(t, "DELETE", base+"/execute/"+job, key, ""); a.status != 200 {
		t.Fatalf("cancel: %d %s", a.status, a.raw)
	}
	readSSE(t, resp.Body, 0)
	resp.Body.Close()
	eventually(t, 20*time.Second, "the stream gone from the list", func() bool { return d.frontEnd("http").ConnsOpen == 0 })
}

// A bring-your-own runner's connection is listed under its lane's
// front-end once its runner actor holds it (kind runner, the runner's id
// and pid, bytes queued), status prints it; once the runner is gone, so is
// the connection.
func TestLaneRunnerConnectionListed(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[lanes.byo]\nrunners = 0\nslots = 1\nnetwork = \"host\"\n")
	sock := filepath.Join(d.home, "runner-byo.sock")
	byo := exec.Command(binary, "runner", "--lane", "byo", "--socket", sock, "--token-file", lanes.JoinTokenPath(d.home, "byo"))
	byo.Stderr = os.Stderr
	p := testio.Start(t, byo)
	d.waitByoReady("byo")
	runners := d.lane("byo").Runners
	if len(runners) != 1 || runners[0].Pid == 0 {
		t.Fatalf("lane byo's runners %+v, want one with its pid", runners)
	}
	f := d.frontEnd("lane byo")
	if f.ConnsOpen != 1 || len(f.Conns) != 1 || f.Conns[0].Kind != "runner" || f.Conns[0].ID != runners[0].ID ||
		int(f.Conns[0].Pid) != runners[0].Pid || f.Conns[0].Since.IsZero() {
		t.Fatalf("lane byo front-end %+v, want runner %s (pid %d) listed", f, runners[0].ID, runners[0].Pid)
	}
	out, _, code := runCLI(t, "status", "--home", d.home)
	if code != 0 || !strings.Contains(out, "runner/"+runners[0].ID) || !strings.Contains(out, "pid "+strconv.Itoa(runners[0].Pid)) {
		t.Fatalf("status (exit %d) does not list the runner's connection:\n%s", code, out)
	}
	byo.Process.Kill()
	<-p.Done()
	eventually(t, 20*time.Second, "the runner's connection gone from the list", func() bool { return d.frontEnd("lane byo").ConnsOpen == 0 })
}
