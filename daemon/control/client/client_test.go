package client

import (
	"testing"
)

func TestClientFastPaths(t *testing.T) {
	for _, tc := range []struct {
		line   string
		id     uint64
		result string
		ok     bool
	}{
		{`{"id":7,"result":{"pong":true}}`, 7, `{"pong":true}`, true},
		{`{"id":0,"result":{}}`, 0, `{}`, true},
		{`{"id":18446744073709551615,"result":1}`, 0, "", false}, // 20 digits: left to encoding/json
		{`{"id":7,"error":{"code":1,"message":"x"}}`, 0, "", false},
		{`{"result":1,"id":7}`, 0, "", false},
		{`{"id":,"result":1}`, 0, "", false},
		{`{"id":7,"result":1`, 0, "", false},
		{``, 0, "", false},
	} {
		id, res, ok := fastResult([]byte(tc.line))
		if ok != tc.ok || id != tc.id || string(res) != tc.result {
			t.Errorf("fastResult(%s) = %d, %q, %v", tc.line, id, res, ok)
		}
	}
	for _, tc := range []struct {
		line, kind, data string
		ok               bool
	}{
		{`{"event":"job.output","data":{"job_id":"j-1"}}`, "job.output", `{"job_id":"j-1"}`, true},
		{`{"event":"events.dropped","data":{"dropped":3}}`, "events.dropped", `{"dropped":3}`, true},
		{`{"event":"a\"b","data":1}`, "", "", false},
		{`{"event":"","data":1}`, "", "", false},
		{`{"data":1,"event":"x"}`, "", "", false},
		{`{"event":"x"}`, "", "", false},
	} {
		kind, data, ok := fastEvent([]byte(tc.line))
		if ok != tc.ok || kind != tc.kind || string(data) != tc.data {
			t.Errorf("fastEvent(%s) = %q, %q, %v", tc.line, kind, data, ok)
		}
	}
}
