package control

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/wire"
)

// Invoke calls the method table in-process: answers, errors with their
// codes, params refused as on the socket, methods answered later, and a
// caller that gives up runs the call's OnClose.
func TestInvoke(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	res, err := h.srv.Invoke(ctx, api.Origin{By: api.ByUI}, "test.echo", textParams{Text: "hi"}, nil)
	if err != nil || string(res) != `{"text":"hi"}` {
		t.Fatalf("test.echo: %s, %v", res, err)
	}
	var ae *api.Error
	if _, err := h.srv.Invoke(ctx, api.Origin{By: api.ByUI}, "test.echo", map[string]any{"nope": 1}, nil); !errors.As(err, &ae) || ae.Code != wire.CodeInvalidParams {
		t.Fatalf("unknown params: %v", err)
	}
	if _, err := h.srv.Invoke(ctx, api.Origin{By: api.ByUI}, "test.async", nil, nil); !errors.As(err, &ae) || ae.Code != api.CodeInvalidState || ae.Message != "answered later" {
		t.Fatalf("an answer from another goroutine: %v", err)
	}
	for _, m := range []string{"ping", "events.subscribe", "no.such"} {
		if _, err := h.srv.Invoke(ctx, api.Origin{By: api.ByUI}, m, nil, nil); !errors.As(err, &ae) || ae.Code != wire.CodeMethodNotFound {
			t.Fatalf("%s: %v, want method not found (the protocol's own methods belong to a connection)", m, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := h.srv.Invoke(cctx, api.Origin{By: api.ByUI}, "test.later", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("test.later past the deadline: %v", err)
	}
	h.dom.mu.Lock()
	closed, pending := h.dom.closed, len(h.dom.pending)
	h.dom.mu.Unlock()
	if closed != 1 || pending != 0 {
		t.Fatalf("after the caller gave up: OnClose ran %d times, %d calls pending", closed, pending)
	}
}
