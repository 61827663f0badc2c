package clanker

import (
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/platform/beneath"
	"github.com/orchestrd/orchestrd/state"
)

// Store is the durable record of the repos (the daemon's state store).
type Store interface {
	// Load reads one repo's records.
	Load(repo string) (state.ClankerSnapshot, error)
	// Repos returns every recorded repo's state (JSON), by path.
	Repos() (map[string][]byte, error)
	// Commit queues c and returns at once; done is called (from another
	// goroutine) once c is committed or has failed. An error is a refusal
	// at once (the queue is full, the store closed): done is not called.
	Commit(c state.ClankerCommit, done func(error)) error
}

// Listener serves a repo's socket: it hands each request line to h and
// writes its answer. The daemon's front-end (clanker/ipc) is one.
// dir, when not nil, is the socket's directory, opened beneath the repo
// without following a link: the socket is bound in it through its
// descriptor, never through socket's path (an agent may have linked a
// directory on the way elsewhere), and dir is the Listener's to close
// (with the Closer, or at once on an error). nil: socket is outside the
// repo, the operator's own path.
type Listener func(socket string, dir *beneath.Dir, repo string, h Handler) (Closer, error)

// Closer stops a repo's socket. Close stops accepting at once (the socket
// file removed: a restarted repo may make it again) and returns without
// waiting for the connections: drained is closed once each has ended (the
// request under way answered within a short grace, then closed). A repo's
// actor calls it from Receive, which never blocks.
type Closer interface {
	Close() (drained <-chan struct{}, err error)
}

// ConnLister is a Closer that lists its connections (clanker/ipc's):
// at most max of those open now, the oldest first, and how many are open.
type ConnLister interface {
	Conns(max int) ([]api.ConnInfo, int)
}

// Handler takes one request of a pod: reply is called once, with the
// response's data (JSON) or the error to answer: from the repo's actor,
// or before Handle returns when the answer reads nothing the actor owns
// (a hello). payload is read before reply is called, never after.
type Handler interface {
	Handle(typ string, payload []byte, reply func(data []byte, err error))
}
