package control

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// looprLine is one line as Loopr's client reads it: a response when it
// has a numeric id (and no event), else an event {event, data}.
type looprLine struct {
	resp  bool
	id    uint64
	res   json.RawMessage
	err   *wire.Error
	event string
	data  json.RawMessage
}

// parseLoopr parses s as Loopr's client does (serde, untagged: a request,
// a response, then an event), failing on a line that is neither or that
// could be taken for both.
func parseLoopr(t *testing.T, s string) looprLine {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("line %q is not a JSON object: %v", s, err)
	}
	idRaw, hasID := m["id"]
	_, hasEvent := m["event"]
	if hasID {
		if hasEvent {
			t.Fatalf("line %q has both an id and an event", s)
		}
		var l looprLine
		if err := json.Unmarshal(idRaw, &l.id); err != nil {
			t.Fatalf("line %q: id is not a u64: %v", s, err)
		}
		var r struct {
			Result json.RawMessage `json:"result"`
			Error  *wire.Error     `json:"error"`
		}
		_ = json.Unmarshal([]byte(s), &r)
		l.resp, l.res, l.err = true, r.Result, r.Error
		return l
	}
	if len(m) != 2 || !hasEvent || m["data"] == nil {
		t.Fatalf("line %q is neither a response nor exactly {event, data}", s)
	}
	var l looprLine
	if err := json.Unmarshal(m["event"], &l.event); err != nil {
		t.Fatalf("line %q: event is not a string", s)
	}
	l.data = m["data"]
	return l
}

func (r *raw) loopr(t *testing.T) looprLine {
	t.Helper()
	s, err := r.line()
	if err != nil {
		t.Fatalf("read: %v (partial %q)", err, s)
	}
	return parseLoopr(t, s)
}

// The events Loopr's kinds cover, and some they do not.
type (
	loopEv struct {
		ID string `json:"id"`
		N  int    `json:"n"`
	}
	planEv   struct{ N int }
	chatEv   struct{ N int }
	metricEv struct {
		RunningLoops int `json:"running_loops"`
	}
	otherEv struct{ N int }
)

func (loopEv) Kind() string   { return "loop.updated" }
func (planEv) Kind() string   { return "plan.approved" }
func (chatEv) Kind() string   { return "chat.chunk" }
func (metricEv) Kind() string { return "metrics.update" }
func (otherEv) Kind() string  { return "job.queued" }

func TestLooprInitialize(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Version = "9.8.7" })
	r := h.raw()
	r.send(`{"id":1,"method":"initialize","params":{"version":"0.1.1"}}`)
	l := r.loopr(t)
	if !l.resp || l.id != 1 || l.err != nil {
		t.Fatalf("initialize: %+v", l)
	}
	var res struct {
		Version      string          `json:"version"`
		Protocol     string          `json:"protocol"`
		Capabilities map[string]bool `json:"capabilities"`
		SessionID    string          `json:"session_id"`
		LooprVersion string          `json:"loopr_version"`
	}
	if err := json.Unmarshal(l.res, &res); err != nil {
		t.Fatal(err)
	}
	if res.Version != "9.8.7" || res.Protocol != "1.0" || !res.Capabilities["chat"] || !res.Capabilities["loops"] ||
		!res.Capabilities["events"] || res.SessionID == "" || res.LooprVersion != LooprVersion {
		t.Fatalf("initialize answered %s", l.res)
	}
	// Loopr clients of the same major pass, members the client adds are
	// ignored (as serde does).
	for i, v := range []string{"0.2.0", "v0.9.1-beta", "0"} {
		r.send(`{"id":` + itoa(10+i) + `,"method":"initialize","params":{"version":"` + v + `","client":"tui"}}`)
		if l := r.loopr(t); l.err != nil {
			t.Fatalf("initialize %s: %+v", v, l.err)
		}
	}
	// Another major: 1004 with both versions.
	for i, v := range []string{"1.0.0", "2", "x.y", "-1.0"} {
		id := uint64(20 + i)
		r.send(`{"id":` + itoa(int(id)) + `,"method":"initialize","params":{"version":"` + v + `"}}`)
		l := r.loopr(t)
		if l.id != id || l.err == nil || l.err.Code != api.CodeVersionMismatch {
			t.Fatalf("initialize %s: %+v, want error 1004", v, l)
		}
		var d VersionMismatchData
		b, _ := json.Marshal(l.err.Data)
		if err := json.Unmarshal(b, &d); err != nil || d.ClientVersion != v || d.DaemonVersion != "9.8.7" || d.LooprVersion != LooprVersion {
			t.Fatalf("initialize %s: data %s (%v)", v, b, err)
		}
		if !strings.Contains(l.err.Message, v) {
			t.Fatalf("initialize %s: message %q does not name the client's version", v, l.err.Message)
		}
	}
	// A very long version is not echoed whole.
	long := strings.Repeat("9", 500)
	r.send(`{"id":30,"method":"initialize","params":{"version":"` + long + `"}}`)
	if l := r.loopr(t); l.err == nil || l.err.Code != api.CodeVersionMismatch || len(l.err.Message) > 300 {
		t.Fatalf("long version: %+v", l.err)
	}
	// No version, or not a string: -32602.
	for i, p := range []string{`{}`, `null`, `{"version":""}`, `{"version":1}`} {
		r.send(`{"id":` + itoa(40+i) + `,"method":"initialize","params":` + p + `}`)
		if l := r.loopr(t); l.err == nil || l.err.Code != wire.CodeInvalidParams || !strings.Contains(l.err.Message, "version") {
			t.Fatalf("initialize %s: %+v", p, l.err)
		}
	}
}

