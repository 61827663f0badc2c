package ui

import (
	"strings"
	"testing"
)

// The overview's tree shows a connection's actor with its peer and bytes
// queued, and how many children a supervisor left off.
func TestTreeShowsConnections(t *testing.T) {
	h := newHarness(t, Config{})
	h.caller.mu.Lock()
	h.caller.answers["tree.get"] = `{"tree":[{"kind":"hooks","id":"","state":"running","panic_restarts":0,` +
		`"started_at":"2026-11-26T10:00:00Z","children_left_off":7,"children":[{"kind":"hook","id":"c3","state":"running",` +
		`"panic_restarts":0,"started_at":"2026-11-26T10:00:00Z","info":{"kind":"hook","id":"c3","pid":4242,` +
		`"since":"2026-11-26T10:00:00Z","age_ms":5,"queued_bytes":12},"children":[]}]}]}`
	h.caller.mu.Unlock()
	c := h.client()
	h.signIn(c)
	resp, body := h.do(c, "GET", "/ui/", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("overview: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{"hook/c3", "pid 4242", "12 B queued", "7 more not listed"} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %q", want)
		}
	}
}
