package lanes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/lanes/runner"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// benchRunnerEnv makes this test binary, re-executed by a lane as
// `EXE runner --lane L --socket P --id ID`, be a real runner: the
// benchmarks below spawn real runner processes without needing the
// orchestrd binary.
const benchRunnerEnv = "ORCHESTRD_LANES_BENCH_RUNNER"

func init() {
	if os.Getenv(benchRunnerEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "runner" {
		os.Exit(runner.Main(os.Args[2:]))
	}
}

// startBenchLane starts a Manager with one host lane "bench" of the given
// runners and slots in a temporary home and stops it when the test ends.
func startBenchLane(tb testing.TB, runners, slots int) *Manager {
	tb.Helper()
	m, _ := startTestLane(tb, defaultLane(runners, slots, NetworkHost, 0))
	return m
}

// startTestLane starts a Manager whose only lane, "bench", is lc; its
// runners are this test binary (see init). It stops when the test ends.
func startTestLane(tb testing.TB, lc LaneConfig) (*Manager, *eventlog.Bus) {
	tb.Helper()
	return startTestLanes(tb, map[string]LaneConfig{"bench": lc})
}

// startTestLanes is startTestLane with the lanes given.
func startTestLanes(tb testing.TB, lanes map[string]LaneConfig) (*Manager, *eventlog.Bus) {
	tb.Helper()
	return startTestLanesWith(tb, lanes, nil)
}

// startTestLanesWith is startTestLanes with the manager's options changed
// by with (nil: none) before it starts.
func startTestLanesWith(tb testing.TB, lanes map[string]LaneConfig, with func(*Options)) (*Manager, *eventlog.Bus) {
	tb.Helper()
	tb.Setenv(benchRunnerEnv, "1")
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	// Not tb.TempDir(): its long path would not fit a unix socket's.
	home := testio.ShortTemp(tb, "lanebench")
	if errs := ValidateLanes("lanes", lanes); len(errs) > 0 {
		tb.Fatal(errs)
	}
	bus, err := eventlog.Open(eventlog.Options{Path: filepath.Join(home, "events.ndjson")})
	if err != nil {
		tb.Fatal(err)
	}
	pids := &pidSink{}
	bus.Subscribe([]string{"runner.spawned"}, pids)
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	opts := Options{Lanes: lanes, ShutdownTimeout: 2 * time.Second, MaxFrameBytes: wire.DefaultMaxFrame,
		FinishedJobs: 10000, FinishedOutputBytes: 64 << 20, Sandbox: true, Home: home, Exe: exe, RunnerStderr: io.Discard, Bus: bus, System: sys,
		RunnerEnv: []string{benchRunnerEnv + "=1"},
		Logger:    zerolog.Nop()}
	if with != nil {
		with(&opts)
	}
	m, err := Start(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := m.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
		sys.Shutdown()
		bus.Close()
		// Shutdown waited for every runner: none may be left, not even
		// as a zombie (Wait reaped it).
		for _, pid := range pids.all() {
			if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
				tb.Errorf("runner pid %d still exists after Shutdown (kill 0: %v)", pid, err)
			}
		}
	})
	return m, bus
}

// pidSink records the pid of every runner spawned.
type pidSink struct {
	mu   sync.Mutex
	pids []int
}

func (p *pidSink) Deliver(r *eventlog.Record) {
	if e, ok := r.Event.(RunnerSpawned); ok {
		p.mu.Lock()
		p.pids = append(p.pids, e.Pid)
		p.mu.Unlock()
	}
}

func (p *pidSink) all() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.pids...)
}

