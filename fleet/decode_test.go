package fleet

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func TestDecodeNode(t *testing.T) {
	t.Parallel()
	n := nodeInfo{Name: "n1", Incarnation: "ab", Lanes: []string{"gpu"}, Free: map[string]int{"gpu": 2},
		StartedAt: time.Now().UTC(), HeartbeatAt: time.Now().UTC(), State: nodeAlive,
		Figures: &api.NodeFigures{CPUs: 8, MemTotalBytes: 16 << 30, MemAvailBytes: 9 << 30, Load1: 0.5, HomeFreeBytes: 1, HomeTotalBytes: 2}}
	b, _ := json.Marshal(n)
	if got, err := decodeNode("n1", b); err != nil || got.Name != "n1" || got.Free["gpu"] != 2 || *got.Figures != *n.Figures {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{`{}`, `[]`, `{"name":"n2","incarnation":"a","state":"alive"}`,
		`{"name":"n1","incarnation":"a","state":"zombie"}`, `{"name":"n1","incarnation":"a","state":"alive","lanes":["a.b"]}`,
		`{"name":"n1","incarnation":"a","state":"alive","free":{"gpu":-1}}`, `{"name":"n1","state":"alive"}`} {
		if _, err := decodeNode("n1", []byte(bad)); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}

// Implausible figures in a heartbeat are dropped; the heartbeat stands.
func TestDecodeNodeFigures(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{`{"cpus":-1}`, `{"cpus":1,"mem_total_bytes":1,"mem_available_bytes":2}`,
		`{"cpus":1,"load5":-0.5}`, `{"cpus":1,"home_free_bytes":9}`, `{"cpus":1000000}`} {
		n, err := decodeNode("n1", []byte(`{"name":"n1","incarnation":"a","state":"alive","figures":`+bad+`}`))
		if err != nil || n.Figures != nil || n.State != nodeAlive {
			t.Errorf("%s: %+v %v", bad, n, err)
		}
	}
}

func TestDecodeJob(t *testing.T) {
	t.Parallel()
	e := jobEntry{Record: api.JobRecord{ID: "c-ab-1", Lane: "gpu", State: api.StateRunning, Node: "n1", Output: "x"}, Incarnation: "i"}
	b, _ := json.Marshal(e)
	got, err := decodeJob("c-ab-1", b)
	if err != nil || got.Record.Node != "n1" || got.Record.Output != "" {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{`{}`, `{"record":{"id":"c-ab-2","state":"queued"}}`, `{"record":{"id":"c-ab-1","state":"odd"}}`,
		`{"record":{"id":"c-ab-1","state":"queued","node":"a b"}}`, `{"record":{"id":"c-ab-1","state":"queued"},"kept":-1}`} {
		if _, err := decodeJob("c-ab-1", []byte(bad)); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
	if _, err := decodeJobMessage("gpu", []byte(`{"id":"c-ab-1","spec":{"lane":"cpu"}}`)); err == nil {
		t.Error("a job of another lane decoded")
	}
	for id, ok := range map[string]bool{"c-ab-1": true, "c-ab-": false, "c-xyz-1": false, "j-ab-1": false, "c-ab-1-2": false} {
		if validJobID(id) != ok {
			t.Errorf("validJobID(%q) = %v", id, !ok)
		}
	}
	// Ids tagged with their lane (newID): a record or message of another
	// lane is not the job's; an id without a tag is bound to none.
	gpu := "c-0a1b2c" + laneTag("gpu") + "-7"
	if !validJobID(gpu) || !idLaneOK(gpu, "gpu") || idLaneOK(gpu, "cpu") || !idLaneOK("c-0a1b2c-7", "cpu") || laneTag("gpu") == laneTag("cpu") {
		t.Errorf("lane tags: %q", gpu)
	}
	if _, err := decodeJobMessage("cpu", []byte(`{"id":"`+gpu+`","spec":{"lane":"cpu"}}`)); err == nil {
		t.Error("a gpu job's id in cpu's queue decoded")
	}
	if err := jobWriterOK(jobEntry{Record: api.JobRecord{ID: gpu, Lane: "cpu", State: api.StateQueued}}, writer{name: "n1"}); err == nil {
		t.Error("a gpu job's record of lane cpu passed")
	}
	if err := jobWriterOK(jobEntry{Record: api.JobRecord{ID: gpu, Lane: "gpu", State: api.StateRunning, Node: "n1"}}, writer{name: "n1", lanes: []string{"cpu"}}); err == nil {
		t.Error("a take of a gpu job by a node certified for cpu passed")
	}
	if err := jobWriterOK(jobEntry{Record: api.JobRecord{ID: gpu, Lane: "gpu", State: api.StateRunning, Node: "n1"}}, writer{name: "n1", lanes: []string{"cpu", "gpu"}}); err != nil {
		t.Errorf("a take of a gpu job by a node certified for it: %v", err)
	}
}

func TestWithOrigin(t *testing.T) {
	t.Parallel()
	kind, out, ok := withOrigin("n1", []byte(`{"ts":"x","seq":1,"kind":"cluster.started","node":"n1"}`))
	if !ok || kind != "cluster.started" || string(out) != `{"origin":"n1","ts":"x","seq":1,"kind":"cluster.started","node":"n1"}` {
		t.Fatalf("%s %s %v", kind, out, ok)
	}
	for _, bad := range []string{``, `{}`, `{"kind":""}`, `[1]`, `{"kind":"a"`, `{"kind":"a"} x`} {
		if _, _, ok := withOrigin("n1", []byte(bad)); ok {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// Anything a node (or anyone with the credentials) writes is decoded
// without a panic, and what is accepted is valid.
func FuzzDecodeNode(f *testing.F) {
	f.Add("n1", []byte(`{"name":"n1","incarnation":"a","state":"alive","lanes":["gpu"],"free":{"gpu":1}}`))
	f.Add("n1", []byte(`{"name":"n1","incarnation":"a","state":"lost","lost_by":"n2"}`))
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		n, err := decodeNode(key, b)
		if err == nil && (n.Name != key || !validName(key) || n.Incarnation == "") {
			t.Fatalf("accepted %+v for %q", n, key)
		}
	})
}

func FuzzDecodeJob(f *testing.F) {
	f.Add("c-ab-1", []byte(`{"record":{"id":"c-ab-1","lane":"gpu","state":"queued"},"max_output":10}`))
	f.Add("c-ab-1", []byte(`{"record":{"id":"c-ab-1","state":"failed","output_b64":"AAE="},"kept":2}`))
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		e, err := decodeJob(key, b)
		if err == nil && (e.Record.ID != key || !api.ValidState(string(e.Record.State)) || e.Record.Output != "" || e.Kept < 0) {
			t.Fatalf("accepted %+v for %q", e, key)
		}
	})
}

func FuzzDecodeJobMessage(f *testing.F) {
	f.Add([]byte(`{"id":"c-ab-1","spec":{"lane":"gpu","command":"true"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeJobMessage("gpu", b)
		if err == nil && (!validJobID(m.ID) || m.Spec.Lane != "gpu") {
			t.Fatalf("accepted %+v", m)
		}
	})
}

func FuzzWithOrigin(f *testing.F) {
	f.Add([]byte(`{"ts":"x","seq":1,"kind":"job.finished"}`))
	f.Add([]byte(`{"kind":"a"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, out, ok := withOrigin("n1", b)
		if !ok {
			return
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil || v["origin"] != "n1" || v["kind"] != kind {
			t.Fatalf("%q -> %q: %v", b, out, err)
		}
	})
}

// eventLines gives every non-empty line of a message, in order, each
// without its newline.
func FuzzEventLines(f *testing.F) {
	f.Add([]byte(`{"kind":"a"}` + "\n" + `{"kind":"b"}`))
	f.Add([]byte("\n\nx\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want [][]byte
		for _, l := range bytes.Split(b, []byte{'\n'}) {
			if len(l) > 0 {
				want = append(want, l)
			}
		}
		var got [][]byte
		eventLines(b, func(l []byte) { got = append(got, l) })
		if len(got) != len(want) {
			t.Fatalf("%q: %d lines, want %d", b, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: line %d %q, want %q", b, i, got[i], want[i])
			}
		}
	})
}
