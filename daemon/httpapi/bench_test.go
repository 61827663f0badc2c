package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkContextGet: one GET /context/KEY over loopback HTTP, client and
// server in this process, the audit log on.
func BenchmarkContextGet(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.RateLimits = RateLimits{}
	key := strings.Repeat("a", 64)
	s, err := Start(Options{Config: cfg, APIKey: key, NodeID: "n", Store: &memStore{}, Home: b.TempDir(), Logger: zerolog.Nop(), Started: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	base := "http://" + s.Addr() + "/api/v1"
	if _, wait, err := s.ctx.put("k", "v", "n", nil); err != nil || wait() != nil {
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
