package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// Messages shaped as in Agor's IPC catalog (../shared/specs/001_*.txt), with
// the spellings of the real executor (tool_params, credential_key).
var agorLines = map[string]string{
	"execute_prompt":        `{"jsonrpc":"2.0","id":"req-1","method":"execute_prompt","params":{"session_token":"tok-9f2c","session_id":"s-1","task_id":"t-1","prompt":"Fix the failing test","cwd":"/home/u/proj","tools":["Read","Write","Bash"],"permission_mode":"acceptEdits","timeout_ms":600000,"stream":true}}`,
	"execute_prompt_result": `{"jsonrpc":"2.0","id":"req-1","result":{"status":"completed","message_count":42,"token_usage":{"input_tokens":1000,"output_tokens":500}}}`,
	"spawn_terminal":        `{"jsonrpc":"2.0","id":"req-2","method":"spawn_terminal","params":{"session_token":"tok-9f2c","cwd":"/home/u","shell":"bash","env":{"TERM":"xterm-256color"},"use_tmux":false,"cols":80,"rows":24}}`,
	"stop_task":             `{"jsonrpc":"2.0","id":"req-3","method":"stop_task","params":{"session_token":"tok-9f2c","task_id":"t-1","reason":"timeout"}}`,
	"shutdown":              `{"jsonrpc":"2.0","id":"req-4","method":"shutdown","params":{"reason":"server_restart","timeout_ms":5000}}`,
	"shutdown_result":       `{"jsonrpc":"2.0","id":"req-4","result":{"status":"idle"}}`,
	"get_api_key":           `{"jsonrpc":"2.0","id":1,"method":"get_api_key","params":{"session_token":"tok-9f2c","credential_key":"ANTHROPIC_API_KEY"}}`,
	"get_api_key_service":   `{"jsonrpc":"2.0","id":2,"method":"get_api_key","params":{"session_token":"tok-9f2c","service":"anthropic"}}`,
	"get_api_key_result":    `{"jsonrpc":"2.0","id":1,"result":{"api_key":"sk-ant-xxxx","expires_at":1737331200000}}`,
	"get_api_key_error":     `{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"No API key configured"}}`,
	"request_permission":    `{"jsonrpc":"2.0","id":3,"method":"request_permission","params":{"session_token":"tok-9f2c","tool_name":"Bash","tool_params":{"command":"rm -rf build","description":"clean"}}}`,
	"request_permission_in": `{"jsonrpc":"2.0","id":4,"method":"request_permission","params":{"session_token":"tok-9f2c","tool_name":"Write","tool_input":{"file_path":"/tmp/x","content":"<a & b>"}}}`,
	"permission_result":     `{"jsonrpc":"2.0","id":3,"result":{"approved":false,"reason":"denied by rule"}}`,
	"get_execution_context": `{"jsonrpc":"2.0","id":5,"method":"get_execution_context","params":{"session_token":"tok-9f2c"}}`,
	"create_message":        `{"jsonrpc":"2.0","id":6,"method":"create_message","params":{"session_token":"tok-9f2c","task_id":"t-1","message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"type":"content_block"}}}`,
	"report_message":        `{"jsonrpc":"2.0","method":"report_message","params":{"session_token":"tok-9f2c","task_id":"t-1","sequence":7,"timestamp":1737331200123,"event_type":"content_block_delta","event_data":{"delta":{"text":"Hello, "}}}}`,
	"report_message_tool":   `{"jsonrpc":"2.0","method":"report_message","params":{"session_token":"tok-9f2c","task_id":"t-1","sequence":8,"timestamp":1737331200124,"event_type":"tool_call","event_data":{"tool":"Read","input":{"file_path":"/tmp/test.txt"}}}}`,
	"report_progress":       `{"jsonrpc":"2.0","method":"report_progress","params":{"session_token":"tok-9f2c","task_id":"t-1","progress":{"percent":40,"message":"Reading files..."}}}`,
	"report_error":          `{"jsonrpc":"2.0","method":"report_error","params":{"session_token":"tok-9f2c","task_id":"t-1","error":{"code":"TOOL_FAILED","message":"exit 1","details":{"stderr":"boom"}}}}`,
	"pause_notifications":   `{"jsonrpc":"2.0","method":"pause_notifications"}`,
	"resume_notifications":  `{"jsonrpc":"2.0","method":"resume_notifications","params":{}}`,
	"cancel_task":           `{"jsonrpc":"2.0","method":"cancel_task","params":{"task_id":"t-1"}}`,
	"method_not_found":      `{"jsonrpc":"2.0","id":"req-9","error":{"code":-32601,"message":"Method not found","data":{"method":"frobnicate"}}}`,
	"parse_error_reply":     `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`,
}

