package main

import (
	"math"
	"slices"
	"time"
)

// Stats summarises repeated measurements of one figure.
type Stats struct {
	N    int     `json:"n"`
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
	Unit string  `json:"unit"`
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest value with at least p% of the values at or below it.
// With 30 samples p99 is the maximum; that is the honest answer for n=30.
func percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// median is the usual median: the mean of the two middle values for an
// even count.
func median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// summarize computes Stats over xs (in unit). p50 is the median.
func summarize(xs []float64, unit string) Stats {
	st := Stats{N: len(xs), Unit: unit}
	if len(xs) == 0 {
		nan := math.NaN()
		st.Min, st.P50, st.P90, st.P99, st.Max, st.Mean = nan, nan, nan, nan, nan, nan
		return st
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	st.Min, st.Max = s[0], s[len(s)-1]
	st.P50 = median(s)
	st.P90 = percentile(s, 90)
	st.P99 = percentile(s, 99)
	st.Mean = sum / float64(len(s))
	return st
}

// ms converts a duration to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// durationsMs converts durations to milliseconds.
func durationsMs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}
