package wire

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// JobStarted (CapJobUsage) names a job's root process, as the runner that
// started it sees it: Pid in the runner's pid namespace and StartTicks,
// its start time in clock ticks since boot (field 22 of /proc/PID/stat),
// which tells it from a later process given the same pid. The daemon
// finds it among the runner's children by both; what descends from it is
// the job's, whatever the processes' environments say.
//
// Cgroup, when the job runs in a cgroup of its own, is that cgroup's path
// (below the one the runner was started in): every process in it is the
// job's, however it left the root's tree.
type JobStarted struct {
	JobID      string `json:"job_id"`
	Pid        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
	Cgroup     string `json:"cgroup,omitempty"`
}

// Validate refuses a JobStarted that cannot name a process.
func (s *JobStarted) Validate() error {
	switch {
	case s.JobID == "":
		return errors.New("JobStarted has no job_id")
	case s.Pid <= 0 || s.Pid > maxPid:
		return fmt.Errorf("JobStarted for a pid out of range (%d)", s.Pid)
	case s.StartTicks == 0:
		return errors.New("JobStarted has no start_ticks")
	case s.Cgroup != "" && (!strings.HasPrefix(s.Cgroup, "/") || path.Clean(s.Cgroup) != s.Cgroup):
		return errors.New("JobStarted's cgroup is not a clean absolute path")
	}
	return nil
}

// maxPid is the kernel's largest pid_max (PID_MAX_LIMIT, 2^22).
const maxPid = 1 << 22

// JobRusage is what a job's root process used, with the descendants it
// waited for (wait4's rusage): CPU in microseconds, the largest resident
// set of any one of those processes in KiB (ru_maxrss). With CgroupCPU,
// the CPU time every process of the job's cgroup used (cpu.stat's
// user_usec and system_usec at its end less at its start: its orphans and
// the children nobody waited for included).
type JobRusage struct {
	UserMicros         uint64 `json:"user_us"`
	SystemMicros       uint64 `json:"system_us"`
	MaxRSSKiB          uint64 `json:"max_rss_kib"`
	CgroupCPU          bool   `json:"cgroup_cpu,omitempty"`
	CgroupUserMicros   uint64 `json:"cgroup_user_us,omitempty"`
	CgroupSystemMicros uint64 `json:"cgroup_system_us,omitempty"`
}
