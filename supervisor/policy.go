package supervisor

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"
)

// Restart policy for the runners of one lane.
//
// Two mechanisms work together, in the style of Nomad's restart tracker
// (an exit goes in, a delay and a reason come out) and OTP's restart
// intensity (MaxR restarts in MaxT):
//
//   - Per runner slot, a runner that dies before it has been up Stable gets
//     capped exponential backoff with equal jitter; one that dies after being
//     up at least Stable is restarted at once and its backoff resets.
//   - Per lane, more than MaxR restarts within MaxT mark the lane degraded.
//     While degraded every restart waits about MaxDelay (jittered between
//     MaxDelay/2 and MaxDelay). The lane recovers once the window holds at
//     most MaxR restarts and some runner has been stable since the last exit
//     (or all exits have aged out of the window).
//
// A Tracker never hands out a zero delay except for a death after at least
// Stable uptime while the lane is not degraded, so a lane never hot-loops.

// Reasons carried in Decision.Reason (and runner.restart_scheduled).
const (
	ReasonStableExit = "stable_exit" // up at least Stable: restart at once
	ReasonCrashLoop  = "crash_loop"  // died too soon: exponential backoff
	ReasonDegraded   = "degraded"    // lane over its restart intensity: at the cap
)

// Policy is the restart configuration of a lane. Field names in error
// messages follow the config keys (restart.stable, restart.base_delay, ...).
type Policy struct {
	Stable    time.Duration // uptime after which a runner counts as stable
	BaseDelay time.Duration // backoff after the first fast death
	MaxDelay  time.Duration // backoff cap; also the delay while degraded
	MaxR      int           // more than MaxR restarts ...
	MaxT      time.Duration // ... within MaxT degrade the lane
}

// DefaultPolicy returns the default restart policy: stable after 1s,
// backoff 10ms doubling to 30s, degraded on more than 10 restarts in 60s.
func DefaultPolicy() Policy {
	return Policy{
		Stable:    time.Second,
		BaseDelay: 10 * time.Millisecond,
		MaxDelay:  30 * time.Second,
		MaxR:      10,
		MaxT:      60 * time.Second,
	}
}

// Validate reports every invalid field, each message naming its config key.
// All durations must be > 0, MaxDelay >= BaseDelay and MaxR >= 1.
func (p Policy) Validate() error {
	var errs []error
	if p.Stable <= 0 {
		errs = append(errs, errors.New("restart.stable must be > 0"))
	}
	if p.BaseDelay <= 0 {
		errs = append(errs, errors.New("restart.base_delay must be > 0"))
	}
	if p.MaxDelay <= 0 {
		errs = append(errs, errors.New("restart.max_delay must be > 0"))
	} else if p.BaseDelay > 0 && p.MaxDelay < p.BaseDelay {
		errs = append(errs, errors.New("restart.max_delay must be >= restart.base_delay"))
	}
	if p.MaxR < 1 {
		errs = append(errs, errors.New("restart.max_r must be >= 1"))
	}
	if p.MaxT <= 0 {
		errs = append(errs, errors.New("restart.max_t must be > 0"))
	}
	return errors.Join(errs...)
}

// Decision is what to do about one runner exit.
type Decision struct {
	Delay  time.Duration // wait this long before restarting the slot
	Reason string        // ReasonStableExit, ReasonCrashLoop or ReasonDegraded
	// RestartsInWindow counts restarts within MaxT including this one. Only
	// the newest MaxR+1 are kept, so it saturates at MaxR+1 ("more than MaxR").
	RestartsInWindow int
	Degraded         bool // lane degraded after this decision
	BecameDegraded   bool // this decision crossed into degraded (emit lane.degraded once)
}

// Tracker applies a Policy to one lane. It is pure bookkeeping: time comes
// in as arguments (non-decreasing), randomness from the given source. It is
// not safe for concurrent use; the lane actor owns it.
//
// Timer protocol for the owner: whenever Degraded() is true after Exited or
// Stable, call Recheck(now) and arm a timer for the returned next (if > 0);
// when it fires call Recheck again. Stable and Recheck return recovered
// exactly once per degraded episode (emit lane.recovered then).
type Tracker struct {
	p    Policy
	rnd  *rand.Rand
	fast map[string]int // consecutive fast deaths per slot; absent = 0
	win  window         // lane-wide restart times, oldest first

	degraded bool
	// stableSinceExit: some runner reported Stable after the last exit.
	stableSinceExit bool
}

// NewTracker returns a Tracker for p. A nil rnd means a source seeded from
// the current time. NewTracker panics if p does not Validate: policies come
// from configuration, which must be validated when it is loaded.
func NewTracker(p Policy, rnd *rand.Rand) *Tracker {
	if err := p.Validate(); err != nil {
		panic("supervisor: invalid restart policy: " + err.Error())
	}
	if rnd == nil {
		now := uint64(time.Now().UnixNano())
		rnd = rand.New(rand.NewPCG(now, now^0x9e3779b97f4a7c15))
	}
	return &Tracker{
		p:    p,
		rnd:  rnd,
		fast: make(map[string]int),
		win:  window{max: p.MaxR + 1},
	}
}

// Policy returns the tracker's policy.
func (t *Tracker) Policy() Policy { return t.p }

