package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name       string
		line       string
		code       int // 0: success
		id         uint64
		method     string
		params     string // "" means nil
		errContain string
	}{
		// Accepted.
		{"SpecExample", `{"id":1,"method":"chat.send","params":{"message":"Build a REST API"}}`,
			0, 1, "chat.send", `{"message":"Build a REST API"}`, ""},
		{"Whitespace", " \t{ \"id\" : 2 ,\n \"method\" : \"ping\" , \"params\" : { } }\r",
			0, 2, "ping", `{ }`, ""},
		{"NoParams", `{"id":3,"method":"loop.list"}`, 0, 3, "loop.list", "", ""},
		{"NullParams", `{"id":3,"method":"loop.list","params":null}`, 0, 3, "loop.list", "", ""},
		{"EmptyParams", `{"params":{},"method":"disconnect","id":4}`, 0, 4, "disconnect", `{}`, ""},
		{"ExtraFields", `{"jsonrpc":"2.0","id":5,"method":"ping","params":{},"x":[1,{"id":9}]}`, 0, 5, "ping", `{}`, ""},
		{"NestedParams", `{"id":6,"method":"plan.reject","params":{"id":"p1","reason":"no \"tests\"","x":{"y":[1,2]}}}`,
			0, 6, "plan.reject", `{"id":"p1","reason":"no \"tests\"","x":{"y":[1,2]}}`, ""},
		{"ZeroID", `{"id":0,"method":"ping"}`, 0, 0, "ping", "", ""},
		{"MaxID", `{"id":18446744073709551615,"method":"ping"}`, 0, 18446744073709551615, "ping", "", ""},
		{"EscapedKey", `{"\u0069d":7,"method":"ping"}`, 0, 7, "ping", "", ""},
		{"EscapedMethod", `{"id":8,"method":"chat\u002esend","params":{}}`, 0, 8, "chat.send", `{}`, ""},
		{"UnknownMethod", `{"id":9,"method":"no.such.method"}`, 0, 9, "no.such.method", "", ""},

		// -32700: not JSON.
		{"Empty", ``, CodeParseError, 0, "", "", "not valid JSON"},
		{"Garbage", `hello`, CodeParseError, 0, "", "", "not valid JSON"},
		{"Truncated", `{"id":1,"method":"ping"`, CodeParseError, 0, "", "", "not valid JSON"},
		{"TrailingComma", `{"id":1,"method":"ping",}`, CodeParseError, 0, "", "", "not valid JSON"},
		{"TwoValues", `{"id":1,"method":"ping"} {"id":2}`, CodeParseError, 0, "", "", "not valid JSON"},
		{"NBSP", "\u00a0{\"id\":1,\"method\":\"ping\"}", CodeParseError, 0, "", "", "not valid JSON"},

		// -32600: not an object.
		{"Array", `[{"id":1,"method":"ping"}]`, CodeInvalidRequest, 0, "", "", "JSON object"},
		{"String", `"ping"`, CodeInvalidRequest, 0, "", "", "JSON object"},
		{"Number", `42`, CodeInvalidRequest, 0, "", "", "JSON object"},
		{"Null", `null`, CodeInvalidRequest, 0, "", "", "JSON object"},
		{"Bool", `true`, CodeInvalidRequest, 0, "", "", "JSON object"},

		// -32600: id.
		{"MissingID", `{"method":"ping"}`, CodeInvalidRequest, 0, "", "", "missing id"},
		{"EmptyObject", `{}`, CodeInvalidRequest, 0, "", "", "missing id"},
		{"NullID", `{"id":null,"method":"ping"}`, CodeInvalidRequest, 0, "", "", "non-negative integer"},
		{"StringID", `{"id":"1","method":"ping"}`, CodeInvalidRequest, 0, "", "", "non-negative integer"},
		{"NegativeID", `{"id":-1,"method":"ping"}`, CodeInvalidRequest, 0, "", "", "-1"},
		{"FloatID", `{"id":1.5,"method":"ping"}`, CodeInvalidRequest, 0, "", "", "1.5"},
		{"WholeFloatID", `{"id":1.0,"method":"ping"}`, CodeInvalidRequest, 0, "", "", "1.0"},
		{"ExponentID", `{"id":1e3,"method":"ping"}`, CodeInvalidRequest, 0, "", "", "1e3"},
		{"OverflowID", `{"id":18446744073709551616,"method":"ping"}`, CodeInvalidRequest, 0, "", "", "non-negative integer"},
		{"ObjectID", `{"id":{},"method":"ping"}`, CodeInvalidRequest, 0, "", "", "non-negative integer"},
		{"DuplicateID", `{"id":1,"method":"ping","id":2}`, CodeInvalidRequest, 0, "", "", "duplicate id"},
		{"DuplicateIDAfterDuplicateMethod", `{"method":"a","method":"b","id":1,"id":2}`, CodeInvalidRequest, 0, "", "", "duplicate id"},
		{"CaseID", `{"ID":1,"method":"ping"}`, CodeInvalidRequest, 0, "", "", "missing id"},

		// -32600: method, with the id recovered.
		{"MissingMethod", `{"id":7}`, CodeInvalidRequest, 7, "", "", "missing method"},
		{"MissingMethodWithParams", `{"id":7,"params":[1]}`, CodeInvalidRequest, 7, "", "", "missing method"},
		{"EmptyMethod", `{"id":7,"method":""}`, CodeInvalidRequest, 7, "", "", "non-empty string"},
		{"NullMethod", `{"id":7,"method":null}`, CodeInvalidRequest, 7, "", "", "non-empty string"},
		{"NumberMethod", `{"method":5,"id":7}`, CodeInvalidRequest, 7, "", "", "non-empty string"},
		{"ArrayMethod", `{"id":7,"method":["ping"]}`, CodeInvalidRequest, 7, "", "", "non-empty string"},
		{"DuplicateMethod", `{"id":7,"method":"a","method":"b"}`, CodeInvalidRequest, 7, "", "", "duplicate method"},
		{"DuplicateParams", `{"id":7,"method":"a","params":{},"params":{}}`, CodeInvalidRequest, 7, "", "", "duplicate params"},

		// -32602: params not an object, with id and method recovered.
		{"ArrayParams", `{"id":8,"method":"loop.get","params":["l1"]}`, CodeInvalidParams, 8, "loop.get", "", "params must be an object"},
		{"StringParams", `{"id":8,"method":"loop.get","params":"l1"}`, CodeInvalidParams, 8, "loop.get", "", "loop.get"},
		{"NumberParams", `{"id":8,"method":"loop.get","params":1}`, CodeInvalidParams, 8, "loop.get", "", "params must be an object"},
		{"BoolParams", `{"id":8,"method":"loop.get","params":false}`, CodeInvalidParams, 8, "loop.get", "", "params must be an object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, rerr := ParseRequest([]byte(tc.line))
			if tc.code == 0 {
				if rerr != nil {
					t.Fatalf("ParseRequest(%s): %v", tc.line, rerr)
				}
			} else {
				if rerr == nil {
					t.Fatalf("ParseRequest(%s) = %+v, want error %d", tc.line, req, tc.code)
				}
				if rerr.Code != tc.code {
					t.Fatalf("code = %d (%s), want %d", rerr.Code, rerr.Message, tc.code)
				}
				if !strings.Contains(rerr.Message, tc.errContain) {
					t.Fatalf("message %q does not contain %q", rerr.Message, tc.errContain)
				}
			}
			if req.ID != tc.id || req.Method != tc.method || string(req.Params) != tc.params || (tc.params == "") != (req.Params == nil) {
				t.Fatalf("got id %d method %q params %q; want %d %q %q", req.ID, req.Method, req.Params, tc.id, tc.method, tc.params)
			}
		})
	}
}

