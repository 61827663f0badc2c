package main

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// A daemon killed with SIGKILL while approvals are pending: the hook that
// asked went with its connection (it falls back to the terminal), so the
// next daemon ends its approval cancelled (daemon_restarted); the one
// asked with approval.request is bound to no connection and is pending
// again, and can still be answered.
func TestApprovalsAfterDaemonKilled(t *testing.T) {
	t.Parallel()
	d, sock := reachoutDaemon(t, "")
	h := startHook(t, sock, nil)
	hooked := d.pendingApproval(h.requestID(t))
	asked := d.requestApproval(map[string]any{"kind": "tool", "tool_name": "Bash",
		"tool_input": map[string]any{"command": "make release"}})

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.proc.Done()
	if out, code := h.exit(t); code == 0 || out != "" {
		t.Fatalf("the hook of a killed daemon: exit %d, stdout %q; want a fallback (non-zero, no output)", code, out)
	}

	d2 := startDaemonAt(t, d.home, fmt.Sprintf("[approvals.reachout]\nsocket = %q\n", sock))
	d2.waitEvent("approval.recovered", func(e map[string]any) bool {
		return e["id"] == hooked.ID && e["action"] == "cancelled"
	})
	d2.waitEvent("approval.recovered", func(e map[string]any) bool {
		return e["id"] == asked && e["action"] == "pending"
	})
	if a := d2.getApproval(hooked.ID); a.State != api.ApprovalCancelled || a.Resolution == nil ||
		a.Resolution.Reason != api.CancelDaemonRestart {
		t.Fatalf("the hook's approval after the restart: %+v (resolution %+v), want cancelled daemon_restarted", a, a.Resolution)
	}
	if a := d2.getApproval(asked); a.State != api.ApprovalPending {
		t.Fatalf("approval.request's approval after the restart: %s, want pending", a.State)
	}
	var res struct {
		Approval api.Approval `json:"approval"`
	}
	d2.mustCall("approval.resolve", map[string]any{"id": asked, "decision": "Allow"}, &res)
	if res.Approval.State != api.ApprovalAllowed {
		t.Fatalf("resolved after the restart: %s", res.Approval.State)
	}
	d2.stop()
}
