package daemon

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/lanes"
)

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string][3]any{"no-net": {2, 4, lanes.NetworkNone}, "net": {1, 4, lanes.NetworkHost}, "heavy": {1, 1, lanes.NetworkHost}}
	for n, w := range want {
		l, ok := c.Lanes[n]
		if !ok || l.Runners != w[0] || l.Slots != w[1] || l.Network != w[2] {
			t.Errorf("lane %s = %+v, want runners/slots/network %v", n, l, w)
		}
	}
	if c.Lanes["heavy"].Nice <= 0 {
		t.Error("heavy lane should run at lower CPU priority")
	}
}

func TestExampleConfigParses(t *testing.T) {
	c, err := LoadConfig("../examples/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Lanes) != 4 || c.Lanes["byo"].Runners != 0 {
		t.Fatalf("lanes = %+v", c.Lanes)
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
		check         func(t *testing.T, c Config)
	}{
		{name: "empty keeps defaults", in: "", check: func(t *testing.T, c Config) {
			if len(c.Lanes) != 3 {
				t.Fatalf("lanes = %v", c.Lanes)
			}
		}},
		{name: "a default lane starts from its defaults", in: "[lanes.heavy]\nslots = 3\n", check: func(t *testing.T, c Config) {
			if len(c.Lanes) != 1 || c.Lanes["heavy"].Slots != 3 || c.Lanes["heavy"].Nice != 10 {
				t.Fatalf("lanes = %+v", c.Lanes)
			}
		}},
		{name: "durations and restart", in: "[lanes.x]\nheartbeat_timeout = \"750ms\"\n[lanes.x.restart]\nmax_r = 2\nmax_t = \"5s\"\n", check: func(t *testing.T, c Config) {
			l := c.Lanes["x"]
			if l.HeartbeatTimeout.Duration != 750*time.Millisecond || l.Restart.MaxR != 2 || l.Restart.MaxT.Duration != 5*time.Second {
				t.Fatalf("lane = %+v", l)
			}
		}},
		{name: "zero runners allowed", in: "[lanes.byo]\nrunners = 0\n", check: func(t *testing.T, c Config) {
			if c.Lanes["byo"].Runners != 0 {
				t.Fatal("runners")
			}
		}},
		{name: "unknown lane key", in: "[lanes.net]\nslotz = 1\n", err: "unknown key lanes.net.slotz"},
		{name: "unknown top key", in: "foo = 1\n", err: "unknown key foo"},
		{name: "unknown daemon key", in: "[daemon]\nfoo = 1\n", err: "unknown key daemon.foo"},
		{name: "unknown restart key", in: "[lanes.net.restart]\nmaxr = 1\n", err: "unknown key lanes.net.restart.maxr"},
		{name: "bad network", in: "[lanes.net]\nnetwork = \"wifi\"\n", err: `lanes.net.network must be "none" or "host", got "wifi"`},
		{name: "bad slots", in: "[lanes.net]\nslots = 0\n", err: "lanes.net.slots must be between 1 and 4096, got 0"},
		{name: "bad duration", in: "[lanes.net]\nheartbeat_timeout = \"soon\"\n", err: "heartbeat_timeout"},
		{name: "wrong type", in: "[lanes.net]\nslots = \"four\"\n", err: "slots"},
		{name: "bad policy", in: "[lanes.net.restart]\nmax_r = 0\n", err: "lanes.net.restart.max_r must be >= 1"},
		{name: "bad overflow", in: "[daemon]\nsubscriber_overflow = \"block\"\n", err: "daemon.subscriber_overflow"},
		{name: "bad toml", in: "[lanes\n", err: "cfg.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("cfg.toml", []byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	_, err := LoadConfig("/nonexistent/orchestrd.toml")
	if err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("err = %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestConfigFinishedOutputBytes(t *testing.T) {
	c, err := ParseConfig("c.toml", nil)
	if err != nil || c.Daemon.FinishedOutputBytes != 4<<20 {
		t.Fatalf("default %d (%v), want 4 MiB", c.Daemon.FinishedOutputBytes, err)
	}
	if c, err := ParseConfig("c.toml", []byte("[daemon]\nfinished_output_bytes = 0\n")); err != nil || c.Daemon.FinishedOutputBytes != 0 {
		t.Fatalf("0: %d, %v", c.Daemon.FinishedOutputBytes, err)
	}
	_, err = ParseConfig("c.toml", []byte("[daemon]\nfinished_output_bytes = -1\n"))
	if err == nil || !strings.Contains(err.Error(), "daemon.finished_output_bytes must be >= 0") {
		t.Fatalf("-1: %v, want an error naming the key", err)
	}
	_, err = ParseConfig("c.toml", []byte("[daemon]\nfinished_output_bytes = \"lots\"\n"))
	if err == nil || !strings.Contains(err.Error(), "finished_output_bytes") {
		t.Fatalf("a string: %v, want an error naming the key", err)
	}
}

func TestConfigSpares(t *testing.T) {
	cfg, err := ParseConfig("c.toml", []byte("[lanes.x]\nnetwork = \"host\"\n[lanes.byo]\nrunners = 0\n"))
	if err != nil || cfg.Lanes["x"].Spares != 1 {
		t.Fatalf("default spares: %+v %v", cfg.Lanes["x"], err)
	}
	if cfg.Lanes["byo"].Runners != 0 || !cfg.Lanes["byo"].AcceptsExternal() {
		t.Fatal("lanes.byo: runners = 0 should parse and take external runners")
	}
	cfg, err = ParseConfig("c.toml", []byte("[lanes.x]\nspares = 2\n"))
	if err != nil || cfg.Lanes["x"].Spares != 2 {
		t.Fatalf("spares = 2: %+v %v", cfg.Lanes["x"], err)
	}
	for _, bad := range []string{"-1", "17"} {
		_, err := ParseConfig("c.toml", []byte("[lanes.x]\nspares = "+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), "lanes.x.spares") {
			t.Fatalf("spares = %s: %v", bad, err)
		}
	}
}

// Set tells the keys the file set from those left to their defaults: a
// front-end the file turns on is told from one on by default.
func TestConfigSet(t *testing.T) {
	cfg, err := ParseConfig("t", []byte("[http]\nlisten = \"127.0.0.1:1\"\napprovals = { reachout = { enabled = true } }\n"))
	if err == nil {
		t.Fatalf("approvals inside [http] parsed: %+v", cfg)
	}
	cfg, err = ParseConfig("t", []byte("approvals = { reachout = { enabled = true } }\n[http]\nlisten = \"127.0.0.1:1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"http.listen": true, "http.enabled": false, "http": true,
		"approvals.reachout.enabled": true, "approvals.reachout.socket": false, "lanes": false} {
		if cfg.Set(key) != want {
			t.Errorf("Set(%q) = %v, want %v", key, !want, want)
		}
	}
	if DefaultConfig().Set("http.listen") {
		t.Error("the embedded defaults set http.listen")
	}
}

// The example config leaves the front-ends on by default, not explicitly:
// whoever copies it keeps a daemon that starts without the port or the
// hook path when another process holds them.
func TestExampleConfigLeavesFrontEndsToDefaults(t *testing.T) {
	c, err := LoadConfig("../examples/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"http.listen", "http.enabled", "approvals.reachout.enabled", "approvals.reachout.socket", "metrics.listen"} {
		if c.Set(k) {
			t.Errorf("examples/config.toml sets %s", k)
		}
	}
	if !c.HTTP.Enabled || c.HTTP.Listen != "127.0.0.1:19532" || !c.Approvals.Reachout.Enabled || c.Metrics.Listen != "" {
		t.Errorf("front-ends: http %v %s, hook %v", c.HTTP.Enabled, c.HTTP.Listen, c.Approvals.Reachout.Enabled)
	}
}
