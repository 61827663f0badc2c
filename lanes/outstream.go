package lanes

import (
	"context"
	"errors"
	"github.com/orchestrd/orchestrd/platform/bufpool"
	"io"
	"sync"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
)

// A job's output as a stream with flow control (see ARCHITECTURE.md,
// "Backpressure"). The job actor writes every chunk its runner sends into
// the job's outStream, which keeps the record's capped copy and, while
// readers are attached, the bytes the slowest of them has not taken yet.
// Readers (run, logs -f, /execute/stream) each read at their own offset and
// lose nothing from where they attached. The daemon acknowledges the
// runner's output (wire.OutputAck) only as far as the slowest reader has
// read plus what the buffer may hold, so a reader that stalls stalls the
// job (its runner stops reading its pipe), never the daemon's memory; with
// no reader attached the job runs at full speed.
const (
	// OutputWindow is what a runner may send of a job's output beyond what
	// the daemon acknowledged (RunnerConfig.output_window).
	OutputWindow = 1 << 20
	// outputBuffer is what the daemon holds of a job's output for its
	// slowest reader before it stops acknowledging: at most this much
	// beyond the slowest reader, plus a window in flight.
	outputBuffer = 2 << 20
	// outputHardCap is how far behind a reader may fall at all. Only a
	// runner that does not take acknowledgements (a Loopr runner), or a
	// job's last bytes after its exit, get there: past it the reader skips
	// ahead to outputBuffer behind and is told what it missed (a gap).
	outputHardCap = 4 << 20
	// readMerge is the most Next joins from small chunks into one piece.
	readMerge = 64 << 10
)

// Streams of a piece of output.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	// StreamOutput is kept output whose stream is not known: the record
	// keeps stdout and stderr as they came, together.
	StreamOutput = "output"
)

// Reasons a reader misses bytes (OutputPiece.GapReason).
const (
	// GapNotKept: bytes written before the reader attached, past what the
	// job's record keeps (max_output_bytes), or dropped from memory.
	GapNotKept = "not_kept"
	// GapBehind: the reader fell outputHardCap behind a runner that does
	// not take acknowledgements; the daemon does not hold more for it.
	GapBehind = "behind"
)

// ErrReaderClosed is returned by Next once the reader is closed.
var ErrReaderClosed = errors.New("output reader closed")

// OutputPiece is what Next returns: bytes of the job's output at Offset,
// or a gap: bytes [Offset, Offset+Gap) the reader will not get.
type OutputPiece struct {
	Offset    int64
	Stream    string
	Data      []byte
	Gap       int64
	GapReason string
}

type outPiece struct {
	off    int64
	stream string
	data   []byte
	buf    *chunkBuf // data's pooled buffer (a routed chunk), or nil
}

// chunkBuf is a routed chunk's buffer (outRoutes), from chunkPools, so that
// output at full speed does not allocate a buffer a chunk (and keep the
// garbage collector busy). The stream's piece and each reader handed its
// bytes hold a reference, counted under the stream's lock; the last to let
// go puts it back.
type chunkBuf struct {
	b    []byte
	refs int
	// whole is the pooled buffer b lies in (an OutputRaw frame's payload,
	// b its chunk), what goes back; nil: b itself.
	whole []byte
}

// chunkPool holds routed chunks' buffers: in classes from 8 KiB to 512
// KiB (lanes/runner's largest chunk), each twice the last, so a buffer is
// at most twice the chunk it holds and a stalled reader's retained bytes
// cost at most twice their size; a smaller chunk gets a buffer of its own
// size. A few of each class are kept once a burst is over.
var chunkPool = bufpool.New(chunkPoolMin, 512<<10, 8)

const chunkPoolMin = 8 << 10

// getChunk is a buffer for n bytes, unreferenced.
func getChunk(n int) *chunkBuf {
	if n < chunkPoolMin {
		return &chunkBuf{b: make([]byte, 0, n)}
	}
	return &chunkBuf{b: chunkPool.Get(n)}
}

