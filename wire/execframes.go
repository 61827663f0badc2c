package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// /execute/stream's binary framing (an orchestrd extension of Loopsy's
// HTTP API): a client that sends `Accept: application/vnd.orchestrd.exec-stream`
// gets the response body as frames rather than server-sent events, a
// job's output as it is (no JSON string, no escapes). A frame is a kind
// byte, a 4-byte big-endian payload length, then the payload:
//
//	'o' stdout bytes   'e' stderr bytes
//	'g' a gap: the decimal count of bytes the client will not get
//	'x' the end: the JSON object the event stream's exit event carries
//
// The 'x' frame is the last. Without that Accept the stream is Loopsy's.
const (
	ExecStreamType = "application/vnd.orchestrd.exec-stream"

	ExecStdout byte = 'o'
	ExecStderr byte = 'e'
	ExecGap    byte = 'g'
	ExecExit   byte = 'x'

	// ExecFrameHeader is a frame's kind and length.
	ExecFrameHeader = 5
)

// AppendExecFrameHeader appends the header of a frame of kind with n
// payload bytes.
func AppendExecFrameHeader(dst []byte, kind byte, n int) []byte {
	return binary.BigEndian.AppendUint32(append(dst, kind), uint32(n))
}

// ExecFrameReader reads /execute/stream's binary frames.
type ExecFrameReader struct {
	r   io.Reader
	max int
	hdr [ExecFrameHeader]byte
	buf []byte
}

// NewExecFrameReader reads frames of at most max payload bytes from r.
func NewExecFrameReader(r io.Reader, max int) *ExecFrameReader {
	return &ExecFrameReader{r: r, max: max}
}

// errExecFrameKind is a frame of no kind the framing knows.
var errExecFrameKind = errors.New("reading an /execute/stream frame: unknown kind")

// Next reads the next frame: its kind and payload (valid until the next
// call). io.EOF (unwrapped) only between frames; a frame cut short, of an
// unknown kind or longer than the maximum is an error.
func (fr *ExecFrameReader) Next() (byte, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if err == io.EOF {
			return 0, nil, io.EOF
		}
		return 0, nil, fmt.Errorf("reading an /execute/stream frame header: %w", err)
	}
	kind, n := fr.hdr[0], binary.BigEndian.Uint32(fr.hdr[1:])
	switch kind {
	case ExecStdout, ExecStderr, ExecGap, ExecExit:
	default:
		return 0, nil, fmt.Errorf("%w %q", errExecFrameKind, kind)
	}
	if uint64(n) > uint64(fr.max) {
		return 0, nil, fmt.Errorf("reading an /execute/stream frame: %d bytes, at most %d", n, fr.max)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("reading an /execute/stream frame of %d bytes: %w", n, err)
	}
	return kind, p, nil
}
