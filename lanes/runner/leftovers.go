package runner

import (
	"os"
	"syscall"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/proc"
	"github.com/orchestrd/orchestrd/wire"
)

// How long the end of a job may wait for the kernel: to freeze what it
// left (so nothing forks while it is listed) and to see it gone.
const (
	freezeTimeout = time.Second
	emptyTimeout  = 2 * time.Second
)

// jobSysProcAttr starts a job as the leader of its own process group,
// killed if the runner's spawner thread dies, and, with a cgroup, inside
// that cgroup from its first instruction (clone3 CLONE_INTO_CGROUP).
func jobSysProcAttr(cg *proc.Cgroup) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cg != nil {
		a.UseCgroupFD, a.CgroupFD = true, cg.FD()
	}
	return a
}

// start forks a job from the spawner's thread (no privileges,
// no_new_privs), registered with the reaper when there is one.
func (r *runner) start(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	var p *os.Process
	fork := func() (int, error) {
		var err error
		r.spawner.Do(func() { p, err = os.StartProcess(path, argv, attr) })
		if err != nil {
			return 0, err
		}
		return p.Pid, nil
	}
	var err error
	if r.reaper != nil {
		_, err = r.reaper.Start(fork)
	} else {
		_, err = fork()
	}
	return p, err
}

// jobCgroup makes the job's cgroup, or returns nil when the runner has no
// cgroup (the job is then tracked by process group and the subreaper).
func (r *runner) jobCgroup(id string) *proc.Cgroup {
	if r.cg == nil {
		return nil
	}
	cg, err := r.cg.Mkdir("job-" + id)
	if err != nil {
		r.log.Warn().Err(err).Str("job_id", id).Msg("job runs without a cgroup; it is tracked by process group")
		return nil
	}
	return cg
}

func (r *runner) removeCgroup(cg *proc.Cgroup) {
	if cg == nil {
		return
	}
	if cg.Populated() && !cg.WaitEmpty(emptyTimeout) {
		r.log.Warn().Str("cgroup", cg.Path).Msg("a job's processes did not die; its cgroup is left")
	} else if err := cg.Remove(); err != nil {
		r.log.Warn().Err(err).Msg("removing a job's cgroup")
	}
	cg.Close()
}

// killLeftovers kills every process job id (main process pid, exited and
// not yet reaped) left running, and returns them. With a cgroup that is
// exactly the cgroup's processes, frozen first so none forks meanwhile.
// Without one: the job's process group, and each process re-parented to
// the runner (the subreaper) that belongs to the job by its process group
// or its ORCHESTRD_JOB_ID, or to no running job, with its descendants.
func (r *runner) killLeftovers(id string, pid int, cg *proc.Cgroup) []wire.KilledProcess {
	var killed []wire.KilledProcess
	note := func(p int) {
		st, ok := proc.ReadStat(p)
		if !ok || st.State == 'Z' {
			return
		}
		killed = append(killed, wire.KilledProcess{Pid: p, Comm: st.Comm})
	}
	if cg != nil {
		if pids, err := cg.Procs(); err == nil && len(pids) > 0 {
			if err := cg.Freeze(freezeTimeout); err != nil {
				r.log.Warn().Err(err).Str("job_id", id).Msg("listing what a job left without freezing it")
			}
			pids, _ = cg.Procs()
			for _, p := range pids {
				note(p)
			}
			if err := cg.Kill(); err != nil {
				r.log.Warn().Err(err).Str("job_id", id).Msg("killing what a job left")
			}
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return killed
	}
	if r.reaper == nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return nil
	}
	orphans := r.reaper.Orphans()
	if len(orphans) == 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return nil
	}
	var mine []int
	for _, o := range orphans {
		if o.Pgid == pid || r.ownerOf(o.Pid, id) {
			mine = append(mine, o.Pid)
		}
	}
	if len(mine) == 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return nil
	}
	for _, p := range descendants(mine) {
		note(p)
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return killed
}

// ownerOf reports whether orphan p is job id's to kill: its environment
// names id, or names no job running on this runner (a process that
// scrubbed its environment is owned by the first job to end).
func (r *runner) ownerOf(p int, id string) bool {
	owner := proc.EnvValue(p, EnvJobID)
	if owner == id {
		return true
	}
	r.mu.Lock()
	_, running := r.jobs[owner]
	r.mu.Unlock()
	return owner == "" || !running
}

// descendants returns roots and every process below them.
func descendants(roots []int) []int {
	kids := map[int][]int{}
	for _, p := range proc.AllPids() {
		if st, ok := proc.ReadStat(p); ok {
			kids[st.PPid] = append(kids[st.PPid], p)
		}
	}
	seen := map[int]bool{}
	var out []int
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
		queue = append(queue, kids[p]...)
	}
	return out
}
