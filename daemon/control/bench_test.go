package control

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orchestrd/orchestrd/daemon/control/client"
)

// BenchmarkPing measures one ping round trip through Client, socket, conn
// actor and writer, with 1 and 64 clients calling concurrently. Allocations
// count both ends (same process).
func BenchmarkPing(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) {
			h := newHarness(b, nil)
			cs := make([]*client.Client, clients)
			for i := range cs {
				cs[i] = h.client()
				if err := cs[i].Call(context.Background(), "ping", nil, nil); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var p pongResult
					for left.Add(-1) >= 0 {
						if err := c.Call(ctx, "ping", nil, &p); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
		})
	}
}
