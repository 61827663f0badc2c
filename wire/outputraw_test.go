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
