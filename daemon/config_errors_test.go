package daemon

import (
	"sort"
	"strings"
	"testing"
)

// A negative number for an unsigned key is refused naming the key (the
// TOML decoder would wrap it around to a huge limit).
func TestConfigRefusesNegativeUnsigned(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"[lanes.x]\nmax_runner_memory_bytes = -1\n", "cfg.toml: lanes.x.max_runner_memory_bytes must be >= 0, got -1"},
		{"[lanes.x]\ntimeout_ms = -5\n", "cfg.toml: lanes.x.timeout_ms must be >= 0, got -5"},
		{"[lanes.x]\nmax_memory_bytes = -1\n", "cfg.toml: lanes.x.max_memory_bytes must be >= 0, got -1"},
		{"[lanes.x]\nmax_cpu_seconds = -0.5\n", "cfg.toml: lanes.x.max_cpu_seconds must be a number >= 0, got -0.5"},
		{"[lanes.no-net]\nmax_output_bytes = -1\n", "cfg.toml: lanes.no-net.max_output_bytes must be >= 0, got -1"},
		{"[daemon]\nmax_frame_bytes = -1\n", "cfg.toml: daemon.max_frame_bytes must be >= 0, got -1"},
	} {
		_, err := ParseConfig("cfg.toml", []byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	c, err := ParseConfig("cfg.toml", []byte("[lanes.x]\nmax_runner_memory_bytes = 0\ntimeout_ms = 1500\n"))
	if err != nil || c.Lanes["x"].TimeoutMs != 1500 {
		t.Fatalf("good values: %v %+v", err, c.Lanes["x"])
	}
}

// Every problem of a config is reported, one line each, each with the
// file name and its full key; none is lost behind the first.
func TestConfigReportsEveryError(t *testing.T) {
	in := `
[daemon]
subscriber_queue = 1
[lanes.x]
slots = 0
max_runner_memory_bytes = -1
network = "wifi"
bogus = 1
[lanes.x.restart]
stable = "0s"
base_delay = "0s"
[lanes.y]
slots = "four"
heartbeat_timeout = "soon"
`
	_, err := ParseConfig("cfg.toml", []byte(in))
	if err == nil {
		t.Fatal("config accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		"daemon.subscriber_queue",
		"lanes.x.bogus",
		"lanes.x.max_runner_memory_bytes",
		"lanes.x.network",
		"lanes.x.restart.base_delay",
		"lanes.x.restart.stable",
		"lanes.x.slots",
		"lanes.y.heartbeat_timeout",
		"lanes.y.slots",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), err)
	}
	var keys []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "cfg.toml: ") {
			t.Errorf("line %q lacks the file name", l)
		}
		l = strings.TrimPrefix(strings.TrimPrefix(l, "cfg.toml: "), "unknown key ")
		k, _, _ := strings.Cut(l, " ")
		keys = append(keys, strings.TrimSuffix(k, ":"))
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Fatalf("keys %v, want %v\n%s", keys, want, err)
	}
}

// The keys issue 21 added are read and checked, naming the key: a lane's
// and a pool's env and inherit_env, a pool's secrets and transport.
func TestConfigEnvSecretsTransport(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"[lanes.x]\nenv = { \"A=B\" = \"c\" }\n", `cfg.toml: lanes.x.env: variable "A=B" contains '=' or NUL`},
		{"[lanes.x]\ninherit_env = [\"A*B\"]\n", `cfg.toml: lanes.x.inherit_env: "A*B": '*' may only end a name`},
		{"[lanes.x]\ninherit_env = [\"*\"]\n", `cfg.toml: lanes.x.inherit_env: "*": a variable's name or a prefix ending in '*' is needed`},
		{"[executors.p]\ncommand = [\"x\"]\ninherit_env = [\"\"]\n", `cfg.toml: executors.p.inherit_env: "": a variable's name or a prefix ending in '*' is needed`},
		{"[executors.p]\ncommand = [\"x\"]\nsecrets = [\"\"]\n", `cfg.toml: executors.p.secrets: an empty name`},
		{"[executors.p]\ncommand = [\"x\"]\ntransport = \"tcp\"\n", `cfg.toml: executors.p.transport must be "socket" or "fd", got "tcp"`},
	} {
		_, err := ParseConfig("cfg.toml", []byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	c, err := ParseConfig("cfg.toml", []byte("[lanes.x]\nenv = { A = \"1\" }\ninherit_env = [\"MY_*\", \"SSH_AUTH_SOCK\"]\n"+
		"[executors.p]\ncommand = [\"x\"]\nsecrets = [\"anthropic\"]\ntransport = \"fd\"\ninherit_env = [\"TMPDIR\"]\n"))
	if err != nil || c.Lanes["x"].Env["A"] != "1" || len(c.Lanes["x"].InheritEnv) != 2 ||
		c.Executors["p"].Transport != "fd" || c.Executors["p"].Secrets[0] != "anthropic" {
		t.Fatalf("good values: %v %+v %+v", err, c.Lanes["x"], c.Executors["p"])
	}
	if d, err := ParseConfig("cfg.toml", []byte("[executors.p]\ncommand = [\"x\"]\n")); err != nil ||
		d.Executors["p"].Transport != "socket" || len(d.Executors["p"].Secrets) != 0 {
		t.Fatalf("defaults: %v %+v", err, d.Executors["p"])
	}
}

// [http] exec_lane: the default one need not be a lane (/execute is then
// off at start, not the daemon); one the file sets must be, found with
// every other error of the file.
func TestConfigExecLane(t *testing.T) {
	if _, err := ParseConfig("cfg.toml", []byte("[lanes.gpu]\n[http]\nlisten = \"127.0.0.1:0\"\n")); err != nil {
		t.Fatalf("the default exec_lane and no net lane: %v", err)
	}
	if _, err := ParseConfig("cfg.toml", []byte("[lanes.gpu]\n[http]\nexec_lane = \"gpu\"\n")); err != nil {
		t.Fatalf("exec_lane = gpu: %v", err)
	}
	_, err := ParseConfig("cfg.toml", []byte("[lanes.gpu]\nslots = 0\n[http]\nexec_lane = \"net\"\n"))
	want := "cfg.toml: http.exec_lane \"net\" is not a lane (the lanes: gpu)"
	if err == nil || !strings.Contains(err.Error(), want+"\n") && !strings.HasSuffix(err.Error(), want) || !strings.Contains(err.Error(), "lanes.gpu.slots") {
		t.Fatalf("exec_lane set to no lane: %v, want %q among the errors", err, want)
	}
}
