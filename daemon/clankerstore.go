package daemon

import (
	"github.com/orchestrd/orchestrd/clanker"
	"github.com/orchestrd/orchestrd/state"
)

// clankerStore is the clanker domain's Store port (clanker.Store): the
// clanker repos' durable record in the state store (state/clanker.go).
type clankerStore struct{ st *state.Store }

var _ clanker.Store = clankerStore{}

func (s clankerStore) Load(repo string) (state.ClankerSnapshot, error) {
	return s.st.Clanker().Load(repo)
}

func (s clankerStore) Repos() (map[string][]byte, error) { return s.st.Clanker().Repos() }

func (s clankerStore) Commit(c state.ClankerCommit, done func(error)) error {
	return s.st.Enqueue(state.ClankerCommitted(c), done)
}
