package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Row is one figure of the table: what orchestrd measured, the baseline
// measured in the same run, their ratio and the target.
type Row struct {
	Scenario string `json:"scenario"`
	Metric   string `json:"metric"`
	N        int    `json:"n"` // trials or samples behind the figure; 0 = not applicable

	Orchestrd string  `json:"orchestrd"` // formatted
	Value     float64 `json:"orchestrd_value"`
	Unit      string  `json:"unit"`

	Baseline      string   `json:"baseline,omitempty"` // formatted, with its name
	BaselineValue *float64 `json:"baseline_value,omitempty"`
	BaselineN     int      `json:"baseline_n,omitempty"`

	// Ratio is orchestrd / baseline (formatted "1.8x"), or whatever the
	// target compares ("72% of baseline").
	Ratio      string   `json:"ratio,omitempty"`
	RatioValue *float64 `json:"ratio_value,omitempty"`

	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"` // nil: informational row without a target
	Note   string `json:"note,omitempty"`
}

// Env describes where and how the run happened.
type Env struct {
	Date      string  `json:"date"`
	Mode      string  `json:"mode"` // full | quick
	CPU       string  `json:"cpu"`
	Cores     int     `json:"cores"`
	MemMiB    int     `json:"mem_mib"`
	Kernel    string  `json:"kernel"`
	GoVersion string  `json:"go_version"`
	LoadStart string  `json:"loadavg_start"`
	LoadEnd   string  `json:"loadavg_end"`
	Seconds   float64 `json:"seconds"`
	Commit    string  `json:"commit,omitempty"`
}

// Report is everything a run produced; it is also the --json document.
type Report struct {
	Env     Env              `json:"env"`
	Rows    []Row            `json:"rows"`
	Notes   []string         `json:"notes,omitempty"`
	Errors  []string         `json:"errors,omitempty"`
	Samples map[string]Stats `json:"samples,omitempty"` // every summarised series, by name
}

func boolp(b bool) *bool        { return &b }
func floatp(f float64) *float64 { return &f }

// fmtMs formats milliseconds with sensible precision.
func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v < 0.1:
		return fmt.Sprintf("%.0f µs", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.0f ms", v)
	}
}

// fmtRate formats a per-second rate.
func fmtRate(v float64, what string) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v >= 10000:
		return fmt.Sprintf("%.0f %s/s", v, what)
	case v >= 100:
		return fmt.Sprintf("%.0f %s/s", v, what)
	default:
		return fmt.Sprintf("%.1f %s/s", v, what)
	}
}

// fmtBytes formats a byte count in binary units.
func fmtBytes(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v):
		return "n/a"
	case a >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case a >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}

// fmtRatio formats a/b as "1.85x"; empty when either is missing.
func fmtRatio(a, b float64) (string, *float64) {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a/b, 0) {
		return "", nil
	}
	r := a / b
	if r >= 10 {
		return fmt.Sprintf("%.0fx", r), &r
	}
	return fmt.Sprintf("%.2fx", r), &r
}

// rateRow is the row of a rate (its p50) against the baseline's in paired
// trials, the ratio the median of the pairs' ratios; short names the unit
// in fmtRate's cells and note says what the baseline is.
func rateRow(metric, unit, short string, o, bl, ratio Stats, note string) Row {
	return Row{Metric: metric, N: o.N, Orchestrd: fmtRate(o.P50, short), Value: o.P50, Unit: unit,
		Baseline: fmtRate(bl.P50, short) + note, BaselineValue: floatp(bl.P50), BaselineN: bl.N,
		Ratio: fmt.Sprintf("%.0f%%", 100*ratio.P50), RatioValue: floatp(ratio.P50)}
}

// rttRow is the row of round trips' p50 / p99 against the baseline's.
func rttRow(metric string, o, bl Stats) Row {
	ratio, rv := fmtRatio(o.P50, bl.P50)
	return Row{Metric: metric, N: o.N, Orchestrd: fmtMs(o.P50) + " / " + fmtMs(o.P99), Value: o.P50, Unit: "ms",
		Baseline: fmtMs(bl.P50) + " / " + fmtMs(bl.P99), BaselineValue: floatp(bl.P50), BaselineN: bl.N,
		Ratio: ratio, RatioValue: rv}
}

// cell makes s safe inside a markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\n", " ")
	if s == "" {
		return "—"
	}
	return s
}

func metCell(m *bool) string {
	switch {
	case m == nil:
		return "—"
	case *m:
		return "yes"
	default:
		return "**no**"
	}
}

// WriteMarkdown renders the report: a header naming the machine, the table
// and the notes.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	e := r.Env
	fmt.Fprintf(&b, "orchbench %s run, %s\n\n", e.Mode, e.Date)
	fmt.Fprintf(&b, "Machine: %s, %d cores, %d MiB RAM, Linux %s, %s; load average %s at start, %s at end; %.0f s.\n\n",
		e.CPU, e.Cores, e.MemMiB, e.Kernel, e.GoVersion, e.LoadStart, e.LoadEnd, e.Seconds)
	if e.Mode == "quick" {
		b.WriteString("Quick mode: few, short trials; timings are not judged.\n\n")
	}
	b.WriteString(renderTable(r.Rows))
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	if len(r.Errors) > 0 {
		b.WriteString("\nHarness errors:\n\n")
		for _, n := range r.Errors {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// renderTable renders rows as a markdown table. Consecutive rows of the
// same scenario show its name once.
func renderTable(rows []Row) string {
	var b strings.Builder
	b.WriteString("| Scenario | Figure | n | orchestrd | Baseline (same run) | Ratio | Target | Met |\n")
	b.WriteString("|---|---|---:|---:|---|---:|---|:---:|\n")
	prev := ""
	for _, r := range rows {
		sc := r.Scenario
		if sc == prev {
			sc = ""
		} else {
			prev = sc
		}
		n := ""
		if r.N > 0 {
			n = fmt.Sprint(r.N)
		}
		orch := r.Orchestrd
		if r.Note != "" {
			orch += " (" + r.Note + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			cellOrEmpty(sc), cell(r.Metric), cellOrEmpty(n), cell(orch), cell(r.Baseline), cell(r.Ratio),
			cell(r.Target), metCell(r.Met))
	}
	return b.String()
}

func cellOrEmpty(s string) string {
	if s == "" {
		return ""
	}
	return cell(s)
}

// WriteJSON writes the report as indented JSON. NaN values (figures that
// could not be measured) become null.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(sanitize(r), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// sanitize replaces NaN and Inf, which JSON cannot carry, with zero in a
// copy of r, recording which series they were in the notes.
func sanitize(r *Report) *Report {
	cp := *r
	cp.Rows = make([]Row, len(r.Rows))
	for i, row := range r.Rows {
		if bad(row.Value) {
			row.Value = 0
		}
		if row.BaselineValue != nil && bad(*row.BaselineValue) {
			row.BaselineValue = nil
		}
		if row.RatioValue != nil && bad(*row.RatioValue) {
			row.RatioValue = nil
		}
		cp.Rows[i] = row
	}
	cp.Samples = make(map[string]Stats, len(r.Samples))
	for k, s := range r.Samples {
		for _, p := range []*float64{&s.Min, &s.P50, &s.P90, &s.P99, &s.Max, &s.Mean} {
			if bad(*p) {
				*p = 0
			}
		}
		cp.Samples[k] = s
	}
	return &cp
}

func bad(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }
