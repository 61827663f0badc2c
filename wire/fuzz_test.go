package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzFrameReader feeds an arbitrary byte stream, in reads of an arbitrary
// size, to a FrameReader with an arbitrary maximum. It checks that the
// reader never panics, consumes exactly the bytes of each frame, returns
// frames that re-encode to those very bytes, never holds a buffer above
// the maximum (nor much above what arrived), refuses an oversized length
// right after its header, and ends with the right error.
func FuzzFrameReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, stream []byte, max uint16, readSize uint8) {
		effMax := int(max)
		if max == 0 {
			effMax = DefaultMaxFrame
		}
		var r io.Reader = bytes.NewReader(stream)
		if readSize > 0 {
			r = &chunkReader{data: stream, n: int(readSize)}
		}
		cr := &countingReader{r: r}
		fr := NewFrameReader(cr, uint32(max))
		off := 0
		for {
			fm, err := fr.Next()
			if cap(fr.buf) > effMax {
				t.Fatalf("buffer of %d bytes, maximum %d", cap(fr.buf), effMax)
			}
			if cap(fr.buf) > frameReadChunk && cap(fr.buf) > 2*len(stream) {
				t.Fatalf("buffer of %d bytes for a %d-byte stream", cap(fr.buf), len(stream))
			}
			if err != nil {
				rest := stream[off:]
				var tooLarge *FrameTooLargeError
				switch {
				case err == io.EOF:
					if len(rest) != 0 {
						t.Fatalf("io.EOF with %d bytes left", len(rest))
					}
				case errors.As(err, &tooLarge):
					if !errors.Is(err, ErrFrameTooLarge) || len(rest) < HeaderSize {
						t.Fatalf("bad too-large error %v with %d bytes left", err, len(rest))
					}
					if n := int(rest[0])<<24 | int(rest[1])<<16 | int(rest[2])<<8 | int(rest[3]); n <= effMax || uint32(n) != tooLarge.Len {
						t.Fatalf("too-large error %+v for length %d, max %d", tooLarge, n, effMax)
					}
					if cr.n != off+HeaderSize {
						t.Fatalf("consumed %d bytes, want %d (header only)", cr.n, off+HeaderSize)
					}
				case errors.Is(err, io.ErrUnexpectedEOF):
					if len(rest) == 0 {
						t.Fatal("io.ErrUnexpectedEOF at a frame boundary")
					}
					if len(rest) >= HeaderSize {
						n := int(rest[0])<<24 | int(rest[1])<<16 | int(rest[2])<<8 | int(rest[3])
						if HeaderSize+n <= len(rest) {
							t.Fatalf("io.ErrUnexpectedEOF with the whole %d-byte frame present", n)
						}
					}
				default:
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			n := HeaderSize + len(fm.Payload)
			if len(fm.Payload) > effMax {
				t.Fatalf("payload of %d bytes, maximum %d", len(fm.Payload), effMax)
			}
			if off+n > len(stream) || cr.n != off+n {
				t.Fatalf("frame of %d bytes at %d, reader consumed %d of %d", n, off, cr.n, len(stream))
			}
			if re := AppendFrame(nil, fm.Type, fm.Payload); !bytes.Equal(re, stream[off:off+n]) {
				t.Fatalf("frame re-encodes to %x, stream has %x", re, stream[off:off+n])
			}
			if v := newMessage(fm.Type); v != nil {
				_ = Unmarshal(fm, v) // must not panic
			}
			off += n
		}
	})
}

// newMessage returns a pointer to a zero message for a known type.
func newMessage(t MsgType) any {
	switch t {
	case TypeHandshake:
		return new(Handshake)
	case TypeHandshakeAck:
		return new(HandshakeAck)
	case TypeJob:
		return new(Job)
	case TypeJobAck:
		return new(JobAck)
	case TypeResult:
		return new(Result)
	case TypeCancel:
		return new(Cancel)
	case TypeCancelAck:
		return new(CancelAck)
	case TypeOutputChunk:
		return new(OutputChunk)
	case TypeHeartbeat:
		return new(Heartbeat)
	case TypeHeartbeatAck:
		return new(HeartbeatAck)
	case TypeShutdown:
		return new(Shutdown)
	case TypeOutputAck:
		return new(OutputAck)
	case TypeStdinChunk:
		return new(StdinChunk)
	case TypeStdinAck:
		return new(StdinAck)
	}
	return nil
}

