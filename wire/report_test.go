package wire

import (
	"encoding/json"
	"reflect"
	"testing"
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

func checkReport(t *testing.T, params []byte) {
	t.Helper()
	if !json.Valid(params) {
		return
	}
	fast, ok := DecodeReportMessage(params)
	if !ok {
		return
	}
	var slow ReportMessage
	if err := json.Unmarshal(params, &slow); err != nil {
		t.Fatalf("%s: the fast decoder took what encoding/json refuses (%v): %+v", params, err, fast)
	}
	if len(slow.EventData) == 0 {
		slow.EventData = nil
	}
	if len(fast.EventData) == 0 {
		fast.EventData = nil
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%s:\nfast %+v\njson %+v", params, fast, slow)
	}
}

func FuzzDecodeReportMessage(f *testing.F) {
	for _, s := range reportSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) { checkReport(t, params) })
}
