package eventlogtest_test

import (
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/supervisor/eventlog/eventlogtest"
)

// A Recorder keeps what it is delivered, in order; WaitFrom waits for a
// record not delivered yet and says where the next search starts; Forget
// Take and Forget drop what was kept.
func TestRecorder(t *testing.T) {
	r := eventlogtest.NewRecorder()
	r.Deliver(&eventlog.Record{Seq: 1, Event: good{}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Deliver(&eventlog.Record{Seq: 2, Event: good{}})
		r.Deliver(&eventlog.Record{Seq: 3, Event: good{}})
	}()
	is := func(seq uint64) func(*eventlog.Record) bool {
		return func(rec *eventlog.Record) bool { return rec.Seq == seq }
	}
	if rec, next := r.WaitFrom(t, 0, "seq 3", is(3)); rec.Seq != 3 || next != 3 {
		t.Fatalf("WaitFrom(0) = seq %d, next %d; want 3, 3", rec.Seq, next)
	}
	if rec, next := r.WaitFrom(t, 1, "seq 2", is(2)); rec.Seq != 2 || next != 2 {
		t.Fatalf("WaitFrom(1) = seq %d, next %d; want 2, 2", rec.Seq, next)
	}
	if rec := r.Wait(t, "seq 1", is(1)); rec.Seq != 1 {
		t.Fatalf("Wait = seq %d, want 1", rec.Seq)
	}
	<-done
	recs := r.Records()
	if len(recs) != 3 || recs[0].Seq != 1 || recs[1].Seq != 2 || recs[2].Seq != 3 {
		t.Fatalf("Records = %+v, want seq 1, 2, 3", recs)
	}
	if recs := r.Take(); len(recs) != 3 || recs[2].Seq != 3 {
		t.Fatalf("Take = %+v, want seq 1, 2, 3", recs)
	}
	if n := len(r.Records()); n != 0 {
		t.Fatalf("%d records after Take", n)
	}
	r.Deliver(&eventlog.Record{Seq: 4, Event: good{}})
	r.Forget()
	if n := len(r.Records()); n != 0 {
		t.Fatalf("%d records after Forget", n)
	}
}
