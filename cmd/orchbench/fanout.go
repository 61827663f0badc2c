package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// fanoutJob prints short lines as fast as the shell can: many small
// writes, so many job.output events.
var fanoutJob = []string{"sh", "-c", `i=0; while [ $i -lt 3000 ]; do echo "orchbench fan-out line $i"; i=$((i+1)); done`}

// rawSubscriber is a raw control connection subscribed to job.output.
type rawSubscriber struct {
	c      net.Conn
	events atomic.Int64
	done   chan struct{}
}

// subscribeRaw subscribes; when read is true a goroutine reads and counts
// every event line, otherwise nothing ever reads the socket (stalled).
func subscribeRaw(sock string, read bool) (*rawSubscriber, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	s := &rawSubscriber{c: c, done: make(chan struct{})}
	if _, err := c.Write([]byte(`{"id":1,"method":"events.subscribe","params":{"kinds":["job.output"]}}` + "\n")); err != nil {
		c.Close()
		return nil, err
	}
	if !read {
		close(s.done)
		return s, nil
	}
	br := bufio.NewReaderSize(c, 256<<10)
	if _, err := br.ReadSlice('\n'); err != nil { // the subscribe answer
		c.Close()
		return nil, err
	}
	go func() {
		defer close(s.done)
		for {
			line, err := br.ReadSlice('\n')
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return
			}
			if err == nil && len(line) > 0 {
				s.events.Add(1)
			}
		}
	}()
	return s, nil
}

func (s *rawSubscriber) close() {
	s.c.Close()
	<-s.done
}

