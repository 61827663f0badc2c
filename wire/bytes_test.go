package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestBytesUnmarshal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []byte   // when no error
		wantNil bool     // want a nil slice, not just an empty one
		errs    []string // substrings of the error; nil means success
	}{
		{"EmptyArray", `[]`, []byte{}, false, nil},
		{"EmptyArraySpaces", " [ \n\t ] ", []byte{}, false, nil},
		{"Array", `[0,1,127,128,255]`, []byte{0, 1, 127, 128, 255}, false, nil},
		{"ArrayWhitespace", "[ 104 ,\n\t105\r\n, 10 ]", []byte("hi\n"), false, nil},
		{"ArrayOuterWhitespace", " \n[1]\t", []byte{1}, false, nil},
		{"NegativeZero", `[-0]`, []byte{0}, false, nil},
		{"Base64", `"aGkK"`, []byte("hi\n"), false, nil},
		{"Base64Padded", `"aGk="`, []byte("hi"), false, nil},
		{"Base64Empty", `""`, []byte{}, false, nil},
		{"Base64EscapedSlashes", `"\/\/\/\/"`, []byte{0xff, 0xff, 0xff}, false, nil},
		{"Base64UnicodeEscape", `"aGk\u003d"`, []byte("hi"), false, nil},
		{"Null", `null`, nil, true, nil},
		{"NullSpaces", ` null `, nil, true, nil},

		{"Over255", `[1,256]`, nil, false, []string{"byte 1", "256", "outside 0..255"}},
		{"Huge", `[99999999999999999999999999]`, nil, false, []string{"byte 0", "99999999999999999999999999", "outside 0..255"}},
		{"Negative", `[-1]`, nil, false, []string{"byte 0", "-1", "outside 0..255"}},
		{"Fraction", `[1.5]`, nil, false, []string{"byte 0", "1.5", "not an integer"}},
		{"WholeFloat", `[7,1.0]`, nil, false, []string{"byte 1", "1.0", "not an integer"}},
		{"Exponent", `[1e2]`, nil, false, []string{"1e2", "not an integer"}},
		{"LeadingZero", `[01]`, nil, false, []string{"01"}},
		{"Nested", `[[1]]`, nil, false, []string{"byte 0", "want an integer"}},
		{"NestedLater", `[1,[2]]`, nil, false, []string{"byte 1", "want an integer"}},
		{"StringElement", `["1"]`, nil, false, []string{"byte 0", "want an integer"}},
		{"NullElement", `[null]`, nil, false, []string{"byte 0", "null"}},
		{"BoolElement", `[true]`, nil, false, []string{"byte 0", "true"}},
		{"TrailingComma", `[1,]`, nil, false, []string{"byte 1"}},
		{"LeadingComma", `[,1]`, nil, false, []string{"byte 0"}},
		{"MissingComma", `[1 2]`, nil, false, []string{"after byte 0"}},
		{"Unclosed", `[1,2`, nil, false, []string{"ends inside the array"}},
		{"UnclosedEmpty", `[`, nil, false, []string{"ends inside the array"}},
		{"TrailingData", `[1]x`, nil, false, []string{"after the array"}},
		{"SpaceInNumber", `[- 1]`, nil, false, []string{"byte 0"}},
		{"Object", `{}`, nil, false, []string{"want an array of bytes or a base64 string"}},
		{"Number", `42`, nil, false, []string{"want an array of bytes or a base64 string"}},
		{"True", `true`, nil, false, []string{"want an array of bytes or a base64 string"}},
		{"Nul", `nul`, nil, false, []string{"want an array of bytes or a base64 string"}},
		{"Empty", ``, nil, false, []string{"empty input"}},
		{"BadBase64", `"not base64!"`, nil, false, []string{"base64"}},
		{"UnpaddedBase64", `"aGk"`, nil, false, []string{"base64"}},
		{"URLBase64", `"-_8="`, nil, false, []string{"base64"}},
		{"RawNewlineInString", "\"aG\nk=\"", nil, false, []string{"chunk string"}},
		{"UnclosedString", `"aGk=`, nil, false, []string{"chunk string"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := Bytes("previous")
			err := b.UnmarshalJSON([]byte(tc.in))
			if tc.errs != nil {
				if err == nil {
					t.Fatalf("decoded %q to %v, want an error", tc.in, []byte(b))
				}
				for _, s := range tc.errs {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if string(b) != "previous" {
					t.Errorf("a failed decode changed the value to %v", []byte(b))
				}
				return
			}
			if err != nil {
				t.Fatalf("decoding %q: %v", tc.in, err)
			}
			if !bytes.Equal(b, tc.want) || (b == nil) != tc.wantNil {
				t.Fatalf("decoded %q to %#v (nil %v), want %#v (nil %v)", tc.in, []byte(b), b == nil, tc.want, tc.wantNil)
			}
		})
	}
}

