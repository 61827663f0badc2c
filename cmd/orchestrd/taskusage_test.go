package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// An agent task (orchestrd executor running a command-line agent) whose
// agent holds memory and burns CPU shows both in its record while it runs
// and at its end (task.get, tasks and tasks --json), as the executor's
// tree while the task ran; the record survives a restart of the daemon;
// the pool's histograms count the task.
func TestTaskUsage(t *testing.T) {
	t.Parallel()
	home, marks, work := shortTemp(t), shortTemp(t), shortTemp(t)
	// 40 MB held in a shell variable, then a busy loop until told to end.
	const held = 40_000_000
	agent := `read prompt
x=$(head -c 40000000 /dev/zero | tr '\0' a)
while [ ! -e ` + marks + `/go ]; do :; done
echo "held ${#x}"`
	cfg := fmt.Sprintf("[daemon]\nusage_sample_interval = \"50ms\"\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n\n"+
		"[lanes.net]\nrunners = 1\nslots = 1\nspares = 0\n\n[executors.cli]\ncommand = [%q, \"executor\", \"--\", \"sh\", \"-c\", %q]\n",
		binary, agent)
	d := startDaemonAt(t, home, cfg)
	id, _ := d.execute(api.TaskSpec{Executor: "cli", Prompt: "burn", Cwd: work})

	task := func() api.TaskRecord {
		var r struct {
			Task api.TaskRecord `json:"task"`
		}
		d.mustCall("task.get", map[string]any{"id": id}, &r)
		return r.Task
	}
	// Margins: RSS is counted in pages and a shell may hold a little less
	// than the bytes it read at the moment of a sample.
	var live api.TaskRecord
	eventuallyOr(t, 60*time.Second, "the running task's usage shows its agent's CPU and memory", func() bool {
		live = task()
		u := live.Usage
		return u != nil && u.UserSeconds+u.SystemSeconds > 0 && u.PeakRSSBytes >= held*9/10
	}, func() string { return jobUsageText(live.Usage) })
	if u := live.Usage; u.Source != api.UsageSourceProcfs || u.Scope != api.UsageScopeExecutor || u.PeakThreads < 2 {
		t.Fatalf("the running task's usage %+v: want procfs, the executor's tree (the executor and its agent)", *u)
	}

	if err := os.WriteFile(filepath.Join(marks, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	end := d.waitTask(id)
	u := end.Usage
	if end.State != api.TaskCompleted || u == nil || u.Samples < 1 || u.UserSeconds+u.SystemSeconds <= 0 ||
		u.PeakRSSBytes < held*9/10 || u.Scope != api.UsageScopeExecutor {
		t.Fatalf("the task ended %s with usage %s", end.State, jobUsageText(u))
	}

	out, _, code := runCLI(t, "--home", home, "tasks")
	cpu := fmt.Sprintf("%.2fs", u.UserSeconds+u.SystemSeconds)
	if code != 0 || !strings.Contains(out, "PEAK RSS") || !strings.Contains(out, cpu) {
		t.Fatalf("tasks printed (exit %d), want CPU %s:\n%s", code, cpu, out)
	}
	js, _, code := runCLI(t, "--home", home, "tasks", "--json")
	var listed struct {
		Tasks []api.TaskRecord `json:"tasks"`
	}
	if code != 0 || json.Unmarshal([]byte(js), &listed) != nil || len(listed.Tasks) != 1 || listed.Tasks[0].Usage == nil ||
		*listed.Tasks[0].Usage != *u {
		t.Fatalf("tasks --json printed (exit %d):\n%s", code, js)
	}

	// The pool's histograms count it.
	series := d.metricSeries()
	if series[`orchestrd_task_cpu_seconds_count{pool="cli"}`] != 1 || series[`orchestrd_task_cpu_seconds_sum{pool="cli"}`] <= 0 ||
		series[`orchestrd_task_peak_rss_bytes_count{pool="cli"}`] != 1 ||
		series[`orchestrd_task_peak_rss_bytes_sum{pool="cli"}`] != float64(u.PeakRSSBytes) {
		t.Fatalf("the pool's histograms: cpu %v/%v, rss %v/%v; want the task's usage %+v",
			series[`orchestrd_task_cpu_seconds_count{pool="cli"}`], series[`orchestrd_task_cpu_seconds_sum{pool="cli"}`],
			series[`orchestrd_task_peak_rss_bytes_count{pool="cli"}`], series[`orchestrd_task_peak_rss_bytes_sum{pool="cli"}`], *u)
	}

	// The record is in the state store: the next daemon has it as it was.
	d.stop()
	d = startDaemonAt(t, home, cfg)
	if again := task(); again.Usage == nil || *again.Usage != *u {
		t.Fatalf("after a restart the usage is %s, want %+v", jobUsageText(again.Usage), *u)
	}
}

// An agent task's record holds its agent's CPU up to the task's end: the
// agent burns 0.3 s of CPU and ends long before the second sample (10 s
// after the first), and the record counts what it burned after the first
// (the task's last sample, taken at its end, with the executor's reaped
// children's CPU).
func TestTaskUsageToItsEnd(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl to burn CPU with")
	}
	home, work := shortTemp(t), shortTemp(t)
	agent := `read prompt
perl -e '1 while do { my @t = times; $t[0]+$t[1] < 0.3 }'
echo burnt`
	cfg := fmt.Sprintf("[daemon]\nusage_sample_interval = \"10s\"\n\n"+
		"[executors.cli]\ncommand = [%q, \"executor\", \"--\", \"sh\", \"-c\", %q]\n", binary, agent)
	d := startDaemonAt(t, home, cfg)
	id, _ := d.execute(api.TaskSpec{Executor: "cli", Prompt: "burn", Cwd: work})
	end := d.waitTask(id)
	u := end.Usage
	if end.State != api.TaskCompleted || u == nil || u.Samples < 1 || u.UserSeconds+u.SystemSeconds < 0.25 ||
		u.Scope != api.UsageScopeExecutor {
		t.Fatalf("the task that burned 0.3 s of CPU ended %s with usage %s", end.State, jobUsageText(u))
	}
}
