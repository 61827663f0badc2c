package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeClankerRequest(t *testing.T) {
	for _, tc := range []struct {
		line, typ, id, payload, err string
	}{
		{line: `{"v":1,"id":"req-1","type":"hello","payload":{"podId":"p"}}`, typ: "hello", id: `"req-1"`, payload: `{"podId":"p"}`},
		{line: ` {"v":1.0,"type":"heartbeat"} `, typ: "heartbeat"},
		{line: `{"v":1,"id":7,"type":"x","payload":null}`, typ: "x", id: `7`},
		{line: `{"v":1,"type":""}`, typ: ""},
		{line: `not json`, err: "invalid ipc request: not JSON"},
		{line: `[1]`, err: "want a JSON object"},
		{line: `{"type":"hello"}`, err: "v is missing"},
		{line: `{"v":2,"type":"hello"}`, err: "unsupported version v=2"},
		{line: `{"v":"1","type":"hello"}`, err: `unsupported version v="1"`},
		{line: `{"v":1}`, err: "type is missing"},
		{line: `{"v":1,"type":3}`, err: "type must be a string, got 3"},
	} {
		req, err := DecodeClankerRequest([]byte(tc.line))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !IsClankerRequestError(err) {
				t.Errorf("%s: error %v, want one containing %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		if req.Type != tc.typ || string(req.ID) != tc.id || string(req.Payload) != tc.payload {
			t.Errorf("%s: got type %q id %s payload %s", tc.line, req.Type, req.ID, req.Payload)
		}
	}
}

func TestDecodeSpoolLine(t *testing.T) {
	e, err := DecodeSpoolLine([]byte(`{"ts":"2026-01-26T10:00:00.000Z","type":"task_status","payload":{"taskId":"t1","status":"done"}}`))
	if err != nil || e.Type != "task_status" || e.TS != "2026-01-26T10:00:00.000Z" || string(e.Payload) != `{"taskId":"t1","status":"done"}` {
		t.Fatalf("got %+v, %v", e, err)
	}
	for _, bad := range []string{`sk":"t1"}}`, `{"ts":"x"}`, `{"type":""}`, `{"type":"a","ts":5}`, `"a"`} {
		if _, err := DecodeSpoolLine([]byte(bad)); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}

func TestAppendClankerResponse(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{string(AppendClankerOK(nil, json.RawMessage(`"r1"`), json.RawMessage(`{"taskId":null}`))), `{"v":1,"id":"r1","ok":true,"data":{"taskId":null}}` + "\n"},
		{string(AppendClankerOK(nil, nil, nil)), `{"v":1,"ok":true}` + "\n"},
		{string(AppendClankerError(nil, nil, "invalid ipc request")), `{"v":1,"ok":false,"error":"invalid ipc request"}` + "\n"},
		{string(AppendClankerError(nil, json.RawMessage(`"r2"`), "unknown ipc type: \"x\"")), `{"v":1,"id":"r2","ok":false,"error":"unknown ipc type: \"x\""}` + "\n"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s want %s", tc.got, tc.want)
		}
	}
}

// FuzzDecodeClankerRequest: any line decodes or is refused with an error,
// never a panic; what decodes answers with a line that is one JSON
// object carrying the same id.
func FuzzDecodeClankerRequest(f *testing.F) {
	for _, s := range []string{`{"v":1,"id":"a","type":"hello","payload":{}}`, `{"v":1,"type":"x"}`, `{"v":2}`, `[]`, `{"v":1,"id":[1,{"a":2}],"type":"t"}`, "\x00", `{"v":1e0,"type":"a"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := DecodeClankerRequest(line)
		if err != nil {
			if !IsClankerRequestError(err) {
				t.Fatalf("error %v is not a ClankerRequestError", err)
			}
			out := AppendClankerError(nil, nil, err.Error())
			if !json.Valid(out) {
				t.Fatalf("error response %q is not JSON", out)
			}
			return
		}
		out := AppendClankerOK(nil, req.ID, req.Payload)
		var back struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("response %q: %v", out, err)
		}
		if req.ID != nil && !json.Valid(back.ID) {
			t.Fatalf("id %q not echoed", req.ID)
		}
	})
}

// FuzzDecodeSpoolLine: any line decodes or is refused, never a panic; a
// decoded one has a type.
func FuzzDecodeSpoolLine(f *testing.F) {
	for _, s := range []string{`{"ts":"2026-01-26T10:00:00Z","type":"task_note","payload":{"taskId":"t"}}`, `{"type":"a"}`, `ype":"a"}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := DecodeSpoolLine(line)
		if err == nil && e.Type == "" {
			t.Fatalf("%q decoded without a type", line)
		}
	})
}

