package main

import (
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemontest"
)

// A node lost shows in orchestrd_cluster_nodes_lost_total (what
// examples/orchestrd-alerts.yml's OrchestrdNodeLost alerts on): kill -9
// of b makes the node that declares it lost count 1 (heartbeat_expired),
// once in the fleet; the other counts 0.
func TestFleetNodeLostMetric(t *testing.T) {
	if testing.Short() {
		t.Skip("three daemons")
	}
	t.Parallel()
	const listen = "[metrics]\nlisten = \"127.0.0.1:0\"\n"
	nodes := startFleet(t, "", [3]string{gpuLanes[0] + listen, gpuLanes[1] + listen, gpuLanes[2] + listen})
	a, b, c := nodes[0].d, nodes[1], nodes[2].d
	a.waitNodes("gpu", "b", "c")
	client := &http.Client{Timeout: 20 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	count := func(d *testDaemon) (float64, bool) {
		t.Helper()
		var fe api.FrontEndList
		d.mustCall("frontend.list", nil, &fe)
		addr := ""
		for _, f := range fe.FrontEnds {
			if f.Name == "metrics" {
				addr = f.Address
			}
		}
		if addr == "" {
			t.Fatalf("no metrics listener: %+v", fe)
		}
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		s := daemontest.MetricSeries(t, string(body))
		v, ok := s[`orchestrd_cluster_nodes_lost_total{reason="heartbeat_expired"}`]
		return v, ok
	}
	for _, d := range []*testDaemon{a, c} {
		if v, ok := count(d); !ok || v != 0 {
			t.Fatalf("before: orchestrd_cluster_nodes_lost_total %v (exported: %v), want 0", v, ok)
		}
	}
	if err := syscall.Kill(b.d.proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.d.done
	var by string
	eventuallyOr(t, 60*time.Second, "cluster.node_lost of b", func() bool {
		for _, d := range []*testDaemon{a, c} {
			for _, e := range d.events() {
				if e["kind"] == "cluster.node_lost" && e["node"] == "b" {
					by, _ = e["by"].(string)
					return true
				}
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%+v", a.nodes()) })
	declarer, other := a, c
	if by == "c" {
		declarer, other = c, a
	}
	if v, _ := count(declarer); v != 1 {
		t.Errorf("%s declared b lost: orchestrd_cluster_nodes_lost_total{reason=\"heartbeat_expired\"} %v, want 1", by, v)
	}
	if v, _ := count(other); v != 0 {
		t.Errorf("the node that did not declare b lost counts %v, want 0", v)
	}
}
