package loopsy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/state"
)

// memStore is a Store that can be told to refuse.
type memStore struct {
	fail   error
	writes int
}

func (m *memStore) Enqueue(w state.Write, done func(error)) error {
	if m.fail != nil {
		return m.fail
	}
	m.writes++
	done(nil)
	return nil
}
func (m *memStore) Context(int64) ([]state.LoopsyRow, error) { return nil, nil }
func (m *memStore) Peers() ([]state.LoopsyRow, error)        { return nil, nil }

func TestContextStore(t *testing.T) {
	st := &memStore{}
	c, err := newCtxStore(st, Config{MaxValueBytes: 8, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_000_000)
	c.now = func() time.Time { return now }
	ttl := 1.5
	put := func(k, v string, ttl *float64) error {
		_, wait, err := c.put(k, v, "n", ttl)
		if err == nil {
			err = wait()
		}
		return err
	}
	if err := put("a", "1", &ttl); err != nil {
		t.Fatal(err)
	}
	if e, ok := c.get("a"); !ok || e.ExpiresAt != 1_001_500 {
		t.Fatalf("get a: %+v %v", e, ok)
	}
	if err := put("b", "2", nil); err != nil {
		t.Fatal(err)
	}
	var ec *refusal
	if err := put("c", "3", nil); !errors.As(err, &ec) || ec.code != CodeContextMaxEntries {
		t.Fatalf("a third entry: %v", err)
	}
	if err := put("b", "123456789", nil); !errors.As(err, &ec) || ec.code != CodeContextTooLarge {
		t.Fatalf("a 9-byte value: %v", err)
	}
	now = now.Add(1500 * time.Millisecond)
	if _, ok := c.get("a"); ok {
		t.Fatal("an expired entry is still read")
	}
	if got := c.list(""); len(got) != 1 || got[0].Key != "b" {
		t.Fatalf("list: %+v", got)
	}
	if err := put("c", "3", nil); err != nil { // the expired one no longer counts
		t.Fatalf("a new entry once one expired: %v", err)
	}
	if e, _ := c.get("b"); e.CreatedAt != 1_000_000 {
		t.Fatalf("b: %+v", e)
	}
	now = now.Add(time.Second)
	if err := put("b", "new", nil); err != nil {
		t.Fatal(err)
	}
	if e, _ := c.get("b"); e.CreatedAt != 1_000_000 || e.UpdatedAt != now.UnixMilli() || e.Value != "new" {
		t.Fatalf("an update keeps createdAt: %+v", e)
	}
	// A write the store refuses is not kept: the value before it is back.
	st.fail = errors.New("disk full")
	if err := put("b", "lost", nil); err == nil {
		t.Fatal("a refused write succeeded")
	}
	if e, _ := c.get("b"); e.Value != "new" {
		t.Fatalf("after a refused write b is %q", e.Value)
	}
	if err := put("d", "x", nil); err == nil {
		t.Fatal("a refused write succeeded")
	}
	if _, ok := c.get("d"); ok {
		t.Fatal("a refused new entry is kept")
	}
	for _, k := range []string{"", strings.Repeat("k", 257), "a\x00b", "\xff"} {
		if err := put(k, "v", nil); !errors.As(err, &ec) || ec.code != CodeInvalidRequest {
			t.Errorf("key %q: %v", k, err)
		}
	}
}

// FuzzBodies: the JSON bodies of the context and the peers decode and
// check without a panic; what passes holds what its handler needs.
func FuzzBodies(f *testing.F) {
	for _, s := range []string{`{"value":"v","ttl":60}`, `{"value":""}`, `{"ttl":-1}`, `{"value":"v","ttl":1e300}`,
		`{"nodeId":"n","hostname":"h","platform":"linux","version":"1.0.53","port":19532,"capabilities":[]}`,
		`{"address":"10.0.0.1","port":70000}`, `{"address":"a b"}`, `[]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var cs contextSetBody
		if json.Unmarshal(b, &cs) == nil && cs.check() == nil {
			if cs.Value == nil || (cs.TTL != nil && *cs.TTL <= 0) {
				t.Fatalf("context %q passed", b)
			}
		}
		var hs handshakeBody
		if json.Unmarshal(b, &hs) == nil && hs.check() == nil {
			if hs.NodeID == "" || hs.Port < 1 || hs.Port > 65535 || hs.Capabilities == nil {
				t.Fatalf("handshake %q passed", b)
			}
		}
		var ap addPeerBody
		if json.Unmarshal(b, &ap) == nil && ap.check() == nil {
			if ap.Address == "" || ap.Port < 1 || ap.Port > 65535 {
				t.Fatalf("peer %q passed", b)
			}
		}
	})
}

// The registry keeps at most maxPeers; a known peer is still updated.
func TestPeersBounded(t *testing.T) {
	p, err := newPeers(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxPeers {
		if _, _, done := p.add(PeerInfo{NodeID: fmt.Sprint(i)}); <-done != nil {
			t.Fatal("refused below the bound")
		}
	}
	_, added, done := p.add(PeerInfo{NodeID: "one-more"})
	var ec *refusal
	if err := <-done; added || !errors.As(err, &ec) || ec.code != CodeInvalidRequest {
		t.Fatalf("past the bound: added %v, %v", added, err)
	}
	if _, _, done := p.add(PeerInfo{NodeID: "7", Status: "online"}); <-done != nil {
		t.Fatal("a known peer refused at the bound")
	}
	if pi, _ := p.get("7"); pi.Status != "online" {
		t.Fatalf("peer 7: %+v", pi)
	}
}

// An mDNS answer cannot move a peer known a more trusted way; a more
// trusted way updates one mDNS found.
func TestPeersTrust(t *testing.T) {
	p, _ := newPeers(nil)
	add := func(pi PeerInfo) PeerInfo {
		got, _, done := p.add(pi)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return got
	}
	add(PeerInfo{NodeID: "n", Address: "10.0.0.1", Source: "handshake"})
	if got := add(PeerInfo{NodeID: "n", Address: "10.6.6.6", Source: "mdns"}); got.Address != "10.0.0.1" {
		t.Fatalf("mDNS moved a handshaken peer: %+v", got)
	}
	add(PeerInfo{NodeID: "m", Address: "10.0.0.2", Source: "mdns"})
	if got := add(PeerInfo{NodeID: "m", Address: "10.0.0.3", Port: 1, Source: "manual", ManuallyAdded: true}); got.Address != "10.0.0.3" || got.Source != "manual" {
		t.Fatalf("a hand-added update of an mDNS peer: %+v", got)
	}
	if got := add(PeerInfo{NodeID: "m", Address: "10.6.6.6", Source: "mdns"}); got.Address != "10.0.0.3" {
		t.Fatalf("mDNS moved a hand-added peer: %+v", got)
	}
}
