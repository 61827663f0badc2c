package lanes

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
)

// finishWith adds and finishes a job with output out.
func finishWith(s *store, id, out string) {
	s.add(rec(id, api.StateRunning), nil)
	r := rec(id, api.StateSucceeded)
	r.Output = out
	s.finish(r)
}

// The cache of finished records stays within its bytes and its count,
// oldest dropped first; a record alone over the bytes is not cached.
func TestStoreCacheBounds(t *testing.T) {
	r := rec("a", api.StateSucceeded)
	unit := recordCost(r) // a record of id "x" and no output
	s := newStore(4, 3*unit+100)
	finishWith(s, "a", strings.Repeat("a", 60))
	finishWith(s, "n", "")
	finishWith(s, "b", strings.Repeat("b", 30))
	if got := s.finishedOutput(); got != 3*unit+90 {
		t.Fatalf("held %d bytes, want %d", got, 3*unit+90)
	}
	finishWith(s, "c", strings.Repeat("c", 20)) // over the bytes: a goes
	check := func(id, want string, cached bool) {
		t.Helper()
		r, ok := s.get(id)
		if ok != cached || ok && (r.Output != want || r.State != api.StateSucceeded) {
			t.Fatalf("%s: cached %v with %d bytes of output; want cached %v with %d", id, ok, len(r.Output), cached, len(want))
		}
	}
	check("a", "", false)
	check("n", "", true)
	check("b", strings.Repeat("b", 30), true)
	check("c", strings.Repeat("c", 20), true)
	for _, id := range []string{"d", "e"} { // count: at most 4
		finishWith(s, id, "")
	}
	check("n", "", false)
	if len(s.done.recs) != 3 || s.finishedOutput() > 3*unit+100 {
		t.Fatalf("%d records, %d bytes", len(s.done.recs), s.finishedOutput())
	}
	// A record alone over the bytes is not cached, and evicts nothing.
	finishWith(s, "huge", strings.Repeat("h", int(3*unit+101)))
	check("huge", "", false)
	check("e", "", true)
	// Many more: the order's front is let go of, the bound holds.
	for i := range 1000 {
		finishWith(s, "m"+strconv.Itoa(i), "x")
	}
	if len(s.done.recs) > 4 || len(s.done.order)-s.done.head != len(s.done.recs) || cap(s.done.order) > 200 {
		t.Fatalf("%d records, order %d from %d (cap %d)", len(s.done.recs), len(s.done.order), s.done.head, cap(s.done.order))
	}
	c := s.stateCounts()
	if c[api.StateSucceeded] != 1007 || c[api.StateRunning] != 0 || len(s.jobs) != 0 {
		t.Fatalf("counts %v, %d live", c, len(s.jobs))
	}
}

// A waiter registered before the end gets the record with its output, even
// when the cache keeps nothing.
func TestStoreWaiterGetsOutputUncached(t *testing.T) {
	s := newStore(4, 0)
	s.add(rec("a", api.StateRunning), nil)
	var got api.JobRecord
	s.wait("a", func(r api.JobRecord) { got = r })
	r := rec("a", api.StateSucceeded)
	r.Output = "kept for the waiter"
	if !s.finish(r) {
		t.Fatal("finish returned false")
	}
	if got.Output != "kept for the waiter" {
		t.Fatalf("waiter got %+v", got)
	}
	if _, ok := s.get("a"); ok {
		t.Fatal("a finished job is still in memory with a cache of 0 bytes")
	}
	if _, found := s.wait("a", func(api.JobRecord) { t.Error("called") }); found {
		t.Fatal("wait found a job memory no longer holds")
	}
}

// Records carry their output byte for byte: "output" when it is UTF-8,
// else "output_b64"; both decode back to the same bytes.
func TestJobRecordOutputRoundTrips(t *testing.T) {
	for _, out := range []string{"", "hello <b> & ü\n", "ok \xff\xfe", "\x00\x01\x80 end"} {
		r := rec("a", api.StateSucceeded)
		r.Output, r.OutputBytes, r.Signal = out, int64(len(out)), "SIGSEGV"
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		_, hasText := m["output"]
		_, hasB64 := m["output_b64"]
		if hasText != utf8.ValidString(out) || hasB64 == hasText {
			t.Fatalf("%q: JSON %s: want exactly one of output (UTF-8) or output_b64", out, b)
		}
		var back api.JobRecord
		if err := json.Unmarshal(b, &back); err != nil || back.Output != out || back.Signal != "SIGSEGV" || back.ID != "a" {
			t.Fatalf("%q: round trip %+v (%v)", out, back, err)
		}
	}
	// Readable in the event log, whose encoder does not escape HTML.
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(api.JobRecord{Output: "a < b"}); err != nil || !strings.Contains(buf.String(), `"output":"a < b"`) {
		t.Fatalf("encoded %s (%v)", buf.String(), err)
	}
	var r api.JobRecord
	if err := json.Unmarshal([]byte(`{"id":"a","output":"x","output_b64":"eA=="}`), &r); err == nil {
		t.Fatal("a record with both output and output_b64 was accepted")
	}
}

// The UTF-8 character a chunk boundary cuts goes out whole with the next
// chunk; bytes that are not UTF-8 are not held back.
func TestSplitPartialRune(t *testing.T) {
	for _, tc := range []struct{ in, head, tail string }{
		{"abc", "abc", ""},
		{"ab\xc3", "ab", "\xc3"},
		{"ab\xe2\x9c", "ab", "\xe2\x9c"},
		{"ab\xf0\x9f\x98", "ab", "\xf0\x9f\x98"},
		{"ab\xe2\x9c\x93", "ab\xe2\x9c\x93", ""},
		{"\xff\xc3", "\xff\xc3", ""},
		{"ab\x9c", "ab\x9c", ""},
		{"", "", ""},
	} {
		h, tl := splitPartialRune([]byte(tc.in))
		if string(h) != tc.head || string(tl) != tc.tail {
			t.Errorf("%q: %q + %q, want %q + %q", tc.in, h, tl, tc.head, tc.tail)
		}
	}
}

// Whatever the bytes, a record's output decodes back to exactly them.
func FuzzJobRecordOutput(f *testing.F) {
	f.Add("hello\n")
	f.Add("ok \xff\xfe")
	f.Add("\xf0\x9f\x98")
	f.Fuzz(func(t *testing.T, out string) {
		r := rec("a", api.StateSucceeded)
		r.Output = out
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back api.JobRecord
		if err := json.Unmarshal(enc, &back); err != nil || back.Output != out || back.ID != "a" || back.State != api.StateSucceeded {
			t.Fatalf("%q: %s decoded to output %q (%v)", out, enc, back.Output, err)
		}
	})
}
