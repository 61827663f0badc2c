package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// A job whose process tree grows past its lane's max_memory_bytes is
// stopped by the daemon's measurement (the lane sets no cgroup limit):
// failed with memory_exceeded, an event saying what was measured, and
// run's exit says so. The lane is sandboxed (network none), as the
// default one is.
func TestJobOverMaxMemoryIsStopped(t *testing.T) {
	t.Parallel()
	needPython3(t)
	d := startDaemon(t, `
[lanes.mem]
runners = 1
slots = 2
network = "none"
max_memory_bytes = 67108864
`)
	// 256 MiB written (resident), then it waits to be stopped.
	_, errOut, code := runCLI(t, "run", "--home", d.home, "--lane", "mem", "--",
		"python3", "-c", "import time\nb = b'x' * (256 << 20)\ntime.sleep(300)")
	if code != exitFailure || !strings.Contains(errOut, "memory_exceeded") || !strings.Contains(errOut, "max_memory_bytes") {
		t.Fatalf("run: exit %d\n%s", code, errOut)
	}
	e := d.waitEvent("job.limit_exceeded", func(e map[string]any) bool { return e["lane"] == "mem" })
	if e["limit"] != "memory" || e["max"].(float64) != 64<<20 || e["measured"].(float64) <= 64<<20 {
		t.Fatalf("job.limit_exceeded = %v", e)
	}
	rec := d.wait(e["job_id"].(string))
	if rec.State != api.StateFailed || rec.Error != api.ErrMemoryExceeded || rec.StoppedBy != "sigterm" || rec.WasCancelled {
		t.Fatalf("record = %+v", rec)
	}
	// A job within the limit is not disturbed.
	id := d.submit(api.JobSpec{Lane: "mem", Argv: []string{"python3", "-c", "b = b'x' * (8 << 20)"}})
	if rec := d.wait(id); rec.State != api.StateSucceeded {
		t.Fatalf("a job within the limit: %+v", rec)
	}
}

// A CPU burner past max_cpu_seconds that ignores SIGTERM is stopped with
// cpu_exceeded: SIGTERM, the lane's kill grace, then SIGKILL.
func TestJobOverMaxCPUIsStopped(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, `
[lanes.cpu]
runners = 1
slots = 1
network = "host"
max_cpu_seconds = 0.5
kill_grace = "200ms"
`)
	id := d.submit(api.JobSpec{Lane: "cpu", Argv: []string{"sh", "-c", `trap "" TERM; while :; do :; done`}})
	rec := d.wait(id)
	if rec.State != api.StateFailed || rec.Error != api.ErrCPUExceeded || rec.StoppedBy != "sigkill" {
		t.Fatalf("record = %+v", rec)
	}
	e := d.waitEvent("job.limit_exceeded", func(e map[string]any) bool { return e["job_id"] == id })
	if e["limit"] != "cpu" || e["max"].(float64) != 0.5 || e["measured"].(float64) <= 0.5 {
		t.Fatalf("job.limit_exceeded = %v", e)
	}
	_, errOut, code := runCLI(t, "wait", "--home", d.home, id)
	if code != exitFailure || !strings.Contains(errOut, "cpu_exceeded") || !strings.Contains(errOut, "SIGKILL") {
		t.Fatalf("wait: exit %d\n%s", code, errOut)
	}
}

