package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
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
	var fe api.FrontEndList
	d.mustCall("frontend.list", nil, &fe)
	var hookFE, controlFE api.FrontEnd
	for _, f := range fe.FrontEnds {
		switch f.Name {
		case "hook":
			hookFE = f
		case "control":
			controlFE = f
		}
	}
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
	if _, code := hook.exit(t); code != 0 {
		t.Fatalf("hook exit %d", code)
	}
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
	httpFE := func() api.FrontEnd {
		var fe api.FrontEndList
		d.mustCall("frontend.list", nil, &fe)
		for _, f := range fe.FrontEnds {
			if f.Name == "http" {
				return f
			}
		}
		t.Fatalf("no http front-end in %+v", fe)
		return api.FrontEnd{}
	}
	f := httpFE()
	if f.ConnsOpen != 1 || len(f.Conns) != 1 || f.Conns[0].Kind != "stream" || !strings.HasPrefix(f.Conns[0].Address, "127.0.0.1:") {
		t.Fatalf("http front-end %+v, want the stream listed", f)
	}
	if a := httpDo(t, "DELETE", base+"/execute/"+job, key, ""); a.status != 200 {
		t.Fatalf("cancel: %d %s", a.status, a.raw)
	}
	readSSE(t, resp.Body, 0)
	resp.Body.Close()
	eventually(t, 20*time.Second, "the stream gone from the list", func() bool { return httpFE().ConnsOpen == 0 })
}
