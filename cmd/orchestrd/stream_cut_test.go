package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
)

// A record whose output the runner cut is reported as maybe incomplete,
// even when every byte the daemon counted arrived: what the holder wrote
// later was never counted.
func TestIncompleteSaysOutputCut(t *testing.T) {
	for _, cut := range []bool{false, true} {
		var errOut bytes.Buffer
		s := &streamReader{stderr: &errOut, received: 10}
		rec := api.JobRecord{ID: "j-1", State: api.StateSucceeded, OutputBytes: 10, OutputCut: cut}
		got := s.incomplete(rec, "reached this client")
		if got != cut || strings.Contains(errOut.String(), "outlived the job") != cut {
			t.Fatalf("cut %v: incomplete %v, said %q", cut, got, errOut.String())
		}
	}
	if s := outputSummary(api.JobRecord{State: api.StateSucceeded, OutputBytes: 10, OutputCut: true}); !strings.Contains(s, "may be incomplete") {
		t.Fatalf("summary %q", s)
	}
}
