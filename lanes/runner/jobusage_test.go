package runner

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/wire"
)

// A daemon that sets RunnerConfig.job_usage gets a JobStarted naming the
// job's root (its pid as the job sees itself, a start time) before the
// job's Result, and the root's wait4 figures in the Result; one that does
// not (a Loopr daemon) gets neither, and the runner announces the
// capability either way.
func TestJobUsageFrames(t *testing.T) {
	job := func(id string) wire.Job {
		return wire.Job{JobID: id, Argv: []string{"sh", "-c", "echo $$; head -c 5000000 /dev/urandom > /dev/null"}}
	}
	for _, on := range []bool{false, true} {
		ack := okAck(1)
		ack.Config.JobUsage = on
		d := startRunner(t, ack)
		if !slices.Contains(d.hs.Capabilities, wire.CapJobUsage) {
			t.Fatalf("capabilities %v lack %s", d.hs.Capabilities, wire.CapJobUsage)
		}
		id := "j-usage-" + strconv.FormatBool(on)
		o := d.run(job(id))
		if o.res.Status != wire.StatusSuccess {
			t.Fatalf("job ended %+v", o.res)
		}
		pid := atoiLine(t, strings.TrimSpace(o.stdout))
		var started []wire.JobStarted
		for _, f := range d.backlog {
			if f.t == wire.TypeJobStarted {
				started = append(started, decode[wire.JobStarted](t, f))
			}
		}
		if !on {
			if len(started) != 0 || o.res.Rusage != nil {
				t.Fatalf("without job_usage: JobStarted %v, rusage %+v", started, o.res.Rusage)
			}
			continue
		}
		if len(started) != 1 || started[0].JobID != id || started[0].Pid != pid || started[0].StartTicks == 0 ||
			started[0].Validate() != nil {
			t.Fatalf("JobStarted %+v, the job's pid %d", started, pid)
		}
		if ru := o.res.Rusage; ru == nil || ru.UserMicros+ru.SystemMicros == 0 || ru.MaxRSSKiB == 0 {
			t.Fatalf("rusage %+v", o.res.Rusage)
		}
	}
}