func TestParseRPCAgorMessages(t *testing.T) {
	want := map[string]struct {
		kind   RPCKind
		id     string // JSON text; "" for a notification
		method string
	}{
		"execute_prompt":        {RPCKindRequest, `"req-1"`, "execute_prompt"},
		"execute_prompt_result": {RPCKindResult, `"req-1"`, ""},
		"spawn_terminal":        {RPCKindRequest, `"req-2"`, "spawn_terminal"},
		"stop_task":             {RPCKindRequest, `"req-3"`, "stop_task"},
		"shutdown":              {RPCKindRequest, `"req-4"`, "shutdown"},
		"shutdown_result":       {RPCKindResult, `"req-4"`, ""},
		"get_api_key":           {RPCKindRequest, `1`, "get_api_key"},
		"get_api_key_service":   {RPCKindRequest, `2`, "get_api_key"},
		"get_api_key_result":    {RPCKindResult, `1`, ""},
		"get_api_key_error":     {RPCKindError, `2`, ""},
		"request_permission":    {RPCKindRequest, `3`, "request_permission"},
		"request_permission_in": {RPCKindRequest, `4`, "request_permission"},
		"permission_result":     {RPCKindResult, `3`, ""},
		"get_execution_context": {RPCKindRequest, `5`, "get_execution_context"},
		"create_message":        {RPCKindRequest, `6`, "create_message"},
		"report_message":        {RPCKindNotification, ``, "report_message"},
		"report_message_tool":   {RPCKindNotification, ``, "report_message"},
		"report_progress":       {RPCKindNotification, ``, "report_progress"},
		"report_error":          {RPCKindNotification, ``, "report_error"},
		"pause_notifications":   {RPCKindNotification, ``, "pause_notifications"},
		"resume_notifications":  {RPCKindNotification, ``, "resume_notifications"},
		"cancel_task":           {RPCKindNotification, ``, "cancel_task"},
		"method_not_found":      {RPCKindError, `"req-9"`, ""},
		"parse_error_reply":     {RPCKindError, `null`, ""},
	}
	if len(want) != len(agorLines) {
		t.Fatalf("%d expectations for %d lines", len(want), len(agorLines))
	}
	for name, line := range agorLines {
		t.Run(name, func(t *testing.T) {
			w := want[name]
			m, derr := ParseRPC([]byte(line))
			if derr != nil {
				t.Fatalf("refused: %v", derr)
			}
			if m.Kind != w.kind || m.Method != w.method {
				t.Fatalf("kind %v method %q, want %v %q", m.Kind, m.Method, w.kind, w.method)
			}
			if w.id != "" && m.ID.String() != w.id {
				t.Fatalf("id %s, want %s", m.ID, w.id)
			}
			// Re-encoded by AppendRPCMessage, the line is the same bytes:
			// these lines are compact and their members in the usual order.
			out, err := AppendRPCMessage(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != line+"\n" {
				t.Fatalf("re-encoded as\n%s\nwant\n%s", out, line)
			}
		})
	}
}

func TestParseRPC(t *testing.T) {
	type want struct {
		kind   RPCKind
		id     string // JSON text of the id (null for none)
		method string
		params string // "" means nil
		result string
		err    string // error object as JSON, for error responses
	}
	tests := []struct {
		name string
		line string
		want want
	}{
		{"Request", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}`, want{RPCKindRequest, `1`, "m", `{"a":1}`, "", ""}},
		{"RequestArrayParams", `{"jsonrpc":"2.0","id":1,"method":"subtract","params":[42,23]}`, want{RPCKindRequest, `1`, "subtract", `[42,23]`, "", ""}},
		{"RequestNoParams", `{"jsonrpc":"2.0","id":"a","method":"m"}`, want{RPCKindRequest, `"a"`, "m", "", "", ""}},
		{"RequestNullParams", `{"jsonrpc":"2.0","id":"a","method":"m","params":null}`, want{RPCKindRequest, `"a"`, "m", "", "", ""}},
		{"MembersInAnyOrder", `{"params":{},"method":"m","id":7,"jsonrpc":"2.0"}`, want{RPCKindRequest, `7`, "m", `{}`, "", ""}},
		{"Whitespace", " \t{ \"jsonrpc\" : \"2.0\" , \"id\" : 2 ,\r \"method\" : \"m\" , \"params\" : [ ] }\r", want{RPCKindRequest, `2`, "m", `[ ]`, "", ""}},
		{"UnknownMembersIgnored", `{"jsonrpc":"2.0","id":1,"method":"m","x":{"id":9,"result":1},"y":[1]}`, want{RPCKindRequest, `1`, "m", "", "", ""}},
		{"EscapedKeyAndMethod", `{"jsonrpc":"2.0","\u0069d":1,"method":"report\u005fmessage"}`, want{RPCKindRequest, `1`, "report_message", "", "", ""}},
		{"EscapedVersion", `{"jsonrpc":"2\u002e0","method":"m"}`, want{RPCKindNotification, `null`, "m", "", "", ""}},
		{"UnicodeMethod", `{"jsonrpc":"2.0","method":"caf\u00e9"}`, want{RPCKindNotification, `null`, "café", "", "", ""}},
		{"HugeIntegerID", `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"m"}`, want{RPCKindRequest, `123456789012345678901234567890`, "m", "", "", ""}},
		{"NegativeID", `{"jsonrpc":"2.0","id":-5,"method":"m"}`, want{RPCKindRequest, `-5`, "m", "", "", ""}},
		{"FractionID", `{"jsonrpc":"2.0","id":1.50,"method":"m"}`, want{RPCKindRequest, `1.50`, "m", "", "", ""}},
		{"ExponentID", `{"jsonrpc":"2.0","id":1e3,"method":"m"}`, want{RPCKindRequest, `1e3`, "m", "", "", ""}},
		{"EmptyStringID", `{"jsonrpc":"2.0","id":"","method":"m"}`, want{RPCKindRequest, `""`, "m", "", "", ""}},
		{"EscapedStringID", `{"jsonrpc":"2.0","id":"a\u0062\"c","method":"m"}`, want{RPCKindRequest, `"ab\"c"`, "m", "", "", ""}},
		{"Notification", `{"jsonrpc":"2.0","method":"report_progress","params":{"progress":{}}}`, want{RPCKindNotification, `null`, "report_progress", `{"progress":{}}`, "", ""}},
		{"Result", `{"jsonrpc":"2.0","id":1,"result":{"approved":true}}`, want{RPCKindResult, `1`, "", "", `{"approved":true}`, ""}},
		{"NullResult", `{"jsonrpc":"2.0","id":1,"result":null}`, want{RPCKindResult, `1`, "", "", `null`, ""}},
		{"ScalarResult", `{"jsonrpc":"2.0","id":"x","result":19}`, want{RPCKindResult, `"x"`, "", "", `19`, ""}},
		{"ResultIgnoresParams", `{"jsonrpc":"2.0","id":1,"result":1,"params":5}`, want{RPCKindResult, `1`, "", "", `1`, ""}},
		{"Error", `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}`, want{RPCKindError, `1`, "", "", "", `{"code":-32601,"message":"Method not found"}`}},
		{"ErrorWithData", `{"jsonrpc":"2.0","id":1,"error":{"message":"x","data":[1,"two"],"code":5,"extra":true}}`, want{RPCKindError, `1`, "", "", "", `{"code":5,"message":"x","data":[1,"two"]}`}},
		{"ErrorNullData", `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x","data":null}}`, want{RPCKindError, `1`, "", "", "", `{"code":1,"message":"x","data":null}`}},
		{"ErrorNullID", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`, want{RPCKindError, `null`, "", "", "", `{"code":-32700,"message":"Parse error"}`}},
		{"ErrorExtremeCode", `{"jsonrpc":"2.0","id":1,"error":{"code":-9223372036854775808,"message":""}}`, want{RPCKindError, `1`, "", "", "", `{"code":-9223372036854775808,"message":""}`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, derr := ParseRPC([]byte(tc.line))
			if derr != nil {
				t.Fatalf("refused: %v", derr)
			}
			w := tc.want
			var gotErr string
			if m.Error != nil {
				b, _ := json.Marshal(m.Error)
				gotErr = string(b)
			}
			if m.Kind != w.kind || m.ID.String() != w.id || m.Method != w.method ||
				string(m.Params) != w.params || (w.params == "") != (m.Params == nil) ||
				string(m.Result) != w.result || gotErr != w.err {
				t.Fatalf("got %v id %s method %q params %q result %q error %s\nwant %+v", m.Kind, m.ID, m.Method, m.Params, m.Result, gotErr, w)
			}
		})
	}
}

func TestParseRPCRefuses(t *testing.T) {
	tests := []struct {
		name     string
		line     string
		code     int
		id       string // the id to answer with, as JSON
		response bool
		contains string
	}{
		// -32700: not JSON.
		{"Empty", ``, CodeParseError, `null`, false, "empty line"},
		{"Blank", " \t\r", CodeParseError, `null`, false, "empty line"},
		{"Garbage", `hello`, CodeParseError, `null`, false, "invalid character 'h'"},
		{"Truncated", `{"jsonrpc":"2.0","id":1,"method":"m"`, CodeParseError, `null`, false, "unexpected end"},
		{"TrailingComma", `{"jsonrpc":"2.0","method":"m",}`, CodeParseError, `null`, false, "at byte"},
		{"TwoObjects", `{"jsonrpc":"2.0","method":"m"} {"jsonrpc":"2.0","method":"m"}`, CodeParseError, `null`, false, "after top-level value"},
		{"SpecExample", `{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]`, CodeParseError, `null`, false, "parse error"},

		// -32600: not one object.
		{"Batch", `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, CodeInvalidRequest, `null`, false, "batches"},
		{"EmptyBatch", `[]`, CodeInvalidRequest, `null`, false, "batches"},
		{"SpecInvalidBatch", `[1,2,3]`, CodeInvalidRequest, `null`, false, "batches"},
		{"Number", `1`, CodeInvalidRequest, `null`, false, "want a JSON object, got \"1\""},
		{"String", `"m"`, CodeInvalidRequest, `null`, false, "want a JSON object"},
		{"Null", `null`, CodeInvalidRequest, `null`, false, "want a JSON object"},

		// -32600: jsonrpc.
		{"NoVersion", `{"id":1,"method":"m"}`, CodeInvalidRequest, `1`, false, `missing "jsonrpc":"2.0"`},
		{"Version1", `{"jsonrpc":"1.0","id":1,"method":"m"}`, CodeInvalidRequest, `1`, false, `jsonrpc must be "2.0", got "\"1.0\""`},
		{"VersionNumber", `{"jsonrpc":2.0,"id":1,"method":"m"}`, CodeInvalidRequest, `1`, false, `jsonrpc must be "2.0"`},
		{"VersionNull", `{"jsonrpc":null,"method":"m"}`, CodeInvalidRequest, `null`, false, `jsonrpc must be "2.0"`},
		{"NoVersionResponse", `{"id":1,"result":1}`, CodeInvalidRequest, `1`, true, `missing "jsonrpc"`},

		// -32600: duplicates.
		{"DuplicateID", `{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}`, CodeInvalidRequest, `null`, false, `duplicate "id" member`},
		{"DuplicateMethod", `{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`, CodeInvalidRequest, `1`, false, `duplicate "method"`},
		{"DuplicateParams", `{"jsonrpc":"2.0","method":"a","params":{},"params":[]}`, CodeInvalidRequest, `null`, false, `duplicate "params"`},
		{"DuplicateVersion", `{"jsonrpc":"2.0","jsonrpc":"2.0","method":"a"}`, CodeInvalidRequest, `null`, false, `duplicate "jsonrpc"`},
		{"DuplicateResult", `{"jsonrpc":"2.0","id":3,"result":1,"result":2}`, CodeInvalidRequest, `3`, true, `duplicate "result"`},
		{"DuplicateEscapedKey", `{"jsonrpc":"2.0","id":1,"method":"a","m\u0065thod":"b"}`, CodeInvalidRequest, `1`, false, `duplicate "method"`},
		{"DuplicateErrorCode", `{"jsonrpc":"2.0","id":3,"error":{"code":1,"code":2,"message":"x"}}`, CodeInvalidRequest, `3`, true, `duplicate "code" member in error`},

		// -32600: id.
		{"BoolID", `{"jsonrpc":"2.0","id":true,"method":"m"}`, CodeInvalidRequest, `null`, false, "id must be a string or a number, got \"true\""},
		{"ObjectID", `{"jsonrpc":"2.0","id":{"n":1},"method":"m"}`, CodeInvalidRequest, `null`, false, "id must be a string or a number"},
		{"ArrayID", `{"jsonrpc":"2.0","id":[1],"result":1}`, CodeInvalidRequest, `null`, true, "id must be a string or a number"},
		{"NullIDRequest", `{"jsonrpc":"2.0","id":null,"method":"m"}`, CodeInvalidRequest, `null`, false, "null is only for error responses"},
		{"NullIDResult", `{"jsonrpc":"2.0","id":null,"result":1}`, CodeInvalidRequest, `null`, true, "got null"},

		// -32600: method.
		{"MethodNumber", `{"jsonrpc":"2.0","method":1,"params":"bar"}`, CodeInvalidRequest, `null`, false, "method must be a non-empty string, got \"1\""},
		{"MethodNull", `{"jsonrpc":"2.0","id":"a","method":null}`, CodeInvalidRequest, `"a"`, false, "method must be a non-empty string"},
		{"MethodEmpty", `{"jsonrpc":"2.0","id":1,"method":""}`, CodeInvalidRequest, `1`, false, "method must be a non-empty string"},
		{"MethodObject", `{"jsonrpc":"2.0","id":1,"method":{}}`, CodeInvalidRequest, `1`, false, "method must be a non-empty string"},
		{"RequestWithResult", `{"jsonrpc":"2.0","id":1,"method":"m","result":1}`, CodeInvalidRequest, `1`, false, "cannot carry a result"},
		{"NotificationWithError", `{"jsonrpc":"2.0","method":"m","error":{"code":1,"message":"x"}}`, CodeInvalidRequest, `null`, false, "cannot carry an error"},

		// -32600: params.
		{"ParamsString", `{"jsonrpc":"2.0","id":1,"method":"m","params":"bar"}`, CodeInvalidRequest, `1`, false, "params of m must be an object or an array, got \"\\\"bar\\\"\""},
		{"ParamsNumber", `{"jsonrpc":"2.0","method":"m","params":5}`, CodeInvalidRequest, `null`, false, "must be an object or an array"},
		{"ParamsBool", `{"jsonrpc":"2.0","method":"m","params":false}`, CodeInvalidRequest, `null`, false, "must be an object or an array"},

		// -32600: responses.
		{"EmptyObject", `{}`, CodeInvalidRequest, `null`, false, `missing "jsonrpc"`},
		{"OnlyVersion", `{"jsonrpc":"2.0"}`, CodeInvalidRequest, `null`, false, "no method"},
		{"OnlyID", `{"jsonrpc":"2.0","id":4}`, CodeInvalidRequest, `4`, false, "no result or error"},
		{"ResultAndError", `{"jsonrpc":"2.0","id":4,"result":1,"error":{"code":1,"message":"x"}}`, CodeInvalidRequest, `4`, true, "both result and error"},
		{"ResultWithoutID", `{"jsonrpc":"2.0","result":1}`, CodeInvalidRequest, `null`, true, "missing id"},
		{"ErrorWithoutID", `{"jsonrpc":"2.0","error":{"code":1,"message":"x"}}`, CodeInvalidRequest, `null`, true, "missing id"},
		{"ErrorNull", `{"jsonrpc":"2.0","id":4,"error":null}`, CodeInvalidRequest, `4`, true, "error must be an object with code and message, got \"null\""},
		{"ErrorString", `{"jsonrpc":"2.0","id":4,"error":"boom"}`, CodeInvalidRequest, `4`, true, "error must be an object"},
		{"ErrorNoCode", `{"jsonrpc":"2.0","id":4,"error":{"message":"x"}}`, CodeInvalidRequest, `4`, true, "error has no code"},
		{"ErrorCodeString", `{"jsonrpc":"2.0","id":4,"error":{"code":"TOOL_FAILED","message":"x"}}`, CodeInvalidRequest, `4`, true, "error code must be an integer, got"},
		{"ErrorCodeFraction", `{"jsonrpc":"2.0","id":4,"error":{"code":1.5,"message":"x"}}`, CodeInvalidRequest, `4`, true, "error code must be an integer"},
		{"ErrorCodeExponent", `{"jsonrpc":"2.0","id":4,"error":{"code":1e3,"message":"x"}}`, CodeInvalidRequest, `4`, true, "error code must be an integer"},
		{"ErrorCodeOverflow", `{"jsonrpc":"2.0","id":4,"error":{"code":9223372036854775808,"message":"x"}}`, CodeInvalidRequest, `4`, true, "error code must be an integer"},
		{"ErrorCodeUnderflow", `{"jsonrpc":"2.0","id":4,"error":{"code":-9223372036854775809,"message":"x"}}`, CodeInvalidRequest, `4`, true, "error code must be an integer"},
		{"ErrorNoMessage", `{"jsonrpc":"2.0","id":4,"error":{"code":1}}`, CodeInvalidRequest, `4`, true, "error has no message"},
		{"ErrorMessageNumber", `{"jsonrpc":"2.0","id":4,"error":{"code":1,"message":2}}`, CodeInvalidRequest, `4`, true, "error message must be a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, derr := ParseRPC([]byte(tc.line))
			if derr == nil {
				t.Fatalf("accepted as %+v", m)
			}
			if derr.Code != tc.code || derr.ID.String() != tc.id || derr.Response != tc.response {
				t.Fatalf("code %d id %s response %v, want %d %s %v (%v)", derr.Code, derr.ID, derr.Response, tc.code, tc.id, tc.response, derr)
			}
			if !strings.Contains(derr.Message, tc.contains) {
				t.Fatalf("message %q does not contain %q", derr.Message, tc.contains)
			}
			if !reflect.DeepEqual(m, RPCMessage{}) {
				t.Fatalf("refused line still gave a message: %+v", m)
			}
			// The answer is a valid error response for the same id.
			out, err := AppendRPCError(nil, derr.ID, &derr.RPCError)
			if err != nil {
				t.Fatal(err)
			}
			back, perr := ParseRPC(bytes.TrimSuffix(out, []byte("\n")))
			if perr != nil || back.Kind != RPCKindError || back.ID != derr.ID || back.Error.Code != tc.code || back.Error.Message != derr.Message {
				t.Fatalf("answer %s reads back as %+v, %v", out, back, perr)
			}
		})
	}
}

