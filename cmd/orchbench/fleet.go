package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// runFleet (issue 26): three daemons joined by their embedded NATS
// servers on 127.0.0.1.
//   - cross-node dispatch: a trivial job submitted on a to a lane only b
//     serves, submit to end, against the same job on b's own local lane;
//   - throughput with `sleep 0.1` jobs (slots, not cores, the limit) of
//     three nodes serving the lane against one node alone;
//   - RSS and idle CPU of a node with the cluster on against off.
func runFleet(b *bench) error {
	const slots = 2
	lanes := func(shared bool, extra string) string {
		return fmt.Sprintf("[lanes.default]\nrunners = 1\nslots = 4\nspares = 0\n[lanes.gpu]\nshared = %t\nrunners = 1\nslots = %d\nspares = 0\n%s", shared, slots, extra)
	}
	only := "[lanes.bonly]\nshared = true\nrunners = 1\nslots = 4\nspares = 0\n"
	nodes, err := b.startFleet("fleet", []string{lanes(true, ""), lanes(true, only), lanes(true, "")})
	if err != nil {
		return err
	}
	defer stopAll(nodes)
	a, bn := nodes[0], nodes[1]
	if err := waitServed(a, "bonly", 1); err != nil {
		return err
	}
	if err := waitServed(a, "gpu", 3); err != nil {
		return err
	}
	// Cross-node dispatch against local dispatch on b.
	n := pick(b, 300, 10)
	cross, err := jobLatencies(a, "bonly", n)
	if err != nil {
		return fmt.Errorf("cross-node jobs: %w", err)
	}
	local, err := jobLatencies(bn, "default", n)
	if err != nil {
		return fmt.Errorf("local jobs on b: %w", err)
	}
	cs, ls := summarize(durationsMs(cross), "ms"), summarize(durationsMs(local), "ms")
	r50, _ := fmtRatio(cs.P50, ls.P50)
	b.add(Row{Metric: "dispatch submit→end, cross-node (a→b) p50 / p99", N: n,
		Orchestrd: fmt.Sprintf("%s / %s", fmtMs(cs.P50), fmtMs(cs.P99)), Value: cs.P50, Unit: "ms",
		Baseline: fmt.Sprintf("local on b: %s / %s", fmtMs(ls.P50), fmtMs(ls.P99)), BaselineValue: floatp(ls.P50), BaselineN: n,
		Ratio: r50})

	// Output: one job writing size bytes, its end recorded only once every
	// piece (signed by its taker) is stored, submit to end.
	size := pick(b, 64<<20, 2<<20)
	runs := pick(b, 5, 1)
	crossOut, err := outputRate(a, "bonly", size, runs)
	if err != nil {
		return fmt.Errorf("cross-node output: %w", err)
	}
	localOut, err := outputRate(bn, "default", size, runs)
	if err != nil {
		return fmt.Errorf("local output on b: %w", err)
	}
	ro, _ := fmtRatio(crossOut, localOut)
	b.add(Row{Metric: fmt.Sprintf("output of one job, %s to stdout, submit→end: cross-node (a→b), median of %d", fmtBytes(float64(size)), runs),
		N: runs, Orchestrd: fmtRate(crossOut/(1<<20), "MiB"), Value: crossOut / (1 << 20), Unit: "MiB/s",
		Baseline: "local on b: " + fmtRate(localOut/(1<<20), "MiB"), BaselineValue: floatp(localOut / (1 << 20)), BaselineN: runs, Ratio: ro})

	// Throughput: three nodes serving gpu against one alone.
	dur := pick(b, 10*time.Second, time.Second)
	conc := 2 * 3 * slots // twice the slots of three nodes: slots, not clients, the limit
	three, err := sleepThroughput(a, "gpu", conc, dur)
	if err != nil {
		return fmt.Errorf("throughput of 3 nodes: %w", err)
	}
	stopAll(nodes)
	nodes = nil
	solo, err := b.startFleet("fleet1", []string{lanes(true, "")})
	if err != nil {
		return err
	}
	defer stopAll(solo)
	if err := waitServed(solo[0], "gpu", 1); err != nil {
		return err
	}
	one, err := sleepThroughput(solo[0], "gpu", conc, dur)
	if err != nil {
		return fmt.Errorf("throughput of 1 node: %w", err)
	}
	ratio := three / one
	b.add(Row{Metric: fmt.Sprintf("throughput, `sleep 0.1` jobs, %d clients: 3 nodes vs 1 (%d slots each)", conc, slots),
		Orchestrd: fmtRate(three, "jobs"), Value: three, Unit: "jobs/s",
		Baseline: "1 node: " + fmtRate(one, "jobs"), BaselineValue: floatp(one),
		Ratio: fmt.Sprintf("%.2fx", ratio), Target: "≥ 2.7x", Met: boolp(ratio >= 2.7)})

	// Idle cost of the cluster: the single node on, against a daemon with
	// the same lanes and no [cluster].
	onCPU, onRSS, err := idleCost(b, solo[0])
	if err != nil {
		return err
	}
	stopAll(solo)
	solo = nil
	off, err := b.startDaemon("fleet-off", lanes(false, ""))
	if err != nil {
		return err
	}
	offCPU, offRSS, err := idleCost(b, off)
	off.stop()
	if err != nil {
		return err
	}
	b.add(Row{Metric: "idle node, cluster on (embedded NATS) vs off: CPU", Orchestrd: fmt.Sprintf("%.3f%% of one core", onCPU),
		Value: onCPU, Unit: "% of one core", Baseline: fmt.Sprintf("off: %.3f%%", offCPU), BaselineValue: floatp(offCPU)})
	b.add(Row{Metric: "idle node, cluster on vs off: daemon RSS", Orchestrd: fmtBytes(float64(onRSS)), Value: float64(onRSS),
		Unit: "bytes", Baseline: "off: " + fmtBytes(float64(offRSS)), BaselineValue: floatp(float64(offRSS))})
	b.note("Fleet: three daemons on this machine, their embedded NATS servers joined by routes on 127.0.0.1 (JetStream replicas 3); the cross-node job is `true` submitted on a to a lane only b serves, timed from job.submit to job.wait's answer on a; the baseline is the same job on b's own local lane. Throughput: closed-loop clients submitting `sleep 0.1` on a, waiting for each end.")
	return nil
}

