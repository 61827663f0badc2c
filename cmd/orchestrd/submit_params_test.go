package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"

	"github.com/orchestrd/orchestrd/wire"
)

// Environment entries no process can be given are refused at job.submit
// with -32602 naming the key; nothing is queued.
func TestSubmitRefusesBadEnv(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"A=B": "1"}, `env key "A=B" contains '='`},
		{map[string]string{"": "1"}, "env has an empty key"},
		{map[string]string{"OK": "1", "NUL\x00KEY": "1"}, `env key "NUL\x00KEY" contains a NUL byte`},
		{map[string]string{"VAL": "a\x00b"}, `env value of "VAL" contains a NUL byte`},
	} {
		err := d.call("job.submit", api.JobSpec{Lane: "net", Argv: []string{"true"}, Env: tc.env}, nil)
		if remoteCode(err) != wire.CodeInvalidParams || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %q: %v; want -32602 with %q", tc.env, err, tc.want)
		}
	}
	var r struct{ Jobs []api.JobRecord }
	d.mustCall("job.list", nil, &r)
	if len(r.Jobs) != 0 {
		t.Fatalf("refused jobs were recorded: %+v", r.Jobs)
	}
	// A good entry still works, on the same daemon.
	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Command: `printf %s "$K"`, Env: map[string]string{"K": "v=w"}}))
	if rec.State != api.StateSucceeded || rec.Output != "v=w" {
		t.Fatalf("record = %+v", rec)
	}
}

// job.get, job.wait and job.cancel take the job as "job_id", the name
// job.submit answers with, as well as "id".
func TestJobMethodsTakeJobID(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	id := d.submit(api.JobSpec{Lane: "net", Argv: []string{"echo", "hi"}})
	var w struct{ Job api.JobRecord }
	d.mustCall("job.wait", map[string]any{"job_id": id, "timeout_ms": 60000}, &w)
	if w.Job.ID != id || w.Job.State != api.StateSucceeded {
		t.Fatalf("job.wait {job_id} = %+v", w.Job)
	}
	var g struct{ Job api.JobRecord }
	d.mustCall("job.get", map[string]any{"job_id": id}, &g)
	if g.Job.ID != id || g.Job.Output != "hi\n" {
		t.Fatalf("job.get {job_id} = %+v", g.Job)
	}
	d.mustCall("job.get", map[string]any{"id": id, "job_id": id}, &g)

	long := d.submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "30"}})
	err := d.call("job.cancel", map[string]any{"id": id, "job_id": long}, nil)
	if remoteCode(err) != wire.CodeInvalidParams || !strings.Contains(err.Error(), "differ") {
		t.Fatalf("job.cancel with two different ids: %v, want -32602", err)
	}
	var c struct {
		WasRunning bool `json:"was_running"`
	}
	d.mustCall("job.cancel", map[string]any{"job_id": long}, &c)
	if rec := d.wait(long); rec.State != api.StateCancelled {
		t.Fatalf("cancelled by job_id: %+v", rec)
	}
	if err := d.call("job.get", map[string]any{}, nil); remoteCode(err) != wire.CodeInvalidParams {
		t.Fatalf("job.get without an id: %v", err)
	}
}

// job.submit takes the job's stdin as text or as base64 bytes, and refuses
// more than api.MaxStdinBytes naming the cap.
func TestSubmitStdin(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, fastConfig)
	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"cat"}, Stdin: "from stdin\n"}))
	if rec.State != api.StateSucceeded || rec.Output != "from stdin\n" {
		t.Fatalf("stdin text: %+v", rec)
	}
	data := make([]byte, api.MaxStdinBytes)
	rand.Read(data)
	sum := sha256.Sum256(data)
	rec = d.wait(d.submit(api.JobSpec{Lane: "net", Argv: []string{"sha256sum"}, StdinB64: data}))
	if rec.State != api.StateSucceeded || !strings.HasPrefix(rec.Output, hex.EncodeToString(sum[:])) {
		t.Fatalf("stdin_b64: %+v, want sha256 %x", rec, sum)
	}
	err := d.call("job.submit", api.JobSpec{Lane: "net", Argv: []string{"cat"}, StdinB64: append(data, 'x')}, nil)
	if remoteCode(err) != wire.CodeInvalidParams || !strings.Contains(err.Error(), "512 KiB") || !strings.Contains(err.Error(), "file") {
		t.Fatalf("stdin over the cap: %v", err)
	}
	err = d.call("job.submit", api.JobSpec{Lane: "net", Argv: []string{"cat"}, Stdin: "a", StdinB64: []byte("b")}, nil)
	if remoteCode(err) != wire.CodeInvalidParams || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("stdin and stdin_b64: %v", err)
	}
	if rec := d.wait(d.submit(api.JobSpec{Lane: "net", Command: "wc -c"})); strings.TrimSpace(rec.Output) != "0" {
		t.Fatalf("without stdin: %+v", rec)
	}
}

// A stdin that would not fit the runner frame limit is refused at submit,
// naming daemon.max_frame_bytes, not sent to kill the runner.
func TestSubmitStdinOverFrameLimit(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "[daemon]\nmax_frame_bytes = 65536\n[lanes.net]\nrunners = 1\nnetwork = \"host\"\n")
	err := d.call("job.submit", api.JobSpec{Lane: "net", Argv: []string{"cat"}, StdinB64: make([]byte, 60000)}, nil)
	if remoteCode(err) != wire.CodeInvalidParams || !strings.Contains(err.Error(), "daemon.max_frame_bytes (65536)") {
		t.Fatalf("stdin over the frame limit: %v", err)
	}
	rec := d.wait(d.submit(api.JobSpec{Lane: "net", Command: "wc -c", StdinB64: make([]byte, 40000)}))
	if rec.State != api.StateSucceeded || strings.TrimSpace(rec.Output) != "40000" {
		t.Fatalf("stdin within the frame limit: %+v", rec)
	}
}
