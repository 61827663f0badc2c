package state

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// cpuTime is the CPU the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkJobWrites records whole jobs as the job path does: submit (with
// its spec), dispatched, running and finished (with 200 bytes of output),
// four writes each returning once committed, from 1 and 32 concurrent
// writers. ns/op is wall time per job at that concurrency; cpu-µs/job is
// the CPU the whole process spent per job (callers and writer); commits/s
// and writes/commit show the group commit.
func BenchmarkJobWrites(b *testing.B) {
	for _, d := range []Durability{DurabilityProcess, DurabilityPower} {
		for _, c := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/c=%d", d, c), func(b *testing.B) {
				s := openT(b, filepath.Join(b.TempDir(), "state.db"), Options{Durability: d})
				spec := api.JobSpec{Command: "sh", Argv: []string{"-c", "true"}, Cwd: "/tmp",
					Env: map[string]string{"HOME": "/home/me"}, TimeoutMs: 30000, MaxOutputBytes: 1 << 20}
				out := strings.Repeat("output line\n", 17)[:200]
				var next atomic.Int64
				var wg sync.WaitGroup
				var failed atomic.Value
				before, cpu0 := s.Stats(), cpuTime()
				b.ResetTimer()
				start := time.Now()
				for range c {
					wg.Go(func() {
						jobs := s.Jobs()
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							id := fmt.Sprintf("j-%d", i)
							code := int32(0)
							now := time.Now()
							for _, err := range []error{
								jobs.Submit(ctx, api.JobRecord{ID: id, Lane: "no-net", State: api.StateQueued, CreatedAt: now}, spec),
								jobs.Dispatch(ctx, id, "no-net-0", 1234, now),
								jobs.Run(ctx, id),
								jobs.Finish(ctx, api.JobRecord{ID: id, Lane: "no-net", State: api.StateSucceeded, ExitCode: &code,
									RunnerID: "no-net-0", RunnerPid: 1234, DispatchedAt: &now, Output: out, OutputBytes: int64(len(out))}),
							} {
								if err != nil {
									failed.CompareAndSwap(nil, err)
									return
								}
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				after := s.Stats()
				commits := after.Commits - before.Commits
				b.ReportMetric(float64(commits)/elapsed.Seconds(), "commits/s")
				b.ReportMetric(float64(after.Writes-before.Writes)/float64(commits), "writes/commit")
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/job")
			})
		}
	}
}

// BenchmarkRecover10k is the store's part of a restart after a crash that
// left 10,000 jobs unfinished, half of them queued and half dispatched: read
// them all with their specs, then record the dispatched ones failed (what
// the daemon's recovery does; it queues the others again).
func BenchmarkRecover10k(b *testing.B) {
	const n = 10_000
	spec := api.JobSpec{Command: "sh", Argv: []string{"-c", "true"}, Env: map[string]string{"HOME": "/home/me"},
		Stdin: "some input\n"}
	for range b.N {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "state.db")
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		ws := make([]Write, 0, n+n/2)
		now := time.Now()
		for i := range n {
			id := fmt.Sprintf("j-%d", i)
			ws = append(ws, JobSubmitted(api.JobRecord{ID: id, Lane: "no-net", CreatedAt: now}, spec))
			if i%2 == 1 {
				ws = append(ws, JobDispatched(id, "no-net-0", 1234, now))
			}
		}
		if err := s.Do(ctx, ws...); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		s, err = Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		un, err := s.Jobs().Unfinished()
		if err != nil || len(un) != n {
			b.Fatalf("%d unfinished, %v", len(un), err)
		}
		fails := make([]Write, 0, n/2)
		for _, u := range un {
			if u.MayHaveRun() {
				rec := u.Record
				rec.State, rec.Error = api.StateFailed, "daemon_lost"
				fails = append(fails, JobFinished(rec))
			}
		}
		if err := s.Do(ctx, fails...); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetOutput1MiB reads finished jobs with 1 MiB of output each,
// the oldest first (their pages long out of the reader's cache), as
// job.get of a finished job does.
func BenchmarkGetOutput1MiB(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "state.db"), Options{})
	out := strings.Repeat("orchbench output line of text\n", (1<<20)/30+1)[:1<<20]
	const jobs = 64
	jobsT := s.Jobs()
	for i := range jobs {
		id := fmt.Sprintf("j-%d", i)
		code := int32(0)
		now := time.Now()
		if err := jobsT.Submit(ctx, api.JobRecord{ID: id, Lane: "no-net", State: api.StateQueued, CreatedAt: now}, api.JobSpec{Command: "yes"}); err != nil {
			b.Fatal(err)
		}
		if err := jobsT.Finish(ctx, api.JobRecord{ID: id, Lane: "no-net", State: api.StateSucceeded, ExitCode: &code,
			Output: out, OutputBytes: int64(len(out))}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := range b.N {
		rec, ok, err := jobsT.Get(fmt.Sprintf("j-%d", i%jobs))
		if err != nil || !ok || len(rec.Output) != 1<<20 {
			b.Fatalf("get: %v %v %d", err, ok, len(rec.Output))
		}
	}
}
