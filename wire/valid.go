package wire

// ValidJSON reports whether data is one valid JSON value, with white space
// around it allowed: exactly what encoding/json's Valid reports
// (FuzzValidJSON checks the two agree), in one forward pass without its
// per-byte state functions. The decoders of the lines that come by the
// thousand (an executor's report_message, the control socket's requests)
// check with it before they walk a line with members and skipValue, which
// assume valid JSON.
//
// As encoding/json, it does not check that strings are UTF-8 (a decoder
// replaces bad bytes), and it refuses nesting deeper than 10,000.
func ValidJSON(data []byte) bool {
	end, ok := validValue(data, skipJSONSpace(data, 0), 0)
	return ok && skipJSONSpace(data, end) == len(data)
}

// validValue checks the one JSON value that starts at data[i], inside depth
// containers, and returns the index just past it.
func validValue(data []byte, i, depth int) (int, bool) {
	var stackBuf [64]byte
	stack := stackBuf[:0] // '{' or '[' per open container
	for {
		// A value starts at i.
		if i >= len(data) {
			return i, false
		}
		ok := true
		switch c := data[i]; c {
		case '{', '[':
			if depth+len(stack) >= maxJSONDepth {
				return i, false
			}
			stack = append(stack, c)
			i = skipJSONSpace(data, i+1)
			if i < len(data) && data[i] == c+2 { // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i, ok = validKey(data, i); !ok {
					return i, false
				}
			}
			continue // the first member's or element's value
		case '"':
			i, ok = validString(data, i)
		case 't':
			i, ok = validLiteral(data, i, "true")
		case 'f':
			i, ok = validLiteral(data, i, "false")
		case 'n':
			i, ok = validLiteral(data, i, "null")
		default:
			i, ok = validNumber(data, i)
		}
		if !ok {
			return i, false
		}
		// After a value: close containers, or go on to the next member or
		// element.
		for {
			if len(stack) == 0 {
				return i, true
			}
			i = skipJSONSpace(data, i)
			if i >= len(data) {
				return i, false
			}
			top := stack[len(stack)-1]
			switch data[i] {
			case ',':
				i = skipJSONSpace(data, i+1)
				if top == '{' {
					if i, ok = validKey(data, i); !ok {
						return i, false
					}
				}
			case top + 2:
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return i, false
			}
			break
		}
	}
}

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

// validKey checks a member's name and its colon at data[i]; it returns the
// index past the colon and the white space after it.
func validKey(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false
	}
	i, ok := validString(data, i)
	if !ok {
		return i, false
	}
	i = skipJSONSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return i, false
	}
	return skipJSONSpace(data, i+1), true
}

// plainByte marks the bytes a JSON string holds as they are: not a
// control character, not the quote, not the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// validString checks the string at data[i] (its opening quote) and returns
// the index past its closing quote.
func validString(data []byte, i int) (int, bool) {
	i++
	for {
		for i < len(data) && plainByte[data[i]] {
			i++
		}
		if i >= len(data) {
			return i, false
		}
		switch data[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 >= len(data) {
				return i, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(data) {
					return i, false
				}
				for _, h := range data[i+2 : i+6] {
					if !isHex(h) {
						return i, false
					}
				}
				i += 6
			default:
				return i, false
			}
		default: // a control character
			return i, false
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func validLiteral(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// validNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at
// data[i] and returns the index past it.
func validNumber(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return i, false
	case data[i] == '0':
		i++
	case isDigit(data[i]):
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return i, false
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return i, false
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	return i, true
}
