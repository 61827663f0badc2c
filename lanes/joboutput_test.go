package lanes

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// job.output carries the job's bytes losslessly: text as "data", anything
// else as "data_b64", on the control socket as in a decoded event.
func TestJobOutputCarriesBytesExactly(t *testing.T) {
	b, err := eventlog.Open(eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bin := "ok \xff\xfe\x00\x80 end"
	cases := []struct {
		data, want string
	}{
		{"line <1>\n", `{"event":"job.output","data":{"job_id":"j1","stream":"stdout","data":"line <1>\n"}}` + "\n"},
		{"héllo ✓\n", `{"event":"job.output","data":{"job_id":"j1","stream":"stdout","data":"héllo ✓\n"}}` + "\n"},
		{bin, `{"event":"job.output","data":{"job_id":"j1","stream":"stdout","data_b64":"b2sg//4AgCBlbmQ="}}` + "\n"},
		{"", `{"event":"job.output","data":{"job_id":"j1","stream":"stdout","data":""}}` + "\n"},
	}
	for _, c := range cases {
		r := b.Emit(JobOutput{JobID: "j1", Stream: "stdout", Data: c.data})
		if string(r.Wire()) != c.want {
			t.Errorf("%q: Wire() = %s, want %s", c.data, r.Wire(), c.want)
		}
		var ev struct {
			Data JobOutput `json:"data"`
		}
		if err := json.Unmarshal(r.Wire(), &ev); err != nil || ev.Data.Data != c.data || ev.Data.JobID != "j1" || ev.Data.Stream != "stdout" {
			t.Errorf("%q: decoded %+v (%v)", c.data, ev.Data, err)
		}
	}
	// Every byte value survives.
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	enc, err := json.Marshal(JobOutput{Data: string(all)})
	if err != nil || !bytes.Contains(enc, []byte(`"data_b64"`)) || bytes.Contains(enc, []byte(`"data"`)) {
		t.Fatalf("all bytes: %s (%v)", enc, err)
	}
	var back JobOutput
	if err := json.Unmarshal(enc, &back); err != nil || back.Data != string(all) {
		t.Fatalf("all bytes came back as %q (%v)", back.Data, err)
	}
	var bad JobOutput
	err = json.Unmarshal([]byte(`{"job_id":"j","stream":"stdout","data":"a","data_b64":"YQ=="}`), &bad)
	if err == nil || !strings.Contains(err.Error(), "data_b64") {
		t.Fatalf("data and data_b64 together: %v, want an error naming both", err)
	}
	if err := json.Unmarshal([]byte(`{"job_id":"j","data_b64":"%%%"}`), &bad); err == nil {
		t.Fatal("bad base64 accepted")
	}
}

// Whatever the bytes, a job.output event decodes back to exactly them, and
// carries exactly one of data (valid UTF-8) and data_b64.
func FuzzJobOutputBytes(f *testing.F) {
	f.Add("hello\n")
	f.Add("ok \xff\xfe")
	f.Add("\xe2\x9c")
	f.Add("\u2028<&>\x00\"\\")
	f.Fuzz(func(t *testing.T, data string) {
		enc, err := json.Marshal(JobOutput{JobID: "j", Stream: "stderr", Data: data})
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(enc, &m); err != nil {
			t.Fatalf("%s is not a JSON object: %v", enc, err)
		}
		_, text := m["data"]
		_, b64 := m["data_b64"]
		if text == b64 || text != utf8.ValidString(data) {
			t.Fatalf("%q encoded as %s", data, enc)
		}
		var back JobOutput
		if err := json.Unmarshal(enc, &back); err != nil || back.Data != data || back.Stream != "stderr" || back.JobID != "j" {
			t.Fatalf("%q: %s decoded to %+v (%v)", data, enc, back, err)
		}
	})
}
