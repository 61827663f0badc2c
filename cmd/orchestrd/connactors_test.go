package main

import (
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
