package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// referenceJSON is the record as encoding/json writes it with "output" or
// "output_b64" added, which is what AppendJSON must equal once decoded.
func referenceJSON(t *testing.T, r JobRecord) []byte {
	t.Helper()
	v := struct {
		jobRecordFields
		Output    *string `json:"output,omitempty"`
		OutputB64 []byte  `json:"output_b64,omitempty"`
	}{jobRecordFields: jobRecordFields(r)}
	switch {
	case !r.HoldsOutput():
	case utf8.ValidString(r.Output):
		v.Output = &r.Output
	default:
		v.OutputB64 = []byte(r.Output)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkAppendJSON compares AppendJSON with the reference: valid JSON, the
// same members with the same values, in the same order.
func checkAppendJSON(t *testing.T, r JobRecord) {
	t.Helper()
	got := r.AppendJSON([]byte("prefix"))
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("AppendJSON lost what dst held: %q", got)
	}
	got = got[len("prefix"):]
	if !json.Valid(got) {
		t.Fatalf("AppendJSON wrote invalid JSON: %q", got)
	}
	want := referenceJSON(t, r)
	var g, w map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("AppendJSON\n%s\nwant (encoding/json)\n%s", got, want)
	}
	if gk, wk := keysInOrder(t, got), keysInOrder(t, want); !reflect.DeepEqual(gk, wk) {
		t.Fatalf("members in order %v, want %v", gk, wk)
	}
	var back JobRecord
	if err := json.Unmarshal(got, &back); err != nil || back.HoldsOutput() && back.Output != r.Output {
		t.Fatalf("round trip: output %q, want %q (%v)", back.Output, r.Output, err)
	}
}

func keysInOrder(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	var keys []string
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestJobRecordAppendJSON(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC)
	later := now.Add(1500 * time.Millisecond).In(time.FixedZone("x", 3600))
	code := int32(-3)
	full := JobRecord{ID: "j-1", Lane: "net", RunnerID: "net-0", RunnerPid: 42, State: StateSucceeded, ExitCode: &code,
		WasTimeout: true, WasCancelled: true, DurationMs: 17, Error: "it \"failed\" <b>\n", Command: "sh -c 'a && b'",
		Argv: []string{"x", "\u2028", "\xff"}, Cwd: "/tmp/ü", CreatedAt: now, DispatchedAt: &now, FinishedAt: &later,
		Signal: "SIGSEGV", StoppedBy: "sigterm", OutputBytes: 9, OutputTruncated: true, OutputEvicted: true, OutputCut: true,
		Output: "héllo\n\t<&>"}
	for _, r := range []JobRecord{
		{},
		{ID: "q", State: StateQueued, CreatedAt: now},
		{ID: "none", State: StateSucceeded},                   // finished, wrote nothing: "output": ""
		{ID: "listed", State: StateSucceeded, OutputBytes: 3}, // as job.list gives it: no output member
		{ID: "bin", State: StateFailed, Output: "ok \xff\xfe", OutputBytes: 5},
		{ID: "bin4", State: StateFailed, Output: string(bytes.Repeat([]byte{0xff, 1, 2, 3}, 3000)), OutputBytes: 12000},
		full,
	} {
		checkAppendJSON(t, r)
	}
}

func FuzzJobRecordAppendJSON(f *testing.F) {
	f.Add("j-1", "echo <hi>", "\xff\xfe", "err\n", int64(3), true)
	f.Add("", "", "", "", int64(0), false)
	f.Add("\u2028", "a\"b\\c", "héllo ✓", "\x00", int64(-1), true)
	f.Fuzz(func(t *testing.T, id, command, output, errStr string, n int64, flag bool) {
		r := JobRecord{ID: id, Lane: command, State: StateSucceeded, Command: command, Error: errStr, Output: output,
			OutputBytes: n, DurationMs: n, WasTimeout: flag, OutputCut: !flag, Argv: []string{id, output}}
		if flag {
			r.State = StateRunning
		}
		checkAppendJSON(t, r)
	})
}
