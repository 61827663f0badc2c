package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Bytes is a []byte that encodes as a JSON array of byte values, like serde's
// Vec<u8>, and decodes from either that array or a standard base64 string.
//
// Decoding rules:
//   - an array of integers 0..255, with any JSON whitespace; -0 is 0, as it
//     is for serde and encoding/json. Fractions and exponents (1.5, 1e2,
//     1.0), values outside 0..255, nested arrays, strings and any other
//     element are refused with an error naming the element and its value.
//   - a string holding standard, padded base64 (RFC 4648 section 4, what
//     encoding/json writes for a []byte). JSON escapes in the string are
//     honoured.
//   - null decodes as an empty (nil) chunk. Serde would refuse null for a
//     Vec<u8>; orchestrd is lenient because an absent chunk and an empty one
//     mean the same thing to a reader of job output.
//
// Encoding always writes the array form ("[]" for nil or empty), never null,
// so a Rust peer deserialising Vec<u8> reads it.
//
// The decoded slice never aliases the JSON input.
type Bytes []byte

// MarshalJSON writes a JSON array of numbers.
func (b Bytes) MarshalJSON() ([]byte, error) {
	return appendBytesArray(make([]byte, 0, bytesArrayMaxLen(len(b))), b), nil
}

// UnmarshalJSON accepts an array of integers 0..255, a base64 string, or null
// (see Bytes).
func (b *Bytes) UnmarshalJSON(data []byte) error {
	data = trimJSONSpace(data)
	if len(data) == 0 {
		return errors.New("decoding chunk: empty input (want an array of bytes or a base64 string)")
	}
	switch data[0] {
	case '[':
		out, end, err := parseByteArray(data)
		if err != nil {
			return err
		}
		if end != len(data) {
			return fmt.Errorf("decoding chunk: unexpected %s after the array", excerpt(data[end:]))
		}
		*b = out
		return nil
	case '"':
		out, err := decodeBase64JSON(data)
		if err != nil {
			return err
		}
		*b = out
		return nil
	case 'n':
		if string(data) == "null" {
			*b = nil
			return nil
		}
	}
	return fmt.Errorf("decoding chunk: want an array of bytes or a base64 string, got %s", excerpt(data))
}

// decEntry is the decimal text of one byte value followed by a comma.
type decEntry struct {
	text [4]byte
	n    uint8 // digits plus the comma
}

var decTable = func() (t [256]decEntry) {
	for i := range t {
		var s []byte
		s = fmt.Appendf(s, "%d,", i)
		copy(t[i].text[:], s)
		t[i].n = uint8(len(s))
	}
	return t
}()

// bytesArrayMaxLen is the longest array encoding of n bytes: "[" + n times
// "255," with the last comma replaced by "]", or "[]" for none.
func bytesArrayMaxLen(n int) int { return 2 + 4*n }

// appendBytesArray appends b as a JSON array of numbers, exactly as
// encoding/json would encode a []int of the same values.
func appendBytesArray(dst, b []byte) []byte {
	if len(b) == 0 {
		return append(dst, '[', ']')
	}
	start := len(dst)
	need := bytesArrayMaxLen(len(b))
	if cap(dst)-start < need {
		nd := make([]byte, start, start+need)
		copy(nd, dst)
		dst = nd
	}
	buf := dst[:start+need]
	pos := start
	buf[pos] = '['
	pos++
	for _, c := range b {
		e := &decTable[c]
		// Write all four bytes and advance by the used length: the slack is
		// overwritten by the next element or ignored.
		*(*[4]byte)(buf[pos : pos+4]) = e.text
		pos += int(e.n)
	}
	buf[pos-1] = ']' // replaces the last comma
	return buf[:pos]
}