// A refused line's LogText holds none of its bytes; its Error (the pod's
// answer) may quote them.
func TestClankerLogTextQuotesNothing(t *testing.T) {
	const m = "zqMARKzq"
	for _, line := range []string{
		`not json ` + m, `["` + m + `"]`, `"` + m + `"`, `{"v":"` + m + `","type":"hello"}`, `{"v":{"` + m + `":1},"type":"hello"}`,
		`{"v":1,"type":["` + m + `"]}`, `{"v":1,"type":{"` + m + `":0}}`,
	} {
		_, err := DecodeClankerRequest([]byte(line))
		if err == nil || !IsClankerRequestError(err) {
			t.Fatalf("%s: %v", line, err)
		}
		if lt := ClankerLogText(err); strings.Contains(lt, m) || lt == "" {
			t.Errorf("%s: LogText %q", line, lt)
		}
	}
	for _, line := range []string{`not json ` + m, `[1,"` + m + `"]`, `{"type":["` + m + `"]}`, `{"type":"a","ts":{"` + m + `":1}}`} {
		_, err := DecodeSpoolLine([]byte(line))
		if err == nil {
			t.Fatalf("%s: decoded", line)
		}
		if lt := ClankerLogText(err); strings.Contains(lt, m) || lt == "" {
			t.Errorf("%s: LogText %q", line, lt)
		} else if !strings.Contains(err.Error(), m) && !strings.HasPrefix(line, "not json") {
			t.Errorf("%s: the answer %q no longer says what was wrong", line, err)
		}
	}
	if got := ClankerLogText(errors.New("plain")); got != "plain" {
		t.Errorf("ClankerLogText of another error: %q", got)
	}
}

// FuzzDecodeClankerHello: the hand-written decoder reads what
// encoding/json reads into a map of members (the last of a repeated
// member wins; a member that is not a string is ""), and refuses what is
// not an object.
func FuzzDecodeClankerHello(f *testing.F) {
	for _, s := range []string{``, `null`, `{}`, `{"podId":"p","role":"slave","worktree":"/w"}`, `{"podId":1,"podId":"x","role":null}`,
		`{"p\u006fdId":"a\u00e9\n","role":"\ud800"}`, "{\"role\":\"\xff\"}", `[]`, `"x"`, `{"podId":"a"`, ` {"role":"judge"} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		h, ok := DecodeClankerHello(payload)
		var m map[string]json.RawMessage
		want := len(payload) == 0 || json.Unmarshal(payload, &m) == nil
		if ok != want {
			t.Fatalf("%q: ok %v, encoding/json %v", payload, ok, want)
		}
		if !ok {
			return
		}
		str := func(k string) string {
			var s string
			if v := m[k]; len(v) > 0 && v[0] == '"' {
				_ = json.Unmarshal(v, &s)
			}
			return s
		}
		if w := (ClankerHello{PodID: str("podId"), Role: str("role"), Worktree: str("worktree")}); h != w {
			t.Fatalf("%q: decoded %+v, encoding/json %+v", payload, h, w)
		}
	})
}

// FuzzClankerMembers: the request's members are read as encoding/json
// reads them into a map (the last of a repeated member wins, escaped
// keys unescaped), and its type decoded as encoding/json decodes it.
func FuzzClankerMembers(f *testing.F) {
	for _, s := range []string{`{"v":1,"id":"a","type":"hello","payload":{}}`, `{"v":1,"type":"a","type":"b","\u0074s":"x"}`,
		`{"v":1,"type":"t\u00e9\n","id":[1,{"a":2}],"payload":null}`, "{\"v\":1,\"type\":\"\xff\"}", ` {"ts":1} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, err := clankerObject(line, "x")
		var m map[string]json.RawMessage
		if json.Unmarshal(bytes.TrimSpace(line), &m) != nil || m == nil {
			if err == nil {
				t.Fatalf("%q: read, encoding/json refuses it", line)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		for k, v := range map[string][]byte{"v": got.v, "id": got.id, "type": got.typ, "ts": got.ts, "payload": got.payload} {
			if w, ok := m[k]; ok != (v != nil) || !bytes.Equal(v, w) {
				t.Fatalf("%q: %s is %q, encoding/json %q", line, k, v, w)
			}
			var ws string
			wErr := json.Unmarshal(v, &ws)
			if s, ok := clankerString(v); v != nil && (ok != (wErr == nil && v[0] == '"') || ok && s != ws) {
				t.Fatalf("%q: %s decoded %q %v, encoding/json %q %v", line, k, s, ok, ws, wErr)
			}
		}
	})
}