func TestParseRPCCopies(t *testing.T) {
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":"abc","method":"m","params":{"k":"v"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"k":"v"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"msg","data":{"k":"v"}}}`,
	} {
		buf := []byte(line)
		m, derr := ParseRPC(buf)
		if derr != nil {
			t.Fatal(derr)
		}
		before, _ := AppendRPCMessage(nil, m)
		for i := range buf {
			buf[i] = 'x'
		}
		after, _ := AppendRPCMessage(nil, m)
		if string(before) != line+"\n" || string(after) != string(before) {
			t.Fatalf("message changed with the line buffer: %s became %s", before, after)
		}
	}
}

func TestRPCID(t *testing.T) {
	tests := []struct {
		id       RPCID
		json     string
		n        int64
		isInt    bool
		isString bool
	}{
		{RPCID{}, `null`, 0, false, false},
		{RPCIntID(0), `0`, 0, true, false},
		{RPCIntID(-42), `-42`, -42, true, false},
		{RPCIntID(1<<63 - 1), `9223372036854775807`, 1<<63 - 1, true, false},
		{RPCStringID(""), `""`, 0, false, true},
		{RPCStringID("req-1"), `"req-1"`, 0, false, true},
		{RPCStringID("<\"é\">"), `"\u003c\"é\"\u003e"`, 0, false, true},
		{RPCStringID("a\xff\xfeb"), "\"a\ufffd\ufffdb\"", 0, false, true}, // as the wire would have it
	}
	for _, tc := range tests {
		if got := tc.id.String(); got != tc.json {
			t.Errorf("%#v encodes as %s, want %s", tc.id, got, tc.json)
		}
		n, ok := tc.id.Int64()
		if n != tc.n || ok != tc.isInt || tc.id.IsString() != tc.isString || tc.id.IsNull() != (tc.json == "null") {
			t.Errorf("%s: Int64 %d %v, IsString %v, IsNull %v", tc.json, n, ok, tc.id.IsString(), tc.id.IsNull())
		}
		var back RPCID
		if err := json.Unmarshal([]byte(tc.json), &back); err != nil || back != tc.id {
			t.Errorf("%s decodes to %#v (%v), want %#v", tc.json, back, err, tc.id)
		}
	}

	// Ids are map keys: a string and a number with the same text differ,
	// escapes of a string do not matter, numbers keep their exact text.
	pending := map[RPCID]string{RPCIntID(1): "number", RPCStringID("1"): "string", RPCStringID("ab"): "ab"}
	for text, want := range map[string]string{`1`: "number", `"1"`: "string", `"a\u0062"`: "ab", `1.0`: "", `10`: ""} {
		var id RPCID
		if err := json.Unmarshal([]byte(text), &id); err != nil {
			t.Fatal(err)
		}
		if got := pending[id]; got != want {
			t.Errorf("id %s finds %q, want %q", text, got, want)
		}
	}

	big := `18446744073709551616123`
	m, derr := ParseRPC([]byte(`{"jsonrpc":"2.0","id":` + big + `,"method":"m"}`))
	if derr != nil {
		t.Fatal(derr)
	}
	if _, ok := m.ID.Int64(); ok || m.ID.String() != big {
		t.Fatalf("big id kept as %s", m.ID)
	}
	out, _ := AppendRPCResult(nil, m.ID, true)
	if want := `{"jsonrpc":"2.0","id":` + big + `,"result":true}` + "\n"; string(out) != want {
		t.Fatalf("answer %s, want %s", out, want)
	}

	for _, bad := range []string{`true`, `{}`, `[1]`, ``, `nul`} {
		var id RPCID
		if err := json.Unmarshal([]byte(bad), &id); err == nil {
			t.Errorf("%q decoded as an id %s", bad, id)
		}
		if err := id.UnmarshalJSON([]byte(bad)); err == nil || !strings.Contains(err.Error(), "JSON-RPC id") {
			t.Errorf("%q: error %v does not say what was decoded", bad, err)
		}
	}
}

