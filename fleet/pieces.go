package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"maps"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// A job's output reaches the output stream as pieces, each carrying the
// offset of its first byte in the job's output (stdout and stderr
// together, in the order the runner read them) in hdrOffset. The node
// running the job publishes up to pubWindow pieces before their
// acknowledgements; a piece whose publication fails (a leader election of
// the stream) is published again, and so lands after pieces that follow
// it, or twice when only its acknowledgement was lost. Readers put the
// pieces back in order with an assembler.
const hdrOffset = "Orchestrd-Offset"

// heldMax and heldPiecesMax bound what an assembler holds waiting for a
// gap to fill: twice what a publisher can have in flight, in bytes and in
// pieces (a piece published again lands at most pubWindow-1 places late).
// A gap that outlives them never fills (the piece's publication failed for
// good, or the stream's limits dropped it): the assembler skips it. The
// count bound also keeps drain's scans short when pieces are small.
const (
	heldMax       = 2 * pubWindow * pieceMax
	heldPiecesMax = 2 * pubWindow
)

// parseOffset reads a piece's offset header: decimal digits only, at most
// 18 of them (no sign, no spaces). A piece without one, or with one that
// does not parse, is not its taker's (checkPiece drops it).
func parseOffset(h string) (int64, bool) {
	if h == "" || len(h) > 18 {
		return 0, false
	}
	for i := 0; i < len(h); i++ {
		if h[i] < '0' || h[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(h, 10, 64)
	return n, err == nil
}

// assembler gives a job's output pieces to emit in offset order, each byte
// once. It is owned by one reader (no lock).
type assembler struct {
	next      int64 // offset of the next byte to emit
	held      map[int64]heldPiece
	heldBytes int
	skipped   int64 // bytes in gaps skipped (lost)
	emit      func(stream string, data []byte) error
}

type heldPiece struct {
	stream string
	data   []byte
}

func newAssembler(emit func(stream string, data []byte) error) *assembler {
	return &assembler{emit: emit}
}

// add takes one piece as read from the stream. hasOff false: an older
// node's piece, taken as the next bytes.
func (a *assembler) add(off int64, hasOff bool, stream string, data []byte) error {
	if !hasOff {
		off = a.next
	}
	if off > a.next {
		if _, dup := a.held[off]; dup || len(data) == 0 {
			return nil
		}
		if a.held == nil {
			a.held = map[int64]heldPiece{}
		}
		a.held[off] = heldPiece{stream, data}
		a.heldBytes += len(data)
		for a.heldBytes > heldMax || len(a.held) > heldPiecesMax {
			// The lowest gap will not fill: skip it.
			if err := a.skipGap(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := a.take(off, stream, data); err != nil {
		return err
	}
	return a.drain()
}

// take emits what of a piece at off <= next is new.
func (a *assembler) take(off int64, stream string, data []byte) error {
	if end := off + int64(len(data)); end > a.next {
		fresh := data[a.next-off:]
		a.next = end
		return a.emit(stream, fresh)
	}
	return nil // a piece published twice
}

// drain emits the held pieces that are now in order.
func (a *assembler) drain() error {
	for len(a.held) > 0 {
		progressed := false
		for off, p := range a.held {
			if off > a.next {
				continue
			}
			delete(a.held, off)
			a.heldBytes -= len(p.data)
			if err := a.take(off, p.stream, p.data); err != nil {
				return err
			}
			progressed = true
		}
		if !progressed {
			return nil
		}
	}
	return nil
}

// skipGap moves next to the lowest held piece, counting the bytes skipped,
// and emits what is then in order.
func (a *assembler) skipGap() error {
	if len(a.held) == 0 {
		return nil
	}
	low := slices.Min(slices.Collect(maps.Keys(a.held)))
	if low > a.next {
		a.skipped += low - a.next
		a.next = low
	}
	return a.drain()
}

// flush ends the output: held pieces are emitted in order, gaps skipped.
func (a *assembler) flush() error {
	for len(a.held) > 0 {
		if err := a.skipGap(); err != nil {
			return err
		}
	}
	return nil
}

// Who may write a job's output (issue 37): its taker only. A piece is
// published on outSubj(id, taker) (a node's NATS permissions let it
// publish only on its own: orchestrd.out.*.<node>) and carries the
// taker's signature (hdrSig) of the job, the node, its offset, its stream
// and a SHA-256 of its bytes (pieceMsg). Readers read the taker's subject
// of the job's take claim only and check each piece against the claim's
// key; a piece that fails is dropped and told (cluster.output_refused,
// once per job and reason). A MAC key handed to the readers would let
// every reader forge: each piece is signed (ed25519 over a digest: about
// 25 µs a piece, plus the digest, 1 GB/s; a reader's check about 60 µs).
const hdrSig = "Orchestrd-Sig"

// outSubj is the subject of job id's output written by node.
func outSubj(id, node string) string { return outSubjPfx + id + "." + node }

// pieceMsg is what a piece's writer signs.
func pieceMsg(id, node string, off int64, stream string, data []byte) []byte {
	h := sha256.Sum256(data)
	b := make([]byte, 0, 64+len(id)+len(node)+len(stream)+len(h))
	b = append(b, "orchestrd output\n"...)
	b = append(b, id...)
	b = append(b, '\n')
	b = append(b, node...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, off, 10)
	b = append(b, '\n')
	b = append(b, stream...)
	b = append(b, '\n')
	return append(b, h[:]...)
}

// checkPiece says whether a piece read on job id's taker's subject is
// the taker's (c): its offset, its stream, or why not.
func checkPiece(c takeClaim, id string, h nats.Header, data []byte) (int64, string, string) {
	off, ok := parseOffset(h.Get(hdrOffset))
	if !ok {
		return 0, "", "a piece without its offset (not a piece of the taker's)"
	}
	stream := h.Get(hdrStream)
	if stream != "stdout" && stream != "stderr" {
		return 0, "", "a piece of no output stream"
	}
	sig, err := base64.RawURLEncoding.DecodeString(h.Get(hdrSig))
	if err != nil || len(sig) == 0 {
		return 0, "", "a piece not signed (a node of an earlier version, or a forgery)"
	}
	if c.key == nil || c.key.Verify(pieceMsg(id, c.Node, off, stream, data), sig) != nil {
		return 0, "", "a piece not signed by the job's taker " + c.Node
	}
	return off, stream, ""
}

// outputTaker is job id's take claim, which says whose output to read;
// false: none yet (or one refused: no output is read).
func (f *Fleet) outputTaker(ctx context.Context, id string) (takeClaim, bool, error) {
	c, found, err := f.readClaim(ctx, id)
	if re, ok := isRefused(err); ok {
		f.refused(re)
		return takeClaim{}, false, nil
	}
	return c, found, err
}

// outputRefused tells a piece of job id's output dropped, once per job
// and reason: a warning and cluster.output_refused.
func (f *Fleet) outputRefused(id, taker, why string) {
	if !f.firstRefusal("output|" + id + "|" + why) {
		return
	}
	f.log.Warn().Str("job_id", eventlog.Ident(id)).Str("taker", eventlog.Ident(taker)).Str("why", why).Msg("dropped a piece of a cluster job's output not written by its taker")
	f.emit(ClusterOutputRefused{JobID: eventlog.Ident(id), Taker: eventlog.Ident(taker), Why: why})
}
