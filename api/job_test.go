package api

import (
	"encoding/json"
	"testing"
)

// A record's JSON has output (or output_b64) only when it holds the job's
// output: a finished job's, kept. A listed record (job.list leaves the
// output out), a running job's and an evicted one have no output member,
// never an "output": "" for output that exists.
func TestJobRecordOutputOnlyWhenHeld(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  JobRecord
		want any // the output member, nil: absent
	}{
		{"finished, kept", JobRecord{State: StateSucceeded, Output: "hi\n", OutputBytes: 3}, "hi\n"},
		{"finished, wrote nothing", JobRecord{State: StateSucceeded}, ""},
		{"listed: output left out", JobRecord{State: StateFailed, OutputBytes: 3}, nil},
		{"evicted", JobRecord{State: StateSucceeded, OutputBytes: 3, OutputEvicted: true}, nil},
		{"running", JobRecord{State: StateRunning}, nil},
		{"queued", JobRecord{State: StateQueued}, nil},
	} {
		b, err := json.Marshal(tc.rec)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		got, has := m["output"]
		if tc.want == nil && has || tc.want != nil && got != tc.want {
			t.Errorf("%s: %s; want output %v", tc.name, b, tc.want)
		}
		if _, b64 := m["output_b64"]; b64 {
			t.Errorf("%s: %s has output_b64", tc.name, b)
		}
		var back JobRecord
		if err := json.Unmarshal(b, &back); err != nil || back.Output != tc.rec.Output {
			t.Errorf("%s: read back %q (%v)", tc.name, back.Output, err)
		}
	}
}
