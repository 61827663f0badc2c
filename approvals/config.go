package approvals

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
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
	// Telegram ([approvals.telegram]), when present, sends every pending
	// approval to Telegram chats and takes their answers.
	Telegram *TelegramConfig `toml:"telegram"`
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

// TelegramConfig is the [approvals.telegram] table: the bot side of
// vibe-reachout, in the daemon.
type TelegramConfig struct {
	// Token names the bot's token in secrets.toml (never the token).
	Token string `toml:"token"`
	// AllowedChatIDs are the chats sent every approval and obeyed; any
	// other chat is refused.
	AllowedChatIDs []int64 `toml:"allowed_chat_ids"`
	// Timeout, as vibe-reachout's timeout_seconds: when set, how long an
	// approval waits for an answer unless [approvals] timeout is set.
	Timeout api.Duration `toml:"timeout"`
	// APIURL is the Bot API's base URL (a proxy, a test server).
	APIURL string `toml:"api_url"`
}

// DefaultTelegramAPI is the Bot API's base URL.
const DefaultTelegramAPI = "https://api.telegram.org"

// APIBase is c's Bot API base URL, the default when unset.
func (c TelegramConfig) APIBase() string {
	if c.APIURL == "" {
		return DefaultTelegramAPI
	}
	return strings.TrimRight(c.APIURL, "/")
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

// Validate checks c, the table named key ("approvals"): every problem is
// one error naming its full key (approvals.rules[2].input.pattern). Rules
// are numbered from 1, as their ids are (config-1 is approvals.rules[1]).
func Validate(key string, c Config) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Timeout.Duration <= 0 {
		bad("%s.timeout must be > 0, got %s", key, c.Timeout)
	}
	if c.NotifyTimeout.Duration <= 0 {
		bad("%s.notify_timeout must be > 0, got %s", key, c.NotifyTimeout)
	}
	for i, a := range c.NotifyCommand {
		if a == "" && i == 0 {
			bad("%s.notify_command[0] (the program) must not be empty", key)
		}
	}
	if t := c.Telegram; t != nil {
		errs = append(errs, validateTelegram(key+".telegram", *t)...)
	}
	for i, r := range c.Rules {
		errs = append(errs, validateRule(fmt.Sprintf("%s.rules[%d]", key, i+1), r)...)
	}
	return errs
}

func validateRule(key string, r RuleConfig) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Tool == "" {
		bad("%s.tool is required (a glob on the tool's name: \"Bash\", \"mcp__*\", \"*\")", key)
	} else if _, err := path.Match(r.Tool, ""); err != nil {
		bad("%s.tool: bad glob %q: %v", key, r.Tool, err)
	}
	if r.Cwd != "" {
		if err := checkGlob(r.Cwd); err != nil {
			bad("%s.cwd: bad glob %q: %v", key, r.Cwd, err)
		}
	}
	if r.Input != nil {
		if r.Input.Field == "" {
			bad("%s.input.field is required (the tool_input field to match, e.g. \"command\")", key)
		}
		if r.Input.Pattern == "" {
			bad("%s.input.pattern is required (a regular expression)", key)
		} else if _, err := regexp.Compile(r.Input.Pattern); err != nil {
			bad("%s.input.pattern: bad regular expression %q: %v", key, r.Input.Pattern, err)
		}
	}
	switch r.Decision {
	case "allow", "deny":
	case "":
		bad("%s.decision is required: \"allow\" or \"deny\"", key)
	default:
		bad("%s.decision must be \"allow\" or \"deny\", got %q", key, r.Decision)
	}
	if r.Message != "" && r.Decision == "allow" {
		bad("%s.message is a deny's message to the agent: an allow rule has none", key)
	}
	return errs
}

func validateTelegram(key string, t TelegramConfig) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case t.Token == "":
		bad("%s.token is required: the name of the bot's token in secrets.toml (never the token itself)", key)
	case strings.Contains(t.Token, ":"):
		bad("%s.token looks like a token, not its name: put the token in secrets.toml "+
			"(orchestrd approvals telegram import) and name it here", key)
	}
	if len(t.AllowedChatIDs) == 0 {
		bad("%s.allowed_chat_ids is required: the chats the bot sends to and obeys", key)
	}
	if t.Timeout.Duration < 0 {
		bad("%s.timeout must be > 0, got %s", key, t.Timeout)
	}
	if t.APIURL != "" {
		u, err := url.Parse(t.APIURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.User != nil {
			bad("%s.api_url must be an http(s) URL without credentials or query, like %s", key, DefaultTelegramAPI)
		}
	}
	return errs
}
