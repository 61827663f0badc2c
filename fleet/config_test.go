package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
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
		{Config{Enabled: true, StartTimeout: api.Duration{Duration: time.Millisecond}}, "start_timeout"},
		{Config{Enabled: true, StartTimeout: api.Duration{Duration: time.Hour}}, "start_timeout"},
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
	t.Parallel()
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

// cluster init makes the fleet's key and the first node's credentials,
// add-node another's; each is 0600, refused when readable by others, and
// never replaced without force. Credentials of an older cluster init (one
// user and password for all), another node's, or with a certificate of
// another fleet are refused, saying why and what fixes it, never what
// the file holds.
func TestInitFleet(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	keyPath, path, err := InitFleet(home, "a", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{keyPath, path} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", p, fi.Mode(), err)
		}
	}
	id, err := readIdentity(path, "")
	if err != nil || id.node != "a" {
		t.Fatalf("reading a's credentials back: %+v %v", id, err)
	}
	// The fleet's seed (an account seed, "SA...") is in no field of the
	// node's file (a base64 certificate may hold the letters "SA").
	var key, creds map[string]any
	if err := json.Unmarshal(mustRead(t, keyPath), &key); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mustRead(t, path), &creds); err != nil {
		t.Fatal(err)
	}
	seed, _ := key["seed"].(string)
	for k, v := range creds {
		if s, _ := v.(string); seed == "" || strings.Contains(s, seed) || strings.HasPrefix(s, "SA") {
			t.Fatalf("a node's credentials hold the fleet's key (in %q)", k)
		}
	}
	first := mustRead(t, path)
	if _, _, err := InitFleet(home, "a", nil, false); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second init without force: %v", err)
	}
	if string(mustRead(t, path)) != string(first) {
		t.Fatal("a refused init changed the file")
	}
	bPath := filepath.Join(t.TempDir(), "b.creds")
	pub, err := AddNode(home, "b", nil, bPath, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := readIdentity(bPath, "b")
	if err != nil || b.pub != pub || b.fleet != id.fleet || b.route != id.route || b.pub == id.pub {
		t.Fatalf("b's credentials: %v", err)
	}
	if _, err := AddNode(home, "b", nil, bPath, false); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("add-node over a file without force: %v", err)
	}
	if _, err := AddNode(home, "../b", nil, bPath, true); err == nil {
		t.Fatal("add-node took a bad name")
	}
	if _, err := readIdentity(bPath, "c"); err == nil || !strings.Contains(err.Error(), "add-node c") {
		t.Fatalf("b's credentials as node c: %v", err)
	}
	// Another fleet's certificate on b's key: refused.
	other := filepath.Join(t.TempDir(), "other")
	if _, _, err := InitFleet(other, "z", nil, false); err != nil {
		t.Fatal(err)
	}
	var nc, oc nodeCreds
	if err := json.Unmarshal(mustRead(t, bPath), &nc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(other, CredentialsFile)), &oc); err != nil {
		t.Fatal(err)
	}
	nc.Fleet = oc.Fleet
	forged, _ := json.Marshal(nc)
	fPath := filepath.Join(t.TempDir(), "forged.creds")
	if err := os.WriteFile(fPath, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readIdentity(fPath, ""); err == nil || !strings.Contains(err.Error(), "not the fleet's") {
		t.Fatalf("a certificate of another fleet: %v", err)
	}
	// Lanes: certified with the key; b's file edited to list more (or
	// none, which means every lane) is refused.
	cPath := filepath.Join(t.TempDir(), "c.creds")
	if _, err := AddNode(home, "c", []string{"gpu", "cpu", "gpu"}, cPath, false); err != nil {
		t.Fatal(err)
	}
	if c, err := readIdentity(cPath, "c"); err != nil || !slices.Equal(c.lanes, []string{"cpu", "gpu"}) || !mayServe(c.lanes, "cpu") || mayServe(c.lanes, "io") {
		t.Fatalf("c's lanes: %+v %v", c, err)
	}
	if _, err := AddNode(home, "d", []string{"a.b"}, filepath.Join(t.TempDir(), "d.creds"), false); err == nil {
		t.Fatal("add-node took a lane that is not a lane name")
	}
	for _, lanes := range [][]string{{"cpu", "gpu", "io"}, nil, {"cpu"}} {
		var cc nodeCreds
		if err := json.Unmarshal(mustRead(t, cPath), &cc); err != nil {
			t.Fatal(err)
		}
		cc.Lanes = lanes
		edited, _ := json.Marshal(cc)
		ePath := filepath.Join(t.TempDir(), "edited.creds")
		if err := os.WriteFile(ePath, edited, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readIdentity(ePath, ""); err == nil || !strings.Contains(err.Error(), "not the fleet's") {
			t.Fatalf("c's credentials edited to lanes %q: %v", lanes, err)
		}
	}
	for in, want := range map[string]string{"gpu": "gpu", "gpu, cpu,gpu": "cpu,gpu", "": "", "a,": "", "x y": ""} {
		got, err := ParseLanes(in)
		if strings.Join(got, ",") != want || (err == nil) != (want != "") {
			t.Errorf("ParseLanes(%q) = %q, %v", in, got, err)
		}
	}
	if _, _, err := InitFleet(home, "a", nil, true); err != nil {
		t.Fatal(err)
	}
	if string(mustRead(t, path)) == string(first) {
		t.Fatal("a forced init kept the old credentials")
	}
	// Readable by others: refused.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readIdentity(path, ""); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("mode 0644: %v", err)
	}
	// An older cluster init's file: refused, naming the commands that
	// make new ones, without the password.
	old := filepath.Join(t.TempDir(), "old.creds")
	if err := os.WriteFile(old, []byte(`{"user":"orchestrd","password":"hunter2-secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readIdentity(old, ""); err == nil || !strings.Contains(err.Error(), "cluster add-node") ||
		!strings.Contains(err.Error(), "older `orchestrd cluster init`") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("an older cluster init's credentials: %v", err)
	}
	if err := os.WriteFile(old, []byte(`{"user":"u","password":"hunter2-secret"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readIdentity(old, ""); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("a bad file: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVersionBefore(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// Check reads a node's credentials and refuses, as Start would, a shared
// lane they do not let it serve; a lane whose name is no NATS subject
// stays local; off, it reads nothing.
func TestCheck(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	if _, _, err := InitFleet(home, "a", []string{"cpu"}, false); err != nil {
		t.Fatal(err)
	}
	c := Config{Enabled: true}
	if id, err := Check(c, home, []string{"cpu", "no.subject"}); err != nil || id == nil || id.id.node != "a" {
		t.Fatalf("cpu: %+v %v", id, err)
	}
	if _, err := Check(c, home, []string{"cpu", "gpu"}); err == nil || !strings.Contains(err.Error(), "serving shared lane gpu in the fleet: node a's credentials") {
		t.Fatalf("gpu: %v", err)
	}
	if _, err := Check(Config{Enabled: true, Name: "b"}, home, nil); err == nil || !strings.Contains(err.Error(), `are node "a"'s, and this node is "b"`) {
		t.Fatalf("another node's credentials: %v", err)
	}
	if id, err := Check(Config{}, t.TempDir(), []string{"gpu"}); id != nil || err != nil {
		t.Fatalf("off: %+v %v", id, err)
	}
}

// A step of the start that keeps failing: a new error at debug level;
// once it has waited startWaitWarn, a warning with the step, the error and
// how long, then no more than one every startWaitWarn.
func TestStartWaiterWarns(t *testing.T) {
	var buf strings.Builder
	f := &Fleet{cfg: Config{StartTimeout: api.Duration{Duration: 4 * time.Minute}}, log: zerolog.New(&buf).Level(zerolog.DebugLevel)}
	w := f.startWait("taking lane gpu's jobs")
	w.failed(errors.New("insufficient resources"))
	w.failed(errors.New("insufficient resources"))
	w.since = time.Now().Add(-startWaitWarn - time.Second)
	w.failed(errors.New("context deadline exceeded"))
	w.failed(errors.New("context deadline exceeded"))
	var levels []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e struct {
			Level, Step, Error string
			Waited             float64
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if e.Step != "taking lane gpu's jobs" || e.Error == "" {
			t.Fatalf("log line %q: want the step and the error", line)
		}
		if e.Level == "warn" && (e.Error != "context deadline exceeded" || e.Waited < float64(startWaitWarn.Milliseconds())) {
			t.Fatalf("warning %q: want the last error and the time waited", line)
		}
		levels = append(levels, e.Level)
	}
	if got := strings.Join(levels, " "); got != "debug warn" {
		t.Fatalf("levels %q, want a debug line for the first error and one warning", got)
	}
}
