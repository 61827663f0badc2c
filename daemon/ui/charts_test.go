package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

func at(min int, sec int) time.Time {
	return t0.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second)
}

// A series keeps one bucket a minute for chartMinutes minutes: what is
// put in a minute adds up (sum, n) and keeps its highest and its last;
// a minute an hour later takes the bucket over; a value older than what
// its bucket holds is dropped.
func TestSeriesBuckets(t *testing.T) {
	type put struct {
		t time.Time
		v float64
	}
	tests := []struct {
		name string
		puts []put
		min  time.Time // the minute read
		want bucket    // min is filled in
		ok   bool
	}{
		{"empty", nil, at(0, 0), bucket{}, false},
		{"one", []put{{at(0, 5), 3}}, at(0, 0), bucket{sum: 3, max: 3, last: 3, n: 1}, true},
		{"one minute adds up", []put{{at(0, 5), 3}, {at(0, 50), 1}, {at(0, 59), 2}}, at(0, 0),
			bucket{sum: 6, max: 3, last: 2, n: 3}, true},
		{"the next minute is its own", []put{{at(0, 5), 3}, {at(1, 0), 1}}, at(1, 0), bucket{sum: 1, max: 1, last: 1, n: 1}, true},
		{"the minute before is kept", []put{{at(0, 5), 3}, {at(1, 0), 1}}, at(0, 0), bucket{sum: 3, max: 3, last: 3, n: 1}, true},
		{"an hour later takes the bucket", []put{{at(0, 5), 3}, {at(chartMinutes, 1), 7}}, at(chartMinutes, 0),
			bucket{sum: 7, max: 7, last: 7, n: 1}, true},
		{"the hour before is gone", []put{{at(0, 5), 3}, {at(chartMinutes, 1), 7}}, at(0, 0), bucket{}, false},
		{"older than the bucket: dropped", []put{{at(chartMinutes, 1), 7}, {at(0, 5), 3}}, at(chartMinutes, 0),
			bucket{sum: 7, max: 7, last: 7, n: 1}, true},
		{"negative and zero values", []put{{at(2, 0), -2}, {at(2, 1), 0}}, at(2, 0), bucket{sum: -2, max: 0, last: 0, n: 2}, true},
		{"before 1970", []put{{time.Unix(-3600, 0), 1}}, time.Unix(-3600, 0), bucket{sum: 1, max: 1, last: 1, n: 1}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s series
			for _, p := range tc.puts {
				s.put(p.t, p.v)
			}
			got, ok := s.at(minuteOf(tc.min))
			if ok != tc.ok {
				t.Fatalf("at: ok %v, want %v (%+v)", ok, tc.ok, got)
			}
			if !ok {
				return
			}
			tc.want.min = minuteOf(tc.min)
			if got != tc.want {
				t.Fatalf("at: %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A chart has at most chartSeriesMax series; past them every new name
// is added into one "(other)" series, and the chart counts how many.
func TestChartSeriesCap(t *testing.T) {
	tests := []struct {
		names      int
		wantSeries int
		wantOther  bool
		wantFolded int
		wantMore   bool
	}{
		{0, 0, false, 0, false},
		{1, 1, false, 0, false},
		{chartSeriesMax, chartSeriesMax, false, 0, false},
		{chartSeriesMax + 1, chartSeriesMax, true, 1, false},
		{chartSeriesMax + chartFoldedMax, chartSeriesMax, true, chartFoldedMax, false},
		{chartSeriesMax + chartFoldedMax + 1, chartSeriesMax, true, chartFoldedMax, true},
		{chartSeriesMax + 5000, chartSeriesMax, true, chartFoldedMax, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.names), func(t *testing.T) {
			c := newChart("x", "X", "jobs", chartCount)
			for i := 0; i < tc.names; i++ {
				for range 2 { // a name again is the same series
					c.get(fmt.Sprintf("lane-%d", i)).put(t0, 1)
				}
			}
			if len(c.series) != tc.wantSeries || (c.other != nil) != tc.wantOther || len(c.folded) != tc.wantFolded ||
				c.foldedMore != tc.wantMore {
				t.Fatalf("%d names: %d series, other %v, folded %d, more %v; want %d, %v, %d, %v", tc.names, len(c.series),
					c.other != nil, len(c.folded), c.foldedMore, tc.wantSeries, tc.wantOther, tc.wantFolded, tc.wantMore)
			}
			if tc.wantOther {
				b, _ := c.other.at(minuteOf(t0))
				if b.sum != float64(2*(tc.names-chartSeriesMax)) {
					t.Fatalf("other's sum %v, want %d", b.sum, 2*(tc.names-chartSeriesMax))
				}
				v := c.view(t0)
				if !strings.Contains(v.Latest, chartOther) || v.Folded != tc.wantFolded || v.FoldedMore != tc.wantMore {
					t.Fatalf("the view does not say what it folded: %q, %d", v.Latest, v.Folded)
				}
			}
		})
	}
}

func rec(kind string, ts time.Time, line string) *eventlog.Record {
	return &eventlog.Record{Kind: kind, TS: ts, Line: []byte(`{"ts":"x","seq":1,"kind":"` + kind + `",` + line + `}`)}
}

// The bus's records become the charts' values: jobs by state, a lane's
// queue from job.queued, restarts by lane, the time an approval waited
// for its answer, tokens and cost. What the charts cannot read is
// ignored.
// The machine's clock set back by two hours: what the charts held is "in
// the future"; they start again, and show what comes after, rather than
// drop every value until the clock catches up. A record a few minutes late
// is not that.
func TestChartsClockBack(t *testing.T) {
	c := newCharts()
	for m := 61; m <= 120; m++ { // an hour of minutes: every bucket holds one
		c.Deliver(rec("job.finished", at(m, 0), `"job_id":"a","lane":"net","state":"succeeded"`))
	}
	c.Deliver(rec("job.finished", at(117, 0), `"job_id":"b","lane":"net","state":"failed"`)) // late: kept
	c.Deliver(rec("job.finished", at(1, 0), `"job_id":"c","lane":"net","state":"succeeded"`))
	views := map[string]chartView{}
	for _, v := range c.views(at(1, 30)) {
		views[v.ID] = v
	}
	if l := views["jobs"].Latest; !strings.Contains(l, "succeeded 1 (1 this minute)") || strings.Contains(l, "failed") {
		t.Errorf("after the clock went back two hours the jobs chart says %q", l)
	}
	c = newCharts()
	c.Deliver(rec("job.finished", at(120, 0), `"job_id":"a","lane":"net","state":"succeeded"`))
	c.Deliver(rec("job.finished", at(117, 0), `"job_id":"b","lane":"net","state":"failed"`))
	views = map[string]chartView{}
	for _, v := range c.views(at(120, 30)) {
		views[v.ID] = v
	}
	if l := views["jobs"].Latest; !strings.Contains(l, "succeeded 1") || !strings.Contains(l, "failed 1") {
		t.Errorf("a record three minutes late: the jobs chart says %q", l)
	}
}

func TestChartsFromRecords(t *testing.T) {
	c := newCharts()
	for _, r := range []*eventlog.Record{
		rec("job.finished", at(0, 1), `"job_id":"a","lane":"net","state":"succeeded"`),
		rec("job.finished", at(0, 2), `"job_id":"b","lane":"net","state":"succeeded"`),
		rec("job.finished", at(0, 3), `"job_id":"c","lane":"net","state":"failed"`),
		rec("job.finished", at(1, 3), `"job_id":"d","lane":"net","state":"node_lost"`),
		rec("job.queued", at(1, 4), `"job_id":"e","lane":"no-net","queued":4`),
		rec("job.queued", at(1, 5), `"job_id":"f","lane":"no-net","queued":2`),
		rec("runner.restart_scheduled", at(1, 6), `"lane":"net","runner_id":"net-0"`),
		rec("approval.requested", at(0, 0), `"id":"ap-1"`),
		rec("approval.resolved", at(0, 30), `"id":"ap-1","decision":"allow"`),
		rec("approval.requested", at(0, 0), `"id":"ap-2"`),
		rec("approval.cancelled", at(0, 10), `"id":"ap-2"`),
		rec("approval.resolved", at(1, 10), `"id":"ap-2","decision":"allow"`), // cancelled: not timed
		rec("approval.resolved", at(1, 11), `"id":"ap-unknown","decision":"deny"`),
		rec("approval.requested", at(1, 0), `"id":"ap-3"`),
		rec("approval.requested", at(1, 0), `"id":"ap-4"`),
		rec("approval.resolved", at(1, 10), `"id":"ap-3","decision":"allow"`),
		rec("approval.resolved", at(1, 40), `"id":"ap-4","decision":"deny"`),
		rec("task.finished", at(1, 20), `"task_id":"t","token_usage":{"input_tokens":100,"output_tokens":20,"cost_usd":0.5}`),
		rec("task.finished", at(1, 21), `"task_id":"t2"`),
		rec("job.finished", at(1, 30), `not json`),
		{Kind: "job.finished", TS: at(1, 31)}, // ephemeral: no line
	} {
		c.Deliver(r)
	}
	now := at(1, 59)
	views := map[string]chartView{}
	for _, v := range c.views(now) {
		views[v.ID] = v
	}
	for id, want := range map[string][]string{
		"jobs":     {"succeeded 2 (0 this minute)", "failed 1 (0 this minute)", "node_lost 1 (1 this minute)"},
		"queue":    {"no-net 2 now (4 at most)"},
		"restarts": {"net 1 (1 this minute)"},
		"answer":   {"answered: mean 26.7 s over 3, last 40.0 s"}, // minute 1's mean is 25
		"tokens":   {"input 100 (100 this minute)", "output 20 (20 this minute)"},
		"cost":     {"cost $0.5000 ($0.5000 this minute)"},
		"waiting":  {"Nothing in the last hour."},
	} {
		for _, w := range want {
			if !strings.Contains(views[id].Latest, w) {
				t.Errorf("chart %s says %q, want %q in it", id, views[id].Latest, w)
			}
		}
	}
	if len(c.asked) != 0 {
		t.Errorf("approvals still timed after their end: %v", c.asked)
	}
	// The jobs' bars: minute 0 a stack of succeeded (2) and failed (1),
	// minute 1 node_lost; the tallest stack is the chart's top.
	j := views["jobs"]
	if len(j.Rects) != 3 || j.Top != "3" {
		t.Fatalf("jobs' bars: %+v, top %s", j.Rects, j.Top)
	}
	for _, r := range j.Rects {
		if r.Series == "succeeded" && (r.Ago != 1 || r.Value != "2" || r.H != fnum(2*float64(chartH-chartTop)/3)) {
			t.Errorf("succeeded's bar: %+v", r)
		}
	}
	// The queue's line: one point a minute it was sampled in.
	if q := views["queue"]; len(q.Lines) != 1 || q.Lines[0].Series != "no-net" || q.Rects != nil {
		t.Fatalf("queue's lines: %+v", q)
	}
}

// Approvals asked for are bounded: past chartAskedMax the oldest is
// forgotten, and so is the list of their ids.
func TestChartsAskedBounded(t *testing.T) {
	c := newCharts()
	for i := range 3 * chartAskedMax {
		c.Deliver(rec("approval.requested", at(0, 0), fmt.Sprintf(`"id":"ap-%d"`, i)))
	}
	if len(c.asked) != chartAskedMax || len(c.order) > 2*chartAskedMax {
		t.Fatalf("asked %d, order %d; want %d, at most %d", len(c.asked), len(c.order), chartAskedMax, 2*chartAskedMax)
	}
	if _, ok := c.asked["ap-0"]; ok {
		t.Fatal("the oldest approval is still timed")
	}
	if _, ok := c.asked[fmt.Sprintf("ap-%d", 3*chartAskedMax-1)]; !ok {
		t.Fatal("the newest approval is not timed")
	}
}

// A sample puts each lane's queue and the approvals waiting; an approval
// the charts did not see asked for is timed from when it was made.
func TestChartsSample(t *testing.T) {
	c := newCharts()
	fc := &fakeCaller{answers: map[string]string{
		"lane.list":     `{"lanes":[{"name":"net","queued":3},{"name":"<b>x</b>","queued":1}]}`,
		"approval.list": `{"approvals":[{"id":"ap-9","created_at":"2026-11-29T20:00:00Z"}]}`,
	}}
	call := func(ctx context.Context, method string, params, out any) error {
		raw, err := fc.Invoke(ctx, from(ctx), method, params, nil)
		if err != nil {
			return err
		}
		return json.Unmarshal(raw, out)
	}
	c.sample(context.Background(), call, at(0, 10))
	c.Deliver(rec("approval.resolved", at(0, 40), `"id":"ap-9","decision":"allow"`))
	views := map[string]chartView{}
	for _, v := range c.views(at(0, 50)) {
		views[v.ID] = v
	}
	for id, w := range map[string]string{"queue": "net 3 now (3 at most); <b>x</b> 1 now", "waiting": "waiting 1 now",
		"answer": "answered: mean 40.0 s"} {
		if !strings.Contains(views[id].Latest, w) {
			t.Errorf("chart %s says %q, want %q in it", id, views[id].Latest, w)
		}
	}
}

// The charts page draws what the charts hold, escaped: a lane's name is
// text, never markup.
func TestChartsPage(t *testing.T) {
	h := newHarness(t, Config{})
	h.caller.mu.Lock()
	h.caller.answers["lane.list"] = `{"lanes":[{"name":"<img src=x onerror=alert(1)>","queued":5}]}`
	h.caller.mu.Unlock()
	h.srv.charts.Deliver(rec("job.finished", time.Now(), `"job_id":"a","lane":"net","state":"succeeded"`))
	c := h.client()
	h.signIn(c)
	resp, body := h.do(c, "GET", "/ui/charts", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("charts: %d\n%s", resp.StatusCode, body)
	}
	for _, w := range []string{`<rect class="s0"`, `data-series="succeeded"`, `succeeded 1 (1 this minute)`,
		`data-series="&lt;img src=x onerror=alert(1)&gt;"`, `&lt;img src=x onerror=alert(1)&gt; 5 now`, `<polyline class="s5"`} {
		if !strings.Contains(body, w) {
			t.Errorf("the charts page has no %q", w)
		}
	}
	if strings.Contains(body, "<img") {
		t.Fatal("a lane's name is markup on the charts page")
	}
}

// The sampler samples when the bus says a job changed, not only every
// sampleEvery: lane.list is asked, and its queue is charted.
func TestChartsSampleOnEvent(t *testing.T) {
	h := newHarness(t, Config{})
	calls := func() int {
		h.caller.mu.Lock()
		defer h.caller.mu.Unlock()
		n := 0
		for _, c := range h.caller.calls {
			if c.Method == "lane.list" {
				n++
			}
		}
		return n
	}
	if n := calls(); n != 0 {
		t.Fatalf("lane.list asked %d times before anything happened", n)
	}
	h.srv.charts.Deliver(rec("job.dispatched", time.Now(), `"job_id":"a","lane":"net","runner_id":"net-0"`))
	queue := func() string {
		for _, v := range h.srv.charts.views(time.Now()) {
			if v.ID == "queue" {
				return v.Latest
			}
		}
		return ""
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(queue(), "net 1 now") {
		if time.Now().After(deadline) {
			t.Fatalf("no sample within 30s of a job.dispatched: lane.list asked %d times, the queue chart says %q", calls(), queue())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
