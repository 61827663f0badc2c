package approvals

import (
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Config is the [approvals] table. daemon/config.go decodes it key by key
// into this; approvals owns its defaults and its validation.
type Config struct {
	// Timeout bounds how long an approval stays pending (then Timeout).
	Timeout api.Duration `toml:"timeout"`
	// NotifyCommand (an argv) runs for each new pending approval with the
	// approval as JSON on its stdin; empty: none.
	NotifyCommand []string `toml:"notify_command"`
	// NotifyTimeout bounds each run of NotifyCommand (then it is killed).
	NotifyTimeout api.Duration   `toml:"notify_timeout"`
	Reachout      ReachoutConfig `toml:"reachout"`
	// Rules ([[approvals.rules]]) are checked in order before anyone is
	// asked.
	Rules []RuleConfig `toml:"rules"`
}

// ReachoutConfig is the [approvals.reachout] table: vibe-reachout's hook
// socket.
type ReachoutConfig struct {
	Enabled bool `toml:"enabled"`
	// Socket is the socket's path; "": the path the hook itself resolves.
	Socket string `toml:"socket"`
}

// RuleConfig is one [[approvals.rules]] entry.
type RuleConfig struct {
	Tool     string      `toml:"tool"`     // a glob (path.Match) on tool_name; required
	Input    *InputMatch `toml:"input"`    // optional: a field of tool_input and a regular expression
	Cwd      string      `toml:"cwd"`      // optional glob on cwd
	Decision string      `toml:"decision"` // "allow" | "deny"
	Message  string      `toml:"message"`  // optional: a deny's message to the agent
}

// InputMatch matches one field of tool_input: its string value against
// the regular expression Pattern.
type InputMatch struct {
	Field   string `toml:"field"`
	Pattern string `toml:"pattern"`
}

// DefaultConfig is the embedded [approvals] table.
func DefaultConfig() Config {
	return Config{
		Timeout:       api.Duration{Duration: 10 * time.Minute},
		NotifyTimeout: api.Duration{Duration: 10 * time.Second},
		Reachout:      ReachoutConfig{Enabled: true},
	}
}