func TestAppendRPC(t *testing.T) {
	type progress struct {
		Percent int    `json:"percent"`
		Message string `json:"message,omitempty"`
	}
	var nilPtr *progress
	tests := []struct {
		name string
		enc  func(dst []byte) ([]byte, error)
		want string
	}{
		{"Request", func(d []byte) ([]byte, error) {
			return AppendRPCRequest(d, RPCStringID("req-1"), "stop_task", map[string]string{"task_id": "t-1", "reason": "timeout"})
		}, `{"jsonrpc":"2.0","id":"req-1","method":"stop_task","params":{"reason":"timeout","task_id":"t-1"}}`},
		{"RequestIntID", func(d []byte) ([]byte, error) { return AppendRPCRequest(d, RPCIntID(7), "m", []int{1, 2}) },
			`{"jsonrpc":"2.0","id":7,"method":"m","params":[1,2]}`},
		{"RequestNoParams", func(d []byte) ([]byte, error) { return AppendRPCRequest(d, RPCIntID(7), "m", nil) },
			`{"jsonrpc":"2.0","id":7,"method":"m"}`},
		{"RequestNilPointerParams", func(d []byte) ([]byte, error) { return AppendRPCRequest(d, RPCIntID(7), "m", nilPtr) },
			`{"jsonrpc":"2.0","id":7,"method":"m"}`},
		{"NotificationStruct", func(d []byte) ([]byte, error) {
			return AppendRPCNotification(d, "report_progress", &progress{Percent: 40, Message: "<ok>"})
		}, `{"jsonrpc":"2.0","method":"report_progress","params":{"percent":40,"message":"\u003cok\u003e"}}`},
		{"NotificationRaw", func(d []byte) ([]byte, error) {
			return AppendRPCNotification(d, "report_message", json.RawMessage(` {"a": "<b>"} `))
		}, `{"jsonrpc":"2.0","method":"report_message","params":{"a": "<b>"}}`},
		{"NotificationRawOnManyLines", func(d []byte) ([]byte, error) {
			return AppendRPCNotification(d, "m", json.RawMessage("{\n\"a\":\r\n[1,\n2]\n}"))
		}, `{"jsonrpc":"2.0","method":"m","params":{"a":[1,2]}}`},
		{"NotificationRawNull", func(d []byte) ([]byte, error) { return AppendRPCNotification(d, "m", json.RawMessage(`null`)) },
			`{"jsonrpc":"2.0","method":"m"}`},
		{"NotificationNilRaw", func(d []byte) ([]byte, error) { return AppendRPCNotification(d, "m", json.RawMessage(nil)) },
			`{"jsonrpc":"2.0","method":"m"}`},
		{"MethodEscaped", func(d []byte) ([]byte, error) { return AppendRPCNotification(d, "a\"b\n", nil) },
			`{"jsonrpc":"2.0","method":"a\"b\n"}`},
		{"Result", func(d []byte) ([]byte, error) {
			return AppendRPCResult(d, RPCStringID("req-4"), map[string]string{"status": "idle"})
		}, `{"jsonrpc":"2.0","id":"req-4","result":{"status":"idle"}}`},
		{"ResultNil", func(d []byte) ([]byte, error) { return AppendRPCResult(d, RPCIntID(1), nil) },
			`{"jsonrpc":"2.0","id":1,"result":null}`},
		{"ResultScalar", func(d []byte) ([]byte, error) { return AppendRPCResult(d, RPCIntID(1), "ok") },
			`{"jsonrpc":"2.0","id":1,"result":"ok"}`},
		{"ResultRaw", func(d []byte) ([]byte, error) { return AppendRPCResult(d, RPCIntID(1), json.RawMessage(`[true]`)) },
			`{"jsonrpc":"2.0","id":1,"result":[true]}`},
		{"Error", func(d []byte) ([]byte, error) {
			return AppendRPCError(d, RPCIntID(3), RPCErrorf(CodeMethodNotFound, "method %q not found", "frob"))
		}, `{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"method \"frob\" not found"}}`},
		{"ErrorNullIDWithData", func(d []byte) ([]byte, error) {
			return AppendRPCError(d, RPCID{}, &RPCError{Code: CodeParseError, Message: "parse error", Data: json.RawMessage("{\"at\":\n3}")})
		}, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error","data":{"at":3}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("previous line\n")
			out, err := tc.enc(append([]byte(nil), prefix...))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(out, prefix) {
				t.Fatalf("the encoder overwrote dst: %q", out)
			}
			line := out[len(prefix):]
			if string(line) != tc.want+"\n" {
				t.Fatalf("got  %s\nwant %s", line, tc.want)
			}
			if _, derr := ParseRPC(line[:len(line)-1]); derr != nil {
				t.Fatalf("the line does not decode: %v", derr)
			}
		})
	}
}

