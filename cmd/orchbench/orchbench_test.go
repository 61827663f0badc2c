package main

import (
	"encoding/json"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	orchd "github.com/orchestrd/orchestrd/daemon"
	"github.com/orchestrd/orchestrd/lanes"
)

func TestPercentileNearestRank(t *testing.T) {
	var xs []float64
	for i := 1; i <= 10; i++ {
		xs = append(xs, float64(i))
	}
	cases := []struct{ p, want float64 }{
		{0, 1}, {10, 1}, {11, 2}, {50, 5}, {90, 9}, {91, 10}, {99, 10}, {100, 10},
	}
	for _, c := range cases {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("percentile(1..10, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	// With 30 samples p99 is the largest: nearest rank ceil(0.99*30) = 30.
	var thirty []float64
	for i := 0; i < 30; i++ {
		thirty = append(thirty, float64(i))
	}
	if got := percentile(thirty, 99); got != 29 {
		t.Errorf("p99 of 30 samples = %v, want the maximum 29", got)
	}
	if got := percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("percentile of nothing = %v, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	in := []float64{5, 1, 4, 2, 3, 6}
	orig := slices.Clone(in)
	st := summarize(in, "ms")
	if !slices.Equal(in, orig) {
		t.Fatalf("summarize reordered its input: %v", in)
	}
	want := Stats{N: 6, Min: 1, P50: 3.5, P90: 6, P99: 6, Max: 6, Mean: 3.5, Unit: "ms"}
	if st != want {
		t.Fatalf("summarize = %+v, want %+v", st, want)
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Fatalf("median of 3 values = %v", m)
	}
	empty := summarize(nil, "ms")
	if empty.N != 0 || !math.IsNaN(empty.P50) {
		t.Fatalf("summarize(nil) = %+v", empty)
	}
	if got := durationsMs([]time.Duration{1500 * time.Microsecond}); got[0] != 1.5 {
		t.Fatalf("durationsMs = %v", got)
	}
}

func TestFormatting(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{fmtMs(0.0421), "42 µs"},
		{fmtMs(1.234), "1.23 ms"},
		{fmtMs(12.34), "12.3 ms"},
		{fmtMs(1007.4), "1007 ms"},
		{fmtMs(math.NaN()), "n/a"},
		{fmtBytes(512), "512 B"},
		{fmtBytes(14.5 * 1024), "14.5 KiB"},
		{fmtBytes(3 << 20), "3.0 MiB"},
		{fmtRate(1234.4, "jobs"), "1234 jobs/s"},
		{fmtRate(12.25, "jobs"), "12.2 jobs/s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if s, v := fmtRatio(3, 2); s != "1.50x" || *v != 1.5 {
		t.Errorf("fmtRatio(3, 2) = %q %v", s, *v)
	}
	if s, v := fmtRatio(1, 0); s != "" || v != nil {
		t.Errorf("fmtRatio(1, 0) = %q %v", s, v)
	}
}

func TestRenderTable(t *testing.T) {
	rows := []Row{
		{Scenario: "1. Restart", Metric: "p50", N: 30, Orchestrd: "1.20 ms", Baseline: "3.00 ms (floor)",
			Ratio: "0.40x", Target: "≤ 5 ms", Met: boolp(true)},
		{Scenario: "1. Restart", Metric: "a|b", N: 30, Orchestrd: "12 ms", Note: "spares=0", Target: "≤ 10 ms", Met: boolp(false)},
		{Scenario: "7. Idle", Metric: "RSS", Orchestrd: "16 MiB"},
	}
	got := renderTable(rows)
	want := "| Scenario | Figure | n | orchestrd | Baseline (same run) | Ratio | Target | Met |\n" +
		"|---|---|---:|---:|---|---:|---|:---:|\n" +
		"| 1. Restart | p50 | 30 | 1.20 ms | 3.00 ms (floor) | 0.40x | ≤ 5 ms | yes |\n" +
		"|  | a\\|b | 30 | 12 ms (spares=0) | — | — | ≤ 10 ms | **no** |\n" +
		"| 7. Idle | RSS |  | 16 MiB | — | — | — | — |\n"
	if got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
	if !missedAny(rows) || missedAny(rows[:1]) {
		t.Fatal("missedAny")
	}
}

func TestReportMarkdownAndJSON(t *testing.T) {
	r := &Report{Env: Env{Date: "2026-01-01 00:00 UTC", Mode: "quick", CPU: "cpu", Cores: 2},
		Rows:    []Row{{Scenario: "x", Metric: "m", Value: math.NaN(), BaselineValue: floatp(math.Inf(1))}},
		Notes:   []string{"a note"},
		Errors:  []string{"an error"},
		Samples: map[string]Stats{"s": summarize(nil, "ms")}}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"orchbench quick run, 2026-01-01", "timings are not judged", "| x | m |", "- a note", "Harness errors", "- an error"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("JSON does not read back: %v\n%s", err, raw)
	}
	if back.Rows[0].BaselineValue != nil || back.Env.Mode != "quick" {
		t.Fatalf("read back %+v", back)
	}
	if !math.IsNaN(r.Rows[0].Value) {
		t.Fatal("WriteJSON modified the report")
	}
}

// The configurations the scenarios write must be valid for the daemon.
func TestLaneConfigParses(t *testing.T) {
	for _, c := range []laneConfig{
		{runners: 1, slots: 1},
		{runners: 1, slots: 1, spares: 1},
		{runners: 1, slots: 1, stable: "100ms"},
		{runners: 2, slots: 16, finishedJobs: 1000},
		{runners: 1, slots: 4, finishedJobs: 16},
		{runners: 1, slots: 1, extraLanes: "\n[lanes.queue]\nrunners = 0\nslots = 1\nnetwork = \"host\"\nqueue_limit = 11000\n"},
	} {
		cfg, err := orchd.ParseConfig("bench.toml", []byte(c.toml()))
		if err != nil {
			t.Fatalf("%+v: %v\n%s", c, err, c.toml())
		}
		l := cfg.Lanes["bench"]
		if l.Runners != c.runners || l.Spares != c.spares || l.Network != lanes.NetworkHost || l.Restart.MaxR < 1000 {
			t.Fatalf("%+v parsed as %+v", c, l)
		}
	}
}

func TestMetricsConfigParses(t *testing.T) {
	cfg, err := orchd.ParseConfig("bench.toml", []byte(metricsConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Daemon.FinishedJobs != 10000 || cfg.Metrics.Listen != "127.0.0.1:0" || cfg.HTTP.Listen != "127.0.0.1:0" {
		t.Fatalf("parsed as %+v %+v %+v", cfg.Daemon, cfg.Metrics, cfg.HTTP)
	}
}

func TestApprovalsConfigParses(t *testing.T) {
	cfg, err := orchd.ParseConfig("bench.toml", []byte(approvalsConfig("/tmp/x/reachout.sock")))
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Approvals; a.Timeout.Duration != 10*time.Minute || !a.Reachout.Enabled || a.Reachout.Socket != "/tmp/x/reachout.sock" {
		t.Fatalf("parsed as %+v", a)
	}
}

func TestClosedLoop(t *testing.T) {
	defer goleak.VerifyNone(t)
	var workers, done atomic.Int32
	w := func() (func() error, func(), error) {
		workers.Add(1)
		return func() error { time.Sleep(time.Millisecond); return nil }, func() { done.Add(1) }, nil
	}
	r, err := closedLoop(4, 50*time.Millisecond, w)
	if err != nil {
		t.Fatal(err)
	}
	if workers.Load() != 4 || done.Load() != 4 {
		t.Fatalf("%d workers made, %d cleaned up", workers.Load(), done.Load())
	}
	if r.ops < 8 || len(r.lat) != r.ops || r.elapsed < 50*time.Millisecond || r.rate() <= 0 {
		t.Fatalf("result %d ops, %d latencies, %s", r.ops, len(r.lat), r.elapsed)
	}
	boom := errors.New("boom")
	_, err = closedLoop(2, time.Second, func() (func() error, func(), error) {
		return func() error { return boom }, func() {}, nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
}

func TestPairedAlternates(t *testing.T) {
	var order []string
	mk := func(name string, rate int) func() (measured, error) {
		return func() (measured, error) {
			order = append(order, name)
			return measured{loadResult: loadResult{ops: rate, elapsed: time.Second}}, nil
		}
	}
	as, bs, err := paired(4, mk("a", 10), mk("b", 20))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "abbaabba" {
		t.Fatalf("order %s, want abbaabba", got)
	}
	for i := range as {
		if as[i].ops != 10 || bs[i].ops != 20 {
			t.Fatalf("pair %d: %d / %d", i, as[i].ops, bs[i].ops)
		}
	}
	if r := pairRatios(as, bs); len(r) != 4 || r[0] != 0.5 {
		t.Fatalf("ratios %v", r)
	}
}

func TestHelloServer(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := filepath.Join(t.TempDir(), "hello.sock")
	hs, err := newHelloServer(path)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello 4242\n")); err != nil {
		t.Fatal(err)
	}
	m, err := hs.next(5*time.Second, 0)
	if err != nil || m.pid != 4242 {
		t.Fatalf("next = %+v, %v", m, err)
	}
	if _, err := hs.next(20*time.Millisecond, 0); err == nil {
		t.Fatal("a second hello out of nowhere")
	}
}
