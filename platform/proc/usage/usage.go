// Package usage measures what process trees cost the machine: CPU time,
// peak resident memory, bytes read and written, peak threads (api.Usage),
// summed over the samples a Tracker takes of some root processes and their
// descendants. It reads /proc through gopsutil and is the daemon's only:
// the runner stays lean (internal/layout's TestRunnerLean). The lanes
// domain measures a job's tree with it, the executors domain an agent
// task's; each names the roots, this package knows nothing of either.
package usage

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/proc/proctree"
)

// Key names a process across pid reuse: its pid and start time.
type Key struct {
	Pid   int32
	Start int64 // ms since the epoch (gopsutil's CreateTime)
}

type figures struct {
	user, sys   float64
	read, write uint64
	// cuser, csys: the CPU of the children it reaped (cutime, cstime),
	// which counts children that lived and died between two samples.
	cuser, csys float64
}

var bootCache sync.Once

// enableBootCache: a process's start time is its boot-relative start plus
// the boot time, read from /proc/stat each time unless cached: the boot
// time does not change, and /proc/stat is the dearest file a sample reads.
func enableBootCache() { bootCache.Do(func() { process.EnableBootTimeCache(true) }) }

// Tracker is one tree's samples so far. One sample at a time uses it (a
// caller samples on a goroutine of its own, never inside an actor's
// Receive, and starts the next once the last is done).
type Tracker struct {
	seen map[Key]figures // every process a sample saw: its last figures
	// since (NewTrackerSince): the boot-clock tick the tracker counts
	// from, and what each process older than it had used when a sample
	// first saw it, subtracted.
	since uint64
	base  map[Key]figures
	// pinned: the processes alive at the last sample; each is measured
	// again (if its pid still names it) wherever it is now, so a process
	// that left the roots' tree (a double fork, re-parented) stays counted.
	pinned map[Key]struct{}
	// parent: each process's parent at its last sample; gone: each
	// process found gone, and whether its parent reaped it then (the
	// parent alive, or itself reaped by its own): its CPU is then in the
	// parent's reaped children's, and counts there.
	parent map[Key]Key
	gone   map[Key]bool
	u      api.Usage
}

// Now is what a sample found the tree using at that moment.
type Now struct {
	RSS uint64
	// CPU is the larger of the sum so far and the CPU seconds of the
	// processes alive now with those of the children they reaped (which
	// counts children that lived and died between two samples).
	CPU float64
}

// NewTracker returns a tracker with no sample yet: every process of the
// tree counts whole.
func NewTracker() *Tracker {
	enableBootCache()
	return &Tracker{seen: map[Key]figures{}, pinned: map[Key]struct{}{}, parent: map[Key]Key{}, gone: map[Key]bool{},
		u: api.Usage{Source: api.UsageSourceProcfs}}
}

// NewTrackerSince returns a tracker of what a tree uses from now on, for
// a long-lived tree (an executor's) that serves one task after another: a
// process started before now counts from its first sample (its CPU and
// bytes then are its baseline, subtracted), one started since counts
// whole. Its peak RSS and threads are the whole tree's at each sample.
// The start is compared in the kernel's boot clock (/proc/PID/stat's
// starttime), never the wall clock.
func NewTrackerSince() *Tracker {
	t := NewTracker()
	t.since, t.base = bootTicks(), map[Key]figures{}
	return t
}

// Baseline takes what process pid has used so far as its baseline, as
// its first sample would, but counts no sample: a tracker since now whose
// root is older than it (an executor, across its tasks) counts that root
// from here rather than from its first sample, so that a child it starts
// and reaps before that sample (an agent that ends at once) is counted,
// in the root's reaped children's CPU. It reads one process's files. No
// effect on a tracker that counts whole, a process it saw already, one
// started since or one gone.
func (t *Tracker) Baseline(pid int) {
	if t.base == nil {
		return
	}
	k, fig, _, _, _, ok := measure(context.Background(), pid)
	if _, known := t.seen[k]; !ok || known {
		return
	}
	if st, ok := startTicks(pid); ok && st >= t.since {
		return
	}
	t.base[k], t.seen[k], t.pinned[k] = fig, fig, struct{}{}
}

