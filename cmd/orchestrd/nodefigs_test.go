package main

import (
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// status shows the node's figures, read by the daemon: its CPU count and
// memory total as this machine has them, memory available and the home's
// free space plausible.
func TestStatusShowsNodeFigures(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	out := mustCLI(t, "status", "--home", d.home, "--json")
	var st struct {
		Node *api.NodeFigures `json:"node"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	n := st.Node
	if n == nil {
		t.Fatalf("status --json has no node figures:\n%s", out)
	}
	if n.CPUs != runtime.NumCPU() || n.MemTotalBytes != testio.MemTotal(t) {
		t.Fatalf("node = %+v; want %d CPUs and MemTotal %d", n, runtime.NumCPU(), testio.MemTotal(t))
	}
	if n.MemAvailBytes == 0 || n.MemAvailBytes > n.MemTotalBytes || n.HomeFreeBytes == 0 ||
		n.HomeFreeBytes > n.HomeTotalBytes || n.Load1 < 0 {
		t.Fatalf("implausible node figures %+v", n)
	}
	out = mustCLI(t, "status", "--home", d.home)
	if !strings.Contains(out, "node: "+strconv.Itoa(runtime.NumCPU())+" CPUs, memory ") {
		t.Fatalf("status has no node line:\n%s", out)
	}
}
