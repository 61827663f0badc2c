package wire

import (
	"bytes"
	"strings"
	"testing"
)

func TestOutputRawRoundTrip(t *testing.T) {
	for _, c := range []OutputChunk{
		{JobID: "job-1", Chunk: Bytes("hello\x00\xff"), Stream: Stdout},
		{JobID: "j", Stream: Stderr},
		{JobID: strings.Repeat("a", 255), Chunk: bytes.Repeat([]byte{0}, 70000), Stream: Stdout},
	} {
		b, err := AppendOutputRaw(nil, &c)
		if err != nil {
			t.Fatal(err)
		}
		f, err := NewFrameReader(bytes.NewReader(b), 0).Next()
		if err != nil || f.Type != TypeOutputRaw {
			t.Fatalf("frame: %v %v", f.Type, err)
		}
		got, err := DecodeOutputRaw(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if got.JobID != c.JobID || got.Stream != c.Stream || !bytes.Equal(got.Chunk, c.Chunk) {
			t.Fatalf("round trip of %q/%s (%d bytes): got %q/%s (%d bytes)", c.JobID, c.Stream, len(c.Chunk), got.JobID, got.Stream, len(got.Chunk))
		}
		if len(f.Payload) > 2+len(c.JobID) {
			f.Payload[len(f.Payload)-1] ^= 1 // the chunk is a copy, not the reader's buffer
			if !bytes.Equal(got.Chunk, c.Chunk) {
				t.Fatal("decoded chunk aliases the frame's payload")
			}
		}
	}
}

func TestOutputRawRefuses(t *testing.T) {
	if _, err := AppendOutputRaw(nil, &OutputChunk{JobID: "j", Stream: "stdout"}); err == nil {
		t.Error("encoded a stream other than Stdout/Stderr")
	}
	if _, err := AppendOutputRaw(nil, &OutputChunk{JobID: strings.Repeat("a", 256), Stream: Stdout}); err == nil {
		t.Error("encoded a 256-byte job id")
	}
	for _, p := range [][]byte{nil, {0}, {2, 1, 'j'}, {0, 3, 'j'}, {0, 1, '"'}, {1, 1, 0x80}} {
		if _, err := DecodeOutputRaw(p); err == nil || !strings.Contains(err.Error(), "OutputRaw") {
			t.Errorf("DecodeOutputRaw(%q) = %v, want an error naming OutputRaw", p, err)
		}
	}
}

func FuzzDecodeOutputRaw(f *testing.F) {
	f.Add([]byte{0, 1, 'j', 'x'})
	f.Add([]byte{1, 0})
	f.Add([]byte{2, 5})
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := DecodeOutputRaw(p)
		if err != nil {
			return
		}
		b, err := AppendOutputRaw(nil, &c)
		if err != nil {
			t.Fatalf("decoded %q but cannot encode it: %v", p, err)
		}
		if !bytes.Equal(b[HeaderSize:], p) {
			t.Fatalf("re-encoding %q gave %q", p, b[HeaderSize:])
		}
	})
}

func TestStreamPieceRaw(t *testing.T) {
	line := AppendStreamPieceRaw(nil, &StreamPiece{JobID: "j1", Offset: 7, Stream: "stdout", Data: []byte("\x00\xffab")})
	if string(line) != `{"job_id":"j1","offset":7,"stream":"stdout","data_len":4}` {
		t.Fatalf("line %s", line)
	}
	if n, ok, err := RawDataLen(line); n != 4 || !ok || err != nil {
		t.Fatalf("RawDataLen = %d, %v, %v", n, ok, err)
	}
	p, err := DecodeStreamPiece(line)
	if err != nil || p.JobID != "j1" || p.Offset != 7 || p.Stream != "stdout" || p.Data != nil {
		t.Fatalf("decoded %+v, %v", p, err)
	}
	// A gap, and an ordinary piece, are not raw.
	for _, sp := range []StreamPiece{{JobID: "j", Offset: 1, Gap: 5, Reason: "behind"}, {JobID: "j", Stream: "stdout", Data: []byte("x")}} {
		l := AppendStreamPieceRaw(nil, &sp)
		if sp.Gap == 0 {
			l = AppendStreamPiece(nil, &sp)
		}
		if _, ok, err := RawDataLen(l); ok || err != nil {
			t.Errorf("RawDataLen(%s) = %v, %v: want not raw", l, ok, err)
		}
	}
	for _, bad := range []string{`{"a":1,"data_len":}`, `{"a":1,"data_len":01}`, `{"a":1,"data_len":99999999999}`, `{"a":1,"data_len":16777217}`} {
		if _, ok, err := RawDataLen([]byte(bad)); !ok || err == nil {
			t.Errorf("RawDataLen(%s) = %v, %v: want an error", bad, ok, err)
		}
	}
}

func FuzzRawDataLen(f *testing.F) {
	f.Add([]byte(`{"job_id":"j","offset":0,"stream":"stdout","data_len":12}`))
	f.Add([]byte(`{"data_len":x}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok, err := RawDataLen(b)
		if err == nil && ok && (n < 0 || n > MaxRawData) {
			t.Fatalf("RawDataLen(%q) = %d", b, n)
		}
		if !ok && err != nil {
			t.Fatalf("an error for a line that is not raw: %v", err)
		}
	})
}