func TestAppendRPCErrors(t *testing.T) {
	tests := []struct {
		name     string
		enc      func(dst []byte) ([]byte, error)
		contains string
	}{
		{"RequestNullID", func(d []byte) ([]byte, error) { return AppendRPCRequest(d, RPCID{}, "m", nil) }, "the id is null"},
		{"RequestEmptyMethod", func(d []byte) ([]byte, error) { return AppendRPCRequest(d, RPCIntID(1), "", nil) }, "empty method"},
		{"NotificationEmptyMethod", func(d []byte) ([]byte, error) { return AppendRPCNotification(d, "", nil) }, "empty method"},
		{"ParamsString", func(d []byte) ([]byte, error) { return AppendRPCRequest(d, RPCIntID(1), "m", "bar") }, `params must be an object or an array, got "\"bar\""`},
		{"ParamsNumber", func(d []byte) ([]byte, error) { return AppendRPCNotification(d, "m", 5) }, "params must be an object or an array"},
		{"ParamsRawInvalid", func(d []byte) ([]byte, error) { return AppendRPCNotification(d, "m", json.RawMessage(`{"a":`)) }, "not valid JSON"},
		{"ParamsRawEmpty", func(d []byte) ([]byte, error) { return AppendRPCNotification(d, "m", json.RawMessage{}) }, "not valid JSON"},
		{"ParamsUnencodable", func(d []byte) ([]byte, error) {
			return AppendRPCNotification(d, "m", map[string]any{"c": make(chan int)})
		}, "unsupported type"},
		{"ResultNullID", func(d []byte) ([]byte, error) { return AppendRPCResult(d, RPCID{}, 1) }, "the id is null"},
		{"ResultUnencodable", func(d []byte) ([]byte, error) { return AppendRPCResult(d, RPCIntID(1), func() {}) }, "unsupported type"},
		{"ErrorNil", func(d []byte) ([]byte, error) { return AppendRPCError(d, RPCIntID(1), nil) }, "no error given"},
		{"ErrorBadData", func(d []byte) ([]byte, error) {
			return AppendRPCError(d, RPCIntID(1), &RPCError{Code: 1, Message: "x", Data: json.RawMessage(`{`)})
		}, "data: not valid JSON"},
		{"MessageNoKind", func(d []byte) ([]byte, error) { return AppendRPCMessage(d, RPCMessage{Method: "m"}) }, "unknown kind"},
		{"MessageRequestNullID", func(d []byte) ([]byte, error) {
			return AppendRPCMessage(d, RPCMessage{Kind: RPCKindRequest, Method: "m"})
		}, "the id is null"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("kept")
			out, err := tc.enc(dst)
			if err == nil || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err = %v, want one containing %q", err, tc.contains)
			}
			if !strings.Contains(err.Error(), "JSON-RPC") {
				t.Errorf("error %q does not say what was being encoded", err)
			}
			if string(out) != "kept" {
				t.Fatalf("dst became %q", out)
			}
		})
	}
}