func TestParseRequestCopiesParams(t *testing.T) {
	line := []byte(`{"id":1,"method":"chat.send","params":{"message":"hello"}}`)
	req, rerr := ParseRequest(line)
	if rerr != nil {
		t.Fatal(rerr)
	}
	for i := range line {
		line[i] = 'x'
	}
	if string(req.Params) != `{"message":"hello"}` {
		t.Fatalf("Params changed with the line buffer: %q", req.Params)
	}
}

func TestParseRequestKnownMethodsDoNotAllocate(t *testing.T) {
	line := []byte(`{"id":1,"method":"loop.list"}`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, rerr := ParseRequest(line); rerr != nil {
			t.Fatal(rerr)
		}
	})
	if allocs != 0 {
		t.Fatalf("ParseRequest of a params-less known method allocates %v times", allocs)
	}
}

func TestDecodeParams(t *testing.T) {
	type rejectParams struct {
		ID     string `json:"id"`
		Reason string `json:"reason,omitempty"`
	}
	tests := []struct {
		name   string
		req    Request
		want   rejectParams
		errSub string
	}{
		{"OK", Request{Method: "plan.reject", Params: json.RawMessage(`{"id":"p1","reason":"no"}`)},
			rejectParams{ID: "p1", Reason: "no"}, ""},
		{"Partial", Request{Method: "plan.reject", Params: json.RawMessage(`{"id":"p1"}`)},
			rejectParams{ID: "p1", Reason: "keep"}, ""},
		{"Missing", Request{Method: "plan.reject"}, rejectParams{ID: "keep", Reason: "keep"}, ""},
		{"UnknownField", Request{Method: "plan.reject", Params: json.RawMessage(`{"id":"p1","feedback":"x"}`)},
			rejectParams{}, `unknown field "feedback"`},
		{"WrongType", Request{Method: "plan.reject", Params: json.RawMessage(`{"id":5}`)}, rejectParams{}, "plan.reject"},
		{"Trailing", Request{Method: "plan.reject", Params: json.RawMessage(`{"id":"p1"} {}`)}, rejectParams{}, "trailing data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := rejectParams{ID: "keep", Reason: "keep"}
			rerr := DecodeParams(tc.req, &got)
			if tc.errSub != "" {
				if rerr == nil || rerr.Code != CodeInvalidParams || !strings.Contains(rerr.Message, tc.errSub) {
					t.Fatalf("err = %v, want code %d containing %q", rerr, CodeInvalidParams, tc.errSub)
				}
				return
			}
			if rerr != nil {
				t.Fatal(rerr)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// End to end with ParseRequest.
	req, rerr := ParseRequest([]byte(`{"id":3,"method":"plan.iterate","params":{"id":"p","feedback":"more","extra":1}}`))
	if rerr != nil {
		t.Fatal(rerr)
	}
	var p struct {
		ID       string `json:"id"`
		Feedback string `json:"feedback"`
	}
	if rerr := DecodeParams(req, &p); rerr == nil || !strings.Contains(rerr.Message, "extra") {
		t.Fatalf("err = %v, want unknown field extra", rerr)
	}
}

func TestErrorType(t *testing.T) {
	e := Errorf(CodeNotFound, "loop %q not found", "l1")
	if e.Code != 1001 || e.Message != `loop "l1" not found` || e.Error() != `loop "l1" not found (code 1001)` {
		t.Fatalf("got %+v / %q", e, e.Error())
	}
	var err error = e
	var target *Error
	if !errors.As(err, &target) || target.Code != CodeNotFound {
		t.Fatal("errors.As does not find *Error")
	}
}

// chunkReader returns its data in reads of at most n bytes.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n, len(r.data))
	copy(p, r.data[:k])
	r.data = r.data[k:]
	return k, nil
}

// readAllLines reads lines until an error, copying each.
func readAllLines(lr *LineReader) ([]string, error) {
	var lines []string
	for {
		l, err := lr.Next()
		if err != nil {
			return lines, err
		}
		lines = append(lines, string(l))
	}
}

func TestLineReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		want    []string
		wantErr error
	}{
		{"Simple", "a\nbb\nccc\n", 0, []string{"a", "bb", "ccc"}, io.EOF},
		{"CRLF", "a\r\nbb\r\n", 0, []string{"a", "bb"}, io.EOF},
		{"OnlyOneCRStripped", "a\r\r\n", 0, []string{"a\r"}, io.EOF},
		{"CRInside", "a\rb\n", 0, []string{"a\rb"}, io.EOF},
		{"FinalNoNewline", "a\nlast", 0, []string{"a", "last"}, io.EOF},
		{"FinalCR", "a\nlast\r", 0, []string{"a", "last"}, io.EOF},
		{"EmptyLines", "\n\na\n\n", 0, []string{"", "", "a", ""}, io.EOF},
		{"Empty", "", 0, nil, io.EOF},
		{"ExactlyMax", "12345\n", 5, []string{"12345"}, io.EOF},
		{"ExactlyMaxCRLF", "12345\r\n", 5, []string{"12345"}, io.EOF},
		{"ExactlyMaxFinal", "1\n12345", 5, []string{"1", "12345"}, io.EOF},
		{"MaxPlusOne", "1\n123456\n1\n", 5, []string{"1"}, ErrLineTooLong},
		{"MaxPlusOneCRLF", "123456\r\n", 5, nil, ErrLineTooLong},
		{"MaxPlusOneFinal", "1\n123456", 5, []string{"1"}, ErrLineTooLong},
		{"MaxPlusOneFinalCR", "123456\r", 5, nil, ErrLineTooLong},
		{"JSONLines", `{"id":1,"method":"ping"}` + "\n" + `{"id":2,"method":"loop.list","params":{}}` + "\n", 0,
			[]string{`{"id":1,"method":"ping"}`, `{"id":2,"method":"loop.list","params":{}}`}, io.EOF},
	}
	for _, tc := range tests {
		for _, chunk := range []int{1, 2, 3, 7, 1 << 20} {
			for _, bufSize := range []int{16, lineReaderBufSize} {
				t.Run(fmt.Sprintf("%s/chunk%d/buf%d", tc.name, chunk, bufSize), func(t *testing.T) {
					lr := newLineReaderSize(&chunkReader{data: []byte(tc.in), n: chunk}, tc.max, bufSize)
					got, err := readAllLines(lr)
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("err = %v, want %v", err, tc.wantErr)
					}
					if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
						t.Fatalf("lines = %q, want %q", got, tc.want)
					}
					if tc.wantErr == ErrLineTooLong {
						if _, err2 := lr.Next(); !errors.Is(err2, ErrLineTooLong) {
							t.Fatalf("after a too-long line, Next = %v; want the same error again", err2)
						}
					}
				})
			}
		}
	}
}