// Through encoding/json the same rules apply, and a decoded chunk does not
// alias the input.
func TestBytesInStruct(t *testing.T) {
	var v struct {
		C Bytes `json:"c"`
	}
	in := []byte(`{"c": [ 1, 2, 3 ]}`)
	if err := json.Unmarshal(in, &v); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.C, []byte{1, 2, 3}) {
		t.Fatalf("got %v", v.C)
	}
	in = []byte(`{"c":"AQID"}`)
	if err := json.Unmarshal(in, &v); err != nil {
		t.Fatal(err)
	}
	copy(in, bytes.Repeat([]byte{'x'}, len(in)))
	if !bytes.Equal(v.C, []byte{1, 2, 3}) {
		t.Fatalf("chunk changed with its input: %v", v.C)
	}
	if err := json.Unmarshal([]byte(`{"c":null}`), &v); err != nil || v.C != nil {
		t.Fatalf("null: %v, %v; want nil chunk", v.C, err)
	}
	if err := json.Unmarshal([]byte(`{"c":[1,2.5]}`), &v); err == nil || !strings.Contains(err.Error(), "2.5") {
		t.Fatalf("err = %v, want one naming 2.5", err)
	}
}

func TestBytesMarshal(t *testing.T) {
	tests := []struct {
		in   Bytes
		want string
	}{
		{nil, `[]`},
		{Bytes{}, `[]`},
		{Bytes{0}, `[0]`},
		{Bytes{9, 10, 99, 100, 255}, `[9,10,99,100,255]`},
		{Bytes("hi\n"), `[104,105,10]`},
	}
	for _, tc := range tests {
		got, err := tc.in.MarshalJSON()
		if err != nil || string(got) != tc.want {
			t.Errorf("MarshalJSON(%v) = %s, %v; want %s", []byte(tc.in), got, err, tc.want)
		}
	}
	// Every byte value, against encoding/json's encoding of []int.
	all := make(Bytes, 256)
	ints := make([]int, 256)
	for i := range all {
		all[i] = byte(i)
		ints[i] = i
	}
	got, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(ints)
	if !bytes.Equal(got, want) {
		t.Fatalf("json.Marshal(Bytes 0..255) = %s\nwant %s", got, want)
	}
	var back Bytes
	if err := json.Unmarshal(got, &back); err != nil || !bytes.Equal(back, all) {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	// Inside a struct, a nil chunk is still an array (serde's Vec<u8> refuses null).
	b, _ := json.Marshal(OutputChunk{JobID: "j", Stream: Stdout})
	if string(b) != `{"job_id":"j","chunk":[],"stream":"Stdout"}` {
		t.Fatalf("nil chunk encodes as %s", b)
	}
}

func TestAppendBytesArrayAppends(t *testing.T) {
	dst := []byte("prefix:")
	got := appendBytesArray(dst, []byte{1, 200})
	if string(got) != "prefix:[1,200]" {
		t.Fatalf("got %q", got)
	}
	dst = make([]byte, 3, 100)
	copy(dst, "abc")
	got = appendBytesArray(dst, []byte{255, 255})
	if string(got) != "abc[255,255]" {
		t.Fatalf("got %q", got)
	}
}

func TestExitStatusJSON(t *testing.T) {
	for _, s := range []ExitStatus{StatusSuccess, StatusFailed, StatusTimeout, StatusCancelled, StatusError} {
		b, err := json.Marshal(s)
		if err != nil || string(b) != `"`+string(s)+`"` {
			t.Fatalf("Marshal(%s) = %s, %v", s, b, err)
		}
		var got ExitStatus
		if err := json.Unmarshal(b, &got); err != nil || got != s {
			t.Fatalf("Unmarshal(%s) = %q, %v", b, got, err)
		}
	}
	var got ExitStatus
	if err := json.Unmarshal([]byte(`"\u0053uccess"`), &got); err != nil || got != StatusSuccess {
		t.Fatalf("escaped variant: %q, %v", got, err)
	}
	refused := []struct{ in, named string }{
		{`"Crashed"`, `"Crashed"`},
		{`"success"`, `"success"`},
		{`""`, `""`},
		{`"Success "`, `"Success "`},
		{`5`, `"5"`},
		{`null`, `"null"`},
		{`{"Success":null}`, `Success`},
		{`["Success"]`, `Success`},
	}
	for _, tc := range refused {
		s := ExitStatus("unchanged")
		err := s.UnmarshalJSON([]byte(tc.in))
		if err == nil {
			t.Errorf("%s decoded to %q", tc.in, s)
			continue
		}
		if !strings.Contains(err.Error(), tc.named) || !strings.Contains(err.Error(), "exit status") {
			t.Errorf("error for %s = %q; want it to name %s", tc.in, err, tc.named)
		}
		if s != "unchanged" {
			t.Errorf("failed decode of %s set %q", tc.in, s)
		}
	}
}

func TestStreamJSON(t *testing.T) {
	for _, s := range []Stream{Stdout, Stderr} {
		b, err := json.Marshal(s)
		if err != nil || string(b) != `"`+string(s)+`"` {
			t.Fatalf("Marshal(%s) = %s, %v", s, b, err)
		}
		var got Stream
		if err := json.Unmarshal(b, &got); err != nil || got != s {
			t.Fatalf("Unmarshal(%s) = %q, %v", b, got, err)
		}
	}
	refused := []struct{ in, named string }{
		{`"Stdin"`, `"Stdin"`},
		{`"stdout"`, `"stdout"`},
		{`1`, `"1"`},
		{`null`, `"null"`},
		{`true`, `"true"`},
	}
	for _, tc := range refused {
		var s Stream
		err := s.UnmarshalJSON([]byte(tc.in))
		if err == nil {
			t.Errorf("%s decoded to %q", tc.in, s)
			continue
		}
		if !strings.Contains(err.Error(), tc.named) || !strings.Contains(err.Error(), "output stream") {
			t.Errorf("error for %s = %q; want it to name %s", tc.in, err, tc.named)
		}
	}
	// Inside a frame payload the error reaches the caller.
	err := Unmarshal(Frame{Type: TypeOutputChunk, Payload: []byte(`{"job_id":"j","chunk":[],"stream":"Both"}`)}, new(OutputChunk))
	if err == nil || !strings.Contains(err.Error(), `"Both"`) {
		t.Fatalf("err = %v, want one naming \"Both\"", err)
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"", "plain", `quote " backslash \`, "<tag>&amp;", "tab\there\nnl\rcr\bbs\ffeed",
		"\x00\x01\x1f\x7f", "café ☕", "\u2028\u2029", "bad \xff utf8 \xc3", "\xed\xa0\x80",
	} {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	}
}

// AppendBytesFieldCompact writes text unless escapes would make it longer
// than base64; either way the bytes read back exactly.
func TestAppendBytesFieldCompact(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"hello\n", `,"data":"hello\n"`},
		{"", `,"data":""`},
		{"\x00\x00\x00", `,"data_b64":"AAAA"`},
		{"ok \xff", `,"data_b64":"b2sg/w=="`},
		{"a\tb", `,"data":"a\tb"`},
	} {
		got := string(AppendBytesFieldCompact(nil, "data", []byte(tc.in)))
		if got != tc.want {
			t.Errorf("%q: %s, want %s", tc.in, got, tc.want)
		}
		var v struct {
			Data    *string `json:"data"`
			DataB64 []byte  `json:"data_b64"`
		}
		if err := json.Unmarshal([]byte("{"+got[1:]+"}"), &v); err != nil {
			t.Fatal(err)
		}
		if back, err := BytesField("data", v.Data, v.DataB64); err != nil || back != tc.in {
			t.Errorf("%q read back as %q (%v)", tc.in, back, err)
		}
	}
}
