// Package proctree measures a process tree's memory from /proc: the
// resident set of some root processes and of all their descendants. The
// runner uses it for its heartbeat's memory_bytes, and the daemon, which
// does not take a runner's word for it, to enforce max_runner_memory_bytes;
// the daemon's job sampler finds a job's root by its pid in the runner's
// pid namespace (NSPids) and reads CPU time with reaped children's
// (CPUTicks).
package proctree

import (
	"bytes"
	"math"
	"os"
	"strconv"
)

// MaxProcs bounds the processes one measurement visits, so that a fork
// bomb costs the measurer a bounded amount of work.
const MaxProcs = 4096

// RSS sums the resident set size, in bytes, of roots and their
// descendants. Descendants are found through every thread's
// /proc/PID/task/TID/children (a process forks from any of its threads: a
// Go runner's jobs are children of whichever thread ran the fork), never
// by scanning all of /proc. A process that is gone counts 0; one that left
// for another parent (a daemonised grandchild) is not counted. Each pid is
// counted once.
func RSS(roots ...int) uint64 {
	var total uint64
	walk(roots, func(pid int) { total += rss(pid) })
	return total
}

// walk calls visit once for each of roots and their descendants (found
// through every thread's children file), MaxProcs at most.
func walk(roots []int, visit func(pid int)) {
	var (
		buf   []byte
		queue = append([]int(nil), roots...)
		seen  = make(map[int]struct{}, len(roots))
	)
	for n := 0; len(queue) > 0 && n < MaxProcs; {
		pid := queue[0]
		queue = queue[1:]
		if _, dup := seen[pid]; dup || pid <= 0 {
			continue
		}
		seen[pid] = struct{}{}
		n++
		visit(pid)
		buf = Children(buf[:0], pid)
		for _, f := range bytes.Fields(buf) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				queue = append(queue, c)
			}
		}
	}
}

// Children appends to dst the space-separated pids of pid's children, read
// from the children file of each of its threads.
func Children(dst []byte, pid int) []byte {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return dst
	}
	for _, t := range tasks {
		if len(dst) > 0 && dst[len(dst)-1] != ' ' {
			dst = append(dst, ' ')
		}
		dst = appendFile(dst, dir+t.Name()+"/children")
	}
	return dst
}

func appendFile(dst []byte, path string) []byte {
	f, err := os.Open(path)
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

// rss is pid's resident set size, 0 if it is gone: the second field of
// /proc/PID/statm, in pages.
func rss(pid int) uint64 {
	var buf [128]byte
	return statmRSS(appendFile(buf[:0], "/proc/"+strconv.Itoa(pid)+"/statm"))
}

// pageSize is the unit of /proc/PID/statm.
var pageSize = uint64(os.Getpagesize())

// statmRSS is the resident set size, in bytes, a /proc/PID/statm line
// gives ("size resident shared text lib data dt", in pages); 0 for a line
// that is not one.
func statmRSS(statm []byte) uint64 {
	f := bytes.Fields(statm)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil || pages > math.MaxUint64/pageSize {
		return 0
	}
	return pages * pageSize
}

// UserHZ is the unit of CPUTicks: USER_HZ, 100 on every Linux
// architecture Go supports.
const UserHZ = 100

// NSPids is pid's pid in each pid namespace it is in, the reader's first
// and its own innermost last (the NSpid line of /proc/PID/status). False
// if it is gone or the line is missing (a kernel before 4.1).
func NSPids(pid int) ([]int, bool) {
	var buf [2048]byte
	return nsPids(appendFile(buf[:0], "/proc/"+strconv.Itoa(pid)+"/status"))
}

// nsPids parses the NSpid line of a /proc/PID/status.
func nsPids(status []byte) ([]int, bool) {
	for len(status) > 0 {
		line := status
		if i := bytes.IndexByte(status, '\n'); i >= 0 {
			line, status = status[:i], status[i+1:]
		} else {
			status = nil
		}
		rest, ok := bytes.CutPrefix(line, []byte("NSpid:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 || len(f) > 32 {
			return nil, false
		}
		out := make([]int, len(f))
		for i, s := range f {
			v, err := strconv.Atoi(string(s))
			if err != nil || v <= 0 {
				return nil, false
			}
			out[i] = v
		}
		return out, true
	}
	return nil, false
}

// CPUTicks is pid's CPU time with that of the children it reaped
// (utime+stime+cutime+cstime of /proc/PID/stat), in USER_HZ ticks; 0 if
// it is gone.
func CPUTicks(pid int) uint64 { return cpuTicks(pid) }

// cpuTicks is pid's utime+stime+cutime+cstime from /proc/PID/stat, 0 if
// it is gone.
func cpuTicks(pid int) uint64 {
	var buf [512]byte
	return statCPU(appendFile(buf[:0], "/proc/"+strconv.Itoa(pid)+"/stat"))
}

// statCPU is fields 14-17 of a /proc/PID/stat line (utime, stime, cutime,
// cstime), counted after the command's closing parenthesis (a command may
// hold spaces and parentheses); 0 for a line that is not one.
func statCPU(stat []byte) uint64 {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, f[11].
	if len(f) < 15 {
		return 0
	}
	var total uint64
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || v < 0 {
			return 0
		}
		total += uint64(v)
	}
	return total
}
