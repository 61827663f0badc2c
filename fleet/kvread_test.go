package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The fleet reads a key through its bucket stream's leader (STREAM.MSG.GET,
// never a direct get): the record and revision KeyValue.Get gives,
// not-found for a key never written, deleted or purged, and a key with a
// wildcard (which would read another key's record) refused unsent.
func TestReadKeyFromTheLeader(t *testing.T) {
	t.Parallel()
	sent := &sentBytes{}
	n := startSolo(t, func(o *Options) { o.dial = sent })
	f := n.f
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	// What the node sends to its server: its reads' requests counted.
	count := func() (direct, leader int) {
		t.Helper()
		if err := f.nc.FlushWithContext(ctx); err != nil {
			t.Fatal(err)
		}
		return sent.count("PUB $JS.API.DIRECT.GET.KV_" + jobsBucket), sent.count("PUB $JS.API.STREAM.MSG.GET.KV_" + jobsBucket)
	}
	check := func(key, want string, wantErr error) {
		t.Helper()
		direct, leader := count()
		got, err := f.readKey(ctx, jobsBucket, key)
		if d, l := count(); d != direct || l != leader+1 {
			t.Fatalf("readKey(%q) sent %d direct gets and %d reads through the leader; want 0 and 1", key, d-direct, l-leader)
		}
		if !errors.Is(err, wantErr) {
			t.Fatalf("readKey(%q): %v, want %v", key, err, wantErr)
		}
		if err != nil {
			return
		}
		e, err := f.jobs.Get(ctx, key)
		if err != nil || !bytes.Equal(got.value, []byte(want)) || got.rev != e.Revision() || !bytes.Equal(e.Value(), []byte(want)) {
			t.Fatalf("readKey(%q) = %q at %d; KeyValue.Get: %q at %d (%v); want %q", key, got.value, got.rev, e.Value(), e.Revision(), err, want)
		}
	}
	put := func(key, v string) {
		t.Helper()
		if _, err := f.jobs.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	check("kv-a", "", jetstream.ErrKeyNotFound)
	put("kv-a", "one")
	put("kv-b", "other")
	check("kv-a", "one", nil)
	put("kv-a", "two")
	check("kv-a", "two", nil)
	if err := f.jobs.Delete(ctx, "kv-a"); err != nil {
		t.Fatal(err)
	}
	check("kv-a", "", jetstream.ErrKeyNotFound)
	put("kv-a", "three")
	check("kv-a", "three", nil)
	if err := f.jobs.Purge(ctx, "kv-b"); err != nil {
		t.Fatal(err)
	}
	check("kv-b", "", jetstream.ErrKeyNotFound)

	_, leader := count()
	for _, key := range []string{"kv-*", "kv-a.>", ">", "*", "", ".kv", "kv.", "kv..a", "kv a", "kv\x00"} {
		if _, err := f.readKey(ctx, jobsBucket, key); !errors.Is(err, jetstream.ErrInvalidKey) {
			t.Fatalf("readKey(%q): %v, want ErrInvalidKey", key, err)
		}
	}
	if _, l := count(); l != leader {
		t.Fatal("an invalid key was sent")
	}

	// A KeyValue handle decides once, from the stream's info when it is
	// bound, whether its reads are direct gets. One bound while the
	// bucket's direct gets were on (before the node that made it turned
	// them off, or from an old info) asks a subject that nobody answers
	// any more: its Get fails, for ever. readKey does not depend on it.
	setDirect := func(on bool) {
		t.Helper()
		st, err := f.js.Stream(ctx, "KV_"+jobsBucket)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.AllowDirect = on
		if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	setDirect(true)
	stale, err := f.js.KeyValue(ctx, jobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	setDirect(false)
	gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
	defer gcancel()
	if e, err := stale.Get(gctx, "kv-a"); err == nil {
		t.Fatalf("a handle bound with direct gets on read %q after they were turned off", e.Value())
	}
	check("kv-a", "three", nil)
}

// sentBytes dials a node's server and keeps what the node sends.
type sentBytes struct {
	mu  sync.Mutex
	out bytes.Buffer
}

func (s *sentBytes) Dial(network, addr string) (net.Conn, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	return &sentConn{Conn: c, s: s}, nil
}

// count is how many times what the node sent holds p.
func (s *sentBytes) count(p string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Count(s.out.Bytes(), []byte(p))
}

type sentConn struct {
	net.Conn
	s *sentBytes
}

func (c *sentConn) Write(b []byte) (int, error) {
	c.s.mu.Lock()
	c.s.out.Write(b)
	c.s.mu.Unlock()
	return c.Conn.Write(b)
}

// Whatever JetStream answers a STREAM.MSG.GET with, decodeMsgGet returns
// a record or an error, and never a record for an answer that has an
// error or no message.
func FuzzDecodeMsgGet(f *testing.F) {
	f.Add([]byte(`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"$KV.b.k","seq":7,"data":"aGk=","time":"2026-11-30T00:00:00Z"}}`))
	f.Add([]byte(`{"message":{"seq":3,"hdrs":"TkFUUy8xLjANCktWLU9wZXJhdGlvbjogREVMDQoNCg=="}}`))
	f.Add([]byte(`{"error":{"code":404,"err_code":10037,"description":"no message found"}}`))
	f.Add([]byte(`{"error":{"code":503,"err_code":10008}}`))
	f.Add([]byte(`{"message":{"seq":1,"hdrs":"garbage"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeMsgGet(b)
		if err != nil {
			if r.value != nil || r.rev != 0 {
				t.Fatalf("an error (%v) with a record %+v", err, r)
			}
			return
		}
		var v struct {
			Error   *json.RawMessage `json:"error"`
			Message *struct {
				Seq  uint64 `json:"seq"`
				Data []byte `json:"data"`
			} `json:"message"`
		}
		if json.Unmarshal(b, &v) != nil || v.Error != nil && string(*v.Error) != "null" || v.Message == nil ||
			v.Message.Seq != r.rev || !bytes.Equal(v.Message.Data, r.value) {
			t.Fatalf("%q decoded as the record %q at %d", b, r.value, r.rev)
		}
	})
}

// The answers decodeMsgGet meets: a record, a delete and a purge marker,
// a missing key, another error, a record the server removed.
func TestDecodeMsgGet(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		value        string
		rev          uint64
		err          error
	}{
		{"record", `{"message":{"subject":"$KV.b.k","seq":7,"data":"aGk="}}`, "hi", 7, nil},
		{"empty value", `{"message":{"subject":"$KV.b.k","seq":8}}`, "", 8, nil},
		{"put header", `{"message":{"seq":9,"hdrs":"TkFUUy8xLjANCktWLU9wZXJhdGlvbjogUFVUDQoNCg==","data":"eA=="}}`, "x", 9, nil},
		{"delete", `{"message":{"seq":3,"hdrs":"TkFUUy8xLjANCktWLU9wZXJhdGlvbjogREVMDQoNCg=="}}`, "", 0, jetstream.ErrKeyNotFound},
		{"purge", `{"message":{"seq":4,"hdrs":"TkFUUy8xLjANCktWLU9wZXJhdGlvbjogUFVSR0UNCg0K"}}`, "", 0, jetstream.ErrKeyNotFound},
		{"removed by max age", `{"message":{"seq":5,"hdrs":"TkFUUy8xLjANCk5hdHMtTWFya2VyLVJlYXNvbjogTWF4QWdlDQoNCg=="}}`, "", 0, jetstream.ErrKeyNotFound},
		{"not found", `{"error":{"code":404,"err_code":10037,"description":"no message found"}}`, "", 0, jetstream.ErrKeyNotFound},
		{"no message", `{"type":"x"}`, "", 0, jetstream.ErrInvalidJetStreamResponse},
	} {
		r, err := decodeMsgGet([]byte(c.answer))
		if !errors.Is(err, c.err) || string(r.value) != c.value || r.rev != c.rev {
			t.Errorf("%s: %q at %d, %v; want %q at %d, %v", c.name, r.value, r.rev, err, c.value, c.rev, c.err)
		}
	}
	_, err := decodeMsgGet([]byte(`{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`))
	if !noStream(err) {
		t.Errorf("a 503 is %v: not retried as a read that reached no leader", err)
	}
}

// validKey agrees with nats.go's rule for a key, written here as the
// regular expression KeyValue.Get checks with (its keyValid): whatever
// it lets through names one key, never a wildcard or an empty token.
func FuzzValidKey(f *testing.F) {
	for _, k := range []string{"n1", "j-abc-1", "a.b", "a..b", ".a", "a.", "*", ">", "a.*", "a b", "", "é", "a/b=c_d"} {
		f.Add(k)
	}
	rule := regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)
	f.Fuzz(func(t *testing.T, k string) {
		want := rule.MatchString(k) && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..")
		if got := validKey(k); got != want {
			t.Fatalf("validKey(%q) = %v, nats.go's rule says %v", k, got, want)
		}
		if validKey(k) && strings.ContainsAny(k, "*> \t\r\n") {
			t.Fatalf("validKey(%q) lets a wildcard or a space through", k)
		}
	})
}