// Lines much longer than the 64 KiB read buffer but under the maximum come
// back whole, one after another, and the line buffer stays within max+1.
func TestLineReaderLongLines(t *testing.T) {
	const max = 1 << 20
	var in bytes.Buffer
	var want []string
	for i, n := range []int{70 << 10, 200 << 10, 1, max, 64 << 10, 64<<10 - 1, 64<<10 + 1, 300 << 10} {
		line := strings.Repeat(string(rune('a'+i)), n)
		want = append(want, line)
		in.WriteString(line)
		if i%2 == 0 {
			in.WriteString("\r\n")
		} else {
			in.WriteString("\n")
		}
	}
	for _, r := range []io.Reader{bytes.NewReader(in.Bytes()), iotest.HalfReader(bytes.NewReader(in.Bytes())), &chunkReader{data: in.Bytes(), n: 4093}} {
		lr := NewLineReader(r, max)
		for i, w := range want {
			got, err := lr.Next()
			if err != nil {
				t.Fatalf("line %d: %v", i, err)
			}
			if string(got) != w {
				t.Fatalf("line %d: got %d bytes, want %d", i, len(got), len(w))
			}
			if cap(lr.buf) > max+1 {
				t.Fatalf("line %d: line buffer grew to %d, max+1 is %d", i, cap(lr.buf), max+1)
			}
		}
		if _, err := lr.Next(); err != io.EOF {
			t.Fatalf("err = %v, want io.EOF", err)
		}
	}
}

