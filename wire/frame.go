package wire

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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

// Buffer management for FrameReader.
const (
	// frameReadChunk is the most a FrameReader allocates ahead of the bytes
	// that have actually arrived: a payload longer than its current buffer
	// is read in steps that at most double what has been received. A peer
	// that announces a large frame and sends little costs little.
	frameReadChunk = 64 << 10
	// frameKeepCap: a buffer above this size is dropped when a small frame
	// (at most frameReadChunk) follows, so one large frame does not pin a
	// large buffer for the life of the connection.
	frameKeepCap = 1 << 20
)

// FrameReader reads frames from a stream, reusing one buffer. It reads
// exactly the bytes of each frame and nothing more, so the underlying reader
// is left at a frame boundary after every successful Next and right after
// the header after a *FrameTooLargeError. Its buffer never grows beyond the
// maximum payload size, nor beyond about twice the bytes actually received
// for the frame being read (plus 64 KiB).
type FrameReader struct {
	r   io.Reader
	max uint32
	hdr [HeaderSize]byte
	buf []byte
	// Alloc, when set, may give the buffer a frame's payload is read
	// into (capacity at least n): that payload is then the caller's, not
	// the reader's to reuse. nil from it: the reader's own buffer.
	Alloc func(t MsgType, n int) []byte
}

// NewFrameReader reads frames of at most max payload bytes (0 means
// DefaultMaxFrame) from r. Wrap r in a bufio.Reader for small frames.
func NewFrameReader(r io.Reader, max uint32) *FrameReader {
	if max == 0 {
		max = DefaultMaxFrame
	}
	if uint64(max) > uint64(math.MaxInt) { // 32-bit platforms
		max = math.MaxInt32
	}
	return &FrameReader{r: r, max: max}
}

// Next reads one frame. It returns io.EOF (unwrapped) only on a clean end
// between frames, an error wrapping io.ErrUnexpectedEOF for a stream cut
// inside a header or payload, and a *FrameTooLargeError for a length over
// the maximum, before reading or allocating anything for the payload.
// Unknown type bytes are returned as they are; the caller decides (see
// MsgType.Known). Other read errors are returned wrapped.
func (fr *FrameReader) Next() (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if err == io.EOF {
			return Frame{}, io.EOF
		}
		return Frame{}, fmt.Errorf("reading frame header: %w", err)
	}
	n := binary.BigEndian.Uint32(fr.hdr[:4])
	t := MsgType(fr.hdr[4])
	if n > fr.max {
		return Frame{}, &FrameTooLargeError{Len: n, Max: fr.max, Type: t}
	}
	size := int(n)
	if fr.Alloc != nil {
		if p := fr.Alloc(t, size); cap(p) >= size {
			p = p[:size]
			if _, err := io.ReadFull(fr.r, p); err != nil {
				return Frame{}, payloadError(t, n, err)
			}
			return Frame{Type: t, Payload: p}, nil
		}
	}
	if cap(fr.buf) > frameKeepCap && size <= frameReadChunk {
		fr.buf = nil
	}
	if size <= cap(fr.buf) {
		p := fr.buf[:size]
		if _, err := io.ReadFull(fr.r, p); err != nil {
			return Frame{}, payloadError(t, n, err)
		}
		return Frame{Type: t, Payload: p}, nil
	}
	// Grow while reading, so the allocation follows the bytes received.
	p := fr.buf[:0]
	for len(p) < size {
		if len(p) == cap(p) {
			c := min(max(2*cap(p), frameReadChunk), size)
			np := make([]byte, len(p), c)
			copy(np, p)
			p = np
			fr.buf = np
		}
		m, err := io.ReadFull(fr.r, p[len(p):cap(p)])
		p = p[:len(p)+m]
		if err != nil {
			return Frame{}, payloadError(t, n, err)
		}
	}
	return Frame{Type: t, Payload: p}, nil
}

func payloadError(t MsgType, n uint32, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading %s payload of %d bytes: %w", t, n, err)
}

// AppendFrame appends the header and payload of one frame to dst. The
// payload must be shorter than 4 GiB (Marshal checks this); see also
// DefaultMaxFrame.
func AppendFrame(dst []byte, t MsgType, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, byte(t))
	return append(dst, payload...)
}

