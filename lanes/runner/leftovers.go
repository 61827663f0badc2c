package runner

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/wire"
)

// How long the end of a job may wait for the kernel: to freeze what it
// left (so nothing forks while it is listed) and to see it gone.
const (
	freezeTimeout = time.Second
	emptyTimeout  = 2 * time.Second
)

// jobSysProcAttr starts a job as the leader of its own session and
// process group (so it has no controlling terminal to type into, and its
// group can be killed whole), killed if the runner's spawner thread dies,
// and, with a cgroup, inside that cgroup from its first instruction (clone3
// CLONE_INTO_CGROUP).
func jobSysProcAttr(cg *proc.Cgroup) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if cg != nil {
		a.UseCgroupFD, a.CgroupFD = true, cg.FD()
	}
	return a
}

// start forks a job. It runs on a thread of the spawner (no privileges,
// no_new_privs: see handleJob), which the job inherits; the pid is
// registered with the reaper when there is one.
func (r *runner) start(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	var p *os.Process
	fork := func() (int, error) {
		var err error
		if p, err = os.StartProcess(path, argv, attr); err != nil {
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

// jobCgroup gives the job an empty cgroup of its own, or nil when the
// runner has none (the job is then tracked by process group and the
// runner's reaping). Cgroups are reused: one a job left empty goes back to
// a pool (as many as the runner has slots), since making and removing one
// per job costs more than the rest of a trivial job's bookkeeping.
func (r *runner) jobCgroup(id string) *proc.Cgroup {
	if r.cg == nil {
		return nil
	}
	r.mu.Lock()
	if n := len(r.cgPool); n > 0 {
		cg := r.cgPool[n-1]
		r.cgPool = r.cgPool[:n-1]
		r.mu.Unlock()
		return cg
	}
	r.cgSeq++
	name := "job-" + strconv.Itoa(r.cgSeq)
	r.mu.Unlock()
	cg, err := r.cg.Mkdir(name)
	if err != nil {
		r.log.Warn().Err(err).Str("job_id", id).Msg("job runs without a cgroup; it is tracked by process group")
		return nil
	}
	return cg
}

// releaseCgroup takes back a job's cgroup once the job is over: into the
// pool if the job left nothing in it (killLeftovers found it empty after
// the job's main process exited, and nothing else can enter it), else
// removed once it is empty. A
// cgroup whose leftovers were killed through cgroup.kill is never reused:
// on some kernels every process later cloned into it is killed too.
func (r *runner) releaseCgroup(cg *proc.Cgroup, killed bool) {
	if cg == nil {
		return
	}
	r.mu.Lock()
	if !killed && len(r.cgPool) < r.slots && !r.closing {
		r.cgPool = append(r.cgPool, cg)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.removeCgroup(cg)
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
// the runner (the subreaper) that is the job's (ownerOf), with its
// descendants.
func (r *runner) killLeftovers(id string, pid int, cg *proc.Cgroup) (killed []wire.KilledProcess, cgKilled bool) {
	note := func(p int) {
		st, ok := proc.ReadStat(p)
		if !ok || st.State == 'Z' {
			return
		}
		killed = append(killed, wire.KilledProcess{Pid: p, Comm: st.Comm})
	}
	if cg != nil {
		if pids, err := cg.Procs(); err == nil && len(pids) > 0 {
			cgKilled = true
			if err := cg.Freeze(freezeTimeout); err != nil {
				r.log.Warn().Err(err).Str("job_id", id).Msg("listing what a job left without freezing it")
			}
			pids, _ = cg.Procs()
			for _, p := range pids {
				note(p)
			}
			r.hostPids(killed) // while they are there to be found
			if err := cg.Kill(); err != nil {
				r.log.Warn().Err(err).Str("job_id", id).Msg("killing what a job left")
			}
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return killed, cgKilled
	}
	if r.reaper == nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return nil, false
	}
	// Without a cgroup there is no freezing the job: stop what is found,
	// list what it started meanwhile, kill all of it, and look again (a
	// process that keeps forking and leaving is caught as its children are
	// re-parented to us) until nothing of the job is left.
	seen := map[int]bool{}
	for round := 0; round < 100; round++ {
		var mine []int
		for _, o := range r.reaper.Orphans() {
			if r.ownerOf(o, id, pid, true) {
				mine = append(mine, o.Pid)
			}
		}
		if len(mine) == 0 {
			break
		}
		for _, p := range mine {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		all, before := descendants(mine), len(killed)
		for _, p := range all {
			if !seen[p] {
				seen[p] = true
				note(p)
			}
		}
		r.hostPids(killed[before:]) // while they are there to be found
		for _, p := range all {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return killed, false
}

// strays lists the processes of job id (main process pid, running) that
// are outside its process group, for them to get SIGTERM with the group:
// with a cgroup, the rest of the cgroup; without one, what is below its
// main process and what was re-parented to the runner that belongs to the
// job (ownerOf, strictly), with what is below that.
func (r *runner) strays(id string, pid int, cg *proc.Cgroup) []int {
	var pids []int
	if cg != nil {
		pids, _ = cg.Procs()
	} else {
		roots := []int{pid}
		if r.reaper != nil {
			for _, o := range r.reaper.Orphans() {
				if r.ownerOf(o, id, pid, false) {
					roots = append(roots, o.Pid)
				}
			}
		}
		pids = descendants(roots)
	}
	out := pids[:0]
	for _, p := range pids {
		if st, ok := proc.ReadStat(p); ok && st.Pgid != pid && st.State != 'Z' {
			out = append(out, p)
		}
	}
	return out
}

// ownerOf reports whether orphan o is job id's (its main process pid:
// the job's process group and session are that pid, the runner made it
// their leader). The strongest name wins: a process still in the job's
// group or session is the job's, whatever its environment says; one in
// another running job's group or session is that job's. Only a process
// in neither (it called setsid) is named by its ORCHESTRD_JOB_ID: the
// job's if it names id, or (with unclaimed) names no job running on this
// runner (a process that scrubbed its environment is owned by the first
// job to end). A job's group and session ids cannot be taken by a new
// process while anything is in them, so they name no other job.
func (r *runner) ownerOf(o proc.Orphan, id string, pid int, unclaimed bool) bool {
	if o.Pgid == pid || o.Sid == pid {
		return true
	}
	owner := proc.EnvValue(o.Pid, EnvJobID)
	// owners, not jobs: this may run with a job's mu held (see owners).
	r.ownersMu.Lock()
	defer r.ownersMu.Unlock()
	for jid, j := range r.owners {
		if jid == id {
			continue
		}
		if other := int(j.pidSeen.Load()); other > 0 && (o.Pgid == other || o.Sid == other) {
			return false
		}
	}
	if owner == id {
		return true
	}
	_, running := r.owners[owner]
	return unclaimed && (owner == "" || !running)
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

// hostPids rewrites the pids of killed, which are this runner's pid
// namespace's when it is that namespace's init, to the pids the daemon and
// the host know them by (found through the /proc the runner was started
// with: NSpid ends with our pid, and the process is in our namespace).
// Pids it cannot find are left as they are.
func (r *runner) hostPids(killed []wire.KilledProcess) {
	if !r.init || r.hostProc <= 0 || len(killed) == 0 {
		return
	}
	want := map[string]int{}
	for i, k := range killed {
		want[strconv.Itoa(k.Pid)] = i
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return
	}
	dfd, err := unix.Openat(r.hostProc, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(dfd), "/proc")
	names, _ := d.Readdirnames(-1)
	d.Close()
	buf := make([]byte, 4096)
	for _, n := range names {
		if len(want) == 0 {
			return
		}
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		fd, err := unix.Openat(r.hostProc, n+"/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		m, _ := unix.Read(fd, buf)
		unix.Close(fd)
		line, ok := fieldLine(buf[:max(m, 0)], "NSpid:")
		if !ok {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		i, ok := want[f[len(f)-1]]
		if !ok {
			continue
		}
		lbuf := make([]byte, 64)
		if ln, err := unix.Readlinkat(r.hostProc, n+"/ns/pid", lbuf); err != nil || string(lbuf[:ln]) != ns {
			continue
		}
		if hp, err := strconv.Atoi(n); err == nil {
			killed[i].Pid = hp
			delete(want, f[len(f)-1])
		}
	}
}

// fieldLine returns the rest of the line of b that starts with key.
func fieldLine(b []byte, key string) (string, bool) {
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, key); ok {
			return rest, true
		}
	}
	return "", false
}