// countingReader counts the bytes handed out.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// endless yields the same byte forever.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

// A peer that never sends a newline cannot make the reader buffer more than
// max+1 bytes of its line, nor read much past that.
func TestLineReaderBoundsOneLine(t *testing.T) {
	for _, max := range []int{10, 64 << 10, 100 << 10, 1 << 20} {
		cr := &countingReader{r: endless('x')}
		lr := NewLineReader(cr, max)
		_, err := lr.Next()
		if !errors.Is(err, ErrLineTooLong) {
			t.Fatalf("max %d: err = %v, want ErrLineTooLong", max, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprint(max)) {
			t.Errorf("max %d: error %q does not name the limit", max, err)
		}
		if cr.n > max+1+lineReaderBufSize {
			t.Fatalf("max %d: read %d bytes before refusing the line", max, cr.n)
		}
		if cap(lr.buf) > max+1 {
			t.Fatalf("max %d: line buffer grew to %d", max, cap(lr.buf))
		}
	}
}

// A read error in the middle of a line (a deadline, say) keeps what was read:
// the next call finishes the same line.
func TestLineReaderResumesAfterError(t *testing.T) {
	errTimeout := errors.New("i/o timeout")
	long := strings.Repeat("y", 100)
	steps := []struct {
		data string
		err  error
	}{{"first\nsec", nil}, {"", errTimeout}, {"ond\n" + long[:50], nil}, {"", errTimeout}, {long[50:] + "\n", nil}}
	r := &scriptReader{steps: steps}
	lr := newLineReaderSize(r, 0, 16)
	var got []string
	var errs int
	for {
		l, err := lr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errTimeout) {
			errs++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(l))
	}
	want := []string{"first", "second", long}
	if strings.Join(got, "|") != strings.Join(want, "|") || errs != 2 {
		t.Fatalf("lines %q with %d errors, want %q with 2", got, errs, want)
	}
}

