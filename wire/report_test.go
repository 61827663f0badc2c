package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"unsafe"
)

var reportSeeds = []string{
	`{"session_token":"tok","task_id":"t-1","sequence":3,"timestamp":1700000000000,"event_type":"content_block_delta","event_data":{"delta":{"text":"hi"}}}`,
	`{"sequence":1,"event_type":"x","event_data":null}`,
	`{"event_type":"caf\u00e9 \"q\"","event_data":[1,2,{"a":"b"}],"extra":{"k":[true,false]}}`,
	`{"sequence":1.5}`,
	`{"sequence":"1"}`,
	`{"sequence":1e3}`,
	`{"sequence":-9223372036854775808,"timestamp":9223372036854775807}`,
	`{"sequence":9223372036854775808}`,
	`{"task_id":null,"task_id":"again"}`,
	`{"event_type":7}`,
	`{"event_type":"\ud800"}`,
	`[1,2]`,
	`"a string"`,
	` { "session_token" : "a b" , "event_data" : "text" } `,
	`{}`,
}

// What the fast decoder takes it decodes as encoding/json does.
func TestDecodeReportMessage(t *testing.T) {
	for _, s := range reportSeeds {
		checkReport(t, []byte(s))
	}
	r, ok := DecodeReportMessage([]byte(reportSeeds[0]))
	if !ok || r.SessionToken != "tok" || r.Sequence != 3 || string(r.EventData) != `{"delta":{"text":"hi"}}` {
		t.Fatalf("decoded %+v, %v", r, ok)
	}
	for _, s := range []string{`{"sequence":1.5}`, `{"event_type":7}`, `[1,2]`} {
		if _, ok := DecodeReportMessage([]byte(s)); ok {
			t.Errorf("%s: taken, want it left to encoding/json", s)
		}
	}
}

// The interner gives back a string it made when the bytes are the same,
// and never a wrong one.
func TestInterner(t *testing.T) {
	var in Interner
	a := in.String([]byte("task-1"))
	if b := in.String([]byte("task-1")); b != a || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("the same bytes made a new string")
	}
	for i := range 20 {
		if s := in.String([]byte{byte('a' + i)}); s != string(rune('a'+i)) {
			t.Fatalf("String(%q) = %q", rune('a'+i), s)
		}
	}
	if got := in.String([]byte("task-1")); got != "task-1" {
		t.Fatalf("after it was forgotten: %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = in.String([]byte("task-1")) }); n != 0 {
		t.Fatalf("a remembered string costs %v allocations", n)
	}
}

func checkReport(t *testing.T, params []byte) {
	t.Helper()
	if !json.Valid(params) {
		return
	}
	fast, ok := DecodeReportMessage(params)
	// The interned decoder agrees, the first time and when its strings
	// come from its memory.
	var in Interner
	for range 2 {
		if r, iok := in.DecodeReportMessage(params); iok != ok || !reflect.DeepEqual(r, fast) {
			t.Fatalf("%s: interned %+v (%v), plain %+v (%v)", params, r, iok, fast, ok)
		}
	}
	if !ok {
		return
	}
	var slow ReportMessage
	if err := json.Unmarshal(params, &slow); err != nil {
		t.Fatalf("%s: the fast decoder took what encoding/json refuses (%v): %+v", params, err, fast)
	}
	if !sameReport(fast, slow) {
		t.Fatalf("%s:\nfast %+v\njson %+v", params, fast, slow)
	}
}

func FuzzDecodeReportMessage(f *testing.F) {
	for _, s := range reportSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) { checkReport(t, params) })
}

var reportLineSeeds = []string{
	`{"jsonrpc":"2.0","method":"report_message","params":{"session_token":"tok","task_id":"t-1","sequence":3,"timestamp":1700000000000,"event_type":"content_block_delta","event_data":{"delta":{"text":"hi"}}}}`,
	` { "params" : { "event_data" : [1, {"a": null}] , "sequence" : -0 } , "method" : "report_message" , "x": {"y": [true]}, "jsonrpc" : "2.0" } `,
	`{"jsonrpc":"2.0","method":"report_message","params":{}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":{"task_id":null,"event_data":null,"sequence":null}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":{"task_id":"caf\u00e9"}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":{"Task_Id":"a"}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":{"sequence":1.5}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":{"sequence":12345678901234567890}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":{"task_id":"a","task_id":"b"}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":{"event_data":{"a":1},}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":{}} x`,
	`{"jsonrpc":"2.0","method":"report_message","id":1,"params":{}}`,
	`{"jsonrpc":"2.0","jsonrpc":"2.0","method":"report_message","params":{}}`,
	`{"jsonrpc":"2.0","method":"report_progress","params":{}}`,
	`{"jsonrpc":"2.0","method":"report_message","params":[1]}`,
	"{\"jsonrpc\":\"2.0\",\"method\":\"report_message\",\"params\":{\"event_type\":\"\xff\"}}",
	`{"jsonrpc":"2.0","method":"report_message","params":{"event_type":"a\"b"}}`,
}

// The one-pass line decoder takes the lines executors send, and what it
// takes the long way takes as the same message.
func TestDecodeReportLine(t *testing.T) {
	for _, s := range reportLineSeeds {
		checkReportLine(t, []byte(s))
	}
	var in Interner
	for _, s := range reportLineSeeds[:4] {
		if _, ok := in.DecodeReportLine([]byte(s)); !ok {
			t.Errorf("%s: left to the long way", s)
		}
	}
	r, _ := in.DecodeReportLine([]byte(reportLineSeeds[0]))
	if r.SessionToken != "tok" || r.TaskID != "t-1" || r.Sequence != 3 || r.Timestamp != 1700000000000 ||
		r.EventType != "content_block_delta" || string(r.EventData) != `{"delta":{"text":"hi"}}` {
		t.Fatalf("decoded %+v", r)
	}
}

func FuzzDecodeReportLine(f *testing.F) {
	for _, s := range reportLineSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkReportLine(t, line) })
}

func checkReportLine(t *testing.T, line []byte) {
	t.Helper()
	var in Interner
	fast, ok := in.DecodeReportLine(line)
	if !ok {
		return
	}
	m, bad := ParseRPC(line)
	if bad != nil || m.Kind != RPCKindNotification || m.Method != "report_message" {
		t.Fatalf("%s: taken as a report_message, but ParseRPC says %+v, %v", line, m, bad)
	}
	slow, sok := DecodeReportMessage(m.Params)
	if !sok {
		var ref ReportMessage
		if err := json.Unmarshal(m.Params, &ref); err != nil {
			t.Fatalf("%s: taken, but encoding/json refuses its params: %v", line, err)
		}
		slow = ref
	}
	if !sameReport(fast, slow) {
		t.Fatalf("%s:\none pass %+v\nlong way %+v", line, fast, slow)
	}
}

// sameReport compares two decodings, an empty event_data and none counting
// as the same.
func sameReport(a, b ReportMessage) bool {
	if len(a.EventData) == 0 {
		a.EventData = nil
	}
	if len(b.EventData) == 0 {
		b.EventData = nil
	}
	return reflect.DeepEqual(a, b)
}
