package wire

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
)

// Bytes is a []byte that encodes as a JSON array of byte values, like serde's
// Vec<u8>, and decodes from either that array or a standard base64 string.
type Bytes []byte

// MarshalJSON writes a JSON array of numbers.
func (b Bytes) MarshalJSON() ([]byte, error) {
	if b == nil {
		return []byte("[]"), nil
	}
	out := make([]byte, 0, 2+len(b)*4)
	out = append(out, '[')
	for i, c := range b {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(c), 10)
	}
	return append(out, ']'), nil
}

// UnmarshalJSON accepts an array of integers 0..255 or a base64 string.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("decoding chunk string: %w", err)
		}
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("decoding chunk as base64: %w", err)
		}
		*b = d
		return nil
	}
	var nums []int
	if err := json.Unmarshal(data, &nums); err != nil {
		return fmt.Errorf("decoding chunk (want an array of bytes or a base64 string): %w", err)
	}
	out := make([]byte, len(nums))
	for i, n := range nums {
		if n < 0 || n > 255 {
			return fmt.Errorf("chunk byte %d is %d, outside 0..255", i, n)
		}
		out[i] = byte(n)
	}
	*b = out
	return nil
}