type scriptReader struct {
	steps []struct {
		data string
		err  error
	}
}

func (r *scriptReader) Read(p []byte) (int, error) {
	if len(r.steps) == 0 {
		return 0, io.EOF
	}
	s := &r.steps[0]
	if s.err != nil {
		err := s.err
		r.steps = r.steps[1:]
		return 0, err
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	if s.data == "" {
		r.steps = r.steps[1:]
	}
	return n, nil
}

// appender is a result that writes its own JSON (JSONAppender).
type appender string

func (a appender) AppendJSON(dst []byte) []byte { return append(dst, a...) }

func TestAppendResponse(t *testing.T) {
	type msg struct {
		MessageID string `json:"message_id"`
	}
	tests := []struct {
		name   string
		id     uint64
		result any
		rerr   *Error
		want   string
	}{
		{"SpecExample", 1, msg{MessageID: "msg-001"}, nil, `{"id":1,"result":{"message_id":"msg-001"}}`},
		{"Pong", 2, map[string]bool{"pong": true}, nil, `{"id":2,"result":{"pong":true}}`},
		{"NilResult", 3, nil, nil, `{"id":3,"result":{}}`},
		{"NilPointerResult", 3, (*msg)(nil), nil, `{"id":3,"result":{}}`},
		{"RawResult", 4, json.RawMessage(`{ "a" : [1, 2] }`), nil, `{"id":4,"result":{"a":[1,2]}}`},
		{"ScalarResult", 5, 42, nil, `{"id":5,"result":42}`},
		{"HTMLResult", 6, "<b>&", nil, `{"id":6,"result":"\u003cb\u003e\u0026"}`},
		{"AppenderResult", 6, appender(`{"a":[1,"x"]}`), nil, `{"id":6,"result":{"a":[1,"x"]}}`},
		{"Error", 7, nil, Errorf(CodeNotFound, "loop %q not found", "l1"), `{"id":7,"error":{"code":1001,"message":"loop \"l1\" not found"}}`},
		{"ErrorIgnoresResult", 8, msg{"x"}, Errorf(CodeMethodNotFound, "unknown method"), `{"id":8,"error":{"code":-32601,"message":"unknown method"}}`},
		{"ErrorData", 9, nil, &Error{Code: CodeInvalidState, Message: "loop is paused", Data: map[string]string{"state": "paused"}},
			`{"id":9,"error":{"code":1002,"message":"loop is paused","data":{"state":"paused"}}}`},
		{"MaxID", 18446744073709551615, nil, &Error{Code: CodeParseError, Message: "parse error"},
			`{"id":18446744073709551615,"error":{"code":-32700,"message":"parse error"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AppendResponse([]byte("prev\n"), tc.id, tc.result, tc.rerr)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "prev\n"+tc.want+"\n" {
				t.Fatalf("got  %s\nwant %s", got, "prev\n"+tc.want+"\n")
			}
			// Matches the Response type through encoding/json.
			var back Response
			if err := json.Unmarshal(got[len("prev\n"):], &back); err != nil {
				t.Fatal(err)
			}
			want := Response{ID: tc.id, Error: tc.rerr}
			if tc.rerr == nil {
				want.Result = json.RawMessage(strings.TrimSuffix(strings.TrimPrefix(tc.want, fmt.Sprintf(`{"id":%d,"result":`, tc.id)), "}"))
			}
			wantJSON, _ := json.Marshal(want)
			if tc.rerr == nil || tc.rerr.Data == nil {
				if gotLine := strings.TrimSuffix(string(got[len("prev\n"):]), "\n"); gotLine != string(wantJSON) {
					t.Fatalf("AppendResponse %s differs from json.Marshal(Response) %s", gotLine, wantJSON)
				}
			}
		})
	}
}

func TestAppendResponseErrors(t *testing.T) {
	dst := []byte("keep")
	got, err := AppendResponse(dst, 1, make(chan int), nil)
	if err == nil || string(got) != "keep" {
		t.Fatalf("unencodable result: %q, %v; want dst unchanged and an error", got, err)
	}
	got, err = AppendResponse(dst, 1, nil, &Error{Code: 1, Message: "m", Data: func() {}})
	if err == nil || string(got) != "keep" {
		t.Fatalf("unencodable error data: %q, %v; want dst unchanged and an error", got, err)
	}
}

func TestAppendEvent(t *testing.T) {
	tests := []struct {
		name  string
		event string
		data  string
		want  string
	}{
		{"SpecChunk", "chat.chunk", `{"text":"I'll help you ","done":false}`, `{"event":"chat.chunk","data":{"text":"I'll help you ","done":false}}`},
		{"SpecToolCall", "chat.tool_call", `{"tool":"read_file","input":{"path":"src/main.rs"}}`,
			`{"event":"chat.tool_call","data":{"tool":"read_file","input":{"path":"src/main.rs"}}}`},
		{"Pretty", "loop.updated", "{\n  \"loop\": {\r\n    \"id\": \"l1\"\n  }\n}", `{"event":"loop.updated","data":{"loop":{"id":"l1"}}}`},
		{"EscapedNewlineKept", "chat.chunk", `{"text":"a\nb"}`, `{"event":"chat.chunk","data":{"text":"a\nb"}}`},
		{"NilData", "metrics.update", "", `{"event":"metrics.update","data":null}`},
		{"InvalidData", "metrics.update", `{"broken":`, `{"event":"metrics.update","data":null}`},
		{"QuotedName", `we"ird<`, `1`, `{"event":"we\"ird\u003c","data":1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var data []byte
			if tc.data != "" {
				data = []byte(tc.data)
			}
			got := AppendEvent([]byte("x"), tc.event, data)
			if string(got) != "x"+tc.want+"\n" {
				t.Fatalf("got  %s\nwant %s", got, "x"+tc.want+"\n")
			}
			line := got[1 : len(got)-1]
			if bytes.ContainsAny(line, "\r\n") || !json.Valid(line) {
				t.Fatalf("event line %q is not one JSON value on one line", line)
			}
			var ev Event
			if err := json.Unmarshal(line, &ev); err != nil || ev.Event != tc.event {
				t.Fatalf("decoded %+v, %v", ev, err)
			}
		})
	}
}

// LineBuffered says whether Next has a whole line without reading.
func TestLineBuffered(t *testing.T) {
	lr := NewLineReader(strings.NewReader("a\nb\r\nc"), 0)
	if lr.LineBuffered() {
		t.Fatal("a line buffered before anything was read")
	}
	for _, want := range []struct {
		line     string
		buffered bool
	}{{"a", true}, {"b", false}, {"c", false}} {
		line, err := lr.Next()
		if err != nil || string(line) != want.line {
			t.Fatalf("Next = %q, %v; want %q", line, err, want.line)
		}
		if got := lr.LineBuffered(); got != want.buffered {
			t.Fatalf("after %q: LineBuffered %v, want %v", want.line, got, want.buffered)
		}
	}
}
