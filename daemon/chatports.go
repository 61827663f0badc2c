package daemon

import "github.com/orchestrd/orchestrd/executors"

// chatPools tells whether an executor pool can answer: it is configured
// and one of its executors is up (idle or busy).
type chatPools struct{ m *executors.Manager }

// Ready reports whether pool has an executor up.
func (p chatPools) Ready(pool string) bool {
	if pool == "" {
		return false
	}
	st, ok := p.m.Pool(pool)
	if !ok {
		return false
	}
	for _, e := range st.Executors {
		if e.State == "idle" || e.State == "busy" {
			return true
		}
	}
	return false
}

// readyFunc is Ready for one pool, as status's llm_ready asks it.
func (p chatPools) readyFunc(pool string) func() bool { return func() bool { return p.Ready(pool) } }
