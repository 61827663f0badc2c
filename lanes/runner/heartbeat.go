package runner

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/orchestrd/orchestrd/wire"
)

// heartbeatLoop sends a Heartbeat every interval until stop is closed.
func (r *runner) heartbeatLoop(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	self := &process.Process{Pid: int32(os.Getpid())}
	var pids []int
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		pids = r.runningPids(pids[:0])
		hb := wire.Heartbeat{
			ActiveJobs:  r.activeJobs(),
			UptimeSecs:  uint64(time.Since(r.started) / time.Second),
			MemoryBytes: rss(self),
		}
		hb.MemoryBytes += jobsRSS(pids)
		if err := r.send(wire.TypeHeartbeat, hb); err != nil {
			return
		}
	}
}

// maxMeasured bounds the processes one heartbeat measures.
const maxMeasured = 1024

// jobsRSS sums the RSS of the jobs' main processes and their descendants,
// found through /proc/PID/task/PID/children (no scan of all of /proc). A
// descendant that left for another parent (a daemonised grandchild) is
// not counted.
func jobsRSS(pids []int) uint64 {
	var total uint64
	queue := append([]int(nil), pids...)
	var buf []byte
	for n := 0; len(queue) > 0 && n < maxMeasured; n++ {
		pid := queue[0]
		queue = queue[1:]
		total += rss(&process.Process{Pid: int32(pid)})
		buf = readChildren(buf[:0], pid)
		for _, f := range bytes.Fields(buf) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				queue = append(queue, c)
			}
		}
	}
	return total
}

func readChildren(dst []byte, pid int) []byte {
	p := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children"
	f, err := os.Open(p)
	if err != nil {
		return dst
	}
	defer f.Close()
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := f.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err != nil || n == 0 {
			return dst
		}
	}
}

// rss is the resident set size of p, 0 if it is gone.
func rss(p *process.Process) uint64 {
	m, err := p.MemoryInfo()
	if err != nil || m == nil {
		return 0
	}
	return m.RSS
}

func (r *runner) activeJobs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

// runningPids appends the main process ids of the jobs still running.
func (r *runner) runningPids(dst []int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.jobs {
		j.mu.Lock()
		if j.pid > 0 && !j.exited {
			dst = append(dst, j.pid)
		}
		j.mu.Unlock()
	}
	return dst
}
