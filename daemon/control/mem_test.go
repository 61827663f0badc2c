package control

import (
	"net"
	"runtime"
	"testing"

	"github.com/orchestrd/orchestrd/wire"
)

// TestIdleConnMemory opens 2000 connections that have each done one ping
// and then sit idle, and measures what they cost (heap in use plus stacks,
// per connection). The client ends are raw sockets in this process too, so
// their few hundred bytes each are included.
func TestIdleConnMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2000 connections")
	}
	const n = 2000
	h := newHarness(t, nil)
	h.mustCall(h.client(), "ping", nil, nil) // warm up: first conn, pools

	var before, after runtime.MemStats
	settle()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()

	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	ping := []byte(`{"id":1,"method":"ping"}` + "\n")
	buf := make([]byte, 128)
	for i := 0; i < n; i++ {
		c, err := net.Dial("unix", h.path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(ping); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	// Every writer goroutine has exited once the goroutine count is back to
	// one reader per connection.
	waitUntil(t, "writers are idle", func() bool { return runtime.NumGoroutine()-g0 <= n })
	h.rec.Forget() // the test's own record of conn.opened events is not the server's cost
	settle()
	runtime.ReadMemStats(&after)

	delta := int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)
	per := delta / n
	heapPer := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	stackPer := (int64(after.StackInuse) - int64(before.StackInuse)) / n
	lr := lineReaderBytes()
	t.Logf("idle connection: %d bytes (heap %d, stack %d; wire.LineReader alone %d), %d goroutines per connection",
		per, heapPer, stackPer, lr, (runtime.NumGoroutine()-g0)/n)
	// The target is 20 KiB; the bound is generous so it cannot flake.
	if per > 64<<10 {
		t.Fatalf("idle connection costs %d bytes", per)
	}
}

func settle() {
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
}

// lineReaderBytes measures what one wire.LineReader allocates.
func lineReaderBytes() int64 {
	const k = 64
	keep := make([]*wire.LineReader, k)
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for i := range keep {
		keep[i] = wire.NewLineReader(nil, 0)
	}
	runtime.ReadMemStats(&b)
	runtime.KeepAlive(keep)
	return int64(b.TotalAlloc-a.TotalAlloc) / k
}
