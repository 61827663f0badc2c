package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"time"
)

// runDashboard is scenario 15: what the dashboard costs. Jobs at c=32 with
// and without a dashboard load, paired (ABBA) in the same run: ten open
// tabs, each doing what app.js does (one event stream of its page's kinds,
// its content reloaded at most once a second while events come; the
// events page appends instead), and /metrics scraped every second when the
// daemon serves it. Then one page's HTML, each page N times with the store
// holding the jobs the run made.
func runDashboard(b *bench) error {
	trials := pick(b, 6, 1)
	dur := b.load(1500 * time.Millisecond)
	cfg := laneConfig{runners: 2, slots: 16, finishedJobs: 1000}.toml() + "\n[http]\nlisten = \"127.0.0.1:0\"\nexec_lane = \"bench\"\n"
	d, addr, key, err := b.startHTTP("dashboard", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	base := "http://" + addr
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	resp, err := web.PostForm(base+"/ui/login", url.Values{"key": {key}})
	if err != nil {
		return fmt.Errorf("signing in: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/" {
		return fmt.Errorf("signing in: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	// Does the daemon serve /metrics (on its API's listener, with the key)?
	metrics := false
	if req, err := http.NewRequest("GET", base+"/metrics", nil); err == nil {
		req.Header.Set("Authorization", "Bearer "+key)
		if r, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			metrics = r.StatusCode == http.StatusOK
		}
	}

	if _, err := closedLoop(4, b.load(500*time.Millisecond), orchJobWorker(d)); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	tabs := []string{"/ui/", "/ui/", "/ui/jobs", "/ui/jobs", "/ui/jobs?state=running", "/ui/events", "/ui/events",
		"/ui/approvals", "/ui/loops", "/ui/agents"}
	var loads []*dashLoad
	withLoad := func() (measured, error) {
		l, err := startDashLoad(web, base, key, tabs, metrics)
		if err != nil {
			return measured{}, err
		}
		defer func() { loads = append(loads, l.stop()) }()
		return trial(func() []int { return nil }, 32, dur, orchJobWorker(d))
	}
	without := func() (measured, error) { return trial(func() []int { return nil }, 32, dur, orchJobWorker(d)) }
	with, alone, err := paired(trials, withLoad, without)
	if err != nil {
		return err
	}
	wr := b.sample("dashboard.c32.with_jobs_per_s", rates(with), "jobs/s")
	ar := b.sample("dashboard.c32.without_jobs_per_s", rates(alone), "jobs/s")
	rt := b.sample("dashboard.c32.ratio", pairRatios(with, alone), "ratio")
	var reloads, events, scrapes, streamErrs int
	for _, l := range loads {
		reloads += l.reloads
		events += l.events
		scrapes += l.scrapes
		streamErrs += l.errs
	}
	what := "10 tabs"
	if metrics {
		what += " + /metrics every 1s"
	}
	b.add(Row{Metric: "jobs c=32 with a dashboard (" + what + ") vs without, paired", N: wr.N,
		Orchestrd: fmtRate(wr.P50, "jobs"), Value: wr.P50, Unit: "jobs/s",
		Baseline: fmtRate(ar.P50, "jobs") + " (no dashboard)", BaselineValue: floatp(ar.P50), BaselineN: ar.N,
		Ratio: fmt.Sprintf("%.0f%% (pairs %.0f%%..%.0f%%)", 100*rt.P50, 100*rt.Min, 100*rt.Max), RatioValue: floatp(rt.P50),
		Target: "within noise (≥ 95%)", Met: boolp(rt.P50 >= 0.95)})
	b.note("dashboard load over %d trials: %d events streamed to tabs, %d page reloads, %d /metrics scrapes, %d stream errors",
		len(loads), events, reloads, scrapes, streamErrs)
	if streamErrs > 0 {
		return fmt.Errorf("the dashboard's streams failed %d times", streamErrs)
	}

	// One page's HTML.
	n := pick(b, 50, 5)
	for _, p := range []string{"/ui/", "/ui/jobs", "/ui/events"} {
		var ms []float64
		for i := 0; i < n; i++ {
			t0 := time.Now()
			r, err := web.Get(base + p)
			if err != nil {
				return fmt.Errorf("GET %s: %w", p, err)
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %d", p, r.StatusCode)
			}
			ms = append(ms, float64(time.Since(t0))/float64(time.Millisecond))
		}
		st := b.sample("dashboard.page"+strings.NewReplacer("/", "_", "?", "_").Replace(p)+"_ms", ms, "ms")
		b.add(Row{Metric: "GET " + p + " (whole page)", N: st.N, Orchestrd: fmt.Sprintf("p50 %s, p99 %s", fmtMs(st.P50), fmtMs(st.P99)),
			Value: st.P50, Unit: "ms", Target: "< 20 ms", Met: boolp(st.P50 < 20)})
	}
	return d.stop()
}

// dashLoad is the open tabs and the scraper of one trial.
type dashLoad struct {
	cancel                         context.CancelFunc
	wg                             sync.WaitGroup
	mu                             sync.Mutex
	events, reloads, scrapes, errs int
}

func startDashLoad(web *http.Client, base, key string, tabs []string, metrics bool) (*dashLoad, error) {
	ctx, cancel := context.WithCancel(context.Background())
	l := &dashLoad{cancel: cancel}
	for _, t := range tabs {
		r, err := web.Get(base + t)
		if err != nil {
			cancel()
			return nil, err
		}
		page, _ := io.ReadAll(r.Body)
		r.Body.Close()
		kinds := attr(string(page), "data-kinds")
		if kinds == "" {
			continue
		}
		follow := strings.Contains(string(page), `data-follow="true"`)
		mode := "&mode=signal" // as app.js asks for a page that reloads
		if follow {
			mode = ""
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/ui/stream?kinds="+url.QueryEscape(kinds)+mode, nil)
		// A stream has no overall timeout: the trial's context ends it.
		resp, err := (&http.Client{Jar: web.Jar}).Do(req)
		if err != nil {
			cancel()
			return nil, err
		}
		l.wg.Add(1)
		go l.tab(ctx, web, base+t, resp, follow)
	}
	if metrics {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				if r, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
					l.mu.Lock()
					l.scrapes++
					l.mu.Unlock()
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	return l, nil
}

// tab reads its stream; every event makes it reload its content as
// app.js does: 100 ms after the first, at most once a second.
func (l *dashLoad) tab(ctx context.Context, web *http.Client, page string, resp *http.Response, follow bool) {
	defer l.wg.Done()
	defer resp.Body.Close()
	dirty := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Time{}
		for {
			select {
			case <-ctx.Done():
				return
			case <-dirty:
			}
			wait := max(100*time.Millisecond, time.Second-time.Since(last))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			last = time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", page, nil)
			req.Header.Set("X-Fragment", "1")
			if r, err := web.Do(req); err == nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				l.mu.Lock()
				l.reloads++
				l.mu.Unlock()
			}
		}
	}()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") || strings.HasPrefix(line, `data: {"queue"`) {
			continue
		}
		l.mu.Lock()
		l.events++
		l.mu.Unlock()
		if !follow || strings.Contains(line, `"missed"`) {
			select {
			case dirty <- struct{}{}:
			default:
			}
		}
	}
	if ctx.Err() == nil {
		l.mu.Lock()
		l.errs++
		l.mu.Unlock()
	}
	<-done
}

// stop closes the tabs and the scraper; it returns l for the counts.
func (l *dashLoad) stop() *dashLoad {
	l.cancel()
	l.wg.Wait()
	return l
}

// attr is the value of the first name="..." in page.
func attr(page, name string) string {
	i := strings.Index(page, name+`="`)
	if i < 0 {
		return ""
	}
	v := page[i+len(name)+2:]
	j := strings.IndexByte(v, '"')
	if j < 0 {
		return ""
	}
	return strings.ReplaceAll(v[:j], "&#43;", "+")
}
