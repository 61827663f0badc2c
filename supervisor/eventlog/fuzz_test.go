package eventlog

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzParseLine checks the line parser used by Read: it never panics, and
// whatever it accepts is one JSON object whose header round-trips through
// the writer's own line format. Seeds live in testdata/fuzz/FuzzParseLine.
func FuzzParseLine(f *testing.F) {
	for _, ev := range sampleEvents() {
		body, _ := marshalValue(ev)
		f.Add(appendLine(nil, t0, 42, ev.Kind(), body))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := ParseLine(raw)
		// Read's fast path must agree with ParseLine on lines it accepts.
		if h, ok := parseHeader(raw); ok && json.Valid(raw) && !hasDuplicateKeys(raw) {
			if err != nil {
				t.Fatalf("parseHeader accepts, ParseLine rejects (%v): %q", err, raw)
			}
			if !h.ts.Equal(l.TS) || h.seq != l.Seq || h.kind != l.Kind {
				t.Fatalf("header %+v, ParseLine %v %d %q", h, l.TS, l.Seq, l.Kind)
			}
		}
		if err != nil {
			return
		}
		trimmed := bytes.TrimSpace(raw)
		if !json.Valid(trimmed) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		if !bytes.Equal(l.Raw, trimmed) {
			t.Fatalf("Raw %q != input %q", l.Raw, trimmed)
		}
		if l.Kind == "" {
			t.Fatalf("accepted without kind: %+v", l)
		}
		for _, k := range []string{"ts", "seq", "kind"} {
			if _, ok := l.Fields[k]; ok {
				t.Fatalf("Fields has %q", k)
			}
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &m); err != nil || len(m) != len(l.Fields)+3 {
			t.Fatalf("field count: %d vs %d (%v)", len(m), len(l.Fields), err)
		}
		// Re-render with the writer's format and parse again.
		if y := l.TS.UTC().Year(); y < 0 || y > 9999 {
			return // not representable in RFC 3339
		}
		body, err := json.Marshal(l.Fields)
		if err != nil {
			t.Fatalf("fields do not marshal: %v", err)
		}
		again, err := ParseLine(appendLine(nil, l.TS, l.Seq, l.Kind, body))
		if err != nil {
			t.Fatalf("re-rendered line does not parse: %v", err)
		}
		if !again.TS.Equal(l.TS) || again.Seq != l.Seq || again.Kind != l.Kind || len(again.Fields) != len(l.Fields) {
			t.Fatalf("round trip: %+v -> %+v", l, again)
		}
	})
}

// hasDuplicateKeys reports whether the top-level object repeats a key.
func hasDuplicateKeys(raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, _ := tok.(string)
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}
