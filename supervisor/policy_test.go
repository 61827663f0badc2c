package supervisor

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed+1)) }

// inJitter reports whether got is a valid equal-jitter draw for d.
func inJitter(got, d time.Duration) bool { return got >= d-d/2 && got <= d }

// roomy is the default policy with an intensity limit that never trips.
func roomy() Policy {
	p := DefaultPolicy()
	p.MaxR = 1 << 20
	return p
}

func TestPolicyDefaults(t *testing.T) {
	p := DefaultPolicy()
	want := Policy{Stable: time.Second, BaseDelay: 10 * time.Millisecond, MaxDelay: 30 * time.Second, MaxR: 10, MaxT: time.Minute}
	if p != want {
		t.Fatalf("DefaultPolicy() = %+v, want %+v", p, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("DefaultPolicy().Validate() = %v", err)
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Policy)
		want []string // substrings, one per expected problem; nil = valid
	}{
		{"defaults", func(*Policy) {}, nil},
		{"max equals base", func(p *Policy) { p.MaxDelay = p.BaseDelay }, nil},
		{"max_r 1", func(p *Policy) { p.MaxR = 1 }, nil},
		{"stable zero", func(p *Policy) { p.Stable = 0 }, []string{"restart.stable must be > 0"}},
		{"stable negative", func(p *Policy) { p.Stable = -time.Second }, []string{"restart.stable must be > 0"}},
		{"base zero", func(p *Policy) { p.BaseDelay = 0 }, []string{"restart.base_delay must be > 0"}},
		{"max zero", func(p *Policy) { p.MaxDelay = 0 }, []string{"restart.max_delay must be > 0"}},
		{"max below base", func(p *Policy) { p.MaxDelay = 5 * time.Millisecond }, []string{"restart.max_delay must be >= restart.base_delay"}},
		{"max_r zero", func(p *Policy) { p.MaxR = 0 }, []string{"restart.max_r must be >= 1"}},
		{"max_r negative", func(p *Policy) { p.MaxR = -3 }, []string{"restart.max_r must be >= 1"}},
		{"max_t zero", func(p *Policy) { p.MaxT = 0 }, []string{"restart.max_t must be > 0"}},
		{"zero policy", func(p *Policy) { *p = Policy{} }, []string{
			"restart.stable must be > 0", "restart.base_delay must be > 0", "restart.max_delay must be > 0",
			"restart.max_r must be >= 1", "restart.max_t must be > 0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.mod(&p)
			err := p.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("Validate() = %q, want %d problems %q", err, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if lines[i] != w {
					t.Errorf("problem %d = %q, want %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestTrackerNewPanicsOnInvalidPolicy(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "restart.max_r must be >= 1") {
			t.Fatalf("recover() = %v, want panic naming restart.max_r", r)
		}
	}()
	NewTracker(Policy{Stable: 1, BaseDelay: 1, MaxDelay: 1, MaxT: 1}, nil)
}

func TestTrackerStableExitRestartsAtOnce(t *testing.T) {
	tests := []struct {
		name   string
		uptime time.Duration
	}{
		{"exactly stable", time.Second},
		{"long lived", time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(DefaultPolicy(), seeded(1))
			d := tr.Exited("r0", t0, tt.uptime)
			want := Decision{Delay: 0, Reason: ReasonStableExit, RestartsInWindow: 1}
			if d != want {
				t.Fatalf("Exited = %+v, want %+v", d, want)
			}
		})
	}
}

func TestTrackerBackoffDoublesWithJitterAndCaps(t *testing.T) {
	ms := time.Millisecond
	want := []time.Duration{
		10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, 1280 * ms,
		2560 * ms, 5120 * ms, 10240 * ms, 20480 * ms, 30 * time.Second, 30 * time.Second, 30 * time.Second,
	}
	for seed := uint64(0); seed < 50; seed++ {
		tr := NewTracker(roomy(), seeded(seed))
		now := t0
		for i, d := range want {
			got := tr.Exited("r0", now, 999*time.Millisecond)
			if got.Reason != ReasonCrashLoop || got.Degraded {
				t.Fatalf("seed %d death %d: %+v, want crash_loop, not degraded", seed, i+1, got)
			}
			if !inJitter(got.Delay, d) {
				t.Fatalf("seed %d death %d: delay %v outside [%v, %v]", seed, i+1, got.Delay, d-d/2, d)
			}
			now = now.Add(got.Delay + 999*time.Millisecond)
		}
	}
}

func TestTrackerBackoffNoOverflow(t *testing.T) {
	p := Policy{Stable: time.Second, BaseDelay: time.Nanosecond, MaxDelay: 1<<63 - 1, MaxR: 1 << 20, MaxT: time.Minute}
	tr := NewTracker(p, seeded(3))
	var last time.Duration
	for i := 0; i < 200; i++ {
		d := tr.Exited("r0", t0, 0)
		if d.Delay <= 0 {
			t.Fatalf("death %d: delay %v <= 0", i+1, d.Delay)
		}
		last = d.Delay
	}
	if !inJitter(last, p.MaxDelay) {
		t.Fatalf("capped delay %v outside [%v, %v]", last, p.MaxDelay/2, p.MaxDelay)
	}
}

func TestTrackerJitterIsReal(t *testing.T) {
	// Many draws at the cap must spread over [MaxDelay/2, MaxDelay].
	p := roomy()
	tr := NewTracker(p, seeded(7))
	lo, hi := p.MaxDelay, time.Duration(0)
	seen := map[time.Duration]bool{}
	for i := 0; i < 2000; i++ {
		d := tr.Exited("r0", t0, 0).Delay
		if i < 20 {
			continue // still ramping up
		}
		lo, hi = min(lo, d), max(hi, d)
		seen[d] = true
	}
	if lo > p.MaxDelay*55/100 || hi < p.MaxDelay*95/100 || len(seen) < 1000 {
		t.Fatalf("jitter range [%v, %v] with %d distinct values; want spread over [%v, %v]", lo, hi, len(seen), p.MaxDelay/2, p.MaxDelay)
	}
}

func TestTrackerTinyBaseDelayNeverZero(t *testing.T) {
	p := Policy{Stable: time.Second, BaseDelay: 1, MaxDelay: 1, MaxR: 1 << 20, MaxT: time.Minute}
	tr := NewTracker(p, seeded(1))
	for i := 0; i < 100; i++ {
		if d := tr.Exited("r0", t0, 0); d.Delay != 1 {
			t.Fatalf("death %d: delay %v, want 1ns", i+1, d.Delay)
		}
	}
}

func TestTrackerBackoffReset(t *testing.T) {
	tests := []struct {
		name  string
		reset func(tr *Tracker, now time.Time) Decision
	}{
		{"Stable call", func(tr *Tracker, now time.Time) Decision {
			tr.Stable("r0", now)
			return Decision{}
		}},
		{"exit after Stable uptime", func(tr *Tracker, now time.Time) Decision {
			return tr.Exited("r0", now, 2*time.Second)
		}},
		{"Forget", func(tr *Tracker, now time.Time) Decision {
			tr.Forget("r0")
			return Decision{}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(roomy(), seeded(2))
			now := t0
			for i := 0; i < 6; i++ {
				tr.Exited("r0", now, 0)
			}
			if d := tr.Exited("r0", now, 0); !inJitter(d.Delay, 640*time.Millisecond) {
				t.Fatalf("7th fast death: delay %v, want ~640ms", d.Delay)
			}
			if d := tt.reset(tr, now); d.Delay != 0 {
				t.Fatalf("reset decision delay %v, want 0", d.Delay)
			}
			d := tr.Exited("r0", now, 0)
			if d.Reason != ReasonCrashLoop || !inJitter(d.Delay, 10*time.Millisecond) {
				t.Fatalf("fast death after reset: %+v, want crash_loop ~10ms", d)
			}
		})
	}
}

func TestTrackerSlotsIndependent(t *testing.T) {
	tr := NewTracker(roomy(), seeded(4))
	for i := 0; i < 5; i++ {
		tr.Exited("a", t0, 0) // a: 10, 20, 40, 80, 160ms
	}
	if d := tr.Exited("b", t0, 0); !inJitter(d.Delay, 10*time.Millisecond) {
		t.Fatalf("b's first fast death: delay %v, want ~10ms", d.Delay)
	}
	tr.Stable("b", t0)
	if d := tr.Exited("a", t0, 0); !inJitter(d.Delay, 320*time.Millisecond) {
		t.Fatalf("a's 6th fast death after b stable: delay %v, want ~320ms", d.Delay)
	}
	tr.Exited("b", t0, time.Minute)
	if d := tr.Exited("a", t0, 0); !inJitter(d.Delay, 640*time.Millisecond) {
		t.Fatalf("a's 7th fast death after b's stable exit: delay %v, want ~640ms", d.Delay)
	}
	tr.Forget("b")
	if d := tr.Exited("a", t0, 0); !inJitter(d.Delay, 1280*time.Millisecond) {
		t.Fatalf("a's 8th fast death after Forget(b): delay %v, want ~1280ms", d.Delay)
	}
}

// degrade drives tr (default policy) into degraded with MaxR+1 fast deaths
// one second apart starting at start, returning the time of the last.
func degrade(t *testing.T, tr *Tracker, start time.Time) time.Time {
	t.Helper()
	now := start
	p := tr.Policy()
	for i := 1; i <= p.MaxR+1; i++ {
		d := tr.Exited(fmt.Sprint("r", i%3), now, 0)
		if i <= p.MaxR && d.Degraded {
			t.Fatalf("restart %d: degraded too early: %+v", i, d)
		}
		if i == p.MaxR+1 {
			if !d.BecameDegraded || !d.Degraded || d.RestartsInWindow != p.MaxR+1 {
				t.Fatalf("restart %d: %+v, want BecameDegraded with %d in window", i, d, p.MaxR+1)
			}
			return now
		}
		now = now.Add(time.Second)
	}
	panic("unreachable")
}

func TestTrackerDegradesOnIntensity(t *testing.T) {
	p := DefaultPolicy()
	tr := NewTracker(p, seeded(5))
	now := degrade(t, tr, t0) // 11th restart at t0+10s
	if !tr.Degraded() {
		t.Fatal("Degraded() = false after 11 restarts in 60s")
	}
	for i, uptime := range []time.Duration{0, time.Hour, 10 * time.Millisecond, 2 * time.Second, 0} {
		now = now.Add(time.Second)
		d := tr.Exited("r1", now, uptime)
		if d.BecameDegraded || !d.Degraded || d.Reason != ReasonDegraded {
			t.Fatalf("exit %d while degraded: %+v, want degraded without BecameDegraded", i, d)
		}
		if !inJitter(d.Delay, p.MaxDelay) {
			t.Fatalf("exit %d while degraded: delay %v outside [%v, %v]", i, d.Delay, p.MaxDelay/2, p.MaxDelay)
		}
		if d.RestartsInWindow != p.MaxR+1 {
			t.Fatalf("exit %d: RestartsInWindow %d, want saturated at %d", i, d.RestartsInWindow, p.MaxR+1)
		}
	}
}

func TestTrackerIntensityWindowEdge(t *testing.T) {
	tests := []struct {
		name     string
		last     time.Duration // offset of the 11th restart from the 1st
		degraded bool
	}{
		{"11th just inside MaxT", time.Minute - time.Nanosecond, true},
		{"11th exactly MaxT later", time.Minute, false},
		{"11th well after", 2 * time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(DefaultPolicy(), seeded(6))
			tr.Exited("r0", t0, time.Hour)
			for i := 0; i < 9; i++ {
				tr.Exited("r0", t0.Add(time.Second), time.Hour)
			}
			d := tr.Exited("r0", t0.Add(tt.last), time.Hour)
			if d.Degraded != tt.degraded || d.BecameDegraded != tt.degraded {
				t.Fatalf("11th restart: %+v, want degraded=%v", d, tt.degraded)
			}
			if !tt.degraded && (d.Delay != 0 || d.Reason != ReasonStableExit) {
				t.Fatalf("11th restart not degraded: %+v, want immediate stable_exit", d)
			}
		})
	}
}

func TestTrackerRecoveryViaStable(t *testing.T) {
	p := DefaultPolicy()
	tr := NewTracker(p, seeded(8))
	last := degrade(t, tr, t0) // restarts at t0 .. t0+10s

	if tr.Stable("r1", last.Add(5*time.Second)) {
		t.Fatal("Stable recovered while 11 restarts still in window")
	}
	if rec, next := tr.Recheck(last.Add(5 * time.Second)); rec || next != 45*time.Second {
		// Stable since the last exit: only waiting for t0's restart to age out at t0+60s.
		t.Fatalf("Recheck = %v, %v; want false, 45s", rec, next)
	}
	if !tr.Degraded() {
		t.Fatal("Degraded() = false before recovery")
	}
	if !tr.Stable("r2", t0.Add(time.Minute)) {
		t.Fatal("Stable at t0+60s did not recover (10 in window, stable since last exit)")
	}
	if tr.Degraded() {
		t.Fatal("Degraded() = true after recovery")
	}
	if tr.Stable("r2", t0.Add(time.Minute)) {
		t.Fatal("second Stable reported recovered again")
	}
	if rec, next := tr.Recheck(t0.Add(time.Minute)); rec || next != 0 {
		t.Fatalf("Recheck after recovery = %v, %v; want false, 0", rec, next)
	}
	// Back to normal: a stable exit restarts at once, which makes 11 in the
	// window again, so the lane degrades a second time, announced again.
	d := tr.Exited("r0", t0.Add(time.Minute), time.Hour)
	if !d.BecameDegraded || d.Reason != ReasonDegraded || !inJitter(d.Delay, p.MaxDelay) {
		t.Fatalf("11th restart in window after recovery: %+v, want BecameDegraded again", d)
	}
}

func TestTrackerRecoveryViaRecheck(t *testing.T) {
	p := DefaultPolicy()
	tr := NewTracker(p, seeded(9))
	last := degrade(t, tr, t0) // t0+10s

	// No runner stable since the last exit: wait for the window to empty.
	rec, next := tr.Recheck(last)
	if rec || next != p.MaxT {
		t.Fatalf("Recheck at last exit = %v, %v; want false, %v", rec, next, p.MaxT)
	}
	// Count has dropped to <= MaxR at t0+60s, but nothing was stable.
	if rec, next := tr.Recheck(t0.Add(time.Minute)); rec || next != 10*time.Second {
		t.Fatalf("Recheck at t0+60s = %v, %v; want false, 10s", rec, next)
	}
	if rec, _ := tr.Recheck(last.Add(next - time.Nanosecond)); rec {
		t.Fatal("recovered before all exits aged out")
	}
	if n := tr.RestartsInWindow(last.Add(next - time.Nanosecond)); n != 1 {
		t.Fatalf("RestartsInWindow just before aging out = %d, want 1", n)
	}
	if rec, next := tr.Recheck(last.Add(next)); !rec || next != 0 {
		t.Fatalf("Recheck after all exits aged out = %v, %v; want true, 0", rec, next)
	}
	if tr.Degraded() {
		t.Fatal("Degraded() = true after recovery")
	}
	if rec, next := tr.Recheck(last.Add(2 * time.Minute)); rec || next != 0 {
		t.Fatalf("Recheck when healthy = %v, %v; want false, 0", rec, next)
	}
}

func TestTrackerExitClearsStableSince(t *testing.T) {
	tr := NewTracker(DefaultPolicy(), seeded(10))
	last := degrade(t, tr, t0) // t0 .. t0+10s
	tr.Stable("r0", last.Add(time.Second))
	exit := last.Add(2 * time.Second) // a fast death after the Stable report
	if d := tr.Exited("r1", exit, 0); d.Reason != ReasonDegraded {
		t.Fatalf("exit while degraded: %+v", d)
	}
	// At t0+62s the window holds t0+3s..t0+10s and the new exit (9 <= MaxR),
	// but nothing has been stable since that exit: wait for it to age out.
	if rec, next := tr.Recheck(t0.Add(62 * time.Second)); rec || next != exit.Add(time.Minute).Sub(t0.Add(62*time.Second)) {
		t.Fatalf("Recheck = %v, %v; want false, until %v ages out", rec, next, exit)
	}
	if !tr.Stable("r1", t0.Add(63*time.Second)) {
		t.Fatal("Stable with 9 in window did not recover")
	}
}

func TestTrackerRecheckNotDegraded(t *testing.T) {
	tr := NewTracker(DefaultPolicy(), seeded(11))
	if rec, next := tr.Recheck(t0); rec || next != 0 {
		t.Fatalf("Recheck on fresh tracker = %v, %v; want false, 0", rec, next)
	}
	tr.Exited("r0", t0, 0)
	if rec, next := tr.Recheck(t0); rec || next != 0 {
		t.Fatalf("Recheck after one exit = %v, %v; want false, 0", rec, next)
	}
	if tr.Stable("r0", t0) {
		t.Fatal("Stable on healthy lane reported recovered")
	}
}

func TestTrackerWindowBounded(t *testing.T) {
	p := DefaultPolicy()
	p.MaxR = 3
	tr := NewTracker(p, seeded(12))
	now := t0
	for i := 0; i < 1000; i++ {
		d := tr.Exited("r0", now, 0)
		if d.RestartsInWindow > p.MaxR+1 {
			t.Fatalf("exit %d: RestartsInWindow %d > MaxR+1", i, d.RestartsInWindow)
		}
		now = now.Add(time.Millisecond)
	}
	if tr.win.n != p.MaxR+1 || len(tr.win.buf) != p.MaxR+1 {
		t.Fatalf("window holds %d in a buffer of %d, want %d", tr.win.n, len(tr.win.buf), p.MaxR+1)
	}
	if n := tr.RestartsInWindow(now); n != p.MaxR+1 {
		t.Fatalf("RestartsInWindow = %d, want %d", n, p.MaxR+1)
	}
	if n := tr.RestartsInWindow(now.Add(p.MaxT)); n != 0 {
		t.Fatalf("RestartsInWindow after MaxT = %d, want 0", n)
	}
	// A huge MaxR allocates only what is used.
	p.MaxR = 1 << 40
	tr = NewTracker(p, seeded(12))
	for i := 0; i < 20; i++ {
		tr.Exited("r0", t0, 0)
	}
	if tr.win.n != 20 || len(tr.win.buf) > 32 {
		t.Fatalf("window holds %d in a buffer of %d, want 20 in <= 32", tr.win.n, len(tr.win.buf))
	}
	for i := 0; i < 20; i++ {
		if !tr.win.at(i).Equal(t0) {
			t.Fatalf("entry %d = %v after growth", i, tr.win.at(i))
		}
	}
}

func TestTrackerNilRandAndSeedDeterminism(t *testing.T) {
	run := func(rnd *rand.Rand) []time.Duration {
		tr := NewTracker(roomy(), rnd)
		var ds []time.Duration
		for i := 0; i < 20; i++ {
			ds = append(ds, tr.Exited("r0", t0, 0).Delay)
		}
		return ds
	}
	a, b := run(seeded(42)), run(seeded(42))
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("same seed, different delays:\n%v\n%v", a, b)
	}
	for i, d := range run(nil) {
		if d <= 0 || d > roomy().MaxDelay {
			t.Fatalf("nil rand: delay %d = %v", i, d)
		}
	}
}

// model is a straightforward reference implementation of the policy with an
// unbounded list of restart times, to check the bounded Tracker against.
type model struct {
	p        Policy
	exits    []time.Time
	fast     map[string]int
	degraded bool
	stable   bool
}

func (m *model) count(now time.Time) int {
	n := 0
	for _, e := range m.exits {
		if now.Sub(e) < m.p.MaxT {
			n++
		}
	}
	return n
}

// prune forgets exits that can never count again (time only moves forward).
func (m *model) prune(now time.Time) {
	i := 0
	for i < len(m.exits) && now.Sub(m.exits[i]) >= m.p.MaxT {
		i++
	}
	m.exits = m.exits[i:]
}

func (m *model) tryRecover(now time.Time) bool {
	if c := m.count(now); m.degraded && (c == 0 || (c <= m.p.MaxR && m.stable)) {
		m.degraded = false
		return true
	}
	return false
}

// backoff returns the un-jittered crash-loop delay, by repeated doubling in
// float to avoid sharing the Tracker's overflow logic.
func (m *model) backoff(n int) time.Duration {
	d := float64(m.p.BaseDelay)
	for i := 1; i < n && d < float64(m.p.MaxDelay); i++ {
		d *= 2
	}
	if d >= float64(m.p.MaxDelay) {
		return m.p.MaxDelay
	}
	return time.Duration(d)
}

func TestTrackerPropertyNeverHotLoops(t *testing.T) {
	var became, viaStable, viaRecheck int
	for seed := uint64(0); seed < 300; seed++ {
		r := seeded(1000 + seed)
		p := Policy{
			Stable:    time.Duration(1+r.IntN(2000)) * time.Millisecond,
			BaseDelay: time.Duration(1 + r.Int64N(int64(50*time.Millisecond))),
			MaxR:      1 + r.IntN(15),
			MaxT:      time.Duration(1+r.IntN(120)) * time.Second,
		}
		p.MaxDelay = p.BaseDelay + time.Duration(r.Int64N(int64(time.Minute)))
		if seed%10 == 0 {
			p.BaseDelay, p.MaxDelay = 1, 1+time.Duration(r.IntN(3))
		}
		tr := NewTracker(p, seeded(seed))
		m := &model{p: p, fast: map[string]int{}}
		slots := []string{"a", "b", "c", "d"}[:1+r.IntN(4)]
		now := t0
		for step := 0; step < 400; step++ {
			now = now.Add(time.Duration(r.Int64N(int64(p.MaxT / 4))))
			slot := slots[r.IntN(len(slots))]
			m.prune(now)
			ctx := fmt.Sprintf("seed %d step %d policy %+v", seed, step, p)
			switch op := r.IntN(10); {
			case op < 6:
				uptime := time.Duration(r.Int64N(int64(2 * p.Stable)))
				wasDegraded := m.degraded
				m.exits = append(m.exits, now)
				m.stable = false
				if m.count(now) > p.MaxR {
					m.degraded = true
				}
				isStable := uptime >= p.Stable
				if isStable {
					delete(m.fast, slot)
				} else {
					m.fast[slot]++
				}

				d := tr.Exited(slot, now, uptime)
				if d.Delay < 0 || d.Delay > p.MaxDelay {
					t.Fatalf("%s: delay %v outside [0, MaxDelay]", ctx, d.Delay)
				}
				if d.Delay == 0 && (!isStable || d.Degraded) {
					t.Fatalf("%s: zero delay for uptime %v, degraded %v", ctx, uptime, d.Degraded)
				}
				if d.Degraded != m.degraded || d.BecameDegraded != (m.degraded && !wasDegraded) {
					t.Fatalf("%s: %+v, model degraded %v (was %v)", ctx, d, m.degraded, wasDegraded)
				}
				if d.BecameDegraded {
					became++
				}
				if want := min(m.count(now), p.MaxR+1); d.RestartsInWindow != want {
					t.Fatalf("%s: RestartsInWindow %d, want %d", ctx, d.RestartsInWindow, want)
				}
				switch {
				case m.degraded:
					if d.Reason != ReasonDegraded || !inJitter(d.Delay, p.MaxDelay) {
						t.Fatalf("%s: degraded decision %+v, want [%v, %v]", ctx, d, p.MaxDelay-p.MaxDelay/2, p.MaxDelay)
					}
				case isStable:
					if d.Reason != ReasonStableExit || d.Delay != 0 {
						t.Fatalf("%s: stable exit %+v, want immediate", ctx, d)
					}
				default:
					want := m.backoff(m.fast[slot])
					if d.Reason != ReasonCrashLoop || !inJitter(d.Delay, want) {
						t.Fatalf("%s: fast death #%d %+v, want crash_loop in [%v, %v]", ctx, m.fast[slot], d, want-want/2, want)
					}
				}
			case op < 8:
				delete(m.fast, slot)
				m.stable = true
				want := m.tryRecover(now)
				if got := tr.Stable(slot, now); got != want {
					t.Fatalf("%s: Stable = %v, want %v", ctx, got, want)
				}
				if want {
					viaStable++
				}
			case op < 9:
				want := m.tryRecover(now)
				got, next := tr.Recheck(now)
				if got != want {
					t.Fatalf("%s: Recheck = %v, want %v", ctx, got, want)
				}
				if want {
					viaRecheck++
				}
				if (next > 0) != m.degraded || next < 0 || next > p.MaxT {
					t.Fatalf("%s: Recheck next = %v with degraded %v", ctx, next, m.degraded)
				}
				if next > 0 {
					// Nothing changes by time alone before next ...
					probe := *m
					if probe.tryRecover(now.Add(next - 1)) {
						t.Fatalf("%s: model recovers before next = %v", ctx, next)
					}
					// ... and at next the count condition has moved.
					if m.stable {
						if c := m.count(now.Add(next)); c > p.MaxR {
							t.Fatalf("%s: at next = %v count still %d", ctx, next, c)
						}
					} else if c := m.count(now.Add(next)); c != 0 {
						t.Fatalf("%s: at next = %v window still holds %d", ctx, next, c)
					}
				}
			default:
				delete(m.fast, slot)
				tr.Forget(slot)
			}
			if tr.Degraded() != m.degraded {
				t.Fatalf("%s: Degraded() = %v, model %v", ctx, tr.Degraded(), m.degraded)
			}
			if got, want := tr.RestartsInWindow(now), min(m.count(now), p.MaxR+1); got != want {
				t.Fatalf("%s: RestartsInWindow = %d, want %d", ctx, got, want)
			}
			if tr.win.n > p.MaxR+1 || len(tr.win.buf) > p.MaxR+1 {
				t.Fatalf("%s: window %d entries, buffer %d", ctx, tr.win.n, len(tr.win.buf))
			}
		}
	}
	t.Logf("degraded %d times, recovered %d via Stable, %d via Recheck", became, viaStable, viaRecheck)
	if became < 100 || viaStable < 50 || viaRecheck < 50 {
		t.Fatalf("random runs too tame: degraded %d, recovered via Stable %d, via Recheck %d", became, viaStable, viaRecheck)
	}
}

func BenchmarkExited(b *testing.B) {
	tr := NewTracker(DefaultPolicy(), seeded(1))
	slots := []string{"r0", "r1", "r2", "r3"}
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(700 * time.Millisecond)
		slot := slots[i%len(slots)]
		d := tr.Exited(slot, now, time.Duration(i%3)*600*time.Millisecond)
		if d.Delay > time.Minute {
			b.Fatal(d)
		}
		if i%5 == 0 {
			tr.Stable(slot, now)
		}
		if d.Degraded {
			tr.Recheck(now)
		}
	}
}
