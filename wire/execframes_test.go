package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Frames written with AppendExecFrameHeader read back as they were; a cut,
// an unknown kind and an oversized length are errors, a clean end io.EOF.
func TestExecFrames(t *testing.T) {
	var b []byte
	frames := []struct {
		kind byte
		data string
	}{{ExecStdout, "out\x00\xff"}, {ExecStderr, ""}, {ExecGap, "12"}, {ExecExit, `{"type":"exit","data":"0"}`}}
	for _, f := range frames {
		b = append(AppendExecFrameHeader(b, f.kind, len(f.data)), f.data...)
	}
	fr := NewExecFrameReader(bytes.NewReader(b), 64)
	for _, f := range frames {
		k, p, err := fr.Next()
		if err != nil || k != f.kind || string(p) != f.data {
			t.Fatalf("frame %q %q: got %q %q %v", f.kind, f.data, k, p, err)
		}
	}
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
	for name, in := range map[string][]byte{
		"cut header":  b[:3],
		"cut payload": b[:7],
		"kind":        append(AppendExecFrameHeader(nil, 'z', 1), 'a'),
		"too long":    AppendExecFrameHeader(nil, ExecStdout, 65),
	} {
		if _, _, err := NewExecFrameReader(bytes.NewReader(in), 64).Next(); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: %v, want an error", name, err)
		}
	}
}

// FuzzExecFrames: any input reads as frames of known kinds within the
// maximum, re-encoded to the bytes they came from, then an end or an error;
// never a panic.
func FuzzExecFrames(f *testing.F) {
	f.Add(append(AppendExecFrameHeader(nil, ExecStdout, 3), "abc"...))
	f.Add(append(AppendExecFrameHeader(nil, ExecExit, 2), "{}"...))
	f.Add(AppendExecFrameHeader(nil, ExecGap, 1<<31))
	f.Add([]byte("data: {}\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := NewExecFrameReader(bytes.NewReader(in), 1<<10)
		var again []byte
		for {
			k, p, err := fr.Next()
			if err != nil {
				if errors.Is(err, io.EOF) && !bytes.Equal(again, in) {
					t.Fatalf("clean end after %d of %d bytes", len(again), len(in))
				}
				return
			}
			if len(p) > 1<<10 {
				t.Fatalf("a %d-byte payload over the maximum", len(p))
			}
			again = append(AppendExecFrameHeader(again, k, len(p)), p...)
			if !bytes.HasPrefix(in, again) {
				t.Fatalf("frame %q of %d bytes does not re-encode to its input", k, len(p))
			}
		}
	})
}
