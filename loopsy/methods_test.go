package loopsy

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
)

// invoke calls method on m with params and waits for its answer.
func invoke(t *testing.T, m apitest.Mux, method string, params any) (json.RawMessage, error) {
	t.Helper()
	res, err := m.Start(t, method, params).Wait(t, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// loopsyCode is the Loopsy code of a method's refusal (0: none).
func loopsyCode(err error) int {
	var ae *api.Error
	if errors.As(err, &ae) {
		if d, ok := ae.Data.(ErrorData); ok {
			return d.LoopsyCode
		}
	}
	return 0
}

// The domain's operations are methods: the context and the peers are
// read and changed through them, a refusal carries Loopsy's code, and a
// body's unknown members are ignored as Loopsy's server ignores them.
func TestMethods(t *testing.T) {
	d, err := New(Options{Config: Config{MaxValueBytes: 16, MaxEntries: 10, ProtocolVersion: "1.0.0"}, NodeID: "self", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	m := apitest.Mux{}
	d.Register(m)
	res, err := invoke(t, m, "loopsy.context.put", map[string]any{"key": "k", "body": map[string]any{"value": "v", "stream": true}, "from": "n-1"})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	var e ContextEntry
	if err := json.Unmarshal(res, &e); err != nil || e.Key != "k" || e.Value != "v" || e.FromNodeID != "n-1" {
		t.Fatalf("put answered %s (%v)", res, err)
	}
	if res, err := invoke(t, m, "loopsy.context.get", map[string]any{"key": "k"}); err != nil || json.Unmarshal(res, &e) != nil || e.Value != "v" {
		t.Fatalf("get: %s %v", res, err)
	}
	for _, c := range []struct {
		method string
		params any
		code   int
	}{
		{"loopsy.context.get", map[string]any{"key": "nope"}, CodeContextNotFound},
		{"loopsy.context.put", map[string]any{"key": "k", "body": map[string]any{"value": "seventeen bytes!!"}}, CodeContextTooLarge},
		{"loopsy.context.put", map[string]any{"key": "k", "body": map[string]any{"ttl": 1}}, CodeInvalidRequest},
		{"loopsy.context.put", map[string]any{"key": "k", "body": map[string]any{"value": 5}}, CodeInvalidRequest},
		{"loopsy.peer.remove", map[string]any{"node_id": "nope"}, CodePeerNotFound},
		{"loopsy.peer.handshake", map[string]any{"peer": "10.0.0.9:4000", "body": map[string]any{"nodeId": "n-2", "hostname": "h",
			"platform": "linux", "version": "2.0.0", "port": 19532, "capabilities": []string{}}}, CodePeerVersionMismatch},
	} {
		if _, err := invoke(t, m, c.method, c.params); loopsyCode(err) != c.code {
			t.Errorf("%s %v: %v, want Loopsy code %d", c.method, c.params, err, c.code)
		}
	}
	if _, err := invoke(t, m, "loopsy.peer.handshake", map[string]any{"peer": "10.0.0.9:4000", "key_name": "laptop", "body": map[string]any{
		"nodeId": "n-2", "hostname": "h", "platform": "linux", "version": "1.0.53", "port": 19532, "capabilities": []string{"context"}}}); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	res, err = invoke(t, m, "loopsy.peer.list", nil)
	var pl struct{ Peers []PeerInfo }
	if err != nil || json.Unmarshal(res, &pl) != nil || len(pl.Peers) != 1 || pl.Peers[0].Address != "10.0.0.9" || pl.Peers[0].Source != "handshake" {
		t.Fatalf("peer.list: %s %v", res, err)
	}
	res, err = invoke(t, m, "loopsy.status", nil)
	if err != nil || string(res) != `{"peers":{"offline":0,"online":1,"total":1}}` {
		t.Fatalf("status: %s %v", res, err)
	}
	if _, err := invoke(t, m, "loopsy.peer.remove", map[string]any{"node_id": "n-2"}); err != nil {
		t.Fatalf("peer.remove: %v", err)
	}
}

// Stop ends what Start started (goleak checks that nothing is left), and
// the methods still answer after it.
func TestStartStop(t *testing.T) {
	d, err := New(Options{Config: Config{MaxValueBytes: 16, MaxEntries: 10, PruneInterval: 10 * time.Millisecond,
		HealthInterval: 10 * time.Millisecond, HealthFailures: 1}, NodeID: "self", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	d.Stop()
	d.Stop() // twice is once
	m := apitest.Mux{}
	d.Register(m)
	if _, err := invoke(t, m, "loopsy.context.list", nil); err != nil {
		t.Fatalf("list after Stop: %v", err)
	}
}
