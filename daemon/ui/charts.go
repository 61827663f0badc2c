package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// Charts of the last hour: what the charts page draws. They are kept in
// the daemon's memory (a restart starts them empty), fed by the bus (a
// sink that never blocks it: it decodes a record's log line and adds it
// to a minute's bucket under a short lock) and by samples of the method
// table (lane.list, approval.list) when the page is read, when a job or
// an approval changed and every sampleEvery.
//
// Bounded: a chart has at most chartSeriesMax series of chartMinutes
// buckets each (one a minute); a series past the cap (a lane, a state
// the chart has no room for) is added into the chart's one "other"
// series, and the chart says how many it folded. Approvals asked for
// and not yet answered (for the time to answer) are at most
// chartAskedMax; past it the oldest is forgotten (its answer is not
// timed).
//
// A chart counts the names it folded into "other" up to chartFoldedMax
// and then says "or more".

const (
	chartMinutes   = 60
	chartSeriesMax = 12
	chartAskedMax  = 4096
	chartFoldedMax = 256 // names other holds that a chart counts
	chartOther     = "(other)"
	sampleEvery    = 30 * time.Second
	sampleGap      = time.Second // samples the bus asks for, at most one a sampleGap
)

// bucket is one minute of a series: what was put in it.
type bucket struct {
	min  int64 // the minute (Unix seconds / 60) it holds; 0: empty
	sum  float64
	max  float64
	last float64
	n    int
}

// series is a chart's line or bar: a ring of the last chartMinutes
// minutes. A value older than what its bucket holds is dropped.
type series struct {
	name string
	ring [chartMinutes]bucket
}

func minuteOf(t time.Time) int64 { return t.Unix() / 60 }

// put adds v at t.
func (s *series) put(t time.Time, v float64) {
	m := minuteOf(t)
	b := &s.ring[((m%chartMinutes)+chartMinutes)%chartMinutes]
	switch {
	case b.n > 0 && b.min > m:
		return // older than the hour the ring holds
	case b.n == 0 || b.min < m:
		*b = bucket{min: m, max: v}
	}
	b.sum += v
	if v > b.max {
		b.max = v
	}
	b.last = v
	b.n++
}

// at is minute m's bucket, if something was put in it.
func (s *series) at(m int64) (bucket, bool) {
	b := s.ring[((m%chartMinutes)+chartMinutes)%chartMinutes]
	return b, b.min == m && b.n > 0
}

// chart is a set of series, at most chartSeriesMax and "other".
type chart struct {
	id, title, unit string
	kind            chartKind
	palette         int // the first series' colour (s<palette>): the jobs' states have colours of their own
	series          []*series
	byName          map[string]*series
	other           *series
	folded          map[string]bool // the names other holds, at most chartFoldedMax
	foldedMore      bool            // and more than those
}

type chartKind int

const (
	chartCount chartKind = iota // bars, stacked: how many a minute (sum)
	chartGauge                  // lines: the highest sample of a minute (max), now the last one
	chartMean                   // bars: the mean of what was put in a minute (sum/n)
)

func newChart(id, title, unit string, kind chartKind, names ...string) *chart {
	c := &chart{id: id, title: title, unit: unit, kind: kind, palette: 5, byName: map[string]*series{}, folded: map[string]bool{}}
	for _, n := range names {
		c.get(n)
	}
	return c
}

// get is name's series, made if there is room, else other's.
func (c *chart) get(name string) *series {
	if s, ok := c.byName[name]; ok {
		return s
	}
	if len(c.series) < chartSeriesMax {
		s := &series{name: name}
		c.series = append(c.series, s)
		c.byName[name] = s
		return s
	}
	if c.other == nil {
		c.other = &series{name: chartOther}
	}
	if !c.folded[name] {
		if len(c.folded) < chartFoldedMax {
			c.folded[name] = true
		} else {
			c.foldedMore = true
		}
	}
	return c.other
}

// charts is the dashboard's charts: a Sink of the bus.
type charts struct {
	mu       sync.Mutex
	jobs     *chart
	queue    *chart
	restarts *chart
	waiting  *chart
	answer   *chart
	tokens   *chart
	cost     *chart
	asked    map[string]time.Time // approval id -> when it was asked for
	order    []string             // asked's ids, oldest first
	newest   int64                // the latest minute put in (clockBack)
	wake     chan struct{}
}

