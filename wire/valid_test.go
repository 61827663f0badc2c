package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

var validCases = []string{
	// valid
	`0`, `-0`, `1`, `-12.5e+3`, `1E9`, `0.0`, `true`, `false`, `null`, `""`, `"a\"b\\c\/\b\f\n\r\t\u00e9\uD83D"`,
	"\"\x7f\xff\xfe\"", `[]`, `{}`, ` [ 1 , 2 ] `, "\t{\"a\" :\n[{}, []], \"b\":{\"c\":null}}\r\n",
	`{"jsonrpc":"2.0","method":"report_message","params":{"sequence":1,"event_data":{"delta":{"text":"x"}}}}`,
	// invalid
	``, ` `, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x1`, `tru`, `nul`, `True`, `"abc`, "\"a\x01\"", "\"a\n\"",
	`"\x"`, `"\u12"`, `"\u12G4"`, `"\`, `[`, `]`, `{`, `}`, `[1,]`, `[,1]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{1:2}`,
	`{"a":1 "b":2}`, `[1 2]`, `[}`, `{]`, `1 2`, `{} {}`, `[1]]`, `nullx`, `"a"x`, "\x00", `{"a":1}}`,
}

func TestValidJSON(t *testing.T) {
	for _, c := range validCases {
		if got, want := ValidJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("ValidJSON(%q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

// Nesting: encoding/json takes 10,000 levels and refuses 10,001.
func TestValidJSONDepth(t *testing.T) {
	for _, depth := range []int{63, 64, 65, maxJSONDepth, maxJSONDepth + 1} {
		for _, open := range []string{"[", `{"k":`} {
			closer := "]"
			if open != "[" {
				closer = "}"
			}
			doc := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(closer, depth))
			if got, want := ValidJSON(doc), json.Valid(doc); got != want || got != (depth <= maxJSONDepth) {
				t.Errorf("depth %d of %q: ValidJSON %v, encoding/json %v", depth, open, got, want)
			}
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := ValidJSON(data), json.Valid(data); got != want {
			t.Fatalf("ValidJSON(%q) = %v, encoding/json says %v", data, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","method":"report_message","params":{"session_token":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","task_id":"t-bench","sequence":12345,"timestamp":1764000000000,"event_type":"content_block_delta","event_data":{"delta":{"text":"chunk 12345 of the agent's streamed answer"}}}}`)
	b.Run("wire", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if !ValidJSON(line) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if !json.Valid(line) {
				b.Fatal("refused")
			}
		}
	})
}
