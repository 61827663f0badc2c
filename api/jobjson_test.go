package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

// referenceJSON is the record as encoding/json writes it (without HTML
// escaping) with "output" or "output_b64" added: what AppendJSON must
// write, byte for byte.
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
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// checkAppendJSON compares AppendJSON with the reference and reads it back.
func checkAppendJSON(t *testing.T, r JobRecord) {
	t.Helper()
	got := r.AppendJSON([]byte("prefix"))
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("AppendJSON lost what dst held: %q", got)
	}
	got = got[len("prefix"):]
	if want := referenceJSON(t, r); !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON\n%s\nwant (encoding/json)\n%s", got, want)
	}
	var back JobRecord
	if err := json.Unmarshal(got, &back); err != nil || back.HoldsOutput() && back.Output != r.Output {
		t.Fatalf("round trip: output %q, want %q (%v)", back.Output, r.Output, err)
	}
}

func TestJobRecordAppendJSON(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC)
	later := now.Add(1500 * time.Millisecond).In(time.FixedZone("x", 3600))
	code := int32(-3)
	full := JobRecord{ID: "j-1", Lane: "net", RunnerID: "net-0", RunnerPid: 42, State: StateSucceeded, ExitCode: &code,
		WasTimeout: true, WasCancelled: true, DurationMs: 17, Error: "it \"failed\" <b>\n", Command: "sh -c 'a && b'",
		Argv: []string{"x", "\u2028", "\xff"}, Cwd: "/tmp/ü", CreatedAt: now, DispatchedAt: &now, FinishedAt: &later,
		Signal: "SIGSEGV", StoppedBy: "sigterm", OutputBytes: 9, OutputTruncated: true, OutputEvicted: true, OutputCut: true, Node: "gpu-box",
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
