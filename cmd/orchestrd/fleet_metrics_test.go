package main

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemontest"
)

// nodesLostMetric reads orchestrd_cluster_nodes_lost_total{reason=
// "heartbeat_expired"} from a daemon's /metrics (its [metrics] listener):
// its value and whether it is exported.
func nodesLostMetric(t *testing.T) func(d *testDaemon) (float64, bool) {
	client := &http.Client{Timeout: 20 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return func(d *testDaemon) (float64, bool) {
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
}
