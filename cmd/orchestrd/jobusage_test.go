package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// usageLanes samples running jobs often, so that a test waits less for a
// sample; nothing depends on when one is taken.
const usageLanes = `
[daemon]
usage_sample_interval = "50ms"
[lanes.work]
runners = 1
slots = 2
spares = 0
network = "host"
`

// A job that burns CPU and holds memory shows both in its record while it
// runs and at its end (what job ID prints, and --json); a job of several
// processes counts its children's memory and threads; the record survives
// a restart of the daemon.
func TestJobUsageSampled(t *testing.T) {
	t.Parallel()
	home, marks := shortTemp(t), shortTemp(t)
	d := startDaemonAt(t, home, usageLanes)

	// 40 MB held in a shell variable, then a busy loop until told to end.
	const held = 40_000_000
	burn := d.submit(api.JobSpec{Lane: "work", Command: `x=$(head -c 40000000 /dev/zero | tr '\0' a); ` +
		`while [ ! -e ` + marks + `/go ]; do :; done; echo ${#x}`})
	// Three children holding 20 MB each; their parent holds next to nothing.
	const each = 20_000_000
	tree := d.submit(api.JobSpec{Lane: "work", Command: `for i in 1 2 3; do ` +
		`(x=$(head -c 20000000 /dev/zero | tr '\0' a); while [ ! -e ` + marks + `/go ]; do sleep 0.05; done; echo ${#x}) & ` +
		`done; wait`})

	// Margins: RSS is counted in pages and a shell may hold a little less
	// than the bytes it read at the moment of a sample; 90 % of it is
	// certainly there once the variable is set.
	var live api.JobRecord
	eventuallyOr(t, 60*time.Second, "the burning job's usage shows its CPU and memory", func() bool {
		live = d.job(burn)
		u := live.Usage
		return u != nil && u.UserSeconds+u.SystemSeconds > 0 && u.PeakRSSBytes >= held*9/10
	}, func() string { return jobUsageText(live.Usage) })
	eventuallyOr(t, 60*time.Second, "the tree job's usage counts its three children", func() bool {
		live = d.job(tree)
		u := live.Usage
		return u != nil && u.PeakRSSBytes >= 3*each*9/10 && u.PeakThreads >= 4
	}, func() string { return jobUsageText(live.Usage) })
	if live.Usage.Source != api.UsageSourceProcfs {
		t.Fatalf("usage source %q while it runs, want procfs", live.Usage.Source)
	}

	if err := os.WriteFile(filepath.Join(marks, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	end := d.wait(burn)
	if end.State != api.StateSucceeded || end.Usage == nil {
		t.Fatalf("the burning job ended %s with usage %v", end.State, end.Usage)
	}
	if u := end.Usage; u.UserSeconds+u.SystemSeconds <= 0 || u.PeakRSSBytes < held*9/10 || u.Samples < 1 || u.PeakThreads < 1 {
		t.Fatalf("the burning job's final usage %+v", *u)
	}
	if endTree := d.wait(tree); endTree.Usage == nil || endTree.Usage.PeakRSSBytes < 3*each*9/10 {
		t.Fatalf("the tree job's final usage %v", endTree.Usage)
	}

	out, _, code := runCLI(t, "--home", home, "job", burn)
	// Its CPU is its cgroup's where the runner gave it one (TestJobCPUFromCgroup).
	if code != 0 || !strings.Contains(out, "usage ") ||
		!strings.Contains(out, "(procfs, ") && !strings.Contains(out, "(cpu from its cgroup, the rest procfs, ") {
		t.Fatalf("job %s printed (exit %d):\n%s", burn, code, out)
	}
	js, _, code := runCLI(t, "--home", home, "job", "--json", burn)
	var fromJSON api.JobRecord
	if code != 0 || json.Unmarshal([]byte(js), &fromJSON) != nil || fromJSON.Usage == nil || *fromJSON.Usage != *end.Usage {
		t.Fatalf("job --json %s printed (exit %d):\n%s", burn, code, js)
	}

	// The record is in the state store: the next daemon has it as it was.
	d.stop()
	d2 := startDaemonAt(t, home, usageLanes)
	again := d2.job(burn)
	if again.Usage == nil || *again.Usage != *end.Usage {
		t.Fatalf("after a restart the usage is %v, want %+v", again.Usage, *end.Usage)
	}
}

// jobUsageText is u for a failure message.
func jobUsageText(u *api.Usage) string {
	if u == nil {
		return "no usage"
	}
	return fmt.Sprintf("%+v", *u)
}

// unsampledLanes samples so seldom that a job of a few seconds ends before
// its first sample: its record's usage is what the job's end gives.
const unsampledLanes = `
[daemon]
usage_sample_interval = "5s"
[lanes.work]
runners = 1
slots = 1
spares = 0
network = "host"
`

// A job shorter than the sample interval is recorded whole: its runner's
// wait4 figures of the root (its reaped children included) are taken
// where they exceed the samples' (or its cgroup's CPU, where it has one). The job prints its own CPU ticks (its
// shell's, with the head it waited for) from /proc; the record has at
// least as much. (Before, it had what the first sample, 100 ms in, saw.)
func TestShortJobTrueTotals(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, unsampledLanes)
	id := d.submit(api.JobSpec{Lane: "work", Command: `head -c 100000000 /dev/urandom > /dev/null; cat /proc/$$/stat`})
	rec := d.wait(id)
	out := rec.Output
	if rec.State != api.StateSucceeded || rec.Usage == nil {
		t.Fatalf("the job ended %s with usage %s:\n%s", rec.State, jobUsageText(rec.Usage), out)
	}
	truth := urandomCPU(t, out, "the job printed")
	u := rec.Usage
	if got := u.UserSeconds + u.SystemSeconds; got < truth-0.02 || u.PeakRSSBytes == 0 ||
		u.Source != api.UsageSourceProcfs && u.Source != api.UsageSourceCgroup {
		t.Fatalf("the record has %.3f s of CPU (%s), the job used %.2f s", got, jobUsageText(u), truth)
	}
}

// urandomCPU is the CPU seconds in stat, a /proc/PID/stat line written by
// what read 100 MB of /dev/urandom: utime, stime, cutime and cstime, the
// 12th to 15th fields after the command. t fails saying "what stat" when
// stat is no such line, or when the seconds are too few to tell.
func urandomCPU(t *testing.T, stat, what string) float64 {
	t.Helper()
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 15 {
		t.Fatalf("%s %q", what, stat)
	}
	var ticks int
	for _, s := range f[11:15] {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s %q", what, stat)
		}
		ticks += n
	}
	truth := float64(ticks) / 100
	if truth < 0.05 {
		t.Fatalf("reading 100 MB of /dev/urandom took %.2f s of CPU: too little to tell", truth)
	}
	return truth
}

