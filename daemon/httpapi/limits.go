package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter holds a token bucket per key and category: n requests a minute,
// up to n at once. A category with n = 0 is not limited. A limited
// category refuses at once (429, code 9002, Retry-After); it never queues
// a request, so it slows nothing else.
type limiter struct {
	perMin map[string]int
	mu     sync.Mutex
	b      map[string]*bucket // key name + "\x00" + category
}

type bucket struct {
	l          *rate.Limiter
	lastEvent  time.Time // last http.rate_limited for this bucket
	suppressed int
}

func newLimiter(c RateLimits) *limiter {
	return &limiter{perMin: map[string]int{"exec": c.Exec, "transfer": c.Transfer, "context": c.Context}, b: map[string]*bucket{}}
}

// category is the rate category of an API path ("" for none).
func category(path string) string {
	rest, ok := strings.CutPrefix(path, "/api/v1/")
	if !ok {
		return ""
	}
	switch seg, _, _ := strings.Cut(rest, "/"); seg {
	case "execute":
		return "exec"
	case "transfer":
		return "transfer"
	case "context":
		return "context"
	}
	return ""
}

// allow takes a token for key in cat: 0 if allowed, else how long until
// one is free; report says whether to record an event now, and how many
// refusals went unrecorded before it.
func (l *limiter) allow(key, cat string, now time.Time) (wait time.Duration, report bool, suppressed int) {
	n := l.perMin[cat]
	if n <= 0 {
		return 0, false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := key + "\x00" + cat
	b := l.b[id]
	if b == nil {
		b = &bucket{l: rate.NewLimiter(rate.Limit(float64(n)/60), n)}
		l.b[id] = b
	}
	r := b.l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		if now.Sub(b.lastEvent) >= time.Second {
			b.lastEvent, suppressed, b.suppressed = now, b.suppressed, 0
			return d, true, suppressed
		}
		b.suppressed++
		return d, false, 0
	}
	return 0, false, 0
}

// limit refuses a request of key past its category's rate.
func (s *Server) limit(w http.ResponseWriter, r *http.Request, key string) bool {
	cat := category(r.URL.Path)
	if cat == "" {
		return true
	}
	wait, report, suppressed := s.limits.allow(key, cat, time.Now())
	if wait == 0 {
		return true
	}
	secs := int(math.Ceil(wait.Seconds()))
	if report {
		s.emit(RateLimited{KeyName: key, Peer: r.RemoteAddr, Category: cat, Path: r.URL.Path, RetryAfter: secs, Suppressed: suppressed})
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, http.StatusTooManyRequests, CodeRateLimited,
		"Rate limit exceeded for "+cat+": "+strconv.Itoa(s.limits.perMin[cat])+" requests a minute; retry in "+strconv.Itoa(secs)+" s")
	return false
}