// Sample measures roots, the processes pinned by earlier samples and
// their descendants (found through every thread's children file, at most
// proctree.MaxProcs processes) once and returns the sum so far and what
// the tree uses now. A process that exits (or whose pid is taken by
// another) while it is read keeps the figures of its last whole sample.
func (t *Tracker) Sample(roots []int) (api.Usage, Now) {
	ctx := context.Background()
	type want struct {
		pid int
		key Key // a pinned process: still it, or its pid names another now
	}
	var (
		buf     []byte
		rss     uint64
		threads int
		ticks   uint64
		ppid    = map[Key]int{}
		byPid   = map[int]Key{}
		queue   = make([]want, 0, len(roots)+len(t.pinned))
		visited = map[int]struct{}{}
		alive   = make(map[Key]struct{}, len(t.pinned))
	)
	for _, pid := range roots {
		queue = append(queue, want{pid: pid})
	}
	for k := range t.pinned {
		queue = append(queue, want{pid: int(k.Pid), key: k})
	}
	for n := 0; len(queue) > 0 && n < proctree.MaxProcs; {
		w := queue[0]
		queue = queue[1:]
		pid := w.pid
		if _, dup := visited[pid]; dup || pid <= 0 {
			continue
		}
		visited[pid] = struct{}{}
		n++
		k, fig, pp, r, th, ok := measure(ctx, pid)
		if !ok || (w.key != Key{} && k != w.key) {
			continue // gone, or not ours to read: its last figures stand
		}
		alive[k] = struct{}{}
		ppid[k], byPid[pid] = pp, k
		ticks += proctree.CPUTicks(pid)
		if _, known := t.seen[k]; !known && t.base != nil {
			if st, ok := startTicks(pid); !ok || st < t.since {
				t.base[k] = fig // older than the tracker (or unknown): counts from now
			}
		}
		t.seen[k] = fig
		rss += r
		threads += th
		buf = proctree.Children(buf[:0], pid)
		for _, f := range bytes.Fields(buf) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				queue = append(queue, want{pid: c})
			}
		}
	}
	t.pinned = alive // the gone are forgotten: their pids may name others next
	for k, pp := range ppid {
		if p, ok := byPid[pp]; ok {
			t.parent[k] = p
		} else {
			delete(t.parent, k)
		}
	}
	for k := range t.seen {
		if _, ok := alive[k]; !ok {
			t.reaped(k, alive)
		}
	}
	// sum: each process's own CPU (the floor); reaped: with the children
	// each reaped, but for the processes a seen one reaped (counted in
	// their parent's). A process older than the tracker counts from its
	// baseline, also where its parent reaped it.
	var sum, reaped figures
	for k, f := range t.seen {
		b := t.base[k]
		sum.user += max(f.user-b.user, 0)
		sum.sys += max(f.sys-b.sys, 0)
		sum.read += f.read - min(b.read, f.read)
		sum.write += f.write - min(b.write, f.write)
		if t.gone[k] {
			reaped.user -= b.user + b.cuser
			reaped.sys -= b.sys + b.csys
			continue
		}
		reaped.user += max(f.user+f.cuser-b.user-b.cuser, 0)
		reaped.sys += max(f.sys+f.csys-b.sys-b.csys, 0)
	}
	sum.user, sum.sys = max(sum.user, reaped.user), max(sum.sys, reaped.sys)
	t.u.UserSeconds, t.u.SystemSeconds, t.u.ReadBytes, t.u.WriteBytes = sum.user, sum.sys, sum.read, sum.write
	t.u.PeakRSSBytes = max(t.u.PeakRSSBytes, rss)
	t.u.PeakThreads = max(t.u.PeakThreads, threads)
	t.u.Samples++
	return t.u, Now{RSS: rss, CPU: max(sum.user+sum.sys, float64(ticks)/proctree.UserHZ)}
}

