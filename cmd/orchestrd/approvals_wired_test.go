package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// With the store wired: the history survives a restart (approvals --all),
// a control approval is pending again, and notify_command gets each new
// pending approval as JSON on its stdin; one that fails is an event.
func TestApprovalsStoreAndNotifyWired(t *testing.T) {
	t.Parallel()
	home := shortTemp(t)
	out := filepath.Join(shortTemp(t), "notified")
	if err := os.MkdirAll(out, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(out, 0o777)
	script := `cat > "$1/$ORCHESTRD_APPROVAL_ID.tmp" && mv "$1/$ORCHESTRD_APPROVAL_ID.tmp" "$1/$ORCHESTRD_APPROVAL_ID.json"; ` +
		`case "$ORCHESTRD_APPROVAL_ID" in *-2) echo boom >&2; exit 4;; esac`
	cfg := strings.Replace(approvalsCLIConfig, "timeout = \"10m\"\n",
		"timeout = \"10m\"\nnotify_timeout = \"5s\"\nnotify_command = [\"sh\", \"-c\", '"+script+"', \"notify\", \""+out+"\"]\n", 1)
	d := startDaemonAt(t, home, cfg)
	first := d.cliRequest("Bash", map[string]any{"command": "make deploy"}, nil)
	second := d.cliRequest("Read", map[string]any{"file_path": "/etc/hosts"}, nil)
	var got []byte
	eventually(t, 20*time.Second, "notified", func() bool {
		var err error
		got, err = os.ReadFile(filepath.Join(out, first+".json"))
		return err == nil
	})
	var a api.Approval
	if err := json.Unmarshal(got, &a); err != nil || a.ID != first || string(a.ToolInput) != `{"command":"make deploy"}` {
		t.Fatalf("notify_command's stdin: %s (%v)", got, err)
	}
	e := d.waitEvent("approval.notify_failed", nil)
	if e["id"] != second || e["exit_code"] != float64(4) || e["stderr_tail"] != "boom\n" {
		t.Fatalf("approval.notify_failed %v", e)
	}
	if _, _, code := runCLI(t, "approve", "--home", home, first); code != 0 {
		t.Fatal("approve")
	}
	d.stop()

	d2 := startDaemonAt(t, home, cfg)
	o, _, code := runCLI(t, "approvals", "--home", home, "--all")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(tableRow(t, o, first)), " "), "allowed Allow/cli") {
		t.Fatalf("history after a restart:\n%s", o)
	}
	if row := strings.Join(strings.Fields(tableRow(t, o, second)), " "); !strings.Contains(row, " pending ") {
		t.Fatalf("second after a restart: %q", row)
	}
	o, _, _ = runCLI(t, "deny", "--home", home, second)
	if o != second+" denied\n" {
		t.Fatalf("deny after a restart: %q", o)
	}
	d2.stop()
}
