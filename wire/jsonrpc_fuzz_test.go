package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"testing"
)

// refRPC is what refParseRPC makes of a line.
type refRPC struct {
	kind   RPCKind // 0 when refused
	code   int     // 0 when accepted
	id     RPCID
	resp   bool // refused, and a response
	method string
	params json.RawMessage
}

// refMembers splits a JSON object into its members with encoding/json,
// keeping every occurrence of each key.
func refMembers(obj []byte) map[string][]json.RawMessage {
	members := map[string][]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		panic(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			panic(err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			panic(err)
		}
		k := tok.(string)
		members[k] = append(members[k], raw)
	}
	return members
}

// refParseRPC is ParseRPC's rule written with encoding/json, in the order
// ParseRPC documents.
func refParseRPC(line []byte) refRPC {
	if !json.Valid(line) {
		return refRPC{code: CodeParseError}
	}
	if d := bytes.TrimLeft(line, " \t\r\n"); d[0] != '{' {
		return refRPC{code: CodeInvalidRequest}
	}
	mem := refMembers(line)
	one := func(k string) json.RawMessage {
		if v := mem[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return nil
	}
	dup := false
	for _, k := range []string{"jsonrpc", "id", "method", "params", "result", "error"} {
		dup = dup || len(mem[k]) > 1
	}
	var r refRPC
	idRaw, idOK := one("id"), false
	if len(mem["id"]) == 1 {
		switch c := idRaw[0]; {
		case c == 'n':
			idOK = true
		case c == '"':
			var s string
			idOK = json.Unmarshal(idRaw, &s) == nil
			r.id = RPCStringID(s)
		case c == '-' || c >= '0' && c <= '9':
			idOK = true
			r.id = RPCID{idNumber, string(idRaw)}
		}
	} else if idRaw != nil {
		c := idRaw[0]
		idOK = c == 'n' || c == '"' || c == '-' || c >= '0' && c <= '9' // the last one decides the error
	}
	if !idOK || len(mem["id"]) != 1 {
		r.id = RPCID{}
	}
	method, params, result, errRaw := one("method"), one("params"), one("result"), one("error")
	r.resp = method == nil && (result != nil || errRaw != nil)
	refuse := func() refRPC {
		r.code = CodeInvalidRequest
		r.method, r.params = "", nil
		return r
	}
	var version string
	switch {
	case dup, idRaw != nil && !idOK, one("jsonrpc") == nil:
		return refuse()
	case json.Unmarshal(one("jsonrpc"), &version) != nil || version != "2.0":
		return refuse()
	}
	if method != nil {
		r.resp = false
		if method[0] != '"' || json.Unmarshal(method, &r.method) != nil || r.method == "" ||
			result != nil || errRaw != nil || (idRaw != nil && idRaw[0] == 'n') {
			return refuse()
		}
		if params != nil {
			switch params[0] {
			case '{', '[':
				r.params = params
			case 'n':
			default:
				return refuse()
			}
		}
		r.kind = RPCKindNotification
		if idRaw != nil {
			r.kind = RPCKindRequest
		}
		return r
	}
	switch {
	case result == nil && errRaw == nil:
		r.resp = false
		return refuse()
	case result != nil && errRaw != nil, idRaw == nil:
		return refuse()
	case result != nil:
		if idRaw[0] == 'n' {
			return refuse()
		}
		r.kind = RPCKindResult
		return r
	}
	if errRaw[0] != '{' {
		return refuse()
	}
	em := refMembers(errRaw)
	for _, k := range []string{"code", "message", "data"} {
		if len(em[k]) > 1 {
			return refuse()
		}
	}
	var msg string
	if len(em["code"]) == 0 || len(em["message"]) == 0 || em["message"][0][0] != '"' || json.Unmarshal(em["message"][0], &msg) != nil {
		return refuse()
	}
	if n, err := strconv.ParseInt(string(em["code"][0]), 10, 64); err != nil || n < math.MinInt || n > math.MaxInt {
		return refuse()
	}
	r.kind = RPCKindError
	return r
}

// compactRaw is raw compacted, or raw itself when it is nil.
func compactRaw(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// compactMessage is m with its raw JSON compacted.
func compactMessage(m RPCMessage) RPCMessage {
	m.Params, m.Result = compactRaw(m.Params), compactRaw(m.Result)
	if m.Error != nil {
		e := *m.Error
		e.Data = compactRaw(e.Data)
		m.Error = &e
	}
	return m
}

// FuzzParseRPC compares ParseRPC with the reference rule on any line. A
// refused line has a message and an answer that reads back; an accepted one
// re-encodes to one line that decodes to the same message and re-encodes to
// the very same bytes, and its params decode into anything without a panic.
func FuzzParseRPC(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		m, derr := ParseRPC(line)
		ref := refParseRPC(line)
		// In place, the same message, its Params and Result inside line.
		if im, ierr := ParseRPCInPlace(line); !reflect.DeepEqual(im, m) || !reflect.DeepEqual(ierr, derr) {
			t.Fatalf("ParseRPCInPlace(%q) = %+v, %v; ParseRPC %+v, %v", line, im, ierr, m, derr)
		}
		if derr != nil {
			if derr.Message == "" {
				t.Fatal("refused without a message")
			}
			if derr.Code != ref.code || derr.ID != ref.id || derr.Response != ref.resp {
				t.Fatalf("ParseRPC(%q) refused: code %d id %s response %v (%v); reference code %d id %s response %v",
					line, derr.Code, derr.ID, derr.Response, derr, ref.code, ref.id, ref.resp)
			}
			if !reflect.DeepEqual(m, RPCMessage{}) {
				t.Fatalf("ParseRPC(%q) refused but returned %+v", line, m)
			}
			out, err := AppendRPCError(nil, derr.ID, &derr.RPCError)
			if err != nil {
				t.Fatal(err)
			}
			back, perr := ParseRPC(out[:len(out)-1])
			if perr != nil || back.Kind != RPCKindError || back.ID != derr.ID || !reflect.DeepEqual(*back.Error, derr.RPCError) {
				t.Fatalf("answer %s reads back as %+v, %v", out, back, perr)
			}
			return
		}
		if ref.code != 0 || m.Kind != ref.kind || m.ID != ref.id || m.Method != ref.method || !bytes.Equal(m.Params, ref.params) {
			t.Fatalf("ParseRPC(%q) = %v id %s method %q params %q; reference code %d %v id %s method %q params %q",
				line, m.Kind, m.ID, m.Method, m.Params, ref.code, ref.kind, ref.id, ref.method, ref.params)
		}

		out, err := AppendRPCMessage(nil, m)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", m, err)
		}
		if bytes.IndexByte(out, '\n') != len(out)-1 || bytes.IndexByte(out, '\r') >= 0 {
			t.Fatalf("%q re-encodes to more than one line: %q", line, out)
		}
		back, derr := ParseRPC(out[:len(out)-1])
		if derr != nil {
			t.Fatalf("%q re-encodes to %q, which is refused: %v", line, out, derr)
		}
		if !reflect.DeepEqual(compactMessage(back), compactMessage(m)) {
			t.Fatalf("%q decodes to %+v, its encoding %q to %+v", line, m, out, back)
		}
		again, err := AppendRPCMessage(nil, back)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("encoding is not stable: %q then %q (%v)", out, again, err)
		}

		var anyV any
		var mapV map[string]any
		var ep struct {
			SessionToken string          `json:"session_token"`
			Sequence     int64           `json:"sequence"`
			Tools        []string        `json:"tools"`
			EventData    json.RawMessage `json:"event_data"`
		}
		for _, v := range []any{&anyV, &mapV, &ep} {
			if perr := DecodeRPCParams(m, v); perr != nil && (perr.Code != CodeInvalidParams || perr.Message == "") {
				t.Fatalf("DecodeRPCParams(%q) = %v", m.Params, perr)
			}
		}
	})
}