// chartKinds are the records the charts read.
var chartKinds = []string{"job.queued", "job.dispatched", "job.finished", "runner.restart_scheduled",
	"approval.requested", "approval.resolved", "approval.timed_out", "approval.cancelled", "approval.auto_resolved",
	"task.finished"}

func newCharts() *charts {
	jobs := newChart("jobs", "Jobs finished a minute, by state", "jobs", chartCount,
		"succeeded", "failed", "timeout", "cancelled", "error")
	jobs.palette = 0 // succeeded green, failed red, ...
	return &charts{
		jobs:     jobs,
		queue:    newChart("queue", "Queue depth by lane", "jobs", chartGauge),
		restarts: newChart("restarts", "Runner restarts a minute, by lane", "restarts", chartCount),
		waiting:  newChart("waiting", "Approvals waiting", "approvals", chartGauge, "waiting"),
		answer:   newChart("answer", "Time to answer an approval (mean a minute)", "s", chartMean, "answered"),
		tokens:   newChart("tokens", "Agent tokens a minute", "tokens", chartCount, "input", "output"),
		cost:     newChart("cost", "Agent cost a minute", "USD", chartCount, "cost"),
		asked:    map[string]time.Time{},
		wake:     make(chan struct{}, 1),
	}
}

// EventsOnly: the charts read a record's log line, never its Wire.
func (c *charts) EventsOnly() {}

// chartFields are the fields of the records the charts read.
type chartFields struct {
	Lane       string `json:"lane"`
	State      string `json:"state"`
	Queued     *int   `json:"queued"`
	ID         string `json:"id"`
	TokenUsage *struct {
		In   int64   `json:"input_tokens"`
		Out  int64   `json:"output_tokens"`
		Cost float64 `json:"cost_usd"`
	} `json:"token_usage"`
}

// Deliver adds r to the charts; it never blocks.
func (c *charts) Deliver(r *eventlog.Record) {
	if r.Line == nil {
		return
	}
	var f chartFields
	if err := json.Unmarshal(r.Line, &f); err != nil {
		return
	}
	c.add(r.Kind, r.TS, f)
	switch r.Kind {
	case "job.queued", "job.dispatched", "job.finished", "approval.requested", "approval.resolved",
		"approval.timed_out", "approval.cancelled", "approval.auto_resolved":
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// chartClockBack is how far behind the latest minute put in a value may
// be before the charts take it for the clock set back (a record the bus
// delivers late is not that late).
const chartClockBack = 5

// clock notes that a value comes at t (c.mu held). A t more than
// chartClockBack minutes behind the latest one put in is the machine's
// clock set back: what the charts hold would be "in the future" and drop
// every new value until the clock caught up with it, so they start again
// empty.
func (c *charts) clock(t time.Time) {
	m := minuteOf(t)
	if m < c.newest-chartClockBack {
		for _, ch := range []*chart{c.jobs, c.queue, c.restarts, c.waiting, c.answer, c.tokens, c.cost} {
			for _, s := range ch.series {
				s.ring = [chartMinutes]bucket{}
			}
			if ch.other != nil {
				ch.other.ring = [chartMinutes]bucket{}
			}
		}
		c.newest = m
	}
	c.newest = max(c.newest, m)
}

// add puts one record's values in the charts.
func (c *charts) add(kind string, ts time.Time, f chartFields) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock(ts)
	switch kind {
	case "job.finished":
		if f.State != "" {
			c.jobs.get(f.State).put(ts, 1)
		}
	case "job.queued":
		if f.Queued != nil && f.Lane != "" {
			c.queue.get(f.Lane).put(ts, float64(*f.Queued))
		}
	case "runner.restart_scheduled":
		if f.Lane != "" {
			c.restarts.get(f.Lane).put(ts, 1)
		}
	case "approval.requested":
		c.ask(f.ID, ts)
	case "approval.resolved":
		if at, ok := c.asked[f.ID]; ok {
			c.answer.get("answered").put(ts, max(0, ts.Sub(at).Seconds()))
			delete(c.asked, f.ID)
		}
	case "approval.timed_out", "approval.cancelled", "approval.auto_resolved":
		delete(c.asked, f.ID)
	case "task.finished":
		if u := f.TokenUsage; u != nil {
			c.tokens.get("input").put(ts, float64(u.In))
			c.tokens.get("output").put(ts, float64(u.Out))
			c.cost.get("cost").put(ts, u.Cost)
		}
	}
}

// ask notes that approval id was asked for at ts (c.mu held).
func (c *charts) ask(id string, ts time.Time) {
	if id == "" {
		return
	}
	if _, ok := c.asked[id]; ok {
		return
	}
	c.asked[id] = ts
	c.order = append(c.order, id)
	for len(c.asked) > chartAskedMax || len(c.order) > 2*chartAskedMax {
		old := c.order[0]
		c.order = c.order[1:]
		if len(c.asked) > chartAskedMax {
			delete(c.asked, old)
		}
	}
}

// sample reads what only the method table knows (each lane's queue,
// the approvals waiting) through call, and puts it at now.
func (c *charts) sample(ctx context.Context, call func(ctx context.Context, method string, params, out any) error, now time.Time) {
	var lanes struct {
		Lanes []api.LaneStatus `json:"lanes"`
	}
	lerr := call(ctx, "lane.list", nil, &lanes)
	var appr struct {
		Approvals []struct {
			ID        string    `json:"id"`
			CreatedAt time.Time `json:"created_at"`
		} `json:"approvals"`
	}
	aerr := call(ctx, "approval.list", map[string]any{"state": "pending"}, &appr)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock(now)
	if lerr == nil {
		for _, l := range lanes.Lanes {
			c.queue.get(l.Name).put(now, float64(l.Queued))
		}
	}
	if aerr == nil {
		c.waiting.get("waiting").put(now, float64(len(appr.Approvals)))
		// One asked for before the charts were (the daemon restarted) is
		// timed from when it was made.
		for _, a := range appr.Approvals {
			if !a.CreatedAt.IsZero() {
				c.ask(a.ID, a.CreatedAt)
			}
		}
	}
}

// run samples every sampleEvery and when the bus says a job or an
// approval changed (at most one a sampleGap), until ctx ends.
func (c *charts) run(ctx context.Context, call func(ctx context.Context, method string, params, out any) error) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.wake:
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c.sample(sctx, call, time.Now())
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(sampleGap):
		}
	}
}