func TestSameMajor(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"0.1.1", "0.1.1", true}, {"0.2", "0.1.1", true}, {"v0.1.0+git", "0.1.1", true}, {"1.0.0", "0.1.1", false},
		{"", "0.1.1", false}, {"abc", "abc", false}, {"01.0", "1.2", true}, {"99999999999999999999.0", "0", false},
	} {
		if got := SameMajor(tc.a, tc.b); got != tc.want {
			t.Errorf("SameMajor(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// subscribe gives Loopr's kinds, in order, after {subscribed: true}; the
// others not. Every line reads as Loopr's client reads it.
func TestLooprSubscribe(t *testing.T) {
	h := newHarness(t, nil)
	r := h.raw()
	r.send(`{"id":1,"method":"initialize","params":{"version":"0.1.1"}}`)
	r.loopr(t)
	// Before subscribe, nothing.
	h.bus.Emit(loopEv{ID: "before", N: -1})
	r.send(`{"id":2,"method":"subscribe","params":{}}`)
	l := r.loopr(t)
	if !l.resp || l.id != 2 || string(l.res) != `{"subscribed":true}` {
		t.Fatalf("subscribe answered %+v (%s)", l, l.res)
	}
	const n = 50
	for i := 0; i < n; i++ {
		h.bus.Emit(otherEv{N: i})
		h.bus.Emit(loopEv{ID: "l-1", N: i})
		h.bus.Emit(planEv{N: i})
		h.bus.Emit(chatEv{N: i})
		h.bus.Emit(metricEv{RunningLoops: i})
	}
	// A request meanwhile: its answer is a response among the events.
	r.send(`{"id":3,"method":"ping"}`)
	want := []string{"loop.updated", "plan.approved", "chat.chunk", "metrics.update"}
	got := 0
	pong := false
	for got < n*len(want) || !pong {
		l := r.loopr(t)
		if l.resp {
			if l.id != 3 || string(l.res) != `{"pong":true}` {
				t.Fatalf("response %+v among the events", l)
			}
			pong = true
			continue
		}
		if l.event != want[got%len(want)] {
			t.Fatalf("event %d is %s, want %s (data %s)", got, l.event, want[got%len(want)], l.data)
		}
		if l.event == "loop.updated" {
			// The event's fields are its data.
			var d loopEv
			if err := json.Unmarshal(l.data, &d); err != nil || d.ID != "l-1" || d.N != got/len(want) {
				t.Fatalf("loop.updated data %s, want id l-1 n %d", l.data, got/len(want))
			}
		}
		got++
	}
	// Params of subscribe are ignored; a second subscribe replaces the
	// first (no event twice).
	r.send(`{"id":4,"method":"subscribe"}`)
	if l := r.loopr(t); l.id != 4 || string(l.res) != `{"subscribed":true}` {
		t.Fatalf("second subscribe: %+v", l)
	}
	h.bus.Emit(loopEv{ID: "once"})
	h.bus.Emit(chatEv{N: -2})
	if l := r.loopr(t); l.event != "loop.updated" || !bytes.Contains(l.data, []byte(`"once"`)) {
		t.Fatalf("after resubscribing: %+v", l)
	}
	if l := r.loopr(t); l.event != "chat.chunk" {
		t.Fatalf("after resubscribing: %+v, want chat.chunk once", l)
	}
	// Bad params: not an object.
	r.send(`{"id":5,"method":"subscribe","params":[1]}`)
	if l := r.loopr(t); l.err == nil || l.err.Code != wire.CodeInvalidParams {
		t.Fatalf("subscribe [1]: %+v", l)
	}
}

// A Loopr subscriber is bounded like every subscriber: one that does not
// read loses the oldest events and is told with events.dropped, read as
// an event.
func TestLooprSubscriberBounded(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.SubscriberQueue = 16 })
	r := h.raw()
	r.send(`{"id":1,"method":"subscribe"}`)
	r.loopr(t)
	big := strings.Repeat("x", 16<<10)
	type bigEv struct {
		loopEv
		Pad string `json:"pad"`
	}
	const n = 400 // 6 MiB: past any socket buffer
	for i := 0; i < n; i++ {
		h.bus.Emit(bigEv{loopEv{ID: "l", N: i}, big})
	}
	h.bus.Emit(loopEv{ID: "last"})
	dropped, last := false, -1
	for {
		l := r.loopr(t)
		if l.resp {
			t.Fatalf("a response %+v", l)
		}
		if l.event == "events.dropped" {
			dropped = true
			continue
		}
		var d loopEv
		if err := json.Unmarshal(l.data, &d); err != nil {
			t.Fatal(err)
		}
		if d.ID == "last" {
			break
		}
		if d.N <= last {
			t.Fatalf("event n=%d after n=%d: out of order", d.N, last)
		}
		last = d.N
	}
	if !dropped {
		t.Fatal("no events.dropped: the subscriber was not bounded")
	}
}

// Bad JSON is answered with id 0 and -32700, as Loopr's client expects;
// the connection goes on.
func TestLooprBadJSON(t *testing.T) {
	h := newHarness(t, nil)
	r := h.raw()
	r.send(`{"id":7,"method":"initialize","params":{"version":"0.1.1"`)
	l := r.loopr(t)
	if !l.resp || l.id != 0 || l.err == nil || l.err.Code != wire.CodeParseError {
		t.Fatalf("bad JSON answered %+v", l)
	}
	r.send(`{"id":8,"method":"ping"}`)
	if l := r.loopr(t); l.id != 8 || l.err != nil {
		t.Fatalf("after bad JSON: %+v", l)
	}
}

// Whatever a client sends as its version, reading its major never panics,
// a version that has one matches itself, and "v" or a suffix change
// nothing.
func FuzzMajor(f *testing.F) {
	for _, s := range []string{"0.1.1", "v1.2.3-rc1", "", "x", "18446744073709551616.0", " 3 ", "1+meta", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		m, ok := major(v)
		if !ok {
			if SameMajor(v, v) {
				t.Fatalf("%q has no major but matches itself", v)
			}
			return
		}
		if !SameMajor(v, v) {
			t.Fatalf("%q (major %d) does not match itself", v, m)
		}
		if m2, ok2 := major("v" + strings.TrimSpace(v) + "-x"); !ok2 && !strings.HasPrefix(strings.TrimSpace(v), "v") || ok2 && m2 != m {
			t.Fatalf("%q: major %d, with v and a suffix %d %v", v, m, m2, ok2)
		}
	})
}