// parseByteArray parses a JSON array of integers 0..255 starting at data[0]
// == '[' and returns the bytes and the index just past the closing bracket.
// It does not need the input to have been validated.
func parseByteArray(data []byte) ([]byte, int, error) {
	// Without strings in a valid array, commas separate elements exactly, so
	// this is the element count for any input that parses.
	out := make([]byte, 0, bytes.Count(data, []byte{','})+1)
	i := skipJSONSpace(data, 1)
	if i < len(data) && data[i] == ']' {
		return out, i + 1, nil
	}
	for {
		// Fast path for the compact form encoders write: 1 to 3 digits, no
		// leading zero, then ',' or ']'. Anything else takes the general
		// path below, which also words the errors.
		if i+3 < len(data) {
			c0 := data[i] - '0'
			if c0 <= 9 {
				v, j := uint(c0), i+1
				if c0 != 0 {
					if d := data[j] - '0'; d <= 9 {
						v, j = v*10+uint(d), j+1
						if d := data[j] - '0'; d <= 9 {
							v, j = v*10+uint(d), j+1
						}
					}
				}
				if v <= 255 {
					switch data[j] {
					case ',':
						out = append(out, byte(v))
						i = j + 1
						continue
					case ']':
						return append(out, byte(v)), j + 1, nil
					}
				}
			}
		}
		i = skipJSONSpace(data, i)
		idx := len(out)
		if i >= len(data) {
			return nil, 0, fmt.Errorf("decoding chunk: input ends inside the array at byte %d", idx)
		}
		start := i
		neg := data[i] == '-'
		if neg {
			i++
		}
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			return nil, 0, fmt.Errorf("decoding chunk: byte %d is %s, want an integer 0..255", idx, excerpt(data[start:]))
		}
		v := 0
		if data[i] == '0' {
			i++
		} else {
			for i < len(data) && data[i] >= '0' && data[i] <= '9' {
				if v <= 255 {
					v = v*10 + int(data[i]-'0')
				}
				i++
			}
		}
		if i < len(data) {
			switch c := data[i]; {
			case c == '.' || c == 'e' || c == 'E':
				return nil, 0, fmt.Errorf("decoding chunk: byte %d is %s, not an integer", idx, numberText(data, start))
			case c >= '0' && c <= '9': // a leading zero, as in 01
				return nil, 0, fmt.Errorf("decoding chunk: byte %d is %s, not a valid JSON number", idx, numberText(data, start))
			}
		}
		if v > 255 || (neg && v != 0) {
			return nil, 0, fmt.Errorf("decoding chunk: byte %d is %s, outside 0..255", idx, numberText(data, start))
		}
		out = append(out, byte(v))
		i = skipJSONSpace(data, i)
		if i >= len(data) {
			return nil, 0, fmt.Errorf("decoding chunk: input ends inside the array after byte %d", idx)
		}
		switch data[i] {
		case ',':
			i++
		case ']':
			return out, i + 1, nil
		default:
			return nil, 0, fmt.Errorf("decoding chunk: unexpected %s after byte %d", excerpt(data[i:]), idx)
		}
	}
}

// numberText returns the number-like run of bytes at data[start:] for an
// error message, cut at 32 bytes.
func numberText(data []byte, start int) string {
	end := start
	for end < len(data) {
		switch c := data[end]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			end++
			continue
		}
		break
	}
	if end-start > 32 {
		return string(data[start:start+32]) + "..."
	}
	return string(data[start:end])
}

// decodeBase64JSON decodes a JSON string (data[0] == '"', no surrounding
// space) holding standard base64.
func decodeBase64JSON(data []byte) ([]byte, error) {
	if len(data) >= 2 && data[len(data)-1] == '"' {
		s := data[1 : len(data)-1]
		if plainBase64Candidate(s) {
			out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
			n, err := base64.StdEncoding.Decode(out, s)
			if err != nil {
				return nil, fmt.Errorf("decoding chunk as base64: %w", err)
			}
			return out[:n], nil
		}
	}
	// Escapes (some encoders write "\/"), or not a well-formed string: let
	// encoding/json unquote it or say what is wrong.
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decoding chunk string: %w", err)
	}
	out, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decoding chunk as base64: %w", err)
	}
	return out, nil
}

// plainBase64Candidate reports whether s can go straight to the base64
// decoder: no JSON escapes, and no raw CR or LF, which base64 would skip but
// which are not allowed unescaped in a JSON string. Any other byte that is
// not valid in a JSON string is also not base64, so the decoder refuses it.
func plainBase64Candidate(s []byte) bool {
	// Three vectorised scans beat one byte loop (a job's output streams
	// through here, 90 KiB a line).
	return bytes.IndexByte(s, '\\') < 0 && bytes.IndexByte(s, '\n') < 0 && bytes.IndexByte(s, '\r') < 0
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipJSONSpace(data []byte, i int) int {
	for i < len(data) && isJSONSpace(data[i]) {
		i++
	}
	return i
}

func trimJSONSpace(data []byte) []byte {
	i := skipJSONSpace(data, 0)
	j := len(data)
	for j > i && isJSONSpace(data[j-1]) {
		j--
	}
	return data[i:j]
}

// excerpt quotes at most 40 bytes of b for an error message.
func excerpt(b []byte) string {
	const n = 40
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
