package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// HeaderSize is the length prefix plus the type byte.
const HeaderSize = 5

// DefaultMaxFrame is the largest payload accepted unless configured otherwise.
const DefaultMaxFrame = 16 << 20

// FrameTooLargeError reports a length prefix over the reader's maximum. The
// payload is not read; the stream cannot be resynchronised, so the caller
// closes the connection.
type FrameTooLargeError struct {
	Len, Max uint32
	Type     MsgType
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("frame %s of %d bytes exceeds the maximum of %d bytes", e.Type, e.Len, e.Max)
}

// ErrFrameTooLarge matches any *FrameTooLargeError with errors.Is.
var ErrFrameTooLarge = errors.New("frame too large")

// Is lets errors.Is(err, ErrFrameTooLarge) match.
func (e *FrameTooLargeError) Is(target error) bool { return target == ErrFrameTooLarge }

// Frame is one decoded frame. Payload aliases the reader's buffer and is
// valid only until the next call to Next.
type Frame struct {
	Type    MsgType
	Payload []byte
}

// FrameReader reads frames from a stream, reusing one buffer.
type FrameReader struct {
	r   io.Reader
	max uint32
	hdr [HeaderSize]byte
	buf []byte
}

// NewFrameReader reads frames of at most max payload bytes (0 means
// DefaultMaxFrame) from r. Wrap r in a bufio.Reader for small frames.
func NewFrameReader(r io.Reader, max uint32) *FrameReader {
	if max == 0 {
		max = DefaultMaxFrame
	}
	return &FrameReader{r: r, max: max}
}

// Next reads one frame. It returns io.EOF only on a clean end between frames,
// io.ErrUnexpectedEOF for a stream cut inside a frame, and a
// *FrameTooLargeError for an oversized length. Unknown type bytes are
// returned as they are; the caller decides (see MsgType.Known).
func (fr *FrameReader) Next() (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(fr.hdr[:4])
	t := MsgType(fr.hdr[4])
	if n > fr.max {
		return Frame{}, &FrameTooLargeError{Len: n, Max: fr.max, Type: t}
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("reading %s payload of %d bytes: %w", t, n, err)
	}
	// Do not let one large frame pin a large buffer forever.
	if cap(fr.buf) > 1<<20 && n < 64<<10 {
		fr.buf = nil
	}
	return Frame{Type: t, Payload: p}, nil
}

// AppendFrame appends the header and payload of one frame to dst.
func AppendFrame(dst []byte, t MsgType, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, byte(t))
	return append(dst, payload...)
}

// Marshal encodes v as the JSON payload of a frame of type t, header
// included, ready for a single Write.
func Marshal(t MsgType, v any) ([]byte, error) {
	p, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %s payload: %w", t, err)
	}
	return AppendFrame(make([]byte, 0, HeaderSize+len(p)), t, p), nil
}

// WriteFrame encodes v and writes the frame with one Write call.
func WriteFrame(w io.Writer, t MsgType, v any) error {
	b, err := Marshal(t, v)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("writing %s frame: %w", t, err)
	}
	return nil
}

// Unmarshal decodes a frame payload into v, naming the frame type on error.
func Unmarshal(f Frame, v any) error {
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return fmt.Errorf("decoding %s payload: %w", f.Type, err)
	}
	return nil
}
