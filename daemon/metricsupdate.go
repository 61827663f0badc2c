package daemon

import (
	"sync"
	"time"

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

// metricsUpdater is the hook behind metrics.update: the loops domain calls
// Changed (never blocking, from any goroutine) whenever its counts may
// have changed; the updater emits one MetricsUpdate with counts() at once
// when the last was at least metricsInterval ago, else once that interval
// is over (however many changes came meanwhile). counts must not block.
type metricsUpdater struct {
	bus    *eventlog.Bus
	counts func() MetricsUpdate
	every  time.Duration

	mu     sync.Mutex
	last   time.Time   // when the last update was emitted
	timer  *time.Timer // armed: an update is due at last+every
	closed bool
}

func newMetricsUpdater(bus *eventlog.Bus, counts func() MetricsUpdate) *metricsUpdater {
	return &metricsUpdater{bus: bus, counts: counts, every: metricsInterval}
}

// Changed says the counts may have changed.
func (u *metricsUpdater) Changed() {
	u.mu.Lock()
	if u.closed || u.timer != nil {
		u.mu.Unlock()
		return // one is due already: it will read the counts then
	}
	if wait := u.every - time.Since(u.last); wait > 0 {
		u.timer = time.AfterFunc(wait, u.fire)
		u.mu.Unlock()
		return
	}
	u.last = time.Now()
	u.mu.Unlock()
	u.emit()
}

// fire is the timer's: the update that was due.
func (u *metricsUpdater) fire() {
	u.mu.Lock()
	u.timer = nil
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.last = time.Now()
	u.mu.Unlock()
	u.emit()
}

func (u *metricsUpdater) emit() {
	m := u.counts()
	if m.Loops == nil {
		m.Loops = map[string]int{}
	}
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