// release drops a reference (the stream's lock held, or the buffer not yet
// written into a stream); the last one puts the buffer back.
func (c *chunkBuf) release() {
	c.refs--
	if c.refs == 0 {
		if c.whole != nil {
			chunkPool.Put(c.whole)
		} else {
			chunkPool.Put(c.b)
		}
		c.b, c.whole = nil, nil
	}
}

// outStream is one job's output. Its job actor writes (or its runner
// connection's reader: writeRouted); readers read from any goroutine.
type outStream struct {
	sh    *shared
	jobID string
	keep  int // max_output_bytes: the record's copy

	mu      sync.Mutex
	kept    []byte
	total   int64      // every byte written
	pieces  []outPiece // retained for readers: [base, total)
	base    int64
	readers map[*OutputReader]struct{}
	// ack tells the job's runner how far its output is acknowledged; nil
	// while the job is on no runner. acked is the last acknowledgement.
	ack   func(acked int64)
	acked int64
	ended bool
	final api.JobRecord
	// actor is the job's actor, where job.stdin goes; over once it ended.
	actor actors.Ref
	over  bool
	early []any // for the actor, before it started
	// unread, when set, is called once the last reader of a stream that
	// has not ended detaches (a cluster job's mirror stops following).
	unread func()
	// sealed: the job actor ended the job; its runner connection's reader
	// writes nothing more (writeRouted). wasRouted: it wrote some.
	sealed, wasRouted bool
}

func (s *outStream) setActor(sys *actors.System, ref actors.Ref) {
	s.mu.Lock()
	s.actor = ref
	for _, m := range s.early {
		sys.Send(ref, m)
	}
	s.early = nil
	s.mu.Unlock()
}

// gone: the job ended; its actor takes no more stdin.
func (s *outStream) gone() {
	s.mu.Lock()
	s.over = true
	s.mu.Unlock()
}

// toActor hands m to the job's actor (kept for it until it has started),
// unless the job has ended (false). Sent under the lock, so nothing
// reaches the actor after gone.
func (s *outStream) toActor(sys *actors.System, m any) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.over:
		return false
	case s.actor.IsZero():
		s.early = append(s.early, m) // one job.stdin at a time: bounded
	default:
		sys.Send(s.actor, m)
	}
	return true
}

func newOutStream(sh *shared, jobID string, keep int) *outStream {
	return &outStream{sh: sh, jobID: jobID, keep: keep}
}

// finishedStream is the stream of a job that ended: its record's kept
// output, then what it did not keep.
func finishedStream(sh *shared, rec api.JobRecord) *outStream {
	s := &outStream{sh: sh, jobID: rec.ID, ended: true, final: rec}
	if rec.State != api.StateError { // an error's output is why it could not run
		s.kept, s.total = []byte(rec.Output), max(rec.OutputBytes, int64(len(rec.Output)))
	}
	s.base = s.total
	s.final.Output = ""
	return s
}

// snapshot is a stream that ends now: what s kept so far, rec as it is.
func (s *outStream) snapshot(rec api.JobRecord) *outStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec.Output = ""
	return &outStream{sh: s.sh, jobID: s.jobID, kept: s.kept[:len(s.kept):len(s.kept)], total: s.total,
		base: s.total, ended: true, final: rec}
}

// write adds a chunk of the job's output: kept up to the record's cap,
// retained while readers are attached. The job actor writes, or its
// runner connection's reader (writeRouted); one of them a job.
func (s *outStream) write(stream string, p []byte) {
	s.mu.Lock()
	s.writeLocked(stream, p, nil)
}