// refDecodeBytes is the Bytes decoding rule written with encoding/json.
func refDecodeBytes(data []byte) ([]byte, bool) {
	d := bytes.Trim(data, " \t\r\n")
	if !json.Valid(d) {
		return nil, false
	}
	switch d[0] {
	case 'n':
		return nil, true
	case '"':
		var s string
		if json.Unmarshal(d, &s) != nil {
			return nil, false
		}
		b, err := base64.StdEncoding.DecodeString(s)
		return b, err == nil
	case '[':
		var elems []json.RawMessage
		if json.Unmarshal(d, &elems) != nil {
			return nil, false
		}
		out := make([]byte, 0, len(elems))
		for _, e := range elems {
			v, err := strconv.ParseInt(string(e), 10, 64)
			if err != nil || v < 0 || v > 255 {
				return nil, false
			}
			out = append(out, byte(v))
		}
		return out, true
	}
	return nil, false
}

// FuzzBytesJSON checks Bytes against the reference rule on arbitrary input,
// and that any byte string survives encode then decode, with the encoding
// equal to encoding/json's for a []int.
func FuzzBytesJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Bytes
		err := b.UnmarshalJSON(data)
		want, ok := refDecodeBytes(data)
		if (err == nil) != ok {
			t.Fatalf("UnmarshalJSON(%q) err = %v; reference accepts: %v", data, err, ok)
		}
		isNull := string(bytes.Trim(data, " \t\r\n")) == "null"
		if ok && (!bytes.Equal(b, want) || (b == nil) != isNull) {
			t.Fatalf("UnmarshalJSON(%q) = %v (nil %v), reference %v", data, []byte(b), b == nil, want)
		}

		enc, err := Bytes(data).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		ints := make([]int, len(data))
		for i, c := range data {
			ints[i] = int(c)
		}
		if wantEnc, _ := json.Marshal(ints); !bytes.Equal(enc, wantEnc) {
			t.Fatalf("MarshalJSON(%q) = %s, want %s", data, enc, wantEnc)
		}
		var back Bytes
		if err := back.UnmarshalJSON(enc); err != nil || !bytes.Equal(back, data) {
			t.Fatalf("round trip of %q: %v, %v", data, []byte(back), err)
		}
		b64 := []byte(`"` + base64.StdEncoding.EncodeToString(data) + `"`)
		if err := back.UnmarshalJSON(b64); err != nil || !bytes.Equal(back, data) {
			t.Fatalf("base64 round trip of %q: %v, %v", data, []byte(back), err)
		}
	})
}

// refParseRequest is ParseRequest's rule written with encoding/json. It
// returns the request and the error code (0 for none).
func refParseRequest(line []byte) (Request, int) {
	if !json.Valid(line) {
		return Request{}, CodeParseError
	}
	if d := bytes.TrimLeft(line, " \t\r\n"); d[0] != '{' {
		return Request{}, CodeInvalidRequest
	}
	members := refMembers(line)
	var req Request
	ids := members["id"]
	if len(ids) != 1 {
		return req, CodeInvalidRequest
	}
	id, err := strconv.ParseUint(string(ids[0]), 10, 64)
	if err != nil {
		return req, CodeInvalidRequest
	}
	req.ID = id
	methods, params := members["method"], members["params"]
	if len(methods) > 1 || len(params) > 1 || len(methods) == 0 {
		return req, CodeInvalidRequest
	}
	if methods[0][0] != '"' || json.Unmarshal(methods[0], &req.Method) != nil || req.Method == "" {
		req.Method = ""
		return req, CodeInvalidRequest
	}
	if len(params) == 1 && string(params[0]) != "null" {
		if params[0][0] != '{' {
			return req, CodeInvalidParams
		}
		req.Params = params[0]
	}
	return req, 0
}

