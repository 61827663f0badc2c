package metrics_test

import (
	"runtime"
	"testing"

	"github.com/orchestrd/orchestrd/internal/daemontest"
	"github.com/orchestrd/orchestrd/internal/testio"
)

// A real daemon's /metrics has the node's figures: its CPU count and
// memory total as this machine has them, the rest plausible.
func TestMetricsNodeFigures(t *testing.T) {
	m := metricsDaemon(t, metricsFrontEnds) // listeners on port 0, never the default one
	got := daemontest.MetricSeries(t, m.scrape())
	memTotal := float64(testio.MemTotal(t))
	wantSeries(t, got, map[string]float64{"orchestrd_node_cpus": float64(runtime.NumCPU()),
		"orchestrd_node_memory_total_bytes": memTotal})
	if a := got["orchestrd_node_memory_available_bytes"]; a <= 0 || a > memTotal {
		t.Errorf("orchestrd_node_memory_available_bytes = %v of %v", a, memTotal)
	}
	for _, k := range []string{"orchestrd_node_home_free_bytes", "orchestrd_node_load1", "orchestrd_node_load5",
		"orchestrd_node_load15"} {
		if v, ok := got[k]; !ok || v < 0 || k == "orchestrd_node_home_free_bytes" && v == 0 {
			t.Errorf("%s = %v (present %v)", k, v, ok)
		}
	}
}