// writeLocked is write with s.mu held; it unlocks it. buf, if not nil,
// is p's pooled buffer: the stream holds it while it retains p, else it
// goes back at once.
func (s *outStream) writeLocked(stream string, p []byte, buf *chunkBuf) {
	if room := s.keep - len(s.kept); room > 0 {
		s.kept = appendKept(s.kept, p[:min(len(p), room)], s.keep)
	}
	if len(s.readers) > 0 {
		s.pieces = append(s.pieces, outPiece{off: s.total, stream: stream, data: p, buf: buf})
	} else if buf != nil {
		buf.release() // copied into the record's copy, if at all
	}
	s.total += int64(len(p))
	// An observer that falls outputBuffer behind skips ahead to half
	// that, and hears of the gap: it never holds the job back.
	skipped := false
	for r := range s.readers {
		if r.observer && s.total-max(r.off, r.pin) > outputBuffer {
			r.pin, r.behind, skipped = s.total-outputBuffer/2, true, true
		}
	}
	if skipped {
		s.trimLocked()
	}
	if len(s.readers) == 0 {
		s.base = s.total
	} else if s.total-s.minPinLocked() > outputHardCap {
		// A runner that ignores acknowledgements: the readers furthest
		// behind skip ahead, and hear of the gap.
		to := s.total - outputBuffer
		for r := range s.readers {
			if max(r.off, r.pin) < to {
				r.pin, r.behind = to, true
			}
		}
		s.trimLocked()
	}
	for r := range s.readers {
		r.signal()
	}
	ack, n := s.ackLocked()
	s.mu.Unlock()
	if n >= 0 {
		ack(n)
	}
}

// writeRouted is write for the runner connection's reader (outRoutes),
// which hands a job's output to its stream without the actors: false, and
// nothing written, once the job actor sealed the stream (the job ended).
// The stream takes buf's reference: buf must not be used after the call.
func (s *outStream) writeRouted(stream string, buf *chunkBuf) bool {
	s.mu.Lock()
	if s.sealed || s.ended {
		s.mu.Unlock()
		buf.release()
		return false
	}
	s.wasRouted = true
	s.writeLocked(stream, buf.b, buf)
	return true
}

// seal: the job ended; its runner's reader writes no more (writeRouted).
func (s *outStream) seal() {
	s.mu.Lock()
	s.sealed = true
	s.mu.Unlock()
}

// routed says whether the runner connection's reader wrote any output.
func (s *outStream) routed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wasRouted
}

// appendKept appends p to kept, growing it by doubling up to keep at most:
// append's own growth for large slices (a quarter at a time) would copy a
// megabyte of output five times over.
func appendKept(kept, p []byte, keep int) []byte {
	if need := len(kept) + len(p); need > cap(kept) {
		grown := make([]byte, len(kept), min(max(2*cap(kept), need, 4<<10), keep))
		copy(grown, kept)
		kept = grown
	}
	return append(kept, p...)
}

// keptFrom is what the record's copy holds from off on, and every byte the
// job wrote so far: bytes of the copy never change once kept (appendKept
// only appends, or copies to a larger array), so the slice may be read
// without the lock.
func (s *outStream) keptFrom(off int) ([]byte, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	off = min(off, len(s.kept))
	return s.kept[off:len(s.kept):len(s.kept)], s.total
}

// record fills rec's output fields from what the stream kept and counted.
func (s *outStream) record(rec *api.JobRecord) {
	s.mu.Lock()
	rec.Output = string(s.kept)
	rec.OutputBytes = s.total
	rec.OutputTruncated = rec.OutputBytes > int64(len(s.kept))
	s.mu.Unlock()
}

// onRunner sets where acknowledgements go (nil: the job is on no runner);
// it starts from nothing acknowledged, as a runner does, and acknowledges
// at once what is due: a runner's reader writes the job's first chunks
// (outRoutes) before the job's actor hears of the JobAck that calls this,
// and a runner that sent its whole window by then waits for this one.
func (s *outStream) onRunner(ack func(int64)) {
	s.mu.Lock()
	s.ack, s.acked = ack, 0
	ack, n := s.ackLocked()
	s.mu.Unlock()
	if n >= 0 {
		ack(n)
	}
}

// end marks the stream over with the job's terminal record: readers get
// what they have not read yet, then io.EOF.
func (s *outStream) end(rec api.JobRecord) {
	s.mu.Lock()
	s.ended, s.ack = true, nil
	rec.Output = ""
	s.final = rec
	for r := range s.readers {
		r.signal()
	}
	s.mu.Unlock()
}

// minPinLocked is the offset the slowest reader still needs.
func (s *outStream) minPinLocked() int64 { return s.minPin(true) }