// FuzzParseRequest compares ParseRequest with the reference rule.
func FuzzParseRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		req, rerr := ParseRequest(line)
		want, wantCode := refParseRequest(line)
		code := 0
		if rerr != nil {
			code = rerr.Code
			if rerr.Message == "" {
				t.Fatal("error without a message")
			}
		}
		if code != wantCode {
			t.Fatalf("ParseRequest(%q) code %d (%v), reference %d", line, code, rerr, wantCode)
		}
		if req.ID != want.ID || req.Method != want.Method || !bytes.Equal(req.Params, want.Params) {
			t.Fatalf("ParseRequest(%q) = %d %q %q, reference %d %q %q", line, req.ID, req.Method, req.Params, want.ID, want.Method, want.Params)
		}
		if rerr == nil {
			var m map[string]any
			_ = DecodeParams(req, &m) // must not panic
			// A parsed request answers with a well-formed line.
			out, err := AppendResponse(nil, req.ID, m, nil)
			if err != nil || !json.Valid(out) || bytes.IndexByte(out, '\n') != len(out)-1 {
				t.Fatalf("response line %q, %v", out, err)
			}
		}
	})
}

// refLines splits data the way LineReader is documented to.
func refLines(data []byte, max int) (lines []string, tooLong bool) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var line []byte
		if i < 0 {
			line, data = data, nil
		} else {
			line, data = data[:i], data[i+1:]
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) > max {
			return lines, true
		}
		lines = append(lines, string(line))
	}
	return lines, false
}

// FuzzLineReader compares LineReader with a plain splitter, with small read
// buffers and reads of arbitrary size so that lines span many fragments.
func FuzzLineReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, max uint8, bufSize uint8, readSize uint8) {
		effMax := int(max)
		if max == 0 {
			effMax = DefaultMaxLine
		}
		var r io.Reader = bytes.NewReader(data)
		if readSize > 0 {
			r = &chunkReader{data: data, n: int(readSize)}
		}
		lr := newLineReaderSize(r, int(max), 16+int(bufSize))
		want, wantTooLong := refLines(data, effMax)
		for i := 0; ; i++ {
			line, err := lr.Next()
			if cap(lr.buf) > effMax+1 {
				t.Fatalf("line buffer of %d bytes, max %d", cap(lr.buf), effMax)
			}
			if err != nil {
				if i != len(want) {
					t.Fatalf("error %v after %d lines, reference has %d", err, i, len(want))
				}
				if wantTooLong != errors.Is(err, ErrLineTooLong) || (!wantTooLong && err != io.EOF) {
					t.Fatalf("error %v, reference too long: %v", err, wantTooLong)
				}
				return
			}
			if i >= len(want) || string(line) != want[i] {
				t.Fatalf("line %d = %q, reference %q", i, line, want)
			}
		}
	})
}

// normalize replaces nil slices and maps that encode as [] or {} with
// empty ones, so a value compares equal to its own encode-decode round trip.
func normalize(v any) {
	switch m := v.(type) {
	case *Handshake:
		if m.Capabilities == nil {
			m.Capabilities = []string{}
		}
	case *Job:
		if m.Argv == nil {
			m.Argv = []string{}
		}
		if m.Env == nil {
			m.Env = map[string]string{}
		}
		if m.FilePaths == nil {
			m.FilePaths = []string{}
		}
		if len(m.Stdin) == 0 {
			m.Stdin = nil // "stdin_b64":"" decodes as empty and is then omitted
		}

	case *OutputChunk:
		if m.Chunk == nil {
			m.Chunk = Bytes{}
		}
	}
}

// reflectJSON encodes v with encoding/json's reflection, bypassing the
// hand-written Job and Handshake encoders, as the reference for them.
func reflectJSON(v any) ([]byte, error) {
	type plainJob Job
	type plainHandshake Handshake
	var j Job
	switch m := v.(type) {
	case Job:
		j = m
	case *Job:
		j = *m
	case Handshake:
		return reflectJSON(&m)
	case *Handshake:
		h := *m
		if h.Capabilities == nil {
			h.Capabilities = []string{}
		}
		return json.Marshal(plainHandshake(h))
	default:
		return json.Marshal(v)
	}
	normalize(&j)
	return json.Marshal(plainJob(j))
}

