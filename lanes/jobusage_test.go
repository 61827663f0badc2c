package lanes

import (
	"math"
	"testing"
)

func TestOverLimit(t *testing.T) {
	for _, c := range []struct {
		name      string
		mem       uint64
		cpu       float64
		u         JobUsage
		wantLimit string // "" within the limits
	}{
		{"no limits", 0, 0, JobUsage{RSSBytes: math.MaxUint64, CPUSeconds: 1e9}, ""},
		{"memory at the limit", 100, 0, JobUsage{RSSBytes: 100}, ""},
		{"memory over", 100, 0, JobUsage{RSSBytes: 101}, "memory"},
		{"cpu at the limit", 0, 1.5, JobUsage{CPUSeconds: 1.5}, ""},
		{"cpu over", 0, 1.5, JobUsage{CPUSeconds: 1.51}, "cpu"},
		{"both over: memory first", 100, 1, JobUsage{RSSBytes: 200, CPUSeconds: 2}, "memory"},
		{"cpu over, memory within", 100, 1, JobUsage{RSSBytes: 50, CPUSeconds: 2}, "cpu"},
	} {
		lc := LaneConfig{MaxMemoryBytes: c.mem, MaxCPUSeconds: c.cpu}
		e, over := lc.overLimit(c.u)
		if over != (c.wantLimit != "") || e.Limit != c.wantLimit {
			t.Errorf("%s: overLimit = %+v, %v; want limit %q", c.name, e, over, c.wantLimit)
		}
		if lc.limitsJobs() != (c.mem > 0 || c.cpu > 0) {
			t.Errorf("%s: limitsJobs = %v", c.name, lc.limitsJobs())
		}
	}
	if limitErr("memory") != "memory_exceeded" || limitErr("cpu") != "cpu_exceeded" {
		t.Error("limitErr")
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		lc := DefaultFor("x")
		lc.MaxCPUSeconds = bad
		if len(lc.validate("lanes.x")) != 1 {
			t.Errorf("max_cpu_seconds %v: %v", bad, lc.validate("lanes.x"))
		}
	}
}