// Round trips through AppendRPCMessage and ParseRPC, with messages built by
// hand rather than decoded.
func TestRPCMessageRoundTrip(t *testing.T) {
	msgs := []RPCMessage{
		{Kind: RPCKindRequest, ID: RPCIntID(1), Method: "execute_prompt", Params: json.RawMessage(`{"prompt":"hi\nthere","tools":[]}`)},
		{Kind: RPCKindRequest, ID: RPCStringID("x\"y"), Method: "shutdown"},
		{Kind: RPCKindNotification, Method: "report_message", Params: json.RawMessage(`[1,{"a":null}]`)},
		{Kind: RPCKindNotification, Method: "pause_notifications"},
		{Kind: RPCKindResult, ID: RPCIntID(-1), Result: json.RawMessage(`null`)},
		{Kind: RPCKindResult, ID: RPCStringID(""), Result: json.RawMessage(`{"approved":true,"reason":"mode=bypassPermissions"}`)},
		{Kind: RPCKindError, ID: RPCID{}, Error: &RPCError{Code: CodeParseError, Message: "parse error"}},
		{Kind: RPCKindError, ID: RPCIntID(9), Error: &RPCError{Code: 1 << 40, Message: "é<>&\u2028", Data: json.RawMessage(`"d"`)}},
	}
	for _, m := range msgs {
		out, err := AppendRPCMessage(nil, m)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if bytes.IndexByte(out, '\n') != len(out)-1 {
			t.Fatalf("%q is not one line", out)
		}
		back, derr := ParseRPC(out[:len(out)-1])
		if derr != nil {
			t.Fatalf("%s: %v", out, derr)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("%s decodes to %+v, want %+v", out, back, m)
		}
	}
}

