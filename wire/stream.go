package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// StreamPiece is the data of a job.stream line on the control socket: a
// piece of a job's output at Offset (Data, from "data" or "data_b64"), or
// a gap (Gap bytes from Offset the reader does not get, and why), or the
// head line of a stream that submitted its job (neither).
type StreamPiece struct {
	JobID  string
	Offset int64
	Stream string
	Data   []byte
	Gap    int64
	Reason string
}

// AppendStreamPiece appends p as JSON: {job_id, offset, stream, data |
// data_b64} for bytes (the shorter form, AppendBytesFieldCompact), {job_id,
// offset, gap, reason} for a gap, {job_id, offset} for neither.
func AppendStreamPiece(dst []byte, p *StreamPiece) []byte {
	dst = append(dst, `{"job_id":`...)
	dst = AppendJSONString(dst, p.JobID, false)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, p.Offset, 10)
	switch {
	case p.Gap > 0:
		dst = append(dst, `,"gap":`...)
		dst = strconv.AppendInt(dst, p.Gap, 10)
		dst = append(dst, `,"reason":`...)
		dst = AppendJSONString(dst, p.Reason, false)
	case p.Stream != "":
		dst = append(dst, `,"stream":`...)
		dst = AppendJSONString(dst, p.Stream, false)
		dst = AppendBytesFieldCompact(dst, "data", p.Data)
	}
	return append(dst, '}')
}

// AppendStreamPieceRaw appends p as AppendStreamPiece does, but for bytes
// {job_id, offset, stream, data_len} without them: the control socket
// writes the line, then the data_len bytes as they are (a job.stream
// called with binary). A gap, or neither, is as AppendStreamPiece has it.
func AppendStreamPieceRaw(dst []byte, p *StreamPiece) []byte {
	if p.Gap > 0 || p.Stream == "" {
		return AppendStreamPiece(dst, p)
	}
	dst = append(dst, `{"job_id":`...)
	dst = AppendJSONString(dst, p.JobID, false)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, p.Offset, 10)
	dst = append(dst, `,"stream":`...)
	dst = AppendJSONString(dst, p.Stream, false)
	dst = append(dst, `,"data_len":`...)
	dst = strconv.AppendInt(dst, int64(len(p.Data)), 10)
	return append(dst, '}')
}

// MaxRawData is the most raw bytes an event line may announce (data_len);
// a client refuses more.
const MaxRawData = 16 << 20

// RawDataLen reports the data_len an event's data ends with (what
// AppendStreamPieceRaw writes): the bytes that follow the event's line.
// ok is false when there is none; err when it is not a length in
// 0..MaxRawData.
func RawDataLen(data []byte) (n int, ok bool, err error) {
	const key = `,"data_len":`
	if len(data) == 0 || data[len(data)-1] != '}' {
		return 0, false, nil
	}
	body := data[:len(data)-1]
	i := bytes.LastIndex(body, []byte(key))
	if i < 0 {
		return 0, false, nil
	}
	digits := body[i+len(key):]
	if len(digits) == 0 || len(digits) > 9 || (len(digits) > 1 && digits[0] == '0') {
		return 0, true, fmt.Errorf("event data_len %q: want a length", excerpt(digits))
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false, nil // data_len is not the last field: not a raw piece
		}
		n = n*10 + int(c-'0')
	}
	if n > MaxRawData {
		return 0, true, fmt.Errorf("event data_len %d: over the maximum of %d bytes", n, MaxRawData)
	}
	return n, true, nil
}

// DecodeStreamPiece decodes a job.stream line's data. The daemon's own
// layout (AppendStreamPiece's, with base64 data) is read in one pass;
// anything else goes through encoding/json, which decides and words the
// error. Data is a new slice.
func DecodeStreamPiece(b []byte) (StreamPiece, error) {
	if p, ok := fastStreamPiece(b); ok {
		return p, nil
	}
	var v struct {
		JobID   string  `json:"job_id"`
		Offset  int64   `json:"offset"`
		Stream  string  `json:"stream"`
		Data    *string `json:"data"`
		DataB64 []byte  `json:"data_b64"`
		Gap     int64   `json:"gap"`
		Reason  string  `json:"reason"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return StreamPiece{}, err
	}
	if v.Data != nil && v.DataB64 != nil {
		return StreamPiece{}, errors.New(`both "data" and "data_b64" are set; want one`)
	}
	p := StreamPiece{JobID: v.JobID, Offset: v.Offset, Stream: v.Stream, Data: v.DataB64, Gap: v.Gap, Reason: v.Reason}
	if v.Data != nil {
		p.Data = []byte(*v.Data)
	}
	return p, nil
}

// fastStreamPiece reads exactly {"job_id":"ID","offset":N,"stream":"S",
// "data_b64":"B64"} or {"job_id":"ID","offset":N,"stream":"S",
// "data_len":N} (no Data: the bytes follow the line) with plain strings
// and digits; false for anything else.
func fastStreamPiece(b []byte) (StreamPiece, bool) {
	var p StreamPiece
	rest, ok := bytes.CutPrefix(b, []byte(`{"job_id":`))
	if !ok || len(rest) == 0 {
		return p, false
	}
	id, i, ok := simpleString(rest, 0)
	if !ok {
		return p, false
	}
	rest, ok = bytes.CutPrefix(rest[i:], []byte(`,"offset":`))
	if !ok {
		return p, false
	}
	n := 0
	for n < len(rest) && n < 18 && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || (n > 1 && rest[0] == '0') || n == 18 {
		return p, false
	}
	off, _ := strconv.ParseInt(string(rest[:n]), 10, 64)
	rest, ok = bytes.CutPrefix(rest[n:], []byte(`,"stream":`))
	if !ok || len(rest) == 0 {
		return p, false
	}
	stream, i, ok := simpleString(rest, 0)
	if !ok {
		return p, false
	}
	rest = rest[i:]
	if digits, ok := bytes.CutPrefix(rest, []byte(`,"data_len":`)); ok {
		// A binary piece's line (AppendStreamPieceRaw): its bytes follow
		// it, not in it.
		if !plainLength(digits) {
			return p, false
		}
		return StreamPiece{JobID: string(id), Offset: off, Stream: string(stream)}, true
	}
	rest, ok = bytes.CutPrefix(rest, []byte(`,"data_b64":"`))
	if !ok || len(rest) < 2 || rest[len(rest)-1] != '}' || rest[len(rest)-2] != '"' {
		return p, false
	}
	enc := rest[:len(rest)-2]
	if !plainBase64Candidate(enc) {
		return p, false
	}
	data := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	m, err := base64.StdEncoding.Decode(data, enc)
	if err != nil {
		return p, false
	}
	return StreamPiece{JobID: string(id), Offset: off, Stream: string(stream), Data: data[:m]}, true
}

// plainLength: b is "N}" exactly, N at most 9 digits without a leading 0.
func plainLength(b []byte) bool {
	n := len(b) - 1
	if n < 1 || n > 9 || b[n] != '}' || (n > 1 && b[0] == '0') {
		return false
	}
	for _, c := range b[:n] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