// waitServing waits until lane bench has n ready runners.
func waitServing(b testing.TB, m *Manager, n int) {
	b.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ready := 0
		for _, l := range m.Lanes() {
			for _, r := range l.Runners {
				if r.State == "ready" && !r.Spare {
					ready++
				}
			}
		}
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d runners ready after 20s, want %d", ready, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeRunner is an in-process bring-your-own runner on the lane's socket
// that answers every Job at once with JobAck and a successful Result, so
// that what is measured is the daemon's side: submit, queue, dispatch,
// frames, result, store, events.
func fakeRunner(b *testing.B, m *Manager) {
	b.Helper()
	c, err := net.Dial("unix", m.lanes["bench"].socket)
	if err != nil {
		b.Fatal(err)
	}
	if err := wire.WriteFrame(c, wire.TypeHandshake, wire.Handshake{Lane: "bench", Pid: uint32(os.Getpid()), Token: m.lanes["bench"].token,
		Version: "bench", Capabilities: []string{"argv"}}); err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(c)
	fr := wire.NewFrameReader(br, 0)
	f, err := fr.Next()
	if err != nil || f.Type != wire.TypeHandshakeAck {
		b.Fatalf("handshake: %v %v", f.Type, err)
	}
	done := make(chan struct{})
	b.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		bw := bufio.NewWriter(c)
		code := int32(0)
		for {
			f, err := fr.Next()
			if err != nil {
				return
			}
			if f.Type != wire.TypeJob {
				continue
			}
			var j wire.Job
			if err := wire.Unmarshal(f, &j); err != nil {
				return
			}
			_ = wire.WriteFrame(bw, wire.TypeJobAck, wire.JobAck{JobID: j.JobID, Accepted: true})
			_ = wire.WriteFrame(bw, wire.TypeResult, wire.Result{JobID: j.JobID, Status: wire.StatusSuccess, ExitCode: &code})
			if br.Buffered() == 0 { // nothing more to answer now: send what is written
				if bw.Flush() != nil {
					return
				}
			}
		}
	}()
	// The byo runner is ready once the lane lists it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, l := range m.Lanes() {
			for _, r := range l.Runners {
				if !r.Spawned && r.State == "ready" {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("fake runner not ready")
		}
		time.Sleep(time.Millisecond)
	}
}

// runJobs runs b.N jobs through lane bench with conc submitters, each
// submitting one job and waiting for it to finish.
func runJobs(b *testing.B, m *Manager, conc int, argv []string) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[string]
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan api.JobRecord, 1)
			for next.Add(1) <= int64(b.N) {
				id, werr := m.Submit(api.JobSpec{Lane: "bench", Argv: argv})
				if werr != nil {
					msg := werr.Error()
					failed.CompareAndSwap(nil, &msg)
					return
				}
				if _, werr := m.Wait(id, func(r api.JobRecord) { done <- r }); werr != nil {
					msg := werr.Error()
					failed.CompareAndSwap(nil, &msg)
					return
				}
				if r := <-done; r.State != api.StateSucceeded {
					msg := fmt.Sprintf("job %s ended %s (%s)", r.ID, r.State, r.Error)
					failed.CompareAndSwap(nil, &msg)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkLaneDispatch is job dispatch inside one real lane: submit ->
// queue -> dispatch to a runner -> Job frame -> JobAck and Result frames ->
// job record finished -> waiter called.
//
//   - fake-runner: an in-process runner that answers at once (no process
//     is started), so the figure is the daemon's own cost per job.
//     Allocations include the fake runner's few.
//   - real-runner: two real runner processes with 16 slots each, running
//     `true`: the whole path, dominated by fork/exec. Allocations are the
//     daemon side's only (the runners are other processes).
func BenchmarkLaneDispatch(b *testing.B) {
	for _, conc := range []int{1, 32} {
		b.Run(fmt.Sprintf("fake-runner/c=%d", conc), func(b *testing.B) {
			m := startBenchLane(b, 0, 64)
			fakeRunner(b, m)
			runJobs(b, m, conc, []string{"true"})
		})
	}
	for _, conc := range []int{1, 32} {
		b.Run(fmt.Sprintf("real-runner/c=%d", conc), func(b *testing.B) {
			m := startBenchLane(b, 2, 16)
			waitServing(b, m, 2)
			runJobs(b, m, conc, []string{"true"})
		})
	}
}
