package daemon

import (
	"strings"
	"testing"
	"time"
)

// The [state] table: its defaults, good values, and each bad value refused
// naming its full key.
func TestStateConfig(t *testing.T) {
	c, err := ParseConfig("cfg.toml", []byte(""))
	if err != nil {
		t.Fatal(err)
	}
	if c.State.Durability != "process" || c.State.RetainJobs != 10000 || c.State.RetainFor.Duration != 168*time.Hour {
		t.Fatalf("defaults: %+v", c.State)
	}
	c, err = ParseConfig("cfg.toml", []byte("[state]\ndurability = \"power\"\nretain_jobs = 5\nretain_for = \"2h\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.State.Durability != "power" || c.State.RetainJobs != 5 || c.State.RetainFor.Duration != 2*time.Hour {
		t.Fatalf("good values: %+v", c.State)
	}
	for _, tc := range []struct{ in, want string }{
		{"[state]\ndurability = \"disk\"\n", `cfg.toml: state.durability must be "process" or "power", got "disk"`},
		{"[state]\nretain_jobs = -1\n", "cfg.toml: state.retain_jobs must be >= 0 (0 keeps any number), got -1"},
		{"[state]\nretain_for = \"-1h\"\n", "cfg.toml: state.retain_for must be >= 0 (0 keeps jobs whatever their age), got -1h0m0s"},
		{"[state]\nretain_for = \"soon\"\n", "cfg.toml: state.retain_for: "},
		{"[state]\nretain_jobs = \"many\"\n", "cfg.toml: state.retain_jobs: "},
		{"[state]\nbogus = 1\n", "cfg.toml: unknown key state.bogus"},
		{"state = 3\n", "cfg.toml: state must be a table ([state])"},
	} {
		_, err := ParseConfig("cfg.toml", []byte(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: err = %v, want one line starting %q", tc.in, err, tc.want)
		}
	}
}
