package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon/control"
	loopsy "github.com/orchestrd/orchestrd/daemon/httpapi/client"
	dom "github.com/orchestrd/orchestrd/loopsy"
	"github.com/orchestrd/orchestrd/state"
)

// benchServer starts the API with Loopsy's domain behind it (its context in
// st, or in memory when st is nil), through a method table of its own.
func benchServer(b *testing.B, cfg Config, key string, st dom.Store) *Server {
	d, err := dom.New(dom.Options{Config: dom.Config{MaxValueBytes: cfg.Context.MaxValueBytes, MaxEntries: cfg.Context.MaxEntries,
		PruneInterval: cfg.Context.PruneInterval.Duration, HealthInterval: cfg.Peers.HealthInterval.Duration,
		HealthFailures: cfg.Peers.HealthFailures}, Store: st, NodeID: "n", Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	b.Cleanup(sys.Shutdown)
	ctrl, err := control.New(control.Options{Path: filepath.Join(b.TempDir(), "daemon.sock"), System: sys, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ctrl.Close() })
	d.Register(ctrl)
	ctrl.Handle("lane.list", func(call api.Call) { call.Respond(map[string]any{"lanes": []any{}}) }) // no lanes: /execute is off
	s, err := Start(Options{Config: cfg, APIKey: key, NodeID: "n", Caller: ctrl, OnClose: d.Stop, Home: b.TempDir(),
		Logger: zerolog.Nop(), Started: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	d.Start()
	b.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// BenchmarkContextGet: one GET /context/KEY over loopback HTTP, client and
// server in this process, the audit log on.
func BenchmarkContextGet(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.RateLimits = RateLimits{}
	key := strings.Repeat("a", 64)
	s := benchServer(b, cfg, key, nil)
	base := "http://" + s.Addr() + "/api/v1"
	if err := loopsy.New(base, key, false).Do(context.Background(), http.MethodPut, "/context/k", map[string]any{"value": "v"}, nil); err != nil {
		b.Fatal(err)
	}
	c := &http.Client{}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("GET", base+"/context/k", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := c.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			buf := make([]byte, 512)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
			}
			resp.Body.Close()
		}
	})
}

// stateStore is the daemon's Store (daemon/http.go's loopsyStore): the
// context and peers in a real state.db.
type stateStore struct{ st *state.Store }

func (s stateStore) Enqueue(w state.Write, done func(error)) error { return s.st.Enqueue(w, done) }
func (s stateStore) Context(nowMs int64) ([]state.LoopsyRow, error) {
	return s.st.Loopsy().Context(nowMs)
}
func (s stateStore) Peers() ([]state.LoopsyRow, error) { return s.st.Loopsy().Peers() }

// BenchmarkContextPut: PUT /context/KEY over loopback HTTP from 16
// clients at once (orchbench's figure), each PUT committed to a real
// state.db (durability process) before its answer, the audit log on.
func BenchmarkContextPut(b *testing.B) {
	st, err := state.Open(filepath.Join(b.TempDir(), "state.db"), state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() }) // after the server (cleanups run last first)
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.RateLimits = RateLimits{}
	key := strings.Repeat("a", 64)
	s := benchServer(b, cfg, key, stateStore{st})
	cl := loopsy.New("http://"+s.Addr()+"/api/v1", key, false)
	var wid atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8) // 16 clients on 2 cores
	before, cpu0 := st.Stats(), cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w, k := wid.Add(1), 0
		for pb.Next() {
			k++
			err := cl.Do(context.Background(), http.MethodPut, fmt.Sprintf("/context/bench-%d-%d", w, k%50), map[string]any{"value": "v", "ttl": 3600}, nil)
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	after := st.Stats()
	b.ReportMetric(float64(after.Writes-before.Writes)/float64(after.Commits-before.Commits), "writes/commit")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU this process used so far, user and system: clients
// and server alike.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
