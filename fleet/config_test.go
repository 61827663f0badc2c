package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orchestrd/orchestrd/api"
)

func TestConfigValidate(t *testing.T) {
	ok := []Config{
		{},
		{Enabled: false, Listen: "0.0.0.0:4222"}, // off: not checked
		{Enabled: true},
		{Enabled: true, Name: "gpu-box.lan", Listen: "127.0.0.1:0", ClusterListen: "[::1]:6222", Routes: []string{"nats-route://127.0.0.1:6223"}},
		{Enabled: true, Listen: "0.0.0.0:4222", TLSCert: "c.pem", TLSKey: "k.pem"},
		{Enabled: true, URL: "nats://127.0.0.1:4222,nats://localhost:4223"},
		{Enabled: true, URL: "tls://nats.example.com:4222"},
		{Enabled: true, URL: "nats://nats.example.com:4222", TLSCA: "ca.pem"},
		{Enabled: true, Heartbeat: api.Duration{Duration: 2 * time.Second}, Replicas: 3},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []struct {
		c   Config
		key string
	}{
		{Config{Enabled: true, Name: "a b"}, "name"},
		{Config{Enabled: true, Name: ".x"}, "name"},
		{Config{Enabled: true, Listen: "0.0.0.0:4222"}, "listen"},
		{Config{Enabled: true, Listen: "4222"}, "listen"},
		{Config{Enabled: true, ClusterListen: "10.0.0.1:6222"}, "cluster_listen"},
		{Config{Enabled: true, Routes: []string{"nats-route://10.0.0.2:6222"}}, "routes"},
		{Config{Enabled: true, Routes: []string{"http://127.0.0.1:6222"}}, "routes"},
		{Config{Enabled: true, Routes: []string{"nats-route://u:secret@127.0.0.1:6222"}}, "routes"},
		{Config{Enabled: true, URL: "nats://127.0.0.1:4222", Listen: "127.0.0.1:4222"}, "url"},
		{Config{Enabled: true, URL: "nats://127.0.0.1:4222", Routes: []string{"nats-route://127.0.0.1:6222"}}, "url"},
		{Config{Enabled: true, URL: "nats://127.0.0.1:4222", ClusterListen: "127.0.0.1:6222"}, "url"},
		{Config{Enabled: true, URL: "nats://user:secret@nats.example.com:4222"}, "url"},
		{Config{Enabled: true, URL: "http://127.0.0.1:4222"}, "url"},
		{Config{Enabled: true, Heartbeat: api.Duration{Duration: time.Millisecond}}, "heartbeat"},
		{Config{Enabled: true, Heartbeat: api.Duration{Duration: -time.Second}}, "heartbeat"},
		{Config{Enabled: true, Heartbeat: api.Duration{Duration: time.Hour}}, "heartbeat"},
		{Config{Enabled: true, Replicas: 9}, "replicas"},
		{Config{Enabled: true, TLSCert: "c.pem"}, "tls_cert"},
	}
	for _, b := range bad {
		err := b.c.Validate()
		if err == nil || !strings.Contains(err.Error(), "[cluster] "+b.key+":") {
			t.Errorf("%+v: %v, want an error naming %s", b.c, err, b.key)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows a password: %v", err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Enabled: true, ClusterListen: "127.0.0.1:6222",
		Routes: []string{"nats-route://127.0.0.1:6222", "nats-route://127.0.0.1:6223", "nats-route://127.0.0.1:6224", "nats-route://127.0.0.1:6225"}}.withDefaults("/h")
	if c.Name == "" || !validName(c.Name) || c.Credentials != "/h/cluster.creds" || c.Heartbeat.Duration != DefaultHeartbeat ||
		c.Listen != DefaultListen || c.Replicas != 3 {
		t.Fatalf("defaults: %+v", c)
	}
	if c := (Config{Enabled: true, Routes: []string{"nats-route://127.0.0.1:6223"}}).withDefaults("/h"); c.Replicas != 2 {
		t.Fatalf("two nodes: replicas %d", c.Replicas)
	}
	if c := (Config{Enabled: true, URL: "nats://127.0.0.1:4222"}).withDefaults("/h"); c.Replicas != 1 || c.Listen != "" {
		t.Fatalf("external: %+v", c)
	}
	if c := (Config{Enabled: true}).withDefaults("/h"); c.Replicas != 1 {
		t.Fatalf("alone: replicas %d", c.Replicas)
	}
	for in, want := range map[string]string{"box.example.com": "box.example.com", "a b/c": "a-b-c", "": "node", "..": "-"} {
		if got := sanitizeName(in); got != want {
			t.Errorf("sanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestInitCredentials(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	path, err := InitCredentials(home, false)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", path, fi.Mode(), err)
	}
	c, kind, err := readCredentials(path)
	if err != nil || kind != credUserPassword || c.User == "" || len(c.Password) < 32 {
		t.Fatalf("reading them back: %v %v", kind, err)
	}
	first, _ := os.ReadFile(path)
	if _, err := InitCredentials(home, false); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second init without force: %v", err)
	}
	if again, _ := os.ReadFile(path); string(again) != string(first) {
		t.Fatal("a refused init changed the file")
	}
	if _, err := InitCredentials(home, true); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(path); string(again) == string(first) {
		t.Fatal("a forced init kept the old password")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("forced: mode %v", fi.Mode())
	}
	// Readable by others: refused, without the password in the error.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readCredentials(path); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("mode 0644: %v", err)
	}
	os.Chmod(path, 0o600)
	if err := os.WriteFile(path, []byte(`{"user":"u","password":"hunter2-secret"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readCredentials(path); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("a bad file: %v", err)
	}
}

func TestVersionBefore(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"2.9.10", true}, {"2.10.0", false}, {"2.15.2", false}, {"v2.9.25", true}, {"1.4.0", true}, {"3.0.0", false},
		{"2.10.0-beta.1", false}, {"2.9", true}, {"", false}, {"x.y.z", false}, {"2", false}, {"-1.5.0", false},
	} {
		if got := versionBefore(c.v, 2, 10); got != c.want {
			t.Errorf("versionBefore(%q, 2, 10) = %v, want %v", c.v, got, c.want)
		}
	}
}

func FuzzVersionBefore(f *testing.F) {
	f.Add("2.9.10")
	f.Add("2.10.0-RC.1")
	f.Fuzz(func(t *testing.T, v string) {
		// A server's version string decides nothing but a warning: it
		// never panics, and an older one is never newer than a later one.
		if versionBefore(v, 2, 10) && !versionBefore(v, 2, 11) {
			t.Fatalf("%q is before 2.10 but not before 2.11", v)
		}
	})
}

// What is tried again: a request no stream leader took, or one a server
// refused at once for want of a quorum; never a lost CAS or a bad request.
func TestNoStream(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("reading: %w", jetstream.ErrNoStreamResponse), true},
		{fmt.Errorf("reading: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest}, false},
		{jetstream.ErrKeyNotFound, false},
		{context.DeadlineExceeded, false},
	} {
		if got := noStream(c.err); got != c.want {
			t.Errorf("noStream(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
