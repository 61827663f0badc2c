package main

import (
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// The harness's wait gives the daemon its whole server-side wait: a job
// that outlasts the client deadline of ordinary calls is still waited for,
// not cut off with "context deadline exceeded" (issue 6, section 8: on a
// loaded machine TestChaos's waits hit the 30 s call deadline while the
// daemon had been asked to wait 60 s).
func TestWaitOutlastsCallDeadline(t *testing.T) {
	d := startDaemon(t, fastConfig)
	id := d.submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "1"}})
	defer func(old time.Duration) { testCallTimeout = old }(testCallTimeout)
	testCallTimeout = 200 * time.Millisecond // far shorter than the job
	rec, err := d.tryWait(id)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if rec.State != api.StateSucceeded {
		t.Fatalf("record = %+v", rec)
	}
}
