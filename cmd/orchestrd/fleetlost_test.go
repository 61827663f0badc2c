package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// logLines are the JSON lines of a daemon's stderr from offset on.
func logLines(s string, offset int) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s[offset:], "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// fleetIdentified: each node's ready line names the cluster (one id for
// all) and the node; status on a names them and counts 3 nodes alive. It
// returns the cluster's id.
func fleetIdentified(t *testing.T, nodes []*fleetNode) string {
	t.Helper()
	a := nodes[0].d
	a.waitNodes("gpu", "b", "c")
	cluster := ""
	for i, n := range nodes {
		readyLine(t, n.d) // waited for
		var r map[string]any
		for _, l := range logLines(n.d.stderr.String(), 0) {
			if l["message"] == "orchestrd ready" {
				r = l
			}
		}
		id, _ := r["cluster"].(string)
		if r["node"] != n.name || len(id) != 12 || (i > 0 && id != cluster) {
			t.Fatalf("%s's ready line: %v (cluster of a: %q)", n.name, r, cluster)
		}
		cluster = id
	}
	out, errOut, code := runCLI(t, "status", "--home", a.home)
	line := regexp.MustCompile(`^cluster ` + cluster + `, node a \(embedded NATS, nats://127\.0\.0\.1:\d+\): 3 nodes, 3 alive\n\n`)
	if code != 0 || !line.MatchString(out) {
		t.Fatalf("status: exit %d %s\n%s", code, errOut, out)
	}
	out, errOut, code = runCLI(t, "status", "--home", a.home, "--json")
	var st struct{ Cluster map[string]string }
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Cluster["cluster"] != cluster || st.Cluster["node"] != "a" {
		t.Fatalf("status --json: exit %d %s\n%s", code, errOut, out)
	}
	return cluster
}

// fleetLosesC: c, the three alive, is killed (SIGKILL): nodes on a shows
// c lost, since when and by whom, without free slots; a gpu job submitted
// on a runs on b; the survivors' logs have nats-server's lines at warn and
// above only, and its errors for c's route (each of the route's
// connections tries every second: some 4 lines a second before) once,
// then at most every minute, each later one saying how many were not
// logged.
func fleetLosesC(t *testing.T, nodes []*fleetNode, cluster string) {
	t.Helper()
	a, b, c := nodes[0].d, nodes[1].d, nodes[2]
	a.waitNodes("gpu", "b", "c")
	// c's route port, as a and b dial it.
	m := regexp.MustCompile(`cluster_listen = "(127\.0\.0\.1:\d+)"`).FindStringSubmatch(c.conf)
	if m == nil {
		t.Fatalf("no cluster_listen in %s", c.conf)
	}
	route := m[1]
	from := map[*testDaemon]int{a: len(a.stderr.String()), b: len(b.stderr.String())}
	if err := syscall.Kill(c.d.proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.d.done

	// The window, driven by what happens: c declared lost and seen so by
	// a; a job submitted on a runs on b; each survivor has said c's
	// route is down.
	eventuallyOr(t, 60*time.Second, "c lost as a sees it", func() bool {
		for _, n := range a.nodes() {
			if n.Name == "c" && n.State == "lost" {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%+v", a.nodes()) })
	if rec := a.wait(a.submit(api.JobSpec{Lane: "gpu", Argv: []string{"true"}})); rec.State != api.StateSucceeded || rec.Node != "b" {
		t.Fatalf("a gpu job with c lost: %+v", rec)
	}
	// nodes: c lost, since when, by whom; no free slots.
	out, errOut, code := runCLI(t, "nodes", "--home", a.home)
	if code != 0 || !regexp.MustCompile(`(?m)^c\s+lost \d+[smh] ago, by [ab]\s+gpu\s+\d+[smh] ago\s+-\s+-\s+-$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^b\s+alive\s+gpu \(\d\)\s+\d+[smh] ago\s+`+strconv.Itoa(runtime.NumCPU())+
			`\s+\d+\.\d [KMGT]iB of \d+\.\d [KMGT]iB\s+\d+\.\d\d$`).MatchString(out) ||
		!strings.HasPrefix(out, "cluster "+cluster+", node a (embedded NATS, ") || !strings.Contains(out, "3 nodes, 2 alive, 1 lost\n") {
		t.Fatalf("nodes: exit %d %s\n%s", code, errOut, out)
	}
	for _, n := range a.nodes() {
		if n.Name == "c" && len(n.Free) != 0 {
			t.Fatalf("cluster.nodes gives free slots of the lost c: %+v", n)
		}
	}

	routeErrors := func(d *testDaemon) []map[string]any {
		var out []map[string]any
		for _, l := range logLines(d.stderr.String(), from[d]) {
			if msg, _ := l["message"].(string); strings.Contains(msg, "connect to route") && strings.Contains(msg, route) {
				out = append(out, l)
			}
		}
		return out
	}
	for _, d := range []*testDaemon{a, b} {
		eventuallyOr(t, 90*time.Second, "a route error for c's route", func() bool { return len(routeErrors(d)) > 0 },
			func() string { return tail(d.stderr.String(), 3000) })
	}
	for _, d := range []*testDaemon{a, b} {
		// Said once since the kill (that line may count those not logged
		// when the routes formed): any later one, a minute on, says how
		// many were not.
		for i, l := range routeErrors(d) {
			if n, _ := l["suppressed"].(float64); i > 0 && n < 1 {
				t.Errorf("line %d about c's route since the kill does not count those not logged:\n%v", i+1, routeErrors(d))
				break
			}
		}
		// nats-server's lines are warnings and errors only.
		for _, l := range logLines(d.stderr.String(), 0) {
			if l["component"] == "nats" && l["level"] != "warn" && l["level"] != "error" {
				t.Errorf("a nats-server line at %v: %v", l["level"], l)
				break
			}
		}
	}
}
