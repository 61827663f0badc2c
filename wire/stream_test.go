package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// A piece, a gap and a head line read back as they were written.
func TestStreamPieceRoundTrip(t *testing.T) {
	for _, p := range []StreamPiece{
		{JobID: "j-1", Offset: 0},
		{JobID: "j-1", Offset: 7, Stream: "stdout", Data: []byte("hello\n")},
		{JobID: "j-1", Offset: 1 << 40, Stream: "stderr", Data: []byte{0, 0xff, 0}},
		{JobID: "j-\"x\"", Offset: 9, Gap: 100, Reason: "not_kept"},
	} {
		b := AppendStreamPiece(nil, &p)
		if !json.Valid(b) {
			t.Fatalf("%+v: invalid JSON %s", p, b)
		}
		got, err := DecodeStreamPiece(b)
		if err != nil || !reflect.DeepEqual(got, p) && !(len(p.Data) == 0 && len(got.Data) == 0 && got.JobID == p.JobID) {
			t.Fatalf("%s: %+v (%v), want %+v", b, got, err, p)
		}
	}
}

// FuzzDecodeStreamPiece: whatever the fast path reads, encoding/json
// reads alike; a piece written reads back.
func FuzzDecodeStreamPiece(f *testing.F) {
	f.Add([]byte(`{"job_id":"j-1","offset":12,"stream":"stdout","data_b64":"aGkK"}`), int64(3), "stdout")
	f.Add([]byte(`{"job_id":"j-1","offset":0}`), int64(0), "")
	f.Add([]byte(`{"job_id":"j-1","offset":7,"stream":"stdout","data_len":65536}`), int64(7), "stdout")
	f.Add([]byte(`{"job_id":"j-1","offset":5,"gap":3,"reason":"behind"}`), int64(5), "stderr")
	f.Fuzz(func(t *testing.T, b []byte, off int64, stream string) {
		if fast, ok := fastStreamPiece(b); ok {
			var v struct {
				JobID   string `json:"job_id"`
				Offset  int64  `json:"offset"`
				Stream  string `json:"stream"`
				DataB64 []byte `json:"data_b64"`
			}
			if err := json.Unmarshal(b, &v); err != nil || v.JobID != fast.JobID || v.Offset != fast.Offset ||
				v.Stream != fast.Stream || !bytes.Equal(v.DataB64, fast.Data) {
				t.Fatalf("%q: fast %+v, encoding/json %+v (%v)", b, fast, v, err)
			}
		}
		_, _ = DecodeStreamPiece(b)
		if off < 0 {
			off = -off
		}
		p := StreamPiece{JobID: string(b[:min(len(b), 8)]), Offset: max(off, 0), Stream: stream, Data: b}
		if stream == "" {
			p.Data = nil
		}
		got, err := DecodeStreamPiece(AppendStreamPiece(nil, &p))
		if err != nil || got.Offset != p.Offset || !bytes.Equal(got.Data, p.Data) {
			t.Fatalf("%+v read back as %+v (%v)", p, got, err)
		}
		// A binary piece's line: no data in it, the rest as written.
		line := AppendStreamPieceRaw(nil, &p)
		got, err = DecodeStreamPiece(line)
		var want struct { // as sent: invalid UTF-8 as U+FFFD
			JobID  string `json:"job_id"`
			Stream string `json:"stream"`
		}
		_ = json.Unmarshal(AppendStreamPiece(nil, &StreamPiece{JobID: p.JobID, Stream: p.Stream}), &want)
		if n, raw, _ := RawDataLen(line); err != nil || got.JobID != want.JobID || got.Offset != p.Offset ||
			got.Stream != want.Stream || got.Data != nil || raw != (p.Stream != "") || n != len(p.Data) && raw {
			t.Fatalf("%+v: raw line %q read back as %+v (%v)", p, line, got, err)
		}
	})
}
