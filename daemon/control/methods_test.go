package control

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/api"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/wire"
)

// The method table: the protocol's own methods and those a domain
// registered are served; anything else is -32601, and params are checked
// the same way for both.
func TestMethodTable(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	var echo textParams
	h.mustCall(c, "test.echo", textParams{Text: "hi"}, &echo)
	if echo.Text != "hi" {
		t.Fatalf("test.echo = %+v", echo)
	}
	unknownField := wire.DecodeParams(wire.Request{Method: "test.echo", Params: []byte(`{"text":"x","nope":1}`)}, &textParams{})
	for _, tc := range []struct {
		name   string
		method string
		params any
		code   int
		msg    string
	}{
		{"domain method unknown field", "test.echo", map[string]any{"text": "x", "nope": 1}, wire.CodeInvalidParams, unknownField.Message},
		{"domain method error", "test.echo", nil, wire.CodeNotFound, "nothing to echo"},
		{"domain method params not an object", "test.echo", []int{1}, wire.CodeInvalidParams, `invalid params for test.echo: params must be an object, got "[1]"`},
		{"subscribe bad kinds", "events.subscribe", map[string]any{"kinds": "job.*"}, wire.CodeInvalidParams, "kinds"},
		{"subscribe empty kind", "events.subscribe", map[string]any{"kinds": []string{""}}, wire.CodeInvalidParams, "empty kind"},
		{"unsubscribe params", "events.unsubscribe", map[string]any{"x": 1}, wire.CodeInvalidParams, "x"},
		{"disconnect params", "disconnect", map[string]any{"x": 1}, wire.CodeInvalidParams, "x"},
		{"unknown method", "job.explode", nil, wire.CodeMethodNotFound, "method not found: job.explode"},
		{"no domain registered it", "job.submit", api.JobSpec{Argv: []string{"x"}}, wire.CodeMethodNotFound, "method not found: job.submit"},
		{"params not an object", "ping", []int{1}, wire.CodeInvalidParams, "object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := h.callErr(c, tc.method, tc.params)
			if e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("%s: error %d %q, want %d containing %q", tc.method, e.Code, e.Message, tc.code, tc.msg)
			}
		})
	}
	// The message of an unknown method is exactly the one it always was.
	r := h.raw()
	r.send(`{"id":9,"method":"no.such"}`)
	if s, err := r.line(); err != nil || s != `{"id":9,"error":{"code":-32601,"message":"method not found: no.such"}}` {
		t.Fatalf("unknown method answered %q (%v)", s, err)
	}
	h.mustCall(c, "ping", nil, nil)
}

// Registering is done before Serve, once per method.
func TestHandleMisuse(t *testing.T) {
	h := newHarness(t, nil)
	h.mustCall(h.client(), "ping", nil, nil) // serving now
	mustPanic := func(what, want string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if s, _ := r.(string); !strings.Contains(s, want) {
				t.Fatalf("%s: panic %v, want one containing %q", what, r, want)
			}
		}()
		f()
	}
	noop := func(api.Call) {}
	mustPanic("after Serve", `Handle("x.y") called after Serve`, func() { h.srv.Handle("x.y", noop) })

	sys := actors.NewSystem(actors.Options{Logger: zerolog.Nop()})
	defer sys.Shutdown()
	srv, err := New(Options{Path: filepath.Join(testio.ShortTemp(t, "ctl"), "d.sock"), System: sys})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	mustPanic("the protocol's own", `method "ping" registered twice`, func() { srv.Handle("ping", noop) })
	srv.Handle("x.y", noop)
	mustPanic("twice", `method "x.y" registered twice`, func() { srv.Handle("x.y", noop) })
	mustPanic("no name", "needs a method name", func() { srv.Handle("", noop) })
	mustPanic("no handler", "needs a method name and a handler", func() { srv.Handle("x.z", nil) })
}

func TestConnMetrics(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	h.mustCall(c, "ping", nil, nil)
	c2 := h.client()
	h.mustCall(c2, "ping", nil, nil)
	if m := h.srv.Metrics(); m.Connections != 2 || m.ConnectionsSeen != 2 {
		t.Fatalf("Metrics = %+v", m)
	}
	c2.Close()
	h.rec.Wait(t, "c2 closed", isClosed("c2"))
	if m := h.srv.Metrics(); m.Connections != 1 || m.ConnectionsSeen != 2 {
		t.Fatalf("Metrics after a close = %+v", m)
	}
	// The actor tree has the conns supervisor with one conn actor per
	// open connection.
	var conns *actors.TreeNode
	tree := h.sys.Tree()
	for i := range tree {
		if tree[i].Kind == "conns" {
			conns = &tree[i]
		}
	}
	if conns == nil || len(conns.Children) != 1 || conns.Children[0].Kind != "conn" || conns.Children[0].ID != "c1" {
		t.Fatalf("tree = %+v", tree)
	}
}

// A handler may answer later, from another goroutine; the connection
// serves other calls meanwhile, and a call its connection leaves before it
// is answered is closed (its OnClose runs), leaving nothing behind.
func TestCallAnsweredLater(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	done := make(chan error, 1)
	var got textParams
	go func() { done <- h.call(c, "test.later", nil, &got) }()
	waitUntil(t, "the call is pending", func() bool { return h.dom.pendingCount() == 1 })
	select {
	case err := <-done:
		t.Fatalf("test.later returned before it was answered: %v", err)
	default:
	}
	h.mustCall(c, "ping", nil, nil)
	go h.dom.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got.Text != "done" {
		t.Fatalf("answered later: %+v", got)
	}

	// Failed later: code, message and data as the handler gave them.
	err := h.call(c, "test.async", nil, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeInvalidState || we.Message != "answered later" {
		t.Fatalf("test.async: %v", err)
	}
	if data, _ := json.Marshal(we.Data); string(data) != `{"n":1}` {
		t.Fatalf("test.async data %s", data)
	}

	// A pending call is closed when its connection closes.
	c2 := h.client()
	left := make(chan error, 1)
	go func() { left <- h.call(c2, "test.later", nil, nil) }()
	waitUntil(t, "the call is pending", func() bool { return h.dom.pendingCount() == 1 })
	c2.Close()
	if err := <-left; !errors.Is(err, client.ErrClientClosed) {
		t.Fatalf("call on a closed client: %v", err)
	}
	h.rec.Wait(t, "c2 closed", isClosed("c2"))
	if n, closed := h.dom.pendingCount(), h.dom.closedCount(); n != 0 || closed != 1 {
		t.Fatalf("after the connection closed: %d calls pending, %d closed; want 0 and 1", n, closed)
	}
	// Nothing is left running for it, or for anything else.
	c.Close()
	h.stop()
	goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