// reaped decides, once, whether gone process k was reaped by a process
// this tracker saw: its parent at its last sample is alive now (only a
// living parent reaps its child), or was itself reaped so (a parent that
// waited for its child before it ended: the usual case; a child orphaned
// instead is then under-counted, never twice).
func (t *Tracker) reaped(k Key, alive map[Key]struct{}) bool {
	if r, ok := t.gone[k]; ok {
		return r
	}
	t.gone[k] = false // a cycle stops here
	r := false
	if p, ok := t.parent[k]; ok {
		if _, live := alive[p]; live {
			r = true
		} else if _, known := t.seen[p]; known {
			r = t.reaped(p, alive)
		}
	}
	t.gone[k] = r
	delete(t.parent, k)
	return r
}

// KeyOf returns the key of the process pid now, and the process for more
// reads; ok is false if there is none.
func KeyOf(ctx context.Context, pid int) (k Key, p *process.Process, ok bool) {
	enableBootCache()
	p, err := process.NewProcessWithContext(ctx, int32(pid))
	if err != nil {
		return k, nil, false
	}
	start, err := p.CreateTimeWithContext(ctx)
	if err != nil {
		return k, nil, false
	}
	return Key{int32(pid), start}, p, true
}

// measure reads one process's figures; ok is false if it is gone (or
// became another process) before they were all read.
func measure(ctx context.Context, pid int) (k Key, f figures, ppid int, rss uint64, threads int, ok bool) {
	k, p, ok := KeyOf(ctx, pid)
	if !ok {
		return k, f, 0, 0, 0, false
	}
	ts, err := p.TimesWithContext(ctx)
	if err != nil {
		return k, f, 0, 0, 0, false
	}
	mem, err := p.MemoryInfoWithContext(ctx)
	if err != nil {
		return k, f, 0, 0, 0, false
	}
	th, err := p.NumThreadsWithContext(ctx)
	if err != nil {
		return k, f, 0, 0, 0, false
	}
	st, ok := readStat(pid)
	if !ok {
		return k, f, 0, 0, 0, false
	}
	f.user, f.sys, rss, threads = ts.User, ts.System, mem.RSS, int(th)
	f.cuser, f.csys, ppid = float64(st.cutime)/proctree.UserHZ, float64(st.cstime)/proctree.UserHZ, st.ppid
	if io, err := p.IOCountersWithContext(ctx); err == nil {
		f.read, f.write = io.ReadBytes, io.WriteBytes
	}
	// Still the same process: a pid reused while it was read would mix
	// two processes' figures.
	if again, _, ok := KeyOf(ctx, pid); !ok || again != k { // CreateTime is cached per Process
		return k, f, 0, 0, 0, false
	}
	return k, f, ppid, rss, threads, true
}

// bootTicks is the boot clock now, in the clock ticks of /proc/PID/stat's
// starttime (proctree.UserHZ a second); 0 if it cannot be read.
func bootTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano()) / (1e9 / proctree.UserHZ)
}

// startTicks is when pid started, in boot-clock ticks.
func startTicks(pid int) (uint64, bool) {
	st, ok := readStat(pid)
	return st.start, ok
}

// stat is what a sample takes from /proc/PID/stat beyond gopsutil's.
type stat struct {
	ppid           int
	cutime, cstime uint64 // clock ticks
	start          uint64 // boot-clock ticks
}

func readStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	return parseStat(b)
}

// statStart is field 22 of a /proc/PID/stat line (starttime).
func statStart(b []byte) (uint64, bool) {
	st, ok := parseStat(b)
	return st.start, ok
}

// parseStat reads fields 4 (ppid), 16-17 (cutime, cstime) and 22
// (starttime) of a /proc/PID/stat line, counted after the command's
// closing parenthesis (a command may hold spaces and parentheses); false
// for a line that is not one.
func parseStat(b []byte) (stat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 20 {
		return stat{}, false
	}
	var v [4]uint64
	for j, n := range [4]int{4, 16, 17, 22} {
		x, err := strconv.ParseUint(string(f[n-3]), 10, 64)
		if err != nil {
			return stat{}, false
		}
		v[j] = x
	}
	return stat{ppid: int(v[0]), cutime: v[1], cstime: v[2], start: v[3]}, true
}

// Pinned returns the processes the last sample found alive: the ones the
// next sample measures wherever they are then.
func (t *Tracker) Pinned() []Key {
	ks := make([]Key, 0, len(t.pinned))
	for k := range t.pinned {
		ks = append(ks, k)
	}
	return ks
}
