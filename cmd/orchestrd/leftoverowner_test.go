package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Without cgroups (the daemon runs as nobody) a job's leftover that left
// its process group but not its session, and claims a running neighbour
// job's ORCHESTRD_JOB_ID, is still its own job's: it dies at that job's
// end (its session names the job; the environment names a job only where
// no group or session does), not at the neighbour's, and the neighbour's
// killed list does not name it.
func TestLeftoverClaimingNeighbourDiesWithItsJob(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the daemon runs as nobody)")
	}
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl to leave the process group with")
	}
	d := startSandboxDaemonWith(t, credFor(t, "non-root"), "", nil)
	dir, tag := d.scratch(t), newTag()
	d.startJob(t, "no-net", dir+"/a", "touch "+dir+"/a; while [ ! -e "+dir+"/end ]; do sleep 0.05; done")
	neighbour := d.jobWith(t, dir+"/a")
	d.runJob(t, "no-net", fmt.Sprintf(`cd %s
env ORCHESTRD_JOB_ID=%s perl -e 'setpgrp(0, 0); open(F, ">", "p"); close F; exec "sleep", $ARGV[0]' %s </dev/null >/dev/null 2>&1 &
while [ ! -e p ]; do sleep 0.01; done`, dir, neighbour, tag))
	hostile := d.jobWith(t, "setpgrp")
	eventually(t, 10*time.Second, "the leftover to die with its own job (its neighbour still runs)",
		func() bool { return len(tagged(tag)) == 0 })
	if err := os.WriteFile(filepath.Join(dir, "end"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the neighbour to end", func() bool {
		return countEvents(d.events(), "job.finished", func(e map[string]any) bool { return e["job_id"] == neighbour }) > 0
	})
	if n := countEvents(d.events(), "process.orphan_killed", func(e map[string]any) bool {
		return e["job_id"] == neighbour
	}); n != 0 {
		t.Fatalf("the neighbour %s's end killed %d processes: the leftover of %s claimed it", neighbour, n, hostile)
	}
	if n := countEvents(d.events(), "process.orphan_killed", func(e map[string]any) bool {
		// It says it is there before it execs sleep: the job may end, and
		// its leftover be killed, while it is still perl.
		return e["job_id"] == hostile && (e["command"] == "sleep" || e["command"] == "perl")
	}); n != 1 {
		t.Fatalf("job %s's end killed %d of its leftover (perl, then sleep), want 1", hostile, n)
	}
}