func runFanout(b *bench) error {
	rounds := pick(b, 6, 1)
	phase := pick(b, 2*time.Second, 500*time.Millisecond)
	fill := pick(b, time.Second, 300*time.Millisecond)
	hold := pick(b, 10*time.Second, time.Second)
	// finished_jobs small: finished records (with their output) are not
	// what this scenario measures.
	d, err := b.startDaemon("fanout", laneConfig{runners: 1, slots: 4, finishedJobs: 16}.toml())
	if err != nil {
		return err
	}
	defer d.stop()
	reader, err := subscribeRaw(d.sock, true)
	if err != nil {
		return err
	}
	defer reader.close()

	// Producers: 4 jobs streaming output at all times.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var prodErr atomic.Pointer[error]
	for i := 0; i < 4; i++ {
		c, err := d.dial()
		if err != nil {
			stop()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for ctx.Err() == nil {
				if err := runOutputJob(ctx, c); err != nil && ctx.Err() == nil {
					prodErr.Store(&err)
					return
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	time.Sleep(pick(b, time.Second, 300*time.Millisecond)) // warm-up
	if reader.events.Load() == 0 {
		return errors.New("no job.output events reached the reading subscriber")
	}
	// window measures the reading subscriber's rate and the daemon's CPU
	// per event it received.
	window := func() (rate, cpuPerEv float64) {
		c0, n0, t0 := cpuOf([]int{d.pid()}), reader.events.Load(), time.Now()
		time.Sleep(phase)
		c1, n1, t1 := cpuOf([]int{d.pid()}), reader.events.Load(), time.Now()
		return float64(n1-n0) / t1.Sub(t0).Seconds(), float64(c1-c0) / float64(time.Microsecond) / float64(max(n1-n0, 1))
	}
	var alone, stalled, ratios, cpuAlone, cpuStalled []float64
	aloneRound := func() {
		r, c := window()
		alone, cpuAlone = append(alone, r), append(cpuAlone, c)
	}
	stalledRound := func() error {
		st, err := subscribeRaw(d.sock, false)
		if err != nil {
			return err
		}
		defer st.close()
		time.Sleep(fill) // until its queue and socket buffer are full
		r, c := window()
		stalled, cpuStalled = append(stalled, r), append(cpuStalled, c)
		return nil
	}
	for r := 0; r < rounds; r++ {
		// ABBA order, so that drift hits both alike.
		if r%2 == 0 {
			aloneRound()
			if err := stalledRound(); err != nil {
				return err
			}
		} else {
			if err := stalledRound(); err != nil {
				return err
			}
			aloneRound()
		}
		ratios = append(ratios, stalled[r]/alone[r])
		b.debugf("fan-out round %d: alone %.0f ev/s (%.1f µs CPU/ev), with stalled %.0f ev/s (%.1f µs CPU/ev)",
			r+1, alone[r], cpuAlone[r], stalled[r], cpuStalled[r])
	}
	// Memory: one subscriber stays stalled for hold while the events keep
	// coming; its queue is bounded, so the daemon's RSS must stay flat.
	rssBefore, _ := procRSS(d.pid())
	st, err := subscribeRaw(d.sock, false)
	if err != nil {
		return err
	}
	time.Sleep(fill)
	rssStart, _ := procRSS(d.pid())
	rssPeak := rssStart
	for deadline := time.Now().Add(hold); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if v, err := procRSS(d.pid()); err == nil && v > rssPeak {
			rssPeak = v
		}
	}
	rssEnd, _ := procRSS(d.pid())
	st.close()
	if p := prodErr.Load(); p != nil {
		return fmt.Errorf("producer: %w", *p)
	}
	al := b.sample("fanout.alone_events_per_s", alone, "events/s")
	sl := b.sample("fanout.with_stalled_events_per_s", stalled, "events/s")
	rt := b.sample("fanout.ratio", ratios, "ratio")
	b.add(Row{Metric: "reading subscriber, events/s (median of phases; ratio: median of paired phases)", N: sl.N,
		Orchestrd: fmtRate(sl.P50, "events") + " with a stalled subscriber", Value: sl.P50, Unit: "events/s",
		Baseline: fmtRate(al.P50, "events") + " alone", BaselineValue: floatp(al.P50), BaselineN: al.N,
		Ratio: fmt.Sprintf("%.0f%%", 100*rt.P50), RatioValue: floatp(rt.P50), Target: "≥ 90% of alone", Met: boolp(rt.P50 >= 0.9)})
	ca, cs := median(cpuAlone), median(cpuStalled)
	ratio, rv := fmtRatio(cs, ca)
	b.add(Row{Metric: "daemon CPU per event delivered to the reader", N: len(cpuStalled),
		Orchestrd: fmt.Sprintf("%.1f µs with a stalled subscriber", cs), Value: cs, Unit: "µs",
		Baseline: fmt.Sprintf("%.1f µs alone", ca), BaselineValue: floatp(ca), Ratio: ratio, RatioValue: rv})
	growth := float64(rssEnd - rssStart)
	allow := max(4<<20, 0.10*float64(rssStart))
	b.add(Row{Metric: fmt.Sprintf("daemon RSS, one subscriber stalled %.0f s: start → end (peak)", hold.Seconds()),
		Orchestrd: fmt.Sprintf("%s → %s (%s; %s before it connected)", fmtBytes(float64(rssStart)), fmtBytes(float64(rssEnd)),
			fmtBytes(float64(rssPeak)), fmtBytes(float64(rssBefore))),
		Value: float64(rssEnd), Unit: "bytes", Ratio: fmt.Sprintf("%+.1f%%", 100*growth/float64(rssStart)),
		RatioValue: floatp(growth / float64(rssStart)),
		Target:     "flat: growth ≤ max(4 MiB, 10%)", Met: boolp(growth <= allow)})
	stop()
	wg.Wait()
	return d.stop()
}

// runOutputJob runs one fan-out job to its end.
func runOutputJob(ctx context.Context, c *client.Client) error {
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := c.Call(ctx, "job.submit", map[string]any{"lane": "bench", "argv": fanoutJob}, &sub); err != nil {
		return err
	}
	var res struct {
		Job struct {
			State string `json:"state"`
		} `json:"job"`
	}
	if err := c.Call(ctx, "job.wait", map[string]any{"id": sub.JobID, "timeout_ms": 60000}, &res); err != nil {
		return err
	}
	if res.Job.State != "succeeded" {
		return fmt.Errorf("fan-out job ended %s", res.Job.State)
	}
	return nil
}