// startFleet starts one daemon per config, joined as a fleet (names
// PREFIX-0, -1, ...), credentials made once and copied.
func (b *bench) startFleet(prefix string, confs []string) ([]*daemon, error) {
	ports := make([][2]int, len(confs))
	for i := range confs {
		for k := range 2 {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			ports[i][k] = ln.Addr().(*net.TCPAddr).Port
			ln.Close()
		}
	}
	// Each node its own credentials (issue 37): the first node's home
	// holds the fleet's key, which makes the others'.
	var keyHome string
	var nodes []*daemon
	for i, conf := range confs {
		name := fmt.Sprintf("%s-%d", prefix, i)
		home := filepath.Join(b.tmp, name)
		if err := os.MkdirAll(home, 0o700); err != nil {
			return nil, err
		}
		if keyHome == "" {
			if out, err := exec.Command(b.bin, "cluster", "init", "--name", name, "--home", home).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("cluster init: %w\n%s", err, out)
			}
			keyHome = home
		} else if out, err := exec.Command(b.bin, "cluster", "add-node", name, "--out", filepath.Join(home, "cluster.creds"),
			"--home", keyHome).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("cluster add-node %s: %w\n%s", name, err, out)
		}
		var routes []string
		for k := range confs {
			if k != i {
				routes = append(routes, strconv.Quote(fmt.Sprintf("nats-route://127.0.0.1:%d", ports[k][1])))
			}
		}
		table := fmt.Sprintf("[cluster]\nenabled = true\nname = %q\nlisten = \"127.0.0.1:%d\"\ncluster_listen = \"127.0.0.1:%d\"\nroutes = [%s]\n",
			name, ports[i][0], ports[i][1], strings.Join(routes, ", "))
		d, err := b.launchDaemon(name, table+conf)
		if err != nil {
			stopAll(nodes)
			return nil, err
		}
		nodes = append(nodes, d)
	}
	for _, d := range nodes {
		if err := d.waitReady(); err != nil {
			stopAll(nodes)
			return nil, err
		}
	}
	return nodes, nil
}

