package main

import (
	"fmt"
	"time"
)

// runIdle: the daemon with its default lanes (no config), idle; CPU of the
// daemon and of its runners over the window, and their RSS.
func runIdle(b *bench) error {
	window := pick(b, 10*time.Second, 2*time.Second)
	d, err := b.startDaemon("idle", "")
	if err != nil {
		return err
	}
	defer d.stop()
	time.Sleep(pick(b, 2*time.Second, 300*time.Millisecond)) // start-up is not idle
	pids := append([]int{d.pid()}, children(d.pid())...)
	cpu0 := make([]time.Duration, len(pids))
	for i, p := range pids {
		if cpu0[i], err = procCPUPrecise(p); err != nil {
			return fmt.Errorf("cpu of %d: %w", p, err)
		}
	}
	t0 := time.Now()
	time.Sleep(window)
	wall := time.Since(t0)
	var daemonCPU, runnersCPU time.Duration
	var daemonRSS, runnersRSS int64
	for i, p := range pids {
		c, err := procCPUPrecise(p)
		if err != nil {
			return fmt.Errorf("process %d went away while idle: %w", p, err)
		}
		rss, _ := procRSS(p)
		if i == 0 {
			daemonCPU, daemonRSS = c-cpu0[i], rss
		} else {
			runnersCPU += c - cpu0[i]
			runnersRSS += rss
		}
	}
	pct := func(c time.Duration) float64 { return 100 * c.Seconds() / wall.Seconds() }
	all := pct(daemonCPU + runnersCPU)
	nr := len(pids) - 1
	b.add(Row{Metric: fmt.Sprintf("CPU, daemon + %d runners, over %.0f s", nr, wall.Seconds()),
		Orchestrd: fmt.Sprintf("%.3f%% of one core", all), Value: all, Unit: "% of one core",
		Target: "≤ 1% of one core", Met: boolp(all <= 1)})
	b.add(Row{Metric: "CPU, daemon alone / runners", Orchestrd: fmt.Sprintf("%.3f%% / %.3f%%", pct(daemonCPU), pct(runnersCPU)),
		Value: pct(daemonCPU), Unit: "% of one core"})
	b.add(Row{Metric: "RSS, daemon / runners (sum)", Orchestrd: fmt.Sprintf("%s / %s", fmtBytes(float64(daemonRSS)), fmtBytes(float64(runnersRSS))),
		Value: float64(daemonRSS), Unit: "bytes"})
	b.note("Idle: CPU is the sum of the threads' run time in /proc/PID/task/TID/schedstat (nanoseconds), read before and after the window.")
	return d.stop()
}
