package eventlog

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
)

type countSink struct{ n atomic.Uint64 }

func (c *countSink) Deliver(*Record) { c.n.Add(1) }

func benchBus(b *testing.B, file bool, subs int) *Bus {
	opts := Options{}
	if file {
		opts.Path = filepath.Join(b.TempDir(), "events.ndjson")
		opts.MaxBytes = 1 << 30
	}
	bus, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	for i := range subs {
		kinds := []string{"runner.*"}
		if i%2 == 0 {
			kinds = nil
		}
		bus.Subscribe(kinds, &countSink{})
	}
	return bus
}

func BenchmarkEmit(b *testing.B) {
	for _, file := range []bool{false, true} {
		for _, subs := range []int{0, 10} {
			b.Run(fmt.Sprintf("file=%v/subs=%d", file, subs), func(b *testing.B) {
				bus := benchBus(b, file, subs)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					bus.Emit(runnerSpawned{Lane: "review", RunnerID: "review-1", Pid: i, Attempt: 1, Network: "none"})
				}
				closeReportingDrops(b, bus)
			})
		}
	}
}

// closeReportingDrops stops b's timer, closes bus and reports the lines
// it dropped per op.
func closeReportingDrops(b *testing.B, bus *Bus) {
	b.StopTimer()
	dropped := bus.dropped.Load()
	bus.Close()
	b.ReportMetric(float64(dropped)/float64(b.N), "drops/op")
}

func BenchmarkEmitParallel(b *testing.B) {
	for _, subs := range []int{0, 10} {
		b.Run(fmt.Sprintf("file=true/subs=%d", subs), func(b *testing.B) {
			bus := benchBus(b, true, subs)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					bus.Emit(runnerSpawned{Lane: "review", RunnerID: "review-1", Pid: i, Attempt: 1, Network: "none"})
				}
			})
			closeReportingDrops(b, bus)
		})
	}
}

func BenchmarkEmitEphemeral(b *testing.B) {
	bus := benchBus(b, true, 10)
	defer bus.Close()
	b.ReportAllocs()
	for b.Loop() {
		bus.Emit(jobOutput{JobID: "j1", Stream: "stdout", Data: "some output line\n"})
	}
}

func BenchmarkRead(b *testing.B) {
	path := filepath.Join(b.TempDir(), "events.ndjson")
	bus, _ := Open(Options{Path: path, Buffer: 1 << 17})
	const n = 100000
	for i := range n {
		bus.Emit(runnerExited{Lane: "review", RunnerID: "review-1", Pid: i, UptimeMs: 5000, Cause: "exited", Spawned: true})
	}
	bus.Close()
	for _, c := range []struct {
		name    string
		q       Query
		matched uint64
	}{
		{"all", Query{}, n},
		{"lane=all", Query{Lane: "review"}, n},
		{"job=none", Query{Job: "j-404"}, 0},
		{"kind=none", Query{Kinds: []string{"job.*"}}, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := ReadWithStats(context.Background(), path, c.q, func(Line) error { return nil })
				if err != nil || st.Matched != c.matched || st.Lines != n {
					b.Fatal(err, st)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/line")
		})
	}
}
