package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// OutputRaw frames (CapOutputRaw) carry an OutputChunk without JSON or
// base64: the payload is one stream byte (0 stdout, 1 stderr), one byte of
// job id length, the job id, then the chunk's bytes as they are. A job's
// output crosses the runner's socket at its own size, and neither side
// encodes, scans or decodes it.

// AppendOutputRaw appends the OutputRaw frame of c (header included) to
// dst. The job id is at most 255 bytes and the stream Stdout or Stderr.
func AppendOutputRaw(dst []byte, c *OutputChunk) ([]byte, error) {
	var sb byte
	switch c.Stream {
	case Stdout:
	case Stderr:
		sb = 1
	default:
		return dst, fmt.Errorf("encoding OutputRaw: stream %q (want Stdout or Stderr)", c.Stream)
	}
	if len(c.JobID) > math.MaxUint8 {
		return dst, fmt.Errorf("encoding OutputRaw: a job id of %d bytes (at most 255)", len(c.JobID))
	}
	n := 2 + len(c.JobID) + len(c.Chunk)
	if uint64(n) > math.MaxUint32 {
		return dst, fmt.Errorf("encoding OutputRaw: %w: a %d-byte chunk does not fit in one frame", ErrFrameTooLarge, len(c.Chunk))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, byte(TypeOutputRaw), sb, byte(len(c.JobID)))
	dst = append(dst, c.JobID...)
	return append(dst, c.Chunk...), nil
}

// errShortOutputRaw is a payload cut before its chunk.
var errShortOutputRaw = errors.New("decoding OutputRaw payload: shorter than its job id")

// DecodeOutputRaw decodes an OutputRaw payload. The chunk is copied out of
// the payload (which aliases the frame reader's buffer); the job id is a
// new string.
func DecodeOutputRaw(p []byte) (OutputChunk, error) {
	id, s, chunk, err := ParseOutputRaw(p)
	if err != nil {
		return OutputChunk{}, err
	}
	c := OutputChunk{JobID: string(id), Stream: s}
	if len(chunk) > 0 {
		c.Chunk = append(Bytes(nil), chunk...)
	}
	return c, nil
}

// ParseOutputRaw is DecodeOutputRaw without copying: the job id and the
// chunk alias p.
func ParseOutputRaw(p []byte) (jobID []byte, s Stream, chunk []byte, err error) {
	if len(p) < 2 {
		return nil, "", nil, errShortOutputRaw
	}
	switch p[0] {
	case 0:
		s = Stdout
	case 1:
		s = Stderr
	default:
		return nil, "", nil, fmt.Errorf("decoding OutputRaw payload: stream byte %d (want 0 or 1)", p[0])
	}
	n := int(p[1])
	if len(p) < 2+n {
		return nil, "", nil, errShortOutputRaw
	}
	id := p[2 : 2+n]
	if !validJobIDBytes(id) {
		return nil, "", nil, errors.New("decoding OutputRaw payload: the job id is not printable ASCII")
	}
	return id, s, p[2+n:], nil
}

// validJobIDBytes: printable ASCII, no quote or backslash (what a job id
// sent as JSON would hold unescaped).
func validJobIDBytes(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