// Exited records that slot's runner exited at now after being up for uptime,
// counts the restart against the lane's intensity and says when to restart.
func (t *Tracker) Exited(slot string, now time.Time, uptime time.Duration) Decision {
	t.win.prune(now, t.p.MaxT)
	t.win.push(now)
	t.stableSinceExit = false

	d := Decision{RestartsInWindow: t.win.n}
	if !t.degraded && t.win.n > t.p.MaxR {
		t.degraded = true
		d.BecameDegraded = true
	}
	d.Degraded = t.degraded

	stable := uptime >= t.p.Stable
	if stable {
		delete(t.fast, slot)
	} else if n := t.fast[slot]; n < math.MaxInt {
		t.fast[slot] = n + 1
	}

	switch {
	case t.degraded:
		d.Reason = ReasonDegraded
		d.Delay = t.jitter(t.p.MaxDelay)
	case stable:
		d.Reason = ReasonStableExit
	default:
		d.Reason = ReasonCrashLoop
		d.Delay = t.jitter(t.backoff(t.fast[slot]))
	}
	return d
}

// Stable records that slot's runner has been up for Stable. It resets the
// slot's backoff and reports whether this clears the lane's degraded state.
func (t *Tracker) Stable(slot string, now time.Time) (recovered bool) {
	delete(t.fast, slot)
	t.stableSinceExit = true
	return t.tryRecover(now)
}

// Recheck re-evaluates a degraded lane at now. recovered is true if the
// window now holds at most MaxR restarts and some runner has been stable
// since the last exit, or if every exit has aged out of the window. Otherwise,
// while degraded, next (> 0) is how long until the passage of time alone can
// change the answer; next is 0 when no recheck is needed.
func (t *Tracker) Recheck(now time.Time) (recovered bool, next time.Duration) {
	if t.tryRecover(now) {
		return true, 0
	}
	if !t.degraded {
		return false, 0
	}
	// Still degraded, so the window is not empty (tryRecover pruned it).
	var at time.Time
	if t.stableSinceExit {
		// Blocked only by the count: wait for it to drop to MaxR.
		at = t.win.at(t.win.n - t.p.MaxR - 1)
	} else {
		// Nothing stable since the last exit: wait for the window to empty.
		at = t.win.at(t.win.n - 1)
	}
	return false, at.Add(t.p.MaxT).Sub(now)
}

// Degraded reports whether the lane is degraded.
func (t *Tracker) Degraded() bool { return t.degraded }

// RestartsInWindow counts restarts within MaxT before now (saturating at
// MaxR+1, see Decision.RestartsInWindow).
func (t *Tracker) RestartsInWindow(now time.Time) int {
	n := t.win.n
	for i := 0; i < t.win.n && now.Sub(t.win.at(i)) >= t.p.MaxT; i++ {
		n--
	}
	return n
}

// Forget drops slot's backoff state; the slot was removed from the lane.
// Its past restarts still count towards the lane's intensity.
func (t *Tracker) Forget(slot string) { delete(t.fast, slot) }

func (t *Tracker) tryRecover(now time.Time) bool {
	if !t.degraded {
		return false
	}
	t.win.prune(now, t.p.MaxT)
	if t.win.n == 0 || (t.win.n <= t.p.MaxR && t.stableSinceExit) {
		t.degraded = false
		return true
	}
	return false
}

// backoff is the un-jittered delay after n >= 1 consecutive fast deaths:
// BaseDelay * 2^(n-1), capped at MaxDelay without overflowing.
func (t *Tracker) backoff(n int) time.Duration {
	d := t.p.BaseDelay
	for i := 1; i < n; i++ {
		if d > t.p.MaxDelay/2 {
			return t.p.MaxDelay
		}
		d *= 2
	}
	return min(d, t.p.MaxDelay)
}

// jitter applies equal jitter: d becomes d/2 + rand[0, d/2], rounded so the
// result lies in [ceil(d/2), d] and is never 0 for d > 0.
func (t *Tracker) jitter(d time.Duration) time.Duration {
	half := d / 2
	return d - half + time.Duration(t.rnd.Int64N(int64(half)+1))
}

// window is a FIFO of restart times holding at most max entries (the newest
// ones). Its ring buffer grows on demand, so a huge MaxR costs nothing until
// it is used.
type window struct {
	buf  []time.Time
	head int // index of the oldest entry
	n    int
	max  int
}

func (w *window) at(i int) time.Time { return w.buf[(w.head+i)%len(w.buf)] }

func (w *window) push(ts time.Time) {
	if w.n == w.max { // full (len(buf) == max): overwrite the oldest
		w.buf[w.head] = ts
		w.head = (w.head + 1) % len(w.buf)
		return
	}
	if w.n == len(w.buf) {
		buf := make([]time.Time, min(max(2*len(w.buf), 8), w.max))
		for i := 0; i < w.n; i++ {
			buf[i] = w.at(i)
		}
		w.buf, w.head = buf, 0
	}
	w.buf[(w.head+w.n)%len(w.buf)] = ts
	w.n++
}

// prune drops entries at least maxT old at now.
func (w *window) prune(now time.Time, maxT time.Duration) {
	for w.n > 0 && now.Sub(w.buf[w.head]) >= maxT {
		w.buf[w.head] = time.Time{}
		w.head = (w.head + 1) % len(w.buf)
		w.n--
	}
}
