package runner

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"

	"github.com/orchestrd/orchestrd/wire"
)

// Output credit (wire.CapOutputCredit). A daemon that gave the runner an
// output window acknowledges each job's output as its readers take it; a
// job's pumps read its pipes only while less than the window is sent and
// unacknowledged, so a job whose output nobody takes blocks on its write,
// as it would on a real pipe, and the runner holds nothing. Once the job's
// process has exited what is left in its pipes goes without waiting (at
// most the pipes' buffers), so its Result is not held up by a slow reader.

// waitCredit blocks until the job may send more output.
func (j *job) waitCredit() {
	w := j.r.window
	if w <= 0 {
		return
	}
	j.mu.Lock()
	for !j.exited && j.sent-j.acked >= w {
		j.credit.Wait()
	}
	j.mu.Unlock()
}

// sendChunk sends an OutputChunk: base64 to a daemon that gave an output
// window (orchestrd's, which reads it: a third of the size and work of an
// array), an array of numbers (serde's Vec<u8>) to any other.
func (r *runner) sendChunk(c *wire.OutputChunk) {
	if r.raw {
		r.sendOutputRaw(c)
		return
	}
	if r.window <= 0 {
		_ = r.send(wire.TypeOutputChunk, c)
		return
	}
	b, err := wire.MarshalOutputChunkBase64(c)
	if err != nil {
		r.log.Error().Err(err).Msg("encoding frame")
		return
	}
	_ = r.sendRaw(wire.TypeOutputChunk, b)
}

// sendOutputRaw sends an OutputRaw frame: its header and the chunk in one
// writev, the chunk neither copied nor encoded.
func (r *runner) sendOutputRaw(c *wire.OutputChunk) {
	var hb [wire.HeaderSize + 2 + 255]byte
	hdr, err := wire.AppendOutputRaw(hb[:0], &wire.OutputChunk{JobID: c.JobID, Stream: c.Stream})
	if err != nil {
		r.log.Error().Err(err).Msg("encoding frame")
		return
	}
	n := uint32(len(hdr) - wire.HeaderSize + len(c.Chunk))
	binary.BigEndian.PutUint32(hdr, n)
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.werr != nil {
		return
	}
	bufs := net.Buffers{hdr, c.Chunk}
	if _, err := bufs.WriteTo(r.conn); err != nil {
		_ = r.lostDaemon(fmt.Errorf("writing %s frame: %w", wire.TypeOutputRaw, err))
	}
}

// outputAcked takes an OutputAck: the job's pumps may read again.
func (r *runner) outputAcked(a wire.OutputAck) {
	r.mu.Lock()
	j := r.jobs[a.JobID]
	r.mu.Unlock()
	if j == nil {
		return
	}
	j.mu.Lock()
	if n := int64(min(a.Acked, 1<<62)); n > j.acked {
		j.acked = n
		j.credit.Broadcast()
	}
	j.mu.Unlock()
}

// stdinChunk takes a StdinChunk for a running (or starting) job; one for a
// job that is gone or does not stream its stdin is dropped.
func (r *runner) stdinChunk(c wire.StdinChunk) {
	r.mu.Lock()
	j := r.jobs[c.JobID]
	r.mu.Unlock()
	if j == nil || j.in == nil {
		return
	}
	j.in.push(c.Data, c.EOF)
}

// stdinStream is a job's stdin as it comes in StdinChunk frames: queued
// here (the daemon sends at most its window unacknowledged) until the
// job's writer goroutine writes them into its pipe.
type stdinStream struct {
	mu     sync.Mutex
	queue  [][]byte
	eof    bool
	wake   chan struct{} // cap 1
	closed chan struct{} // closed by close: the job is over
	once   sync.Once
}

func newStdinStream() *stdinStream {
	return &stdinStream{wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (s *stdinStream) push(data []byte, eof bool) {
	s.mu.Lock()
	if len(data) > 0 && !s.eof {
		s.queue = append(s.queue, data)
	}
	s.eof = s.eof || eof
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next waits for the next piece: data, or eof once the queue is empty.
// ok is false once the stream is closed.
func (s *stdinStream) next() (data []byte, eof, ok bool) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			data = s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return data, false, true
		}
		eof = s.eof
		s.mu.Unlock()
		if eof {
			return nil, true, true
		}
		select {
		case <-s.wake:
		case <-s.closed:
			return nil, false, false
		}
	}
}

func (s *stdinStream) close() { s.once.Do(func() { close(s.closed) }) }