// Marshal encodes v as the JSON payload of a frame of type t, header
// included, ready for a single Write. The payload is what json.Marshal
// writes for v; OutputChunk, Job and Handshake values take a faster,
// reflection-free path with the same output.
func Marshal(t MsgType, v any) ([]byte, error) {
	switch m := v.(type) {
	case OutputChunk:
		return marshalOutputChunk(t, &m)
	case *OutputChunk:
		if m != nil {
			return marshalOutputChunk(t, m)
		}
	case Job:
		return marshalAppender(t, m.appendJSON)
	case *Job:
		if m != nil {
			return marshalAppender(t, m.appendJSON)
		}
	case Handshake:
		return marshalAppender(t, m.appendJSON)
	case *Handshake:
		if m != nil {
			return marshalAppender(t, m.appendJSON)
		}
	}
	var out []byte
	err := withEncoded(v, func(p []byte) {
		if uint64(len(p)) > math.MaxUint32 {
			return
		}
		out = AppendFrame(make([]byte, 0, HeaderSize+len(p)), t, p)
	})
	if err != nil {
		return nil, fmt.Errorf("encoding %s payload: %w", t, err)
	}
	if out == nil {
		return nil, fmt.Errorf("encoding %s payload: %w: longer than 4 GiB", t, ErrFrameTooLarge)
	}
	return out, nil
}

// marshalAppender builds a frame from a hand-written payload encoder.
func marshalAppender(t MsgType, appendPayload func([]byte) []byte) ([]byte, error) {
	out := appendPayload(make([]byte, HeaderSize, 512))
	if uint64(len(out)-HeaderSize) > math.MaxUint32 {
		return nil, fmt.Errorf("encoding %s payload: %w: longer than 4 GiB", t, ErrFrameTooLarge)
	}
	binary.BigEndian.PutUint32(out, uint32(len(out)-HeaderSize))
	out[4] = byte(t)
	return out, nil
}

// marshalOutputChunk writes an OutputChunk frame by hand: the chunk is most
// of the payload, and encoding/json would copy and re-scan it after
// Bytes.MarshalJSON. The output is identical to json.Marshal's.
func marshalOutputChunk(t MsgType, c *OutputChunk) ([]byte, error) {
	if uint64(len(c.Chunk)) > math.MaxUint32/4 {
		return nil, fmt.Errorf("encoding %s payload: %w: a %d-byte chunk does not fit in one frame", t, ErrFrameTooLarge, len(c.Chunk))
	}
	const fixed = len(`{"job_id":,"chunk":,"stream":}`) + 4 // + quotes
	out := make([]byte, HeaderSize, HeaderSize+fixed+len(c.JobID)+bytesArrayMaxLen(len(c.Chunk))+len(c.Stream))
	out[4] = byte(t)
	out = append(out, `{"job_id":`...)
	out = appendJSONString(out, c.JobID)
	out = append(out, `,"chunk":`...)
	out = appendBytesArray(out, c.Chunk)
	out = append(out, `,"stream":`...)
	out = appendJSONString(out, string(c.Stream))
	out = append(out, '}')
	if uint64(len(out)-HeaderSize) > math.MaxUint32 {
		return nil, fmt.Errorf("encoding %s payload: %w: longer than 4 GiB", t, ErrFrameTooLarge)
	}
	binary.BigEndian.PutUint32(out, uint32(len(out)-HeaderSize))
	return out, nil
}

