package wire

import (
	"encoding/base64"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// Job output is bytes, and JSON strings are text: a Go string holding bytes
// that are not UTF-8 comes out of encoding/json with U+FFFD in their place.
// So a field holding job output is written under one of two names: NAME, a
// JSON string, when the bytes are valid UTF-8 (readable, and what almost
// every job writes), else NAME_b64, standard base64, and NAME is absent.
// job.output events ("data") and job records ("output") use this.

// AppendBytesField appends ,"name":"..." or ,"name_b64":"..." for s.
func AppendBytesField(dst []byte, name, s string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	if utf8.ValidString(s) {
		dst = append(dst, '"', ':')
		return AppendJSONString(dst, s, false)
	}
	dst = append(dst, `_b64":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, []byte(s))
	return append(dst, '"')
}

// BytesField returns the bytes of a field written by AppendBytesField, given
// what was decoded for name (text, nil if absent) and for name_b64 (b64, as
// encoding/json decodes base64 into a []byte; nil if absent). Both at once
// is an error.
func BytesField(name string, text *string, b64 []byte) (string, error) {
	switch {
	case text != nil && b64 != nil:
		return "", fmt.Errorf("both %q and %q are set; want one", name, name+"_b64")
	case text != nil:
		return *text, nil
	}
	return string(b64), nil
}

// AppendBytesFieldCompact is AppendBytesField choosing the shorter form:
// text when b is valid UTF-8 and its JSON escapes (control bytes are six
// bytes each) leave it no longer than base64, else NAME_b64. Streams use
// it: a job writing NUL bytes would otherwise send six bytes for each.
func AppendBytesFieldCompact(dst []byte, name string, b []byte) []byte {
	extra, limit := 0, len(b)/3
	for _, c := range b {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		switch c {
		case '"', '\\', '\n', '\t', '\r', '\b', '\f':
			extra++
		default:
			extra += 5
		}
		if extra > limit {
			break // base64 is shorter: no need to look further
		}
	}
	if extra <= limit && utf8.Valid(b) {
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		return AppendJSONString(dst, unsafe.String(unsafe.SliceData(b), len(b)), false) // read only, not kept
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, `_b64":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}
