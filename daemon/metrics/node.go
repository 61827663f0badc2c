package metrics

import (
	"context"

	"github.com/orchestrd/orchestrd/platform/nodefigs"
	"github.com/prometheus/client_golang/prometheus"
)

// nodeCollector reports the node's figures (platform/nodefigs), read at
// each scrape: the CPU count, memory total and available, load averages
// and the free space of the daemon's home.
type nodeCollector struct {
	home                               string
	cpus, memTotal, memAvail, homeFree *prometheus.Desc
	load1, load5, load15               *prometheus.Desc
}

func newNodeCollector(home string) *nodeCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_node_"+name, help, nil, nil)
	}
	return &nodeCollector{home: home,
		cpus:     d("cpus", "Logical CPUs of the node the daemon runs on."),
		memTotal: d("memory_total_bytes", "Memory of the node."),
		memAvail: d("memory_available_bytes", "Memory of the node available to new work (MemAvailable)."),
		homeFree: d("home_free_bytes", "Free space of the file system of the daemon's home."),
		load1:    d("load1", "The node's load average over 1 minute."),
		load5:    d("load5", "The node's load average over 5 minutes."),
		load15:   d("load15", "The node's load average over 15 minutes."),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cpus, c.memTotal, c.memAvail, c.homeFree, c.load1, c.load5, c.load15} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	f, err := nodefigs.Read(context.Background(), c.home)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.memTotal, err)
		return
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	g(c.cpus, float64(f.CPUs))
	g(c.memTotal, float64(f.MemTotalBytes))
	g(c.memAvail, float64(f.MemAvailBytes))
	g(c.homeFree, float64(f.HomeFreeBytes))
	g(c.load1, f.Load1)
	g(c.load5, f.Load5)
	g(c.load15, f.Load15)
}
