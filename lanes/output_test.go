package lanes

import (
	"encoding/json"
	"strings"
	"sync"
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

// Finished jobs' output stays within the budget, oldest dropped first; the
// records stay and say so, and each drop is reported once.
func TestStoreBoundsFinishedOutput(t *testing.T) {
	s := newStore(4)
	var mu sync.Mutex
	var evicted []string
	s.boundOutput(100, func(r api.JobRecord, n int) {
		mu.Lock()
		evicted = append(evicted, r.ID+":"+strings.Repeat("x", n/10))
		mu.Unlock()
	})
	finishWith(s, "a", strings.Repeat("a", 60))
	finishWith(s, "none", "")
	finishWith(s, "b", strings.Repeat("b", 30))
	if got := s.finishedOutput(); got != 90 {
		t.Fatalf("held %d bytes, want 90", got)
	}
	finishWith(s, "c", strings.Repeat("c", 20)) // 110 > 100: a goes
	check := func(id string, want string, gone bool) {
		t.Helper()
		r, ok := s.get(id)
		if !ok || r.Output != want || r.OutputEvicted != gone || r.State != api.StateSucceeded {
			t.Fatalf("%s: found %v, output %d bytes, evicted %v; want %d bytes, evicted %v", id, ok, len(r.Output), r.OutputEvicted, len(want), gone)
		}
	}
	check("a", "", true)
	check("none", "", false)
	check("b", strings.Repeat("b", 30), false)
	check("c", strings.Repeat("c", 20), false)
	if got := s.finishedOutput(); got != 50 {
		t.Fatalf("held %d bytes, want 50", got)
	}
	// The finished_jobs ring drops whole records; the byte count follows.
	finishWith(s, "d", strings.Repeat("d", 10)) // ring of 4: "a" goes
	finishWith(s, "e", "")                      // "none" goes
	finishWith(s, "f", strings.Repeat("f", 10)) // "b" goes
	if _, ok := s.get("b"); ok {
		t.Fatal("b is still there past finished_jobs")
	}
	if got := s.finishedOutput(); got != 40 {
		t.Fatalf("held %d bytes after the ring dropped b, want 40", got)
	}
	// A job alone over the budget loses its output at once, after every
	// older one.
	finishWith(s, "huge", strings.Repeat("h", 150))
	check("d", "", true)
	check("f", "", true)
	check("huge", "", true)
	if got := s.finishedOutput(); got > 100 {
		t.Fatalf("held %d bytes, over the budget of 100", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(evicted, " ") != "a:xxxxxx d:x f:x huge:"+strings.Repeat("x", 15) {
		t.Fatalf("evictions reported: %v", evicted)
	}
}

// A waiter registered before the end gets the record with its output, even
// when the budget drops it at once.
func TestStoreWaiterGetsOutputBeforeEviction(t *testing.T) {
	s := newStore(4)
	s.boundOutput(0, nil)
	s.add(rec("a", api.StateRunning), nil)
	var got api.JobRecord
	s.wait("a", func(r api.JobRecord) { got = r })
	r := rec("a", api.StateSucceeded)
	r.Output = "kept for the waiter"
	s.finish(r)
	if got.Output != "kept for the waiter" || got.OutputEvicted {
		t.Fatalf("waiter got %+v", got)
	}
	if now, _ := s.get("a"); now.Output != "" || !now.OutputEvicted {
		t.Fatalf("stored %+v, want its output evicted (budget 0)", now)
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