// FuzzRunnerMessages decodes an arbitrary payload as every message type;
// whatever decodes must re-encode (as encoding/json would), travel through
// a FrameReader, and decode back to an equal value. The OutputChunk fast
// path must agree with plain encoding/json.
func FuzzRunnerMessages(f *testing.F) {
	types := []MsgType{TypeHandshake, TypeHandshakeAck, TypeJob, TypeJobAck, TypeResult, TypeCancel,
		TypeCancelAck, TypeOutputChunk, TypeHeartbeat, TypeHeartbeatAck, TypeShutdown,
		TypeOutputAck, TypeStdinChunk, TypeStdinAck}
	f.Add([]byte(`{"job_id":"j-1","acked":1048576}`))
	f.Add([]byte(`{"lane":"net","pid":7,"version":"v<1>","capabilities":["output_credit"],"token":"t"}`))
	f.Add([]byte(`{"job_id":"j-1","data":"aGkK","eof":true}`))
	f.Add([]byte(`{"job_id":"j-1","bytes":3,"stdin_stream":true}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, mt := range types {
			v := newMessage(mt)
			if err := Unmarshal(Frame{Type: mt, Payload: payload}, v); err != nil {
				continue
			}
			if mt == TypeOutputChunk {
				var ref OutputChunk
				if err := json.Unmarshal(payload, &ref); err != nil || !reflect.DeepEqual(&ref, v) {
					t.Fatalf("OutputChunk %q: fast path %#v, encoding/json %#v (%v)", payload, v, ref, err)
				}
			}
			frame, err := Marshal(mt, v)
			if err != nil {
				t.Fatalf("%s: re-encoding %#v: %v", mt, v, err)
			}
			want, err := reflectJSON(v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(frame[HeaderSize:], want) {
				t.Fatalf("%s: Marshal payload %s, encoding/json %s", mt, frame[HeaderSize:], want)
			}
			if viaJSON, err := json.Marshal(v); err != nil || !bytes.Equal(viaJSON, want) {
				t.Fatalf("%s: json.Marshal %s (%v), encoding/json %s", mt, viaJSON, err, want)
			}
			fm, err := NewFrameReader(bytes.NewReader(frame), 0).Next()
			if err != nil || fm.Type != mt {
				t.Fatalf("%s: reading back: %v %v", mt, fm.Type, err)
			}
			v2 := newMessage(mt)
			if err := Unmarshal(fm, v2); err != nil {
				t.Fatalf("%s: re-decoding %s: %v", mt, fm.Payload, err)
			}
			normalize(v)
			if !reflect.DeepEqual(v, v2) {
				t.Fatalf("%s: %q decoded to %#v, round trip gives %#v", mt, payload, v, v2)
			}
		}
	})
}

// FuzzJSONString checks the hand-written string encoder against
// encoding/json.
func FuzzJSONString(f *testing.F) {
	f.Add("plain")
	f.Add("<a href=\"x\">&</a>\u2028\xff\x00\t")
	f.Add("eight by eight: a long run of plain text\nthen a line, \"quoted\" and back\\slashed, <tag> & more\x1f\x7f~")
	f.Add("0123456\x00" + "01234567" + "0123456\u00e9" + "012345\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want = bytes.TrimSuffix(b.Bytes(), []byte("\n"))
		if got := AppendJSONString(nil, s, false); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSONString(%q, false) = %s, want %s", s, got, want)
		}
	})
}

// BenchmarkJSONString: a job's text output (lines of ASCII), 1 MiB, as
// job.get writes it.
func BenchmarkJSONString(b *testing.B) {
	s := strings.Repeat("orchbench output line of text\n", (1<<20)/30)
	buf := make([]byte, 0, 2*len(s))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = AppendJSONString(buf[:0], s, false)
	}
}