func stopAll(ds []*daemon) {
	for _, d := range ds {
		d.stop()
	}
}

// waitServed waits until d's fleet has n live nodes serving lane.
func waitServed(d *daemon, lane string, n int) error {
	c, err := d.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var r struct {
			Nodes []struct {
				State string   `json:"state"`
				Lanes []string `json:"lanes"`
			} `json:"nodes"`
		}
		got := 0
		if err := call(c, "cluster.nodes", nil, &r); err == nil {
			for _, nd := range r.Nodes {
				for _, l := range nd.Lanes {
					if l == lane && nd.State == "alive" {
						got++
					}
				}
			}
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d nodes serving %s after 60s, want %d\n%s", got, lane, n, d.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// submitWait submits spec on c and waits for its end.
func submitWait(c *client.Client, lane string, argv []string) error {
	var s struct {
		JobID string `json:"job_id"`
	}
	if err := call(c, "job.submit", map[string]any{"lane": lane, "argv": argv}, &s); err != nil {
		return err
	}
	var w struct {
		Job struct {
			State string `json:"state"`
			Error string `json:"error"`
		} `json:"job"`
	}
	if err := call(c, "job.wait", map[string]any{"id": s.JobID}, &w); err != nil {
		return err
	}
	if w.Job.State != "succeeded" {
		return fmt.Errorf("job %s ended %s %s", s.JobID, w.Job.State, w.Job.Error)
	}
	return nil
}

// jobLatencies times n trivial jobs on lane, one after the other.
func jobLatencies(d *daemon, lane string, n int) ([]time.Duration, error) {
	c, err := d.dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for range 3 { // warm up
		if err := submitWait(c, lane, []string{"true"}); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if err := submitWait(c, lane, []string{"true"}); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t))
	}
	return out, nil
}

// outputRate is the median bytes/s of n jobs on lane each writing size
// bytes of zeros, submit to end.
func outputRate(d *daemon, lane string, size, n int) (float64, error) {
	c, err := d.dial()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	argv := []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}
	if err := submitWait(c, lane, argv); err != nil { // warm up
		return 0, err
	}
	var ms []float64
	for range n {
		t := time.Now()
		if err := submitWait(c, lane, argv); err != nil {
			return 0, err
		}
		ms = append(ms, float64(size)/time.Since(t).Seconds())
	}
	return summarize(ms, "B/s").P50, nil
}

// sleepThroughput is jobs/s of conc closed-loop clients of `sleep 0.1` jobs.
func sleepThroughput(d *daemon, lane string, conc int, dur time.Duration) (float64, error) {
	res, err := closedLoop(conc, dur, func() (func() error, func(), error) {
		c, err := d.dial()
		if err != nil {
			return nil, nil, err
		}
		return func() error { return submitWait(c, lane, []string{"sleep", "0.1"}) }, func() { c.Close() }, nil
	})
	if err != nil {
		return 0, err
	}
	return res.rate(), nil
}

// idleCost is a daemon's CPU (% of one core) over an idle window, and its RSS.
func idleCost(b *bench, d *daemon) (float64, int64, error) {
	window := pick(b, 10*time.Second, time.Second)
	time.Sleep(pick(b, 2*time.Second, 300*time.Millisecond))
	c0, err := procCPUPrecise(d.pid())
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	time.Sleep(window)
	c1, err := procCPUPrecise(d.pid())
	if err != nil {
		return 0, 0, err
	}
	rss, _ := procRSS(d.pid())
	return 100 * (c1 - c0).Seconds() / time.Since(t0).Seconds(), rss, nil
}
