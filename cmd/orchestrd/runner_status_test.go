package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Lane slow restarts its runner 15-30 s after a death, long enough to look
// at a runner in backoff; lane fast restarts at once.
const statusConfig = `
[lanes.slow]
runners = 1
slots = 1
spares = 0
network = "host"
[lanes.slow.restart]
stable = "10s"
base_delay = "30s"
max_delay = "30s"
[lanes.fast]
runners = 1
slots = 1
spares = 0
network = "host"
[lanes.fast.restart]
stable = "10s"
base_delay = "1ms"
max_delay = "20ms"
max_r = 100
`

// runnerJSON is lane.list's raw JSON object for runner id.
func (d *testDaemon) runnerJSON(id string) map[string]any {
	d.t.Helper()
	var r struct {
		Lanes []struct {
			Runners []map[string]any `json:"runners"`
		} `json:"lanes"`
	}
	d.mustCall("lane.list", nil, &r)
	for _, l := range r.Lanes {
		for _, rn := range l.Runners {
			if rn["id"] == id {
				return rn
			}
		}
	}
	d.t.Fatalf("no runner %s in lane.list", id)
	return nil
}

// treeNode finds kind/id in tree.get's raw JSON.
func treeNode(nodes []map[string]any, kind, id string) map[string]any {
	for _, n := range nodes {
		if n["kind"] == kind && n["id"] == id {
			return n
		}
		var kids []map[string]any
		for _, k := range n["children"].([]any) {
			kids = append(kids, k.(map[string]any))
		}
		if f := treeNode(kids, kind, id); f != nil {
			return f
		}
	}
	return nil
}

// A runner in backoff has no process: lane.list shows no pid but its
// last_pid, and `orchestrd status` says so (issue 6: the dead pid was shown
// as the runner's pid).
func TestBackoffRunnerShowsLastPid(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, statusConfig)
	pid := d.readyRunner("slow")
	d.kill("runner", pid)
	e := d.waitEvent("runner.restart_scheduled", func(e map[string]any) bool { return e["runner_id"] == "slow-0" })
	if e["delay_ms"].(float64) < 10000 {
		t.Fatalf("restart in %v ms: too soon to look at a runner in backoff", e["delay_ms"])
	}
	var rn map[string]any
	eventually(t, 10*time.Second, "slow-0 in backoff", func() bool {
		rn = d.runnerJSON("slow-0")
		return rn["state"] == "backoff"
	})
	if _, has := rn["pid"]; has || rn["last_pid"] != float64(pid) {
		t.Fatalf("lane.list runner in backoff = %v, want no pid and last_pid %d", rn, pid)
	}
	out, _, code := runCLI(t, "status", "--home", d.home)
	row := regexp.MustCompile(`(?m)^slow-0 +slow +- \(was ` + strconv.Itoa(pid) + `\) +backoff `)
	if code != 0 || !row.MatchString(out) {
		t.Fatalf("status: code %d, want the slow-0 row to read \"- (was %d)\" and backoff:\n%s", code, pid, out)
	}
	// The ready one keeps its pid and has no last_pid.
	fast := d.runnerJSON("fast-0")
	if fast["state"] != "ready" || fast["pid"] == nil || fast["last_pid"] != nil {
		t.Fatalf("ready runner = %v", fast)
	}
}

// lane.list's restarts (of the runner's process) and tree.get's count (of
// its actor, after panics) measure different things: they are named
// differently, each agrees with what it counts, and status says which is
// which (issue 6: the tree said restarts=0 where the table said 2).
func TestRestartCountsAreNamedForWhatTheyCount(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, statusConfig)
	const kills = 2
	for i := 0; i < kills; i++ {
		pid := d.readyRunner("fast")
		d.kill("runner", pid)
		d.waitEvent("runner.exited", func(e map[string]any) bool { return e["pid"] == float64(pid) })
		eventually(t, 20*time.Second, "fast-0 back", func() bool {
			rn := d.runnerJSON("fast-0")
			return rn["state"] == "ready" && rn["pid"] != float64(pid)
		})
	}
	rn := d.runnerJSON("fast-0")
	scheduled := countEvents(d.events(), "runner.restart_scheduled", func(e map[string]any) bool { return e["runner_id"] == "fast-0" })
	if rn["restarts"] != float64(kills) || scheduled != kills {
		t.Fatalf("lane.list restarts %v, runner.restart_scheduled events %d; want both %d", rn["restarts"], scheduled, kills)
	}

	var tr struct {
		Tree []map[string]any `json:"tree"`
	}
	d.mustCall("tree.get", nil, &tr)
	node := treeNode(tr.Tree, "runner", "fast-0")
	if node == nil {
		t.Fatalf("no runner/fast-0 in tree.get: %v", tr.Tree)
	}
	if _, has := node["restarts"]; has || node["panic_restarts"] != float64(0) {
		t.Fatalf("tree.get runner/fast-0 = %v: want panic_restarts 0 (it never panicked) and no field named like lane.list's restarts", node)
	}

	out, _, code := runCLI(t, "status", "--home", d.home)
	row := regexp.MustCompile(`(?m)^fast-0 +fast +\d+ +ready +serving +` + fmt.Sprint(kills) + ` `)
	if code != 0 || !row.MatchString(out) || !strings.Contains(out, "runner/fast-0  ready  panic_restarts=0") ||
		strings.Contains(out, " restarts=") {
		t.Fatalf("status: code %d, want RESTARTS %d for fast-0 and panic_restarts=0 for its actor:\n%s", code, kills, out)
	}
}
