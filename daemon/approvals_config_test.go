package daemon

import (
	"strings"
	"testing"
	"time"
)

// The [approvals] table is decoded key by key: every unknown key is named
// with its full key (inside [approvals.reachout] and each
// [[approvals.rules]] entry too), and so is every bad value.
func TestApprovalsConfig(t *testing.T) {
	cfg, err := ParseConfig("c.toml", []byte(`
[approvals]
timeout = "90s"
notify_command = ["ntfy", "publish", "me"]
[approvals.reachout]
socket = "/tmp/r.sock"
[[approvals.rules]]
tool = "Bash"
input = { field = "command", pattern = "^git (status|diff|log)" }
decision = "allow"
[[approvals.rules]]
tool = "Bash"
cwd = "/srv/**"
decision = "deny"
message = "not on the servers"
`))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Approvals
	if a.Timeout.Duration != 90*time.Second || a.NotifyTimeout.Duration != 10*time.Second || len(a.NotifyCommand) != 3 ||
		!a.Reachout.Enabled || a.Reachout.Socket != "/tmp/r.sock" || len(a.Rules) != 2 ||
		a.Rules[0].Input == nil || a.Rules[0].Input.Pattern != "^git (status|diff|log)" || a.Rules[1].Message != "not on the servers" {
		t.Fatalf("decoded %+v", a)
	}
	if d := DefaultConfig().Approvals; d.Timeout.Duration != 10*time.Minute || !d.Reachout.Enabled {
		t.Fatalf("defaults %+v", d)
	}

	_, err = ParseConfig("c.toml", []byte(`
[approvals]
timeout = "0s"
bogus = 1
[approvals.reachout]
sockett = "x"
[[approvals.rules]]
tool = "Bash"
decision = "allow"
input = { field = "command", pattern = "^git (", extra = 2 }
[[approvals.rules]]
tool = "Read"
decision = "perhaps"
colour = "red"
`))
	if err == nil {
		t.Fatal("a bad [approvals] table was accepted")
	}
	for _, want := range []string{
		"c.toml: unknown key approvals.bogus",
		"c.toml: unknown key approvals.reachout.sockett",
		"c.toml: unknown key approvals.rules[1].input.extra",
		"c.toml: unknown key approvals.rules[2].colour",
		"c.toml: approvals.timeout must be > 0",
		`c.toml: approvals.rules[1].input.pattern: bad regular expression "^git ("`,
		`c.toml: approvals.rules[2].decision must be "allow" or "deny", got "perhaps"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := ParseConfig("c.toml", []byte("[approvals]\nrules = 3\n")); err == nil ||
		!strings.Contains(err.Error(), "approvals.rules must be an array of tables ([[approvals.rules]])") {
		t.Errorf("rules = 3: %v", err)
	}
}
