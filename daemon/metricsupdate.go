package daemon

import (
	"maps"
	"sync"
	"time"

	"github.com/orchestrd/orchestrd/loops"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// MetricsUpdate is Loopr's metrics.update: the loop counts, pushed to
// subscribers (Loopr's subscribe includes it) when they change, at most
// once per metricsInterval. Ephemeral: the counts are derived, and every
// change behind them is a loop.* line of the log already. Its kind is
// Loopr's name, not a noun.verb_past, because Loopr's client matches it.
type MetricsUpdate struct {
	RunningLoops int            `json:"running_loops"`
	Loops        map[string]int `json:"loops"` // by status
}

func (MetricsUpdate) Kind() string { return "metrics.update" }
func (MetricsUpdate) Ephemeral()   {}

func init() { eventlog.Register(MetricsUpdate{}) }

// metricsInterval is the least time between two metrics.update events.
const metricsInterval = time.Second

// metricsSettle is how long after a change the counts are read: the
// loops supervisor recounts on a message that follows the loop's event.
const metricsSettle = 20 * time.Millisecond

// metricsUpdater is the hook behind metrics.update. Changed (never
// blocking, from any goroutine, under any lock: nothing is read or
// emitted on the caller's goroutine) says the counts may have changed; the
// updater reads counts() on a timer of its own, metricsSettle later but
// not sooner than metricsInterval after the last update, and emits them
// if they differ from the last sent. Counts that have not changed yet
// (the count lags the event) are read once more an interval later.
type metricsUpdater struct {
	bus    *eventlog.Bus
	counts func() MetricsUpdate
	every  time.Duration
	settle time.Duration

	mu      sync.Mutex
	last    time.Time // when the last update was emitted
	sent    *MetricsUpdate
	timer   *time.Timer // armed: a read is due
	recheck bool        // the due read is the second for its change
	closed  bool
}

func newMetricsUpdater(bus *eventlog.Bus, counts func() MetricsUpdate) *metricsUpdater {
	return &metricsUpdater{bus: bus, counts: counts, every: metricsInterval, settle: metricsSettle}
}

// Changed says the counts may have changed.
func (u *metricsUpdater) Changed() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	if u.timer != nil {
		if !u.recheck {
			return // a read is due: it will see this change too
		}
		u.timer.Stop() // a recheck is due: this change reads sooner
	}
	u.recheck = false
	u.timer = time.AfterFunc(max(u.settle, u.every-time.Since(u.last)), u.fire)
}

// fire is the timer's: read the counts, send them if they changed.
func (u *metricsUpdater) fire() {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.timer = nil
	m := u.counts()
	if m.Loops == nil {
		m.Loops = map[string]int{}
	}
	if u.sent != nil && u.sent.RunningLoops == m.RunningLoops && maps.Equal(u.sent.Loops, m.Loops) {
		if !u.recheck {
			u.recheck = true
			u.timer = time.AfterFunc(u.every, u.fire)
		} else {
			u.recheck = false
		}
		u.mu.Unlock()
		return
	}
	u.recheck = false
	u.sent, u.last = &m, time.Now()
	u.mu.Unlock()
	u.bus.Emit(m)
}

// Close stops the updater: a due update is dropped, later changes are
// ignored.
func (u *metricsUpdater) Close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	if u.timer != nil {
		u.timer.Stop()
		u.timer = nil
	}
}

// loopMetrics is metrics.update over the loops domain: every loop.created,
// loop.updated and loop.deleted on the bus is a change; the counts are the
// loops supervisor's. stop unsubscribes and closes it.
func loopMetrics(bus *eventlog.Bus, m *loops.Manager) (stop func()) {
	u := newMetricsUpdater(bus, func() MetricsUpdate {
		by, running := m.Counts()
		out := MetricsUpdate{RunningLoops: running, Loops: make(map[string]int, len(by))}
		for s, n := range by {
			out.Loops[string(s)] = n
		}
		return out
	})
	unsub := bus.Subscribe([]string{"loop.created", "loop.updated", "loop.deleted"}, changeSink(u.Changed))
	return func() { unsub(); u.Close() }
}

// changeSink calls f for every record: f must not block.
type changeSink func()

func (f changeSink) Deliver(*eventlog.Record) { f() }
