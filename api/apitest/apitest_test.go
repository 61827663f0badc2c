package apitest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// The first answer is kept; later ones, of either kind, are ignored.
func TestFirstAnswerWins(t *testing.T) {
	c := NewCall("m", nil)
	if c.Answered() || c.Result() != nil || c.Err() != nil {
		t.Fatal("a new call is answered")
	}
	c.Respond(map[string]int{"n": 1})
	c.Fail(api.Errorf(api.CodeInvalidParams, "late"))
	c.Respond(map[string]int{"n": 2})
	res, err := c.Wait(t, time.Second)
	if err != nil || string(res) != `{"n":1}` || string(c.Result()) != `{"n":1}` || c.Err() != nil {
		t.Fatalf("got %s, %v; want the first result", res, err)
	}

	c = NewCall("m", nil)
	c.Fail(errors.New("plain"))
	c.Respond("late")
	if _, err := c.Wait(t, time.Second); err == nil || err.Code != api.CodeInternal || c.Result() != nil {
		t.Fatalf("got %v, result %s; want the first error as CodeInternal", err, c.Result())
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done is open after the answer")
	}
}

// OnClose's funcs run on Close only while the call is unanswered, and at
// once when registered after Close.
func TestOnClose(t *testing.T) {
	ran := 0
	c := NewCall("m", nil)
	c.OnClose(func() { ran++ })
	if ran != 0 {
		t.Fatal("OnClose ran before Close")
	}
	c.Close()
	if ran != 1 {
		t.Fatalf("OnClose ran %d times on Close of an unanswered call", ran)
	}
	c.OnClose(func() { ran++ })
	if ran != 2 {
		t.Fatal("OnClose registered after Close did not run at once")
	}

	ran = 0
	c = NewCall("m", nil)
	c.OnClose(func() { ran++ })
	c.Respond(nil)
	c.Close()
	if ran != 0 {
		t.Fatal("OnClose ran on Close of an answered call")
	}

	c = NewClosedCall("m", nil)
	c.OnClose(func() { ran++ })
	if ran != 1 {
		t.Fatal("OnClose of a call whose client is gone did not run at once")
	}
}

// Start encodes the params and hands the call to its handler, whose
// Decode refuses unknown fields with the control socket's message.
func TestMuxStart(t *testing.T) {
	mx := Mux{}
	mx.Handle("echo", func(c api.Call) {
		var p struct{ X int }
		if err := c.Decode(&p); err != nil {
			c.Fail(err)
			return
		}
		c.Respond(p.X)
	})
	res, err := mx.Start(t, "echo", map[string]int{"X": 7}).Wait(t, time.Second)
	var x int
	if err != nil || json.Unmarshal(res, &x) != nil || x != 7 {
		t.Fatalf("echo: %s, %v", res, err)
	}
	_, err = mx.Start(t, "echo", map[string]int{"Y": 7}).Wait(t, time.Second)
	if err == nil || err.Code != api.CodeInvalidParams || !strings.Contains(err.Message, "invalid params for echo") {
		t.Fatalf("unknown field: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a method twice did not panic")
		}
	}()
	mx.Handle("echo", func(api.Call) {})
}
