package main

// nodesLost reads orchestrd_cluster_nodes_lost_total{reason=
// "heartbeat_expired"} from a daemon's /metrics (its [metrics] listener):
// its value and whether it is exported.
func nodesLost(d *testDaemon) (float64, bool) {
	v, ok := d.metricSeries()[`orchestrd_cluster_nodes_lost_total{reason="heartbeat_expired"}`]
	return v, ok
}