// MarshalOutputChunkBase64 is Marshal(TypeOutputChunk, c) with the chunk
// as a base64 string rather than an array of numbers: a third of the
// bytes and far less work on both sides. orchestrd's runner sends it to a
// daemon that gave it an output window (an orchestrd daemon, which reads
// both); a Loopr daemon gets arrays, serde's Vec<u8>.
func MarshalOutputChunkBase64(c *OutputChunk) ([]byte, error) {
	if uint64(len(c.Chunk)) > math.MaxUint32/2 {
		return nil, fmt.Errorf("encoding OutputChunk payload: %w: a %d-byte chunk does not fit in one frame", ErrFrameTooLarge, len(c.Chunk))
	}
	const fixed = len(`{"job_id":,"chunk":"","stream":}`) + 4
	out := make([]byte, HeaderSize, HeaderSize+fixed+len(c.JobID)+base64.StdEncoding.EncodedLen(len(c.Chunk))+len(c.Stream))
	out[4] = byte(TypeOutputChunk)
	out = append(out, `{"job_id":`...)
	out = appendJSONString(out, c.JobID)
	out = append(out, `,"chunk":"`...)
	out = base64.StdEncoding.AppendEncode(out, c.Chunk)
	out = append(out, `","stream":`...)
	out = appendJSONString(out, string(c.Stream))
	out = append(out, '}')
	binary.BigEndian.PutUint32(out, uint32(len(out)-HeaderSize))
	return out, nil
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
// Unknown JSON fields are ignored, as serde does by default. A *Shutdown
// accepts any payload, even an empty one. An *OutputChunk takes a faster
// path with the same result as json.Unmarshal.
func Unmarshal(f Frame, v any) error {
	switch m := v.(type) {
	case *Shutdown:
		if m != nil {
			return nil
		}
	case *OutputChunk:
		if m != nil && fastDecodeOutputChunk(f.Payload, m) {
			return nil
		}
	}
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return fmt.Errorf("decoding %s payload: %w", f.Type, err)
	}
	return nil
}

// fastDecodeOutputChunk decodes the common shape of an OutputChunk payload:
// one object with the three fields spelled exactly, each at most once, a
// job_id and stream without escapes or non-ASCII, and a chunk array, base64
// string or null, and a stream. On anything else it returns false without touching c, and
// the caller falls back to encoding/json, which decides (and words the
// error). Like encoding/json, fields absent from the payload are left as
// they are.
func fastDecodeOutputChunk(data []byte, c *OutputChunk) bool {
	var (
		jobID              []byte
		stream             Stream
		chunk              Bytes
		haveJob, haveChunk bool
		haveStream         bool
	)
	i := skipJSONSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipJSONSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return false
			}
			end := skipString(data, i)
			if end > len(data) || end-i < 2 || data[end-1] != '"' {
				return false
			}
			key := data[i+1 : end-1]
			i = skipJSONSpace(data, end)
			if i >= len(data) || data[i] != ':' {
				return false
			}
			i = skipJSONSpace(data, i+1)
			if i >= len(data) {
				return false
			}
			switch string(key) {
			case "job_id":
				s, next, ok := simpleString(data, i)
				if !ok || haveJob {
					return false
				}
				jobID, haveJob, i = s, true, next
			case "stream":
				s, next, ok := simpleString(data, i)
				if !ok || haveStream {
					return false
				}
				switch string(s) {
				case "Stdout":
					stream = Stdout
				case "Stderr":
					stream = Stderr
				default:
					return false
				}
				haveStream, i = true, next
			case "chunk":
				if haveChunk {
					return false
				}
				switch data[i] {
				case '[':
					out, next, err := parseByteArray(data[i:])
					if err != nil {
						return false
					}
					chunk, i = out, i+next
				case 'n':
					if len(data)-i < 4 || string(data[i:i+4]) != "null" {
						return false
					}
					chunk, i = nil, i+4
				case '"':
					end := skipString(data, i)
					if end > len(data) || data[end-1] != '"' || end-i < 2 {
						return false
					}
					s := data[i+1 : end-1]
					if !plainStringContent(s) {
						return false
					}
					out, err := decodeBase64JSON(data[i:end])
					if err != nil {
						return false
					}
					chunk, i = out, end
				default:
					return false
				}
				haveChunk = true
			default:
				return false // unknown or oddly spelled field: encoding/json decides
			}
			i = skipJSONSpace(data, i)
			if i >= len(data) {
				return false
			}
			if data[i] == ',' {
				i = skipJSONSpace(data, i+1)
				continue
			}
			if data[i] != '}' {
				return false
			}
			i++
			break
		}
	}
	if skipJSONSpace(data, i) != len(data) || !haveStream {
		return false
	}
	if haveJob {
		c.JobID = string(jobID)
	}
	if haveChunk {
		c.Chunk = chunk
	}
	if haveStream {
		c.Stream = stream
	}
	return true
}

// simpleString returns the content of the JSON string at data[i] if it is
// printable ASCII without escapes, and the index just past it.
func simpleString(data []byte, i int) ([]byte, int, bool) {
	if data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		c := data[j]
		if c == '"' {
			return data[i+1 : j], j + 1, true
		}
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return nil, 0, false
		}
	}
	return nil, 0, false
}
