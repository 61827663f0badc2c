package fleet

import (
	"maps"
	"slices"
	"strconv"
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
// does not parse, comes from an older node and is taken in arrival order.
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