// skipWithoutJobCgroup skips the test where a job of lane runs in no
// cgroup of its own (what /proc/self/cgroup says in a job).
func (d *testDaemon) skipWithoutJobCgroup(lane string) {
	d.t.Helper()
	probe := d.submit(api.JobSpec{Lane: lane, Command: `cat /proc/self/cgroup`})
	if rec := d.wait(probe); !strings.Contains(rec.Output, "/job-") {
		d.t.Skipf("the runner puts no job in a cgroup of its own here (%q)", rec.Output)
	}
}

// Where the job runs in a cgroup of its own (its runner was given one),
// its record's CPU is the cgroup's: what a process it left behind used is
// counted, though no sample saw it (it left the tree at once) and the root
// never waited for it. The orphan writes its own CPU ticks, with the head
// it waited for, before the job ends.
func TestJobCPUFromCgroup(t *testing.T) {
	t.Parallel()
	marks := shortTemp(t)
	d := startDaemon(t, unsampledLanes)
	d.skipWithoutJobCgroup("work")
	id := d.submit(api.JobSpec{Lane: "work", Command: `(setsid sh -c 'head -c 100000000 /dev/urandom > /dev/null; ` +
		`cat /proc/$$/stat > ` + marks + `/stat.tmp; mv ` + marks + `/stat.tmp ` + marks + `/stat' &); ` +
		`while [ ! -e ` + marks + `/stat ]; do sleep 0.05; done`})
	rec := d.wait(id)
	if rec.State != api.StateSucceeded || rec.Usage == nil {
		t.Fatalf("the job ended %s with usage %s", rec.State, jobUsageText(rec.Usage))
	}
	b, err := os.ReadFile(filepath.Join(marks, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	truth := urandomCPU(t, out, "the orphan wrote")
	u := rec.Usage
	if got := u.UserSeconds + u.SystemSeconds; got < truth-0.02 || u.Source != api.UsageSourceCgroup || u.CgroupFigures != api.UsageCgroupCPU {
		t.Fatalf("the record has %.3f s of CPU (%s), the job's orphan used %.2f s", got, jobUsageText(u), truth)
	}
	out, _, code := runCLI(t, "--home", d.home, "job", id)
	if code != 0 || !strings.Contains(out, "(cpu from its cgroup, the rest procfs, ") {
		t.Fatalf("job %s printed (exit %d):\n%s", id, code, out)
	}
}
