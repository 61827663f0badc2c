package main

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// openIdle opens n connections to sock, each proven live by one ping round
// trip (so the server has fully set it up), using a few dialers at once.
func openIdle(sock string, n int) ([]*rawConn, error) {
	conns := make([]*rawConn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || firstErr.Load() != nil {
					return
				}
				rc, err := dialRaw(sock)
				if err == nil {
					err = rc.roundTrip("ping")
					if err != nil {
						rc.close()
					}
				}
				if err != nil {
					err = fmt.Errorf("connection %d: %w", i+1, err)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				conns[i] = rc
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		closeAll(conns)
		return nil, *p
	}
	return conns, nil
}

func closeAll(conns []*rawConn) {
	for _, c := range conns {
		if c != nil {
			c.close()
		}
	}
}

// settledRSS waits a little for the process to settle and reads its RSS.
func settledRSS(pid int, wait time.Duration) (int64, error) {
	time.Sleep(wait)
	return procRSS(pid)
}

func runScale(b *bench) error {
	nConns := pick(b, 10000, 2000)
	nJobs := pick(b, 10000, 2000)
	settle := pick(b, time.Second, 300*time.Millisecond)
	if lim := nofile(); lim < uint64(nConns)+512 {
		nConns = max(100, int(lim)-512)
		b.note("Scale: open-files limit %d; measured %d connections instead of 10,000.", lim, nConns)
	}
	// The echo baseline with as many idle connections (a goroutine and a
	// 4 KiB read buffer each), first: the harness's own open-files limit
	// may not hold both sets at once.
	var echoPer float64 = -1
	if echo, err := b.startEcho("scale-echo"); err != nil {
		b.note("Scale: echo baseline not measured: %v", err)
	} else {
		e0, _ := settledRSS(echo.pid(), settle)
		ec, err := openIdle(echo.sock, nConns)
		if err != nil {
			b.note("Scale: echo baseline not measured: %v", err)
		} else {
			e1, _ := settledRSS(echo.pid(), settle)
			echoPer = float64(e1-e0) / float64(nConns)
			closeAll(ec)
		}
		echo.stop()
	}

	// Lane "queue" has no runner: its jobs stay queued.
	cfg := laneConfig{runners: 1, slots: 1, extraLanes: fmt.Sprintf(
		"\n[lanes.queue]\nrunners = 0\nslots = 1\nnetwork = \"host\"\nqueue_limit = %d\n", nJobs+1000)}.toml()
	d, err := b.startDaemon("scale", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	if lim, _ := strconv.ParseUint(procNofile(d.pid()), 10, 64); lim > 0 && lim < uint64(nConns)+256 {
		return fmt.Errorf("the daemon's open-files limit is %d, too low for %d connections", lim, nConns)
	}
	rss0, err := settledRSS(d.pid(), settle)
	if err != nil {
		return err
	}
	conns, err := openIdle(d.sock, nConns)
	if err != nil {
		return err
	}
	defer func() { closeAll(conns) }()
	rss1, err := settledRSS(d.pid(), settle)
	if err != nil {
		return err
	}
	perConn := float64(rss1-rss0) / float64(nConns)

	// 10,000 queued jobs, submitted over 8 connections.
	c, err := d.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	rss2, err := procRSS(d.pid())
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var subErr atomic.Pointer[error]
	per := nJobs / 8
	for w := 0; w < 8; w++ {
		cnt := per
		if w == 7 {
			cnt = nJobs - 7*per
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, err := d.dial()
			if err != nil {
				subErr.CompareAndSwap(nil, &err)
				return
			}
			defer cc.Close()
			for i := 0; i < cnt; i++ {
				if err := call(cc, "job.submit", map[string]any{"lane": "queue", "argv": []string{"true"}}, nil); err != nil {
					subErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := subErr.Load(); p != nil {
		return fmt.Errorf("job.submit: %w", *p)
	}
	ls, err := laneList(c)
	if err != nil {
		return err
	}
	queued := -1
	for _, l := range ls {
		if l.Name == "queue" {
			queued = l.Queued
		}
	}
	if queued != nJobs {
		return fmt.Errorf("lane queue holds %d jobs, want %d", queued, nJobs)
	}
	rss3, err := settledRSS(d.pid(), settle)
	if err != nil {
		return err
	}
	perJob := float64(rss3-rss2) / float64(nJobs)

	row := Row{Metric: fmt.Sprintf("%d idle control connections: RSS growth per connection", nConns), N: nConns,
		Orchestrd: fmtBytes(perConn), Value: perConn, Unit: "bytes",
		Target: "≤ 20 KiB", Met: boolp(perConn <= 20<<10)}
	if echoPer >= 0 {
		row.Baseline = fmtBytes(echoPer) + " (Go NDJSON echo)"
		row.BaselineValue = floatp(echoPer)
		row.Ratio, row.RatioValue = fmtRatio(perConn, echoPer)
	}
	b.add(row)
	b.add(Row{Metric: fmt.Sprintf("%d queued jobs: RSS growth per job", nJobs), N: nJobs,
		Orchestrd: fmtBytes(perJob), Value: perJob, Unit: "bytes"})
	b.add(Row{Metric: "daemon RSS: idle → with connections → with queued jobs",
		Orchestrd: fmt.Sprintf("%s → %s → %s", fmtBytes(float64(rss0)), fmtBytes(float64(rss1)), fmtBytes(float64(rss3))),
		Value:     float64(rss3), Unit: "bytes"})
	return d.stop()
}
