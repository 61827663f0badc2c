package executors_test

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/executors"
	"github.com/orchestrd/orchestrd/internal/daemontest"
)

// A task that ends before its first periodic sample is measured by its
// last, taken at its end, and its record (and task.finished) says so: one
// sample, of the executor's tree (cmd/orchestrd's TestTaskUsage has one
// sampled while it runs). Not parallel: it sets when the first sample is
// taken, an hour on, and the interval is an hour too (the first sample
// comes at the shorter of the two: with 50 ms a task slower than that on
// a loaded machine had a periodic sample too).
func TestTaskEndedBeforeFirstSample(t *testing.T) {
	t.Cleanup(executors.SetFirstUsageSample(time.Hour))
	d := daemontest.Start(t, "[daemon]\nusage_sample_interval = \"1h\"\n"+execConfig(t, "instances = 1\n"))
	id, _ := daemontest.Execute(t, d, d.Home, api.TaskSpec{Prompt: daemontest.Script(`{"op":"message","n":1,"text":"quick"}`)})
	rec := daemontest.WaitTask(t, d, id)
	if u := rec.Usage; rec.State != api.TaskCompleted || u == nil || u.Samples != 1 || u.Scope != api.UsageScopeExecutor ||
		u.Source != api.UsageSourceProcfs {
		t.Fatalf("a task ended before its first sample: %+v, usage %+v", rec, u)
	}
	if got := render.TaskUsage(rec); got == "none: it ended before its first sample" {
		t.Fatalf("its usage reads %q", got)
	}
	ev := d.WaitEvent("task.finished", func(e map[string]any) bool { return e["task_id"] == id })
	if u, ok := ev["usage"].(map[string]any); !ok || u["samples"] != float64(1) || u["scope"] != "executor" {
		t.Fatalf("task.finished: %v", ev)
	}
}

// An agent the executor starts and reaps before the task's first sample
// counts whole (its CPU in the executor's reaped children's): the
// executor's baseline is what it had used as the task was handed to it,
// not what it had at the first sample, after the agent ended (0 s counted
// before). The executor here is orchestrd's own (`orchestrd executor`),
// whose agent is a child: sh, then perl burning 0.2 s of CPU. Not
// parallel: it sets when the first sample is taken.
func TestTaskAgentEndedBeforeFirstSample(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl to burn CPU with")
	}
	t.Cleanup(executors.SetFirstUsageSample(time.Hour))
	agent := "read prompt\nperl -e '1 while do { my @t = times; $t[0]+$t[1] < 0.2 }'\necho burnt"
	d := daemontest.Start(t, fmt.Sprintf("[daemon]\nusage_sample_interval = \"1h\"\n\n"+
		"[executors.cli]\ncommand = [%q, \"executor\", \"--\", \"sh\", \"-c\", %q]\n", daemontest.Binary(t), agent))
	id, _ := daemontest.Execute(t, d, d.Home, api.TaskSpec{Executor: "cli", Prompt: "burn"})
	rec := daemontest.WaitTask(t, d, id)
	if u := rec.Usage; rec.State != api.TaskCompleted || u == nil || u.Samples != 1 || u.UserSeconds+u.SystemSeconds < 0.18 {
		t.Fatalf("a task whose agent burned 0.2 s of CPU and ended before the first sample: %s, usage %s",
			rec.State, render.TaskUsage(rec))
	}
}