// minPin is where the slowest reader is; observers counts the readers
// that hold nothing back (the dashboard's), for what memory keeps, or
// not, for how far the runner is acknowledged.
func (s *outStream) minPin(observers bool) int64 {
	m := s.total
	for r := range s.readers {
		if r.observer && !observers {
			continue
		}
		m = min(m, max(r.off, r.pin))
	}
	return m
}

// trimLocked lets go of what every reader has taken.
func (s *outStream) trimLocked() {
	pin := s.minPinLocked()
	i := 0
	for i < len(s.pieces) && s.pieces[i].off+int64(len(s.pieces[i].data)) <= pin {
		if b := s.pieces[i].buf; b != nil {
			b.release()
		}
		s.pieces[i] = outPiece{}
		i++
	}
	s.pieces = s.pieces[i:]
	if len(s.pieces) == 0 {
		s.pieces = nil
		s.base = max(s.base, pin)
		if len(s.readers) == 0 {
			s.base = s.total
		}
	} else {
		s.base = max(s.base, s.pieces[0].off)
	}
}

// ackLocked says how far to acknowledge now, if that moved on by a
// quarter window: everything with no reader, else up to what keeps the
// buffer beyond the slowest reader within outputBuffer. n < 0: nothing.
func (s *outStream) ackLocked() (func(int64), int64) {
	if s.ack == nil || s.ended {
		return nil, -1
	}
	target := s.total
	if pin := s.minPin(false); pin < s.total {
		target = min(target, pin+outputBuffer-OutputWindow)
	}
	if target < s.acked+OutputWindow/4 {
		return nil, -1
	}
	s.acked = target
	return s.ack, target
}

// attach adds a reader: from the start when the stream has not begun
// (a reader attached at submission), else the kept bytes, a gap to what is
// retained, then live.
func (s *outStream) attach(who string, observer bool) *OutputReader {
	r := &OutputReader{s: s, who: who, wake: make(chan struct{}, 1), observer: observer}
	s.mu.Lock()
	r.pin = s.base
	if !s.ended {
		if s.readers == nil {
			s.readers = map[*OutputReader]struct{}{}
		}
		s.readers[r] = struct{}{}
	}
	s.mu.Unlock()
	return r
}

// OutputReader reads one job's output at its own pace: every byte from
// where it attached (before that, what the record keeps), then io.EOF
// once the job has ended and its record is committed. While it is
// attached and behind, the job's runner is not acknowledged past it. Close
// it when done; Next and Close may be called from different goroutines.
type OutputReader struct {
	s      *outStream
	who    string
	wake   chan struct{}
	off    int64 // the next byte to deliver
	pin    int64 // the reader needs no retained byte below this
	behind bool  // pushed ahead by the hard cap: the next gap is GapBehind
	// observer: the reader holds nothing back; past outputBuffer behind it
	// skips ahead (a gap, GapBehind). Set before it is attached.
	observer bool
	closed   bool
	buf      []byte // where small chunks are joined; reused by each Next
	// lent: the pooled buffer of the piece Next returned last; its Data
	// is the caller's until the next call, which lets it go.
	lent *chunkBuf

	delivered, missed int64
}

func (r *OutputReader) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Next waits for the next piece of output (or gap), io.EOF once the job
// has ended and everything was delivered, ctx's error, or ErrReaderClosed.
// The piece's Data is valid until the next call.
func (r *OutputReader) Next(ctx context.Context) (OutputPiece, error) {
	s := r.s
	for {
		s.mu.Lock()
		if r.lent != nil {
			r.lent.release()
			r.lent = nil
		}
		if r.closed {
			s.mu.Unlock()
			return OutputPiece{}, ErrReaderClosed
		}
		if p, ok := r.nextLocked(); ok {
			if len(s.pieces) > 0 && s.readers != nil {
				s.trimLocked()
			}
			ack, n := s.ackLocked()
			s.mu.Unlock()
			if n >= 0 {
				ack(n)
			}
			return p, nil
		}
		if s.ended {
			s.mu.Unlock()
			return OutputPiece{}, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-r.wake:
		case <-ctx.Done():
			return OutputPiece{}, ctx.Err()
		}
	}
}

