package clanker

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orchestrd/orchestrd/wire"
)

// A hello's answer is always {"ok":true} (a payload that is not an object
// aside): it reads nothing the repo owns. So a connection answers it on
// its own goroutine, after leaving what it says (and when) in the repo's
// seenPods. The repo's actor, which owns its pods, applies what waits
// there before it takes any message (takeSeen): whatever reads the pods
// (a task_request, a status, the tick that marks pods stale) comes after
// every hello already answered, and a hello costs the actor nothing until
// then.

// maxSeenPending bounds the pods whose hellos wait for the actor: past it
// a hello of another pod goes through the actor, as every other request
// does.
const maxSeenPending = 256

// seenHello is a pod's hellos since the actor last took them, merged as
// if applied in order (the last role said, the last worktree).
type seenHello struct {
	wire.ClankerHello
	at time.Time
}

// seenPods holds hellos answered but not yet applied, by pod.
// Connections add; the repo's actor takes.
type seenPods struct {
	waiting atomic.Bool // pending is not empty: the actor's cheap look
	mu      sync.Mutex
	pending map[string]seenHello
}

// add leaves h, said at at, to be applied; false when too many pods wait
// already.
func (s *seenPods) add(h wire.ClankerHello, at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok := s.pending[h.PodID]
	if !ok && len(s.pending) >= maxSeenPending {
		return false
	}
	if s.pending == nil {
		s.pending = map[string]seenHello{}
	}
	if h.Role == "" {
		h.Role = prev.Role
	}
	s.pending[h.PodID] = seenHello{h, at}
	s.waiting.Store(true)
	return true
}

// take returns the hellos waiting (nil: none) and forgets them.
func (s *seenPods) take() map[string]seenHello {
	if !s.waiting.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	s.waiting.Store(false)
	return p
}

// hello answers a hello on the caller's goroutine; false when the actor
// must (a payload that is not an object is refused there, and said; a
// full seenPods waits).
func (h repoHandler) hello(payload []byte) bool {
	p, ok := wire.DecodeClankerHello(payload)
	if !ok {
		return false
	}
	if !helloNames(p) {
		return true // it changes nothing
	}
	return h.seen.add(p, h.m.now())
}

// takeSeen applies the hellos answered since the actor last looked.
func (r *repo) takeSeen() {
	if r.seen == nil {
		return
	}
	for _, p := range r.seen.take() {
		r.podHello(p.ClankerHello, p.at)
	}
}

// helloNames: the hello names a pod the repo may keep.
func helloNames(p wire.ClankerHello) bool { return p.PodID != "" && podName(p.PodID) == nil }

// hello is the handler of a hello the actor is handed (from the spool, or
// one a full seenPods sent on): the same effect.
func hello(r *repo, ch *change, p map[string]json.RawMessage) ([]byte, error) {
	r.podHello(wire.ClankerHello{PodID: optString(p, "podId"), Role: optString(p, "role"), Worktree: optString(p, "worktree")}, r.now())
	return okData, nil
}

// podHello marks the pod a hello names alive with the role (when said)
// and worktree it says, as seen at at.
func (r *repo) podHello(p wire.ClankerHello, at time.Time) {
	if !helloNames(p) {
		return
	}
	pd := r.pod(p.PodID)
	if p.Role != "" {
		pd.role = p.Role
	}
	pd.worktree = p.Worktree
	pd.lastSeen, pd.stale = at, false
}