// A hostile job cannot get a neighbour on its runner stopped, nor make it
// look costly: it leaves behind a process (double fork, a session of its
// own: the runner adopts it) that names the neighbour's id in its
// environment and holds 128 MiB, past the lane's 64 MiB (the hostile job
// itself is stopped for it where it has a cgroup of its own). The neighbour's
// tree is its root's descendants, as its runner named the root; the
// orphan's environment counts for nothing. (On the old code, which found a
// job's processes by ORCHESTRD_JOB_ID among the runner's children, the
// neighbour was stopped with memory_exceeded.)
func TestHostileOrphanCannotClaimNeighbour(t *testing.T) {
	t.Parallel()
	needPython3(t)
	marks := shortTemp(t)
	d := startDaemon(t, `
[daemon]
usage_sample_interval = "200ms"
[lanes.mem]
runners = 1
slots = 2
spares = 0
network = "none"
max_memory_bytes = 67108864
`)
	wait := `while [ ! -e ` + marks + `/go ]; do sleep 0.05; done`
	victim := d.submit(api.JobSpec{Lane: "mem", Command: wait})
	eventuallyOr(t, 60*time.Second, "the neighbour runs", func() bool { return d.job(victim).State == api.StateRunning },
		func() string { return string(d.job(victim).State) })
	eat := `import time; b = b'x' * (128 << 20); open('` + marks + `/ready', 'w').close(); time.sleep(300)`
	hostile := d.submit(api.JobSpec{Lane: "mem", Command: `(setsid env ORCHESTRD_JOB_ID=` + victim +
		` python3 -c "` + eat + `" &); ` + wait})
	// Where the job runs in a cgroup of its own, the orphan is still the
	// hostile job's (TestEscapedOrphanCountedByCgroup): that job is
	// stopped, and the orphan with it, maybe before it said it was ready.
	var h api.JobRecord
	eventuallyOr(t, 60*time.Second, "the orphan holds its memory, or its job was stopped for it", func() bool {
		_, err := os.Stat(filepath.Join(marks, "ready"))
		h = d.job(hostile)
		return err == nil || h.State.Terminal()
	}, func() string { return string(h.State) })
	if h.State.Terminal() && h.Error != api.ErrMemoryExceeded {
		t.Fatalf("the hostile job ended %+v", h)
	}

	// Fifteen samples of the neighbour (three seconds: its limit is
	// checked at each) while the orphan holds its 128 MiB.
	first := d.job(victim)
	if first.Usage == nil {
		first.Usage = &api.Usage{}
	}
	var rec api.JobRecord
	eventuallyOr(t, 120*time.Second, "fifteen more samples of the neighbour", func() bool {
		rec = d.job(victim)
		if rec.State != api.StateRunning {
			t.Fatalf("the neighbour ended %s (%s) while the hostile orphan named it: usage %s",
				rec.State, rec.Error, jobUsageText(rec.Usage))
		}
		return rec.Usage != nil && rec.Usage.Samples >= first.Usage.Samples+15
	}, func() string { return jobUsageText(rec.Usage) })
	if rec.Usage.PeakRSSBytes >= 64<<20 {
		t.Fatalf("the neighbour's usage counts the orphan: %s", jobUsageText(rec.Usage))
	}
	if err := os.WriteFile(filepath.Join(marks, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if end := d.wait(victim); end.State != api.StateSucceeded || end.Error != "" {
		t.Fatalf("the neighbour ended %+v", end)
	}
	if h := d.wait(hostile); h.State != api.StateSucceeded && h.Error != api.ErrMemoryExceeded {
		t.Fatalf("the hostile job ended %+v", h)
	}
}

// Where a job runs in a cgroup of its own, a process it leaves behind at
// once (double fork, a session of its own, its job id scrubbed from its
// environment, before any sample) is still the job's: the cgroup says so,
// and the job is stopped when that process holds more than the lane's
// max_memory_bytes. (On the old code, which went by ORCHESTRD_JOB_ID, and
// with the root's tree alone, it counted for no job.)
func TestEscapedOrphanCountedByCgroup(t *testing.T) {
	t.Parallel()
	needPython3(t)
	d := startDaemon(t, `
[lanes.mem]
runners = 1
slots = 1
spares = 0
network = "none"
max_memory_bytes = 67108864
`)
	d.skipWithoutJobCgroup("mem")
	id := d.submit(api.JobSpec{Lane: "mem", Command: `(setsid env -u ORCHESTRD_JOB_ID python3 -c ` +
		`"import time; b = b'x' * (128 << 20); time.sleep(300)" &); sleep 300`})
	rec := d.wait(id)
	if rec.State != api.StateFailed || rec.Error != api.ErrMemoryExceeded {
		t.Fatalf("record = %+v", rec)
	}
	e := d.waitEvent("job.limit_exceeded", func(e map[string]any) bool { return e["job_id"] == id })
	if e["limit"] != "memory" || e["measured"].(float64) <= 64<<20 {
		t.Fatalf("job.limit_exceeded = %v", e)
	}
}

// needPython3 skips t where there is no python3 to run a job's memory hog.
func needPython3(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
}