// nextLocked takes the next piece or gap, if there is one.
func (r *OutputReader) nextLocked() (OutputPiece, bool) {
	s := r.s
	if r.off >= s.total {
		return OutputPiece{}, false
	}
	base := max(s.base, r.pin)
	if r.off < base {
		if r.off < int64(len(s.kept)) {
			end := min(int64(len(s.kept)), base)
			p := OutputPiece{Offset: r.off, Stream: StreamOutput, Data: s.kept[r.off:end:end]}
			r.off = end
			r.delivered += int64(len(p.Data))
			return p, true
		}
		p := OutputPiece{Offset: r.off, Gap: base - r.off, GapReason: GapNotKept}
		if r.behind {
			p.GapReason, r.behind = GapBehind, false
		}
		r.off = base
		r.missed += p.Gap
		return p, true
	}
	// In the retained pieces: find r.off, join what follows of the same
	// stream up to readMerge.
	i := 0
	for i < len(s.pieces) && s.pieces[i].off+int64(len(s.pieces[i].data)) <= r.off {
		i++
	}
	if i == len(s.pieces) {
		return OutputPiece{}, false
	}
	first := s.pieces[i]
	data := first.data[r.off-first.off:]
	if len(data) < readMerge && i+1 < len(s.pieces) && s.pieces[i+1].stream == first.stream &&
		len(data)+len(s.pieces[i+1].data) <= readMerge {
		if r.buf == nil {
			r.buf = make([]byte, 0, readMerge)
		}
		buf := append(r.buf[:0], data...)
		for j := i + 1; j < len(s.pieces) && s.pieces[j].stream == first.stream && len(buf)+len(s.pieces[j].data) <= readMerge; j++ {
			buf = append(buf, s.pieces[j].data...)
		}
		data = buf
	}
	if first.buf != nil && len(data) > 0 && &data[0] == &first.data[r.off-first.off] {
		first.buf.refs++ // handed out as it is, not joined into r.buf
		r.lent = first.buf
	}
	p := OutputPiece{Offset: r.off, Stream: first.stream, Data: data}
	r.off += int64(len(data))
	r.delivered += int64(len(data))
	return p, true
}

// Hold keeps the bytes of the piece Next returned last as they are past
// the next call, until release runs (once, from any goroutine): a pusher
// that writes them later (job.stream's binary pieces, the socket taking
// them) need not copy them. nil: the piece lies in no chunk of the stream's
// pool (the record's kept bytes, small chunks joined in the reader's
// buffer, which the next call reuses); copy it.
func (r *OutputReader) Hold() (release func()) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c := r.lent
	if c == nil {
		return nil
	}
	c.refs++
	return func() {
		s.mu.Lock()
		c.release()
		s.mu.Unlock()
	}
}

// Close detaches the reader at once: the job is no longer held back by
// it. reason says why in job.stream_closed: "ended" (read to its end),
// "detached" (its client went away or stopped early).
func (r *OutputReader) Close(reason string) { r.close(reason, true) }

func (r *OutputReader) close(reason string, emit bool) {
	s := r.s
	s.mu.Lock()
	if r.closed {
		s.mu.Unlock()
		return
	}
	r.closed = true
	delete(s.readers, r)
	s.trimLocked()
	ack, n := s.ackLocked()
	delivered, missed := r.delivered, r.missed
	var unread func()
	if len(s.readers) == 0 && !s.ended {
		unread = s.unread
	}
	s.mu.Unlock()
	if n >= 0 {
		ack(n)
	}
	if unread != nil {
		unread()
	}
	r.signal()
	if emit && s.sh != nil {
		s.sh.bus.Emit(JobStreamClosed{JobID: s.jobID, Reader: r.who, Reason: reason, Bytes: delivered, Missed: missed})
	}
}

// Record is the job's terminal record once Next returned io.EOF (its
// output only for a job that ended in error: why it could not run); the
// record as it was for a reader of a running job that does not follow.
func (r *OutputReader) Record() api.JobRecord {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.final
}

// Counts says how many bytes the reader delivered and missed so far.
func (r *OutputReader) Counts() (delivered, missed int64) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.delivered, r.missed
}

// JobID is the job the reader reads.
func (r *OutputReader) JobID() string { return r.s.jobID }
