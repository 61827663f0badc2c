package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runMetrics: the daemon's Prometheus metrics. A daemon that has run
// 10,000 jobs (its in-memory store full of finished ones, the state store
// holding them) answers GET /metrics: its latency, p50 and p99, as
// Prometheus asks (a kept-alive connection, Accept-Encoding gzip, which
// the daemon answers plain), on the HTTP API with
// the key and on [metrics] listen, against GET /api/v1/health on the same
// listener (the HTTP stack's own floor). Then what a scrape every second
// costs the job path: jobs at c=32 with and without a scraper, paired.
func runMetrics(b *bench) error {
	finished := pick(b, 10000, 500)
	d, addr, key, err := b.startHTTP("metrics", metricsConfig())
	if err != nil {
		return err
	}
	defer d.stop()
	ctl, err := d.dial()
	if err != nil {
		return err
	}
	var fe struct {
		FrontEnds []struct {
			Name    string `json:"name"`
			Address string `json:"address"`
		} `json:"frontends"`
	}
	err = call(ctl, "frontend.list", nil, &fe)
	ctl.Close()
	if err != nil {
		return err
	}
	local := ""
	for _, f := range fe.FrontEnds {
		if f.Name == "metrics" {
			local = f.Address
		}
	}
	if local == "" {
		return fmt.Errorf("frontend.list has no metrics address: %+v", fe.FrontEnds)
	}
	api := "http://" + addr

	// 10,000 jobs run to their end.
	t0 := time.Now()
	if err := runNJobs(d, 32, finished); err != nil {
		return fmt.Errorf("running %d jobs: %w", finished, err)
	}
	b.logf("   %d jobs ran in %.1f s", finished, time.Since(t0).Seconds())
	// What 10,000 jobs left behind (the store's commits, the runners' and
	// the daemon's collections) settles before the latency is measured.
	time.Sleep(pick(b, 3*time.Second, 0))
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	// A job's end reaches the counter after its waiter heard it: the
	// count is waited for (10 s at most), not read once.
	var got float64
	var body string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if body, err = scrape(client, api+"/metrics", key); err != nil {
			return err
		}
		if got = finishedIn(body); got >= float64(finished) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got < float64(finished) {
		return fmt.Errorf("/metrics counts %v finished jobs 10 s after the last ended, want %d", got, finished)
	}

	n := pick(b, 1000, 50)
	for _, c := range []struct{ what, url, key, base string }{
		{"HTTP API, Bearer key", api + "/metrics", key, api + "/api/v1/health"},
		{"[metrics] listen", "http://" + local + "/metrics", "", api + "/api/v1/health"},
	} {
		var lat, floor []float64
		for i := range 2 * n {
			// Interleaved, so drift on a shared machine hits both alike.
			url, into := c.url, &lat
			if i%2 == 1 {
				url, into = c.base, &floor
			}
			start := time.Now()
			if _, err := scrape(client, url, c.key); err != nil {
				return err
			}
			*into = append(*into, float64(time.Since(start).Microseconds())/1000)
		}
		o := b.sample("metrics.scrape_ms."+strings.Fields(c.what)[0], lat, "ms")
		fl := b.sample("metrics.health_ms."+strings.Fields(c.what)[0], floor, "ms")
		ratio, rv := fmtRatio(o.P50, fl.P50)
		b.add(Row{Metric: fmt.Sprintf("GET /metrics with %d finished jobs (%s) p50 / p99", finished, c.what), N: o.N,
			Orchestrd: fmtMs(o.P50) + " / " + fmtMs(o.P99), Value: o.P99, Unit: "ms",
			Baseline: fmtMs(fl.P50) + " / " + fmtMs(fl.P99) + " (GET /api/v1/health, same listener)", BaselineValue: floatp(fl.P50),
			BaselineN: fl.N, Ratio: ratio, RatioValue: rv, Target: "p99 < 5 ms", Met: boolp(o.P99 < 5),
			Note: fmt.Sprintf("%d bytes uncompressed", len(body))})
	}

	// The job path with Prometheus scraping every second, against none.
	trials := pick(b, 6, 1)
	dur := b.load(3 * time.Second)
	pids := func() []int { return append([]int{d.pid()}, children(d.pid())...) }
	var scrapes atomic.Int64
	withScraper := func() (measured, error) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				if _, err := scrape(client, api+"/metrics", key); err == nil {
					scrapes.Add(1)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})
		defer func() { close(stop); wg.Wait() }()
		return trial(pids, 32, dur, orchJobWorker(d))
	}
	w, wo, err := paired(trials, withScraper, func() (measured, error) { return trial(pids, 32, dur, orchJobWorker(d)) })
	if err != nil {
		return fmt.Errorf("jobs with and without scraping: %w", err)
	}
	wr := b.sample("metrics.jobs_c32_scraped_per_s", rates(w), "jobs/s")
	wor := b.sample("metrics.jobs_c32_per_s", rates(wo), "jobs/s")
	rt := b.sample("metrics.jobs_c32_ratio", pairRatios(w, wo), "ratio")
	b.add(Row{Metric: "jobs c=32 while /metrics is scraped every second, jobs/s", N: wr.N,
		Orchestrd: fmtRate(wr.P50, "job"), Value: wr.P50, Unit: "jobs/s",
		Baseline: fmtRate(wor.P50, "job") + " (no scraper, paired)", BaselineValue: floatp(wor.P50), BaselineN: wor.N,
		Ratio: fmt.Sprintf("%.0f%%", 100*rt.P50), RatioValue: floatp(rt.P50), Target: "≥ 90% of baseline", Met: boolp(rt.P50 >= 0.90),
		Note: fmt.Sprintf("%d scrapes during the trials", scrapes.Load())})
	return nil
}

// metricsConfig keeps 10,000 finished jobs in memory and serves /metrics
// both ways on free loopback ports.
func metricsConfig() string {
	return laneConfig{runners: 2, slots: 16, finishedJobs: 10000, queueLimit: 20000}.toml() +
		"\n[http]\nlisten = \"127.0.0.1:0\"\nexec_lane = \"bench\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n"
}

// runNJobs runs n `true` jobs to their end on lane bench from conc
// connections.
func runNJobs(d *daemon, conc, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	for range conc {
		op, done, err := orchJobWorker(d)()
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer done()
			for next.Add(1) <= int64(n) {
				if err := op(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// scrape GETs url (with the key, when given) as Prometheus does: gzip,
// the whole body read.
func scrape(c *http.Client, url, key string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(resp.Body)
		if err != nil {
			return "", err
		}
		r = gz
	}
	body, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return string(body), nil
}

// finishedIn sums orchestrd_jobs_finished_total in an exposition.
func finishedIn(text string) float64 {
	var sum float64
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "orchestrd_jobs_finished_total{") {
			if i := strings.LastIndexByte(l, ' '); i > 0 {
				v, _ := strconv.ParseFloat(l[i+1:], 64)
				sum += v
			}
		}
	}
	return sum
}
