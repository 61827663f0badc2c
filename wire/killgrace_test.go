package wire

import (
	"bytes"
	"testing"
)

// kill_grace_ms, Cancel's force and Result's stopped_by are orchestrd's
// extensions: absent, each frame is the spec's byte for byte; present, they
// round-trip, and the hand-written Job encoder writes what encoding/json
// would.
func TestKillGraceExtensions(t *testing.T) {
	const plain = `{"job_id":"j-1","agent_id":"","tool_name":"","command":"sleep 9","argv":[],"cwd":"","worktree_dir":"","env":{},"timeout_ms":0,"max_output_bytes":0,"file_paths":[]}`
	ms := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		grace *uint64
		want  string
	}{
		{nil, plain},
		{ms(0), plain[:len(plain)-1] + `,"kill_grace_ms":0}`},
		{ms(2500), plain[:len(plain)-1] + `,"kill_grace_ms":2500}`},
	} {
		j := Job{JobID: "j-1", Command: "sleep 9", KillGraceMs: tc.grace}
		frame, err := Marshal(TypeJob, j)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(frame[HeaderSize:]); got != tc.want {
			t.Fatalf("payload\n got %s\nwant %s", got, tc.want)
		}
		if ref, err := reflectJSON(j); err != nil || !bytes.Equal(ref, frame[HeaderSize:]) {
			t.Fatalf("encoding/json writes %s (%v)", ref, err)
		}
		var back Job
		if err := Unmarshal(Frame{Type: TypeJob, Payload: frame[HeaderSize:]}, &back); err != nil {
			t.Fatal(err)
		}
		if (back.KillGraceMs == nil) != (tc.grace == nil) || (tc.grace != nil && *back.KillGraceMs != *tc.grace) {
			t.Fatalf("kill_grace_ms decoded as %v, sent %v", back.KillGraceMs, tc.grace)
		}
	}
	for _, tc := range []struct {
		v    any
		want string
	}{
		{Cancel{JobID: "j"}, `{"job_id":"j"}`},
		{Cancel{JobID: "j", Force: true}, `{"job_id":"j","force":true}`},
		{Result{JobID: "j", Status: StatusCancelled, WasCancelled: true},
			`{"job_id":"j","status":"Cancelled","output":"","exit_code":null,"was_timeout":false,"was_cancelled":true,"duration_ms":0}`},
		{Result{JobID: "j", Status: StatusTimeout, WasTimeout: true, StoppedBy: StoppedBySIGKILL},
			`{"job_id":"j","status":"Timeout","output":"","exit_code":null,"was_timeout":true,"was_cancelled":false,"duration_ms":0,"stopped_by":"sigkill"}`},
	} {
		frame, err := Marshal(TypeCancel, tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(frame[HeaderSize:]); got != tc.want {
			t.Errorf("payload\n got %s\nwant %s", got, tc.want)
		}
	}
}
