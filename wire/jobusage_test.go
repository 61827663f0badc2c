package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// JobStarted and Result.rusage cross the wire as they were sent; a
// JobStarted that names no process is refused with why; a Result without
// rusage is the spec's byte for byte (no "rusage" key).
func TestJobStartedAndRusage(t *testing.T) {
	var buf bytes.Buffer
	in := JobStarted{JobID: "j-1", Pid: 42, StartTicks: 12345, Cgroup: "/sys/fs/cgroup/o/r.1/job-1"}
	if err := WriteFrame(&buf, TypeJobStarted, in); err != nil {
		t.Fatal(err)
	}
	f, err := NewFrameReader(&buf, 0).Next()
	if err != nil || f.Type != TypeJobStarted {
		t.Fatalf("frame %v, %v", f.Type, err)
	}
	var out JobStarted
	if err := Unmarshal(f, &out); err != nil || out != in || out.Validate() != nil {
		t.Fatalf("JobStarted %+v (%v), sent %+v", out, err, in)
	}
	for _, c := range []struct {
		s    JobStarted
		want string
	}{
		{JobStarted{Pid: 1, StartTicks: 1}, "no job_id"},
		{JobStarted{JobID: "j", Pid: 0, StartTicks: 1}, "out of range"},
		{JobStarted{JobID: "j", Pid: 1 << 23, StartTicks: 1}, "out of range"},
		{JobStarted{JobID: "j", Pid: 1}, "no start_ticks"},
		{JobStarted{JobID: "j", Pid: 1, StartTicks: 1, Cgroup: "job-1"}, "clean absolute"},
		{JobStarted{JobID: "j", Pid: 1, StartTicks: 1, Cgroup: "/a/../b"}, "clean absolute"},
	} {
		if err := c.s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}

	code := int32(0)
	res := Result{JobID: "j-1", Status: StatusSuccess, ExitCode: &code,
		Rusage: &JobRusage{UserMicros: 1_500_000, SystemMicros: 20_000, MaxRSSKiB: 2048}}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || back.Rusage == nil || *back.Rusage != *res.Rusage {
		t.Fatalf("Result %s decoded to %+v (%v)", b, back.Rusage, err)
	}
	res.Rusage = nil
	if b, _ := json.Marshal(res); bytes.Contains(b, []byte("rusage")) {
		t.Fatalf("a Result without rusage: %s", b)
	}
}

func FuzzJobStarted(f *testing.F) {
	f.Add([]byte(`{"job_id":"j","pid":42,"start_ticks":7}`))
	f.Add([]byte(`{"job_id":"","pid":-1,"start_ticks":0}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		var s JobStarted
		if Unmarshal(Frame{Type: TypeJobStarted, Payload: p}, &s) != nil || s.Validate() != nil {
			return
		}
		if s.JobID == "" || s.Pid <= 0 || s.StartTicks == 0 {
			t.Fatalf("accepted %+v", s)
		}
	})
}
