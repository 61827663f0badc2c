// Package eventlogtest checks a package's event kinds from its own tests:
// that each is registered with the event log, that the package's tests hold
// a sample of every kind it registered, and that each sample is logged and
// sent to subscribers as the kind promises. Its Recorder is a bus sink a
// test waits on.
package eventlogtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// CheckKinds checks samples, one populated value of each kind a package
// defines (a test may pass the kinds of several packages):
//   - each sample's kind is registered, by the sample's own type;
//   - every kind registered by a type of the samples' packages has a
//     sample, so a kind added without a test fails here;
//   - no sample has a field named ts, seq or kind, and each encodes to a
//     JSON object;
//   - emitted on a bus with a file, each sample that is not Ephemeral is
//     one log line of its kind carrying exactly its own fields, and each
//     Ephemeral one is delivered but not logged; every sample's control
//     socket line is {"event":kind,"data":...}.
func CheckKinds(t testing.TB, samples ...eventlog.Event) {
	t.Helper()
	pkgs := map[string]bool{}
	sampled := map[string]bool{}
	for _, ev := range samples {
		typ := reflect.TypeOf(ev)
		pkgs[typ.PkgPath()] = true
		kind := ev.Kind()
		if sampled[kind] {
			t.Errorf("two samples of %s", kind)
		}
		sampled[kind] = true
		switch reg := eventlog.Registered(kind); {
		case reg == nil:
			t.Errorf("%s (%s) is not registered: call eventlog.Register(%s{}) from an init function", kind, typ, typ.Name())
		case reflect.TypeOf(reg) != typ:
			t.Errorf("%s is registered by %T, not by %s", kind, reg, typ)
		}
		fields, err := fieldsOf(ev)
		if err != nil {
			t.Errorf("%s: %v", kind, err)
			continue
		}
		if a, ok := ev.(eventlog.Appender); ok {
			own := a.AppendJSON(nil)
			dec := json.NewDecoder(bytes.NewReader(own))
			dec.UseNumber()
			var got map[string]any
			if err := dec.Decode(&got); err != nil || bytes.ContainsAny(own, "\r\n") {
				t.Errorf("%s: AppendJSON wrote %s: not one JSON object on one line (%v)", kind, own, err)
			} else if !reflect.DeepEqual(got, fields) {
				t.Errorf("%s: AppendJSON wrote %s, json.Marshal the fields %v", kind, own, fields)
			}
		}
		for _, k := range []string{"ts", "seq", "kind"} {
			if _, ok := fields[k]; ok {
				t.Errorf("%s has a field named %q, which the log line uses itself", kind, k)
			}
		}
	}
	for _, kind := range eventlog.Kinds() {
		if typ := reflect.TypeOf(eventlog.Registered(kind)); pkgs[typ.PkgPath()] && !sampled[kind] {
			t.Errorf("%s (%s) has no sample: add one to the samples this test passes", kind, typ)
		}
	}
	if t.Failed() {
		return
	}
	checkLogged(t, samples)
}

// checkLogged emits samples on a bus with a file and reads the file back.
func checkLogged(t testing.TB, samples []eventlog.Event) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	bus, err := eventlog.Open(eventlog.Options{Path: path})
	if err != nil {
		t.Fatalf("opening an event log: %v", err)
	}
	var logged []eventlog.Event
	for _, ev := range samples {
		r := bus.Emit(ev)
		var wire struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(r.Wire(), &wire); err != nil || wire.Event != ev.Kind() || len(wire.Data) == 0 {
			t.Errorf("%s: control socket line %q (%v)", ev.Kind(), r.Wire(), err)
		}
		if _, eph := ev.(eventlog.Ephemeral); eph {
			if r.Line != nil || r.Seq != 0 {
				t.Errorf("%s is ephemeral but was logged: %s", ev.Kind(), r.Line)
			}
			continue
		}
		logged = append(logged, ev)
	}
	if err := bus.Close(); err != nil {
		t.Fatalf("closing the event log: %v", err)
	}
	var lines []eventlog.Line
	st, err := eventlog.ReadWithStats(context.Background(), path, eventlog.Query{}, func(l eventlog.Line) error {
		lines = append(lines, l)
		return nil
	})
	if err != nil || st.Malformed != 0 {
		t.Fatalf("reading the log back: %v, %d malformed lines", err, st.Malformed)
	}
	if len(lines) != len(logged) {
		t.Fatalf("%d lines logged for %d samples that are not ephemeral", len(lines), len(logged))
	}
	for i, ev := range logged {
		want, _ := fieldsOf(ev)
		if lines[i].Kind != ev.Kind() || !reflect.DeepEqual(lines[i].Fields, want) {
			t.Errorf("logged as %s %v\nwant %s %v", lines[i].Kind, lines[i].Fields, ev.Kind(), want)
		}
	}
}

// fieldsOf is ev's own JSON object, decoded as the log reader decodes.
func fieldsOf(ev eventlog.Event) (map[string]any, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, fmt.Errorf("encodes to %s, not a JSON object", b)
	}
	return m, nil
}
