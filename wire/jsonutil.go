package wire

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"slices"
	"sync"
	"unicode/utf8"
)

// encoderBuf is a reusable json.Encoder writing into its own buffer. It
// produces exactly what json.Marshal does (HTML escaping included) plus a
// newline, without json.Marshal's final copy.
type encoderBuf struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoderPool = sync.Pool{New: func() any {
	e := new(encoderBuf)
	e.enc = json.NewEncoder(&e.buf)
	return e
}}

// maxPooledEncoderBuf keeps one huge value from pinning a huge buffer.
const maxPooledEncoderBuf = 64 << 10

// withEncoded encodes v as json.Marshal would and passes the bytes (without
// the newline) to fn; they are valid only during the call.
func withEncoded(v any, fn func([]byte)) error {
	e := encoderPool.Get().(*encoderBuf)
	e.buf.Reset()
	err := e.enc.Encode(v)
	if err == nil {
		b := e.buf.Bytes()
		fn(b[:len(b)-1])
	}
	if e.buf.Cap() <= maxPooledEncoderBuf {
		encoderPool.Put(e)
	}
	return err
}

// appendMarshal appends json.Marshal(v) to dst. On error dst is returned
// unchanged.
func appendMarshal(dst []byte, v any) ([]byte, error) {
	err := withEncoded(v, func(b []byte) { dst = append(dst, b...) })
	return dst, err
}

// plainStringContent reports whether b can sit between two quotes in JSON
// as it is and reads back as the same bytes: no quote, backslash or control
// character. (It says nothing about UTF-8 validity.)
func plainStringContent(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// appendJSONString appends s as a JSON string, byte for byte what
// json.Marshal writes: <, > and & escaped as \u003c, \u003e, \u0026,
// U+2028 and U+2029 escaped, invalid UTF-8 replaced by \ufffd. (A port of
// encoding/json's appendString with escapeHTML set; FuzzJSONString checks
// the two agree.)
func appendJSONString(dst []byte, s string) []byte { return AppendJSONString(dst, s, true) }

// AppendJSONString appends s as a JSON string, exactly as encoding/json
// writes it with escapeHTML (the control socket's frames), or without
// (the event log, which people read): invalid UTF-8 becomes U+FFFD, and
// U+2028 and U+2029 are escaped either way. It is the one string writer of
// every hand-written encoder in orchestrd.
func AppendJSONString(dst []byte, s string, escapeHTML bool) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look of its own (a
		// job's text output is mostly such runs).
		for i+8 <= len(s) {
			m := special8(load8(s, i), escapeHTML)
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3 // the first byte that needs one
			break
		}
		if i >= len(s) {
			break
		}
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && (!escapeHTML || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// load8 is s[i:i+8] as a little-endian word (one load).
func load8(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// zeroBytes marks each byte of w that is 0 with its high bit, exactly up
// to the first such byte (above it a borrow may mark one wrongly).
func zeroBytes(w uint64) uint64 { return (w - ones) &^ w & highs }

// special8 marks with its high bit the first byte of w that needs a look
// of its own as AppendJSONString writes it: not ASCII, below 0x20, '"' or
// '\\' (or <, > or & with html). Bytes above it may be marked wrongly; 0:
// none needs one.
func special8(w uint64, html bool) uint64 {
	m := w&highs | (w-ones*0x20)&^w&highs | zeroBytes(w^(ones*'"')) | zeroBytes(w^(ones*'\\'))
	if html {
		m |= zeroBytes(w^(ones*'<')) | zeroBytes(w^(ones*'>')) | zeroBytes(w^(ones*'&'))
	}
	return m
}

// skipString returns the index just past the JSON string that starts at
// data[i] == '"', or len(data) if it is not closed.
func skipString(data []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(data[i:], '"')
		if j < 0 {
			return len(data)
		}
		i += j
		k := i
		for data[k-1] == '\\' { // stops at the opening quote at the latest
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
		i++
	}
}

// skipValue returns the index just past the JSON value that starts at
// data[i]. data must be valid JSON (checked by ValidJSON): this finds the
// end of a value, it does not check it.
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = skipString(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(data) {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// objectMembers walks the members of a JSON object in valid JSON.
type objectMembers struct {
	data []byte
	i    int // at the next key, or at the closing '}'
}

// members starts a walk of the object whose '{' is at data[open].
func members(data []byte, open int) objectMembers {
	return objectMembers{data: data, i: skipJSONSpace(data, open+1)}
}

// next returns the next member's key (unescaped) and raw value, or false
// at the end of the object.
func (o *objectMembers) next() (key, val []byte, ok bool) {
	d := o.data
	if d[o.i] == '}' {
		return nil, nil, false
	}
	kEnd := skipString(d, o.i)
	key = d[o.i+1 : kEnd-1]
	if !plainStringContent(key) {
		var k string
		if json.Unmarshal(d[o.i:kEnd], &k) == nil {
			key = []byte(k)
		}
	}
	i := skipJSONSpace(d, kEnd) // at ':'
	i = skipJSONSpace(d, i+1)   // at the value
	vEnd := skipValue(d, i)     // just past it
	val = d[i:vEnd]             // never empty
	i = skipJSONSpace(d, vEnd)  // at ',' or '}'
	if d[i] == ',' {
		i = skipJSONSpace(d, i+1)
	}
	o.i = i
	return key, val, true
}

// appendStringArray appends ss as a JSON array of strings; nil is [].
func appendStringArray(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

// appendStringMap appends m as a JSON object with its keys sorted, as
// encoding/json writes a map[string]string; nil is {}.
func appendStringMap(dst []byte, m map[string]string) []byte {
	if len(m) == 0 {
		return append(dst, '{', '}')
	}
	var stack [16]string
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, m[k])
	}
	return append(dst, '}')
}

// internedString decodes the JSON string raw as encoding/json does
// (invalid UTF-8 becomes U+FFFD); a string of known is returned without
// allocating. False when raw is not a string.
func internedString(raw []byte, known map[string]string) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if plainStringContent(inner) && utf8.Valid(inner) {
		if s, ok := known[string(inner)]; ok {
			return s, true
		}
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// interned is the set of strings ss, each its own key, for internedString.
func interned(ss ...string) map[string]string {
	m := make(map[string]string, len(ss))
	for _, s := range ss {
		m[s] = s
	}
	return m
}
