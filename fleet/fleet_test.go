package fleet

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orchestrd/orchestrd/api"
)

// A job submitted on a node that does not serve its lane runs on one that
// does; its output is followed on the submitting node byte for byte, and
// a third node's Wait sees its end.
func TestSubmitElsewhereFollowWait(t *testing.T) {
	r := &runs{n: map[string]int{}, on: map[string]string{}}
	ns := startCluster(t, time.Second, r, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 2}, nodeSpec{})
	a, b, c := ns[0], ns[1], ns[2]
	if !a.f.Serves("gpu") || !c.f.Serves("gpu") || a.f.Serves("cpu") {
		t.Fatalf("Serves: a gpu %v, c gpu %v, a cpu %v", a.f.Serves("gpu"), c.f.Serves("gpu"), a.f.Serves("cpu"))
	}
	id := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	if !a.f.Owns(id) {
		t.Fatalf("a does not own %s", id)
	}
	var got bytes.Buffer
	var streams []string
	rec, err := a.f.Follow(context.Background(), id, func(stream string, data []byte) error {
		got.Write(data)
		streams = append(streams, stream)
		return nil
	})
	if err != nil {
		t.Fatalf("following %s on a: %v", id, err)
	}
	if got.String() != outputBytes(id) {
		t.Fatalf("a followed %d bytes, want %d, in order", got.Len(), len(outputBytes(id)))
	}
	if rec.State != api.StateSucceeded || rec.Node != b.name {
		t.Fatalf("followed record: %+v", rec)
	}
	if r.count(id) != 1 {
		t.Fatalf("%s ran %d times", id, r.count(id))
	}
	wr := waitEnd(t, c, id)
	if wr.State != api.StateSucceeded || wr.Output != outputBytes(id) {
		t.Fatalf("c's wait: state %s, %d bytes of output", wr.State, len(wr.Output))
	}
	gr, found, err := c.f.Get(id)
	if err != nil || !found || gr.Output != outputBytes(id) || gr.Lane != "gpu" || gr.DispatchedAt == nil {
		t.Fatalf("c's get: found %v err %v record %+v", found, err, gr)
	}
	list, err := a.f.List(api.Filter{Lane: "gpu"})
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("a's list: %v %+v", err, list)
	}
	// Following an ended job still gives every byte.
	got.Reset()
	if _, err := c.f.Follow(context.Background(), id, func(_ string, d []byte) error { got.Write(d); return nil }); err != nil || got.String() != outputBytes(id) {
		t.Fatalf("c follows the ended job: %v, %d bytes", err, got.Len())
	}
	if len(b.ev.kinds("cluster.job_taken")) != 1 {
		t.Fatalf("b took %d jobs", len(b.ev.kinds("cluster.job_taken")))
	}

	// A lane nobody serves is refused, as an unknown lane is.
	_, err = trySubmit(a, api.JobSpec{Lane: "cpu", Command: "echo"})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("a lane nobody serves: %v", err)
	}
	_, err = trySubmit(a, api.JobSpec{Lane: "gpu", Command: "cat", StdinStream: true})
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidParams {
		t.Fatalf("streamed stdin: %v", err)
	}

	// The embedded server refuses an anonymous client.
	if nc, err := nats.Connect(a.f.URL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected")
	}
}
