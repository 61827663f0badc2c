package wire

import (
	"strings"
	"unicode/utf8"
)

// DecodeReportLine decodes a whole JSON-RPC line that is a report_message
// notification, in one forward pass that also checks it is valid JSON:
// the line an executor sends by the thousand a second, which ParseRPC then
// DecodeReportMessage would walk three times. EventData aliases line.
//
// It takes only the plain form: "jsonrpc":"2.0" and
// "method":"report_message" written so, a params object, no id, result or
// error, keys without escapes, the strings it decodes plain UTF-8, the
// numbers plain integers. It returns false for anything else, valid or
// not; the caller then goes the long way (ParseRPC, DecodeReportMessage),
// which also names what is wrong. Whatever it takes, the long way takes as
// the same message (FuzzDecodeReportLine checks it).
func (in *Interner) DecodeReportLine(line []byte) (ReportMessage, bool) {
	var r ReportMessage
	i := skipJSONSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return r, false
	}
	i = skipJSONSpace(line, i+1)
	var version, method, params, ok bool
	for {
		var key []byte
		if key, i, ok = plainKey(line, i); !ok {
			return r, false
		}
		switch string(key) {
		case "jsonrpc":
			if version || !hasAt(line, i, `"2.0"`) {
				return r, false
			}
			version, i = true, i+len(`"2.0"`)
		case "method":
			if method || !hasAt(line, i, `"report_message"`) {
				return r, false
			}
			method, i = true, i+len(`"report_message"`)
		case "params":
			if params || i >= len(line) || line[i] != '{' {
				return r, false
			}
			params = true
			if i, ok = in.reportParams(line, i, &r); !ok {
				return r, false
			}
		case "id", "result", "error":
			return r, false
		default:
			if i, ok = validValue(line, i, 1); !ok {
				return r, false
			}
		}
		var closed bool
		if i, closed, ok = nextMember(line, i); !ok {
			return r, false
		}
		if closed {
			break
		}
	}
	if skipJSONSpace(line, i) != len(line) || !version || !method || !params {
		return r, false
	}
	return r, true
}

// reportParams decodes the params object at line[i] into r (as
// decodeReport would) and returns the index past it.
func (in *Interner) reportParams(line []byte, i int, r *ReportMessage) (int, bool) {
	i = skipJSONSpace(line, i+1)
	if i < len(line) && line[i] == '}' {
		return i + 1, true
	}
	var key []byte
	var ok bool
	for {
		if key, i, ok = plainKey(line, i); !ok {
			return i, false
		}
		s, n := r.slot(string(key))
		switch {
		case s != nil || n != nil:
		case string(key) == "event_data":
			start := i
			if i, ok = validValue(line, i, 2); !ok {
				return i, false
			}
			r.EventData = line[start:i]
		default:
			for _, f := range reportKeys {
				if strings.EqualFold(string(key), f) {
					return i, false // encoding/json would take it for f: the long way
				}
			}
			if i, ok = validValue(line, i, 2); !ok {
				return i, false
			}
		}
		switch {
		case (s != nil || n != nil) && hasAt(line, i, "null"):
			i += len("null") // the field stays as it is, as encoding/json leaves it
		case s != nil:
			var content []byte
			if content, i, ok = plainString(line, i); !ok {
				return i, false
			}
			*s = in.String(content)
		case n != nil:
			if *n, i, ok = plainInt(line, i); !ok {
				return i, false
			}
		}
		var closed bool
		if i, closed, ok = nextMember(line, i); !ok {
			return i, false
		}
		if closed {
			return i, true
		}
	}
}

// plainKey reads a member's key without escapes at line[i], and its colon;
// it returns the key's content and the index of its value.
func plainKey(line []byte, i int) ([]byte, int, bool) {
	key, i, ok := plainString(line, i)
	if !ok {
		return nil, i, false
	}
	i = skipJSONSpace(line, i)
	if i >= len(line) || line[i] != ':' {
		return nil, i, false
	}
	return key, skipJSONSpace(line, i+1), true
}

// plainString reads a string without escapes, of valid UTF-8, at line[i]:
// its content and the index past it.
func plainString(line []byte, i int) ([]byte, int, bool) {
	if i >= len(line) || line[i] != '"' {
		return nil, i, false
	}
	j := i + 1
	ascii := true
	for j < len(line) && plainByte[line[j]] {
		ascii = ascii && line[j] < 0x80
		j++
	}
	if j >= len(line) || line[j] != '"' {
		return nil, j, false // an escape, a control character or the end
	}
	content := line[i+1 : j]
	if !ascii && !utf8.Valid(content) {
		return nil, j, false
	}
	return content, j + 1, true
}

// plainInt reads an integer without fraction or exponent that fits in 18
// digits at line[i].
func plainInt(line []byte, i int) (int64, int, bool) {
	neg := i < len(line) && line[i] == '-'
	j := i
	if neg {
		j++
	}
	start := j
	var v int64
	for j < len(line) && isDigit(line[j]) {
		v = v*10 + int64(line[j]-'0')
		j++
	}
	switch {
	case j == start, j-start > 18, j-start > 1 && line[start] == '0':
		return 0, j, false
	case j < len(line) && (line[j] == '.' || line[j] == 'e' || line[j] == 'E'):
		return 0, j, false
	}
	if neg {
		v = -v
	}
	return v, j, true
}

// nextMember steps over the white space after a member's value and its
// ',' (then the white space after it) or its '}' (closed), returning the
// index past them.
func nextMember(line []byte, i int) (next int, closed, ok bool) {
	i = skipJSONSpace(line, i)
	switch {
	case i >= len(line):
		return i, false, false
	case line[i] == '}':
		return i + 1, true, true
	case line[i] == ',':
		return skipJSONSpace(line, i+1), false, true
	}
	return i, false, false
}

func hasAt(line []byte, i int, s string) bool {
	return len(line)-i >= len(s) && string(line[i:i+len(s)]) == s
}
