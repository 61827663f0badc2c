package lanes

import (
	"bytes"
	"sync"

	"github.com/orchestrd/orchestrd/wire"
)

// outRoutes: a runner connection's reader (readLoop) hands each OutputRaw
// chunk to its job's outStream itself, not through the runner's and the
// job's actors (two mailbox hops a chunk). The runner actor keeps the
// table as it keeps r.jobs: a job is routed from before its Job frame is
// written until its Result is taken (or the runner is lost), so every chunk
// of a routed job goes this way, in the order the runner sent it, and
// before the Result that ends it. A chunk for a job not routed goes
// through the actors as before (and is dropped there, as then, for a job
// the runner does not hold). The job's actor seals the stream when the job
// ends (outStream.seal): a chunk read after that is not written.
type outRoutes struct {
	mu sync.Mutex
	m  map[string]*outStream
}

func newOutRoutes() *outRoutes { return &outRoutes{m: map[string]*outStream{}} }

func (t *outRoutes) set(jobID string, out *outStream) {
	t.mu.Lock()
	t.m[jobID] = out
	t.mu.Unlock()
}

func (t *outRoutes) del(jobID string) {
	t.mu.Lock()
	delete(t.m, jobID)
	t.mu.Unlock()
}

// clear drops every route: the connection is gone.
func (t *outRoutes) clear() {
	t.mu.Lock()
	clear(t.m)
	t.mu.Unlock()
}

func (t *outRoutes) get(jobID []byte) *outStream {
	t.mu.Lock()
	out := t.m[string(jobID)]
	t.mu.Unlock()
	return out
}

// allocFrame is the runner connection's FrameReader.Alloc: an OutputRaw
// frame's payload is read into a pooled buffer, which its chunk then lives
// in (routeOutputRaw), not copied out of the reader's.
func allocFrame(t wire.MsgType, n int) []byte {
	if t != wire.TypeOutputRaw || n < chunkPoolMin {
		return nil
	}
	return chunkPool.Get(n)
}

// routeOutputRaw writes an OutputRaw frame's chunk into its job's stream
// if the job is routed. It returns what the runner actor is still to be
// told (nil: nothing): the chunk itself for a job not routed, or, while
// someone listens for job.output, that it was written, for the job's actor
// to put on the bus in order with the job's other events. owned: payload
// is the caller's, from allocFrame (its chunk is written as it lies in
// it); else it is the frame reader's, and copied.
func (t *outRoutes) routeOutputRaw(sh *shared, payload []byte, owned bool) (any, error) {
	id, s, chunk, err := wire.ParseOutputRaw(payload)
	if err != nil {
		if owned {
			chunkPool.Put(payload)
		}
		return nil, err
	}
	out := t.get(id)
	if out == nil {
		if !owned {
			chunk = bytes.Clone(chunk)
		}
		return wire.OutputChunk{JobID: string(id), Stream: s, Chunk: chunk}, nil
	}
	if len(chunk) == 0 {
		if owned {
			chunkPool.Put(payload)
		}
		return nil, nil
	}
	var ev any
	if sh != nil && sh.bus.Wants("job.output") {
		// The stream's copy goes back to the pool once read: the event
		// has its own.
		ev = outputWritten{jobID: string(id), stream: s, data: bytes.Clone(chunk)}
	}
	buf := &chunkBuf{b: chunk, refs: 1, whole: payload}
	if !owned {
		buf = getChunk(len(chunk))
		buf.b = append(buf.b[:0], chunk...)
		buf.refs = 1
	}
	if !out.writeRouted(streamName(streamIndex(s)), buf) {
		return nil, nil
	}
	return ev, nil
}

// outputWritten: a routed chunk was written into its job's stream; the job's
// actor says so on the bus (job.output).
type outputWritten struct {
	jobID  string
	stream wire.Stream
	data   []byte
}