// The page's view of a chart: SVG geometry in a viewBox of chartW x
// chartH, a legend and the text a person (and a screen reader) reads.

const (
	chartW   = 600
	chartH   = 150
	chartTop = 8
	slotW    = float64(chartW) / chartMinutes
)

type chartView struct {
	ID, Title  string
	Rects      []chartRect
	Lines      []chartLine
	Legend     []chartLegend
	Top        string // the value the top of the chart stands for
	Latest     string // the text alternative: the latest values and the hour's
	Folded     int    // series added into (other)
	FoldedMore bool   // and more than Folded
	Empty      bool
}

type chartRect struct {
	X, Y, W, H    string
	Class, Series string
	Ago           int // minutes ago: 0 is this minute
	Value         string
}

type chartLine struct {
	Class, Series, Points string
}

type chartLegend struct {
	Name, Class string
}

func fnum(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// value formats v in the chart's unit.
func (c *chart) value(v float64) string {
	switch c.unit {
	case "USD":
		return "$" + strconv.FormatFloat(v, 'f', 4, 64)
	case "s":
		return strconv.FormatFloat(v, 'f', 1, 64) + " s"
	}
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// pick is what a bucket shows in the chart.
func (c *chart) pick(b bucket) float64 {
	switch c.kind {
	case chartGauge:
		return b.max
	case chartMean:
		return b.sum / float64(b.n)
	}
	return b.sum
}

// view draws the chart as of now.
func (c *chart) view(now time.Time) chartView {
	v := chartView{ID: c.id, Title: c.title, Folded: len(c.folded), FoldedMore: c.foldedMore}
	nowM := minuteOf(now)
	all := append([]*series(nil), c.series...)
	if c.other != nil {
		all = append(all, c.other)
	}
	// The top: the highest minute (stacked for counts).
	top := 0.0
	for ago := 0; ago < chartMinutes; ago++ {
		stack := 0.0
		for _, s := range all {
			if b, ok := s.at(nowM - int64(ago)); ok {
				if c.kind == chartCount {
					stack += c.pick(b)
				} else {
					stack = max(stack, c.pick(b))
				}
			}
		}
		top = max(top, stack)
	}
	v.Empty = top == 0
	if top == 0 {
		top = 1
	}
	v.Top = c.value(top)
	scale := float64(chartH-chartTop) / top
	x := func(ago int) float64 { return float64(chartMinutes-1-ago) * slotW }
	var base [chartMinutes]float64
	var words []string
	for i, s := range all {
		class := "s" + strconv.Itoa((c.palette+i)%chartSeriesMax)
		if s == c.other {
			class = "s-other"
		}
		var pts []string
		sum, hi, n, lastV, seen := 0.0, 0.0, 0, 0.0, false
		for ago := chartMinutes - 1; ago >= 0; ago-- {
			b, ok := s.at(nowM - int64(ago))
			if !ok {
				continue
			}
			val := c.pick(b)
			sum, hi, n, seen = sum+b.sum, max(hi, b.max), n+b.n, true
			if c.kind == chartGauge {
				lastV = b.last
				y := fnum(min(float64(chartH)-val*scale, chartH-1)) // a step a minute; 0 just above the axis
				pts = append(pts, fnum(x(ago))+","+y, fnum(x(ago)+slotW)+","+y)
				continue
			}
			lastV = val
			if c.kind == chartMean {
				lastV = b.last // the last one's, not its minute's mean
			}
			if val <= 0 {
				continue
			}
			h := val * scale
			y := float64(chartH) - base[ago] - h
			if c.kind == chartCount {
				base[ago] += h
			}
			v.Rects = append(v.Rects, chartRect{X: fnum(x(ago) + 1), Y: fnum(y), W: fnum(slotW - 2), H: fnum(h),
				Class: class, Series: s.name, Ago: ago, Value: c.value(val)})
		}
		if !seen {
			continue
		}
		if len(pts) > 0 {
			v.Lines = append(v.Lines, chartLine{Class: class, Series: s.name, Points: strings.Join(pts, " ")})
		}
		var said string
		switch c.kind {
		case chartGauge:
			said = fmt.Sprintf("%s %s now (%s at most)", s.name, c.value(lastV), c.value(hi))
		case chartMean:
			said = fmt.Sprintf("%s: mean %s over %d, last %s", s.name, c.value(sum/float64(max(n, 1))), n, c.value(lastV))
		default:
			cur := 0.0
			if b, ok := s.at(nowM); ok {
				cur = c.pick(b)
			}
			said = fmt.Sprintf("%s %s (%s this minute)", s.name, c.value(sum), c.value(cur))
		}
		words = append(words, said)
		v.Legend = append(v.Legend, chartLegend{Name: s.name, Class: class})
	}
	if len(words) == 0 {
		v.Latest = "Nothing in the last hour."
	} else {
		v.Latest = "In the last hour: " + strings.Join(words, "; ") + "."
	}
	return v
}

// chartsView is the charts page.
type chartsView struct {
	Charts []chartView
}

func (c *charts) views(now time.Time) []chartView {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []chartView
	for _, ch := range []*chart{c.jobs, c.queue, c.restarts, c.waiting, c.answer, c.tokens, c.cost} {
		out = append(out, ch.view(now))
	}
	return out
}

// startCharts subscribes the charts to the bus and starts their
// sampler; stopCharts undoes both and waits for the sampler.
func (s *Server) startCharts() {
	s.charts = newCharts()
	unsub := s.opts.Bus.Subscribe(chartKinds, s.charts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.charts.run(ctx, func(ctx context.Context, method string, params, out any) error {
			raw, err := s.opts.Caller.Invoke(ctx, api.Origin{By: api.ByUI}, method, params, nil)
			if err != nil {
				return err
			}
			return json.Unmarshal(raw, out)
		})
	}()
	var once sync.Once
	s.stopCharts = func() {
		once.Do(func() {
			unsub()
			cancel()
			<-done
		})
	}
}

func chartsData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	now := time.Now()
	s.charts.sample(ctx, s.call, now) // what the page shows is now's, not the last sample's
	return chartsView{Charts: s.charts.views(now)}, nil
}

func init() {
	register(&page{Name: "charts", Title: "Charts", Pattern: "/ui/charts", Nav: true, Kinds: chartKinds, Data: chartsData})
}
