package render

import (
	"fmt"
	"strconv"

	"github.com/orchestrd/orchestrd/api"
)

// UsageLine is the one line a job's or a task's usage is shown as, in the CLI
// and on the dashboard: "cpu 1.20s user + 0.05s sys, peak rss 41.0 MiB,
// read 12.0 KiB, wrote 0 B, 3 threads (procfs, 7 samples)".
func UsageLine(u *api.Usage) string {
	if u == nil {
		return ""
	}
	src := u.Source
	switch {
	case src == api.UsageSourceCgroup && u.CgroupFigures == api.UsageCgroupCPU:
		src = "cpu from its cgroup, the rest procfs"
	case src != api.UsageSourceCgroup && src != api.UsageSourceProcfs:
		src = "?" // a record from elsewhere: its word is not printed
	}
	scope := ""
	if u.Scope == api.UsageScopeExecutor {
		scope = "; the executor's tree while the task ran"
	}
	return fmt.Sprintf("cpu %.2fs user + %.2fs sys, peak rss %s, read %s, wrote %s, %s (%s, %s%s)",
		u.UserSeconds, u.SystemSeconds, Bytes(u.PeakRSSBytes), Bytes(u.ReadBytes), Bytes(u.WriteBytes),
		api.Count(u.PeakThreads, "thread"), src, api.Count(u.Samples, "sample"), scope)
}

// TaskUsage is an agent task's usage as a line: "" when it has none (the
// daemon does not sample, or it never ran), and what a usage of no sample
// means: not sampled yet, or ended before its first sample.
func TaskUsage(t api.TaskRecord) string {
	switch u := t.Usage; {
	case u == nil:
		return ""
	case u.Samples > 0:
		return UsageLine(u)
	case t.State.Terminal():
		return "none: it ended before its first sample"
	default:
		return "no sample yet"
	}
}

// TaskCPU is an agent task's CPU seconds and peak RSS for a table, "-"
// when it has no sample.
func TaskCPU(t api.TaskRecord) (cpu, rss string) {
	if u := t.Usage; u != nil && u.Samples > 0 {
		return fmt.Sprintf("%.2fs", u.UserSeconds+u.SystemSeconds), Bytes(u.PeakRSSBytes)
	}
	return "-", "-"
}

// Bytes is n in binary units: "0 B", "512 B", "12.0 KiB", "41.0 MiB".
func Bytes(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	f, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if f < 1024 {
			break
		}
		f, unit = f/1024, u
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + unit
}