func TestDecodeRPCParams(t *testing.T) {
	type executePrompt struct {
		SessionToken   string   `json:"session_token"`
		TaskID         string   `json:"task_id"`
		Prompt         string   `json:"prompt"`
		Tools          []string `json:"tools"`
		PermissionMode string   `json:"permission_mode"`
		TimeoutMs      int64    `json:"timeout_ms"`
		Stream         bool     `json:"stream"`
	}
	type requestPermission struct {
		SessionToken string          `json:"session_token"`
		ToolName     string          `json:"tool_name"`
		ToolParams   json.RawMessage `json:"tool_params"`
		ToolInput    json.RawMessage `json:"tool_input"`
	}
	type getAPIKey struct {
		SessionToken  string `json:"session_token"`
		CredentialKey string `json:"credential_key"`
		Service       string `json:"service"`
	}
	type reportProgress struct {
		TaskID   string `json:"task_id"`
		Progress struct {
			Percent    uint8  `json:"percent"`
			TotalSteps *int   `json:"total_steps"`
			Message    string `json:"message"`
		} `json:"progress"`
	}
	type mcpServers struct {
		Servers []struct {
			Name string            `json:"name"`
			Env  map[string]string `json:"env"`
		} `json:"mcp_servers"`
		Ratio float64 `json:"ratio"`
		Blob  []byte  `json:"blob"`
	}
	parse := func(t *testing.T, line string) RPCMessage {
		t.Helper()
		m, derr := ParseRPC([]byte(line))
		if derr != nil {
			t.Fatal(derr)
		}
		return m
	}

	t.Run("AgorShapes", func(t *testing.T) {
		var ep executePrompt
		if err := DecodeRPCParams(parse(t, agorLines["execute_prompt"]), &ep); err != nil {
			t.Fatal(err)
		}
		want := executePrompt{"tok-9f2c", "t-1", "Fix the failing test", []string{"Read", "Write", "Bash"}, "acceptEdits", 600000, true}
		if !reflect.DeepEqual(ep, want) {
			t.Fatalf("got %+v, want %+v", ep, want)
		}
		// Both spellings of request_permission and get_api_key decode;
		// unknown fields (description, content) are allowed.
		var rp1, rp2 requestPermission
		if err := DecodeRPCParams(parse(t, agorLines["request_permission"]), &rp1); err != nil {
			t.Fatal(err)
		}
		if err := DecodeRPCParams(parse(t, agorLines["request_permission_in"]), &rp2); err != nil {
			t.Fatal(err)
		}
		if rp1.ToolName != "Bash" || !strings.Contains(string(rp1.ToolParams), "rm -rf build") || rp1.ToolInput != nil ||
			rp2.ToolName != "Write" || !strings.Contains(string(rp2.ToolInput), "/tmp/x") || rp2.ToolParams != nil {
			t.Fatalf("got %+v and %+v", rp1, rp2)
		}
		var k1, k2 getAPIKey
		if err := DecodeRPCParams(parse(t, agorLines["get_api_key"]), &k1); err != nil {
			t.Fatal(err)
		}
		if err := DecodeRPCParams(parse(t, agorLines["get_api_key_service"]), &k2); err != nil {
			t.Fatal(err)
		}
		if k1 != (getAPIKey{"tok-9f2c", "ANTHROPIC_API_KEY", ""}) || k2 != (getAPIKey{"tok-9f2c", "", "anthropic"}) {
			t.Fatalf("got %+v and %+v", k1, k2)
		}
	})

	t.Run("AbsentParamsLeaveValue", func(t *testing.T) {
		v := getAPIKey{Service: "kept"}
		if err := DecodeRPCParams(parse(t, agorLines["pause_notifications"]), &v); err != nil || v.Service != "kept" {
			t.Fatalf("%+v, %v", v, err)
		}
	})

	tests := []struct {
		name   string
		line   string
		v      any
		code   int
		reason string
	}{
		{"FieldType", `{"jsonrpc":"2.0","id":1,"method":"execute_prompt","params":{"prompt":5}}`, new(executePrompt),
			CodeInvalidParams, `invalid params for execute_prompt: "prompt" is a number, want a string`},
		{"ElementType", `{"jsonrpc":"2.0","id":1,"method":"execute_prompt","params":{"tools":["Read",7]}}`, new(executePrompt),
			CodeInvalidParams, `invalid params for execute_prompt: "tools" is a number, want a string`},
		{"ListNotArray", `{"jsonrpc":"2.0","id":1,"method":"execute_prompt","params":{"tools":"Read"}}`, new(executePrompt),
			CodeInvalidParams, `"tools" is a string, want an array`},
		{"Bool", `{"jsonrpc":"2.0","id":1,"method":"execute_prompt","params":{"stream":"yes"}}`, new(executePrompt),
			CodeInvalidParams, `"stream" is a string, want a boolean`},
		{"IntegerFraction", `{"jsonrpc":"2.0","id":1,"method":"execute_prompt","params":{"timeout_ms":1.5}}`, new(executePrompt),
			CodeInvalidParams, `"timeout_ms" is the number 1.5, want an integer`},
		{"IntegerOverflow", `{"jsonrpc":"2.0","id":1,"method":"execute_prompt","params":{"timeout_ms":99999999999999999999}}`, new(executePrompt),
			CodeInvalidParams, `"timeout_ms" is the number 99999999999999999999, want an integer that fits int64`},
		{"Nested", `{"jsonrpc":"2.0","method":"report_progress","params":{"progress":{"percent":"half"}}}`, new(reportProgress),
			CodeInvalidParams, `invalid params for report_progress: "progress.percent" is a string, want a non-negative integer`},
		{"NestedRange", `{"jsonrpc":"2.0","method":"report_progress","params":{"progress":{"percent":300}}}`, new(reportProgress),
			CodeInvalidParams, `"progress.percent" is the number 300, want a non-negative integer that fits uint8`},
		{"Pointer", `{"jsonrpc":"2.0","method":"report_progress","params":{"progress":{"total_steps":[]}}}`, new(reportProgress),
			CodeInvalidParams, `"progress.total_steps" is an array, want an integer`},
		{"NotObject", `{"jsonrpc":"2.0","method":"report_progress","params":{"progress":true}}`, new(reportProgress),
			CodeInvalidParams, `"progress" is a boolean, want an object`},
		{"ArrayForStruct", `{"jsonrpc":"2.0","id":1,"method":"get_api_key","params":["tok","anthropic"]}`, new(getAPIKey),
			CodeInvalidParams, `invalid params for get_api_key: params is an array, want an object`},
		{"MapValue", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"mcp_servers":[{"env":{"A":1}}]}}`, new(mcpServers),
			CodeInvalidParams, `"mcp_servers.env" is a number, want a string`},
		{"Float", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"ratio":"1"}}`, new(mcpServers),
			CodeInvalidParams, `"ratio" is a string, want a number`},
		{"Bytes", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"blob":1}}`, new(mcpServers),
			CodeInvalidParams, `"blob" is a number, want a base64 string`},
		{"BadBase64", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"blob":"@@"}}`, new(mcpServers),
			CodeInvalidParams, `invalid params for m: illegal base64`},
		{"CustomUnmarshaler", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"id":true}}`, new(struct {
			ID RPCID `json:"id"`
		}), CodeInvalidParams, `invalid params for m: decoding JSON-RPC id: want a string, a number or null, got "true"`},
		{"NotAPointer", `{"jsonrpc":"2.0","id":1,"method":"m","params":{}}`, getAPIKey{},
			CodeInternal, `decoding params for m: json: Unmarshal(non-pointer`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeRPCParams(parse(t, tc.line), tc.v)
			if err == nil {
				t.Fatalf("accepted: %+v", tc.v)
			}
			if err.Code != tc.code || !strings.Contains(err.Message, tc.reason) {
				t.Fatalf("got %d %q, want %d and %q", err.Code, err.Message, tc.code, tc.reason)
			}
		})
	}
}

func TestRPCLineReader(t *testing.T) {
	// Lines up to the maximum pass, a longer one is refused naming the
	// protocol and the limit, and the reader stops there.
	in := "{\"jsonrpc\":\"2.0\",\"method\":\"m\"}\r\n" + strings.Repeat("x", 41) + "\n{}\n"
	lr := NewRPCLineReader(strings.NewReader(in), 40)
	line, err := lr.Next()
	if err != nil || string(line) != `{"jsonrpc":"2.0","method":"m"}` {
		t.Fatalf("first line %q, %v", line, err)
	}
	for range 2 {
		_, err = lr.Next()
		if !errors.Is(err, ErrLineTooLong) || err.Error() != "JSON-RPC line longer than 40 bytes: line too long" {
			t.Fatalf("err = %v, want the JSON-RPC line limit", err)
		}
	}

	// A peer that never ends its line is refused after about max bytes.
	for _, max := range []int{0, 1000} {
		cr := &countingReader{r: endless('x')}
		lr := NewRPCLineReader(cr, max)
		_, err := lr.Next()
		want := max
		if max == 0 {
			want = DefaultMaxRPCLine
		}
		if !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), fmt.Sprint(want)) {
			t.Fatalf("max %d: err = %v", max, err)
		}
		if cr.n > want+1+rpcReaderBufSize || cap(lr.buf) > want+1 {
			t.Fatalf("max %d: read %d bytes, buffered %d", max, cr.n, cap(lr.buf))
		}
	}

	// The control socket's reader keeps its wording.
	_, err = NewLineReader(strings.NewReader(strings.Repeat("x", 11)), 10).Next()
	if err == nil || err.Error() != "control line longer than 10 bytes: line too long" {
		t.Fatalf("control reader err = %v", err)
	}
}

// A conversation as the daemon reads it: lines from a stream, each decoded,
// a blank line and garbage answered without disturbing what follows.
func TestRPCStream(t *testing.T) {
	stream := agorLines["report_message"] + "\n" +
		"not json\n" +
		agorLines["get_api_key"] + "\n" +
		`{"jsonrpc":"2.0","id":8,"method":"request_permission","params":7}` + "\n" +
		agorLines["permission_result"] + "\n"
	lr := NewRPCLineReader(strings.NewReader(stream), 0)
	var got []string
	for {
		line, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		m, derr := ParseRPC(line)
		if derr != nil {
			got = append(got, fmt.Sprintf("refused %d id %s", derr.Code, derr.ID))
			continue
		}
		got = append(got, fmt.Sprintf("%v %s%s", m.Kind, m.Method, m.ID))
	}
	want := []string{
		"notification report_messagenull",
		"refused -32700 id null",
		"request get_api_key1",
		"refused -32600 id 8",
		"result 3",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestRPCKindString(t *testing.T) {
	for k, want := range map[RPCKind]string{RPCKindRequest: "request", RPCKindNotification: "notification", RPCKindResult: "result", RPCKindError: "error", 0: "RPCKind(0)"} {
		if k.String() != want {
			t.Errorf("%d: %q, want %q", k, k.String(), want)
		}
	}
}
