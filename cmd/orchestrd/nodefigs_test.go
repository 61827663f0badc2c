package main

import (
	"bufio"
	"encoding/json"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// procMemTotal is /proc/meminfo's MemTotal in bytes.
func procMemTotal(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

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
	if n.CPUs != runtime.NumCPU() || n.MemTotalBytes != procMemTotal(t) {
		t.Fatalf("node = %+v; want %d CPUs and MemTotal %d", n, runtime.NumCPU(), procMemTotal(t))
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
