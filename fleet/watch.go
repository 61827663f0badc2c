package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// jobWatch is one watch of the whole jobs bucket per node, shared by every
// waiter on that node. A watch per waiter made (and deleted) a consumer
// per job.wait, each a round of the JetStream meta group on every server:
// at tens of jobs a second that, not the jobs, was the fleet's limit.
//
// The watch runs while someone waits and stops after watchIdle without a
// waiter. It is a hint, never the only way: a waiter also reads its record
// once the watch is live and every pollTerminal, so an update lost while
// the watch was being made again costs time, not the end.
type jobWatch struct {
	mu      sync.Mutex
	waiters map[string]map[chan jobEntry]struct{}
	n       int           // waiters in all
	live    chan struct{} // closed once the current watch delivers updates
	want    chan struct{} // a waiter came: start the watch (cap 1)
}

// watchIdle: how long the watch stays up with nobody waiting.
const watchIdle = 30 * time.Second

func newJobWatch() *jobWatch {
	return &jobWatch{waiters: map[string]map[chan jobEntry]struct{}{}, live: make(chan struct{}),
		want: make(chan struct{}, 1)}
}

// add registers a waiter for id's end. live is closed once the watch is
// delivering updates (then a read of the record misses nothing after it).
func (w *jobWatch) add(id string) (ch chan jobEntry, live <-chan struct{}, remove func()) {
	ch = make(chan jobEntry, 1)
	w.mu.Lock()
	m := w.waiters[id]
	if m == nil {
		m = map[chan jobEntry]struct{}{}
		w.waiters[id] = m
	}
	m[ch] = struct{}{}
	w.n++
	live = w.live
	w.mu.Unlock()
	select {
	case w.want <- struct{}{}:
	default:
	}
	return ch, live, func() {
		w.mu.Lock()
		if m := w.waiters[id]; m != nil {
			if _, ok := m[ch]; ok {
				delete(m, ch)
				w.n--
			}
			if len(m) == 0 {
				delete(w.waiters, id)
			}
		}
		w.mu.Unlock()
	}
}

// deliver hands a terminal record to id's waiters (never blocking: each
// waiter's channel holds one end, and one is all it takes).
func (w *jobWatch) deliver(id string, e jobEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[id] {
		select {
		case ch <- e:
		default:
		}
	}
}

// waiting: id has a waiter.
func (w *jobWatch) waiting(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiters[id]) > 0
}

func (w *jobWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// setLive marks the watch live (closing the channel waiters hold) or not
// (a new channel for the next watch).
func (w *jobWatch) setLive(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.live:
		if !on {
			w.live = make(chan struct{})
		}
	default:
		if on {
			close(w.live)
		}
	}
}

// watchJobs owns the shared watch: made when a waiter comes, made again
// when it breaks, stopped after watchIdle with nobody waiting.
func (f *Fleet) watchJobs() {
	defer f.wg.Done()
	w := f.jw
	for {
		if w.count() == 0 {
			select {
			case <-f.ctx.Done():
				return
			case <-w.want:
			}
		}
		kw, err := f.jobs.WatchAll(f.ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
		if err != nil {
			if f.ctx.Err() != nil {
				return
			}
			f.log.Debug().Err(err).Msg("watching the cluster jobs: trying again")
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		w.setLive(true) // updates only: delivering from its making on
		f.runWatch(kw)
		_ = kw.Stop()
		w.setLive(false)
		if f.ctx.Err() != nil {
			return
		}
	}
}

// runWatch delivers kw's updates until it breaks, the fleet stops, or
// nobody has waited for watchIdle.
func (f *Fleet) runWatch(kw jetstream.KeyWatcher) {
	w := f.jw
	idle := time.NewTicker(watchIdle)
	defer idle.Stop()
	quiet := false
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-w.want:
			quiet = false
		case <-idle.C:
			if w.count() > 0 {
				quiet = false
				continue
			}
			if quiet {
				return
			}
			quiet = true
		case e, ok := <-kw.Updates():
			if !ok {
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if !w.waiting(e.Key()) {
				continue
			}
			je, err := f.readJob(e.Key(), e.Value())
			if err == nil && je.Record.State.Terminal() {
				ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
				err = f.checkClaim(ctx, je)
				cancel()
				if err == nil {
					w.deliver(e.Key(), je)
				}
			}
			if re, ok := isRefused(err); ok {
				f.refused(re)
			}
		}
	}
}
