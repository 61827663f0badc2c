package reachout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/BurntSushi/toml"
)

// BotConfig is what vibe-reachout's bot reads from its config.toml: what
// `orchestrd approvals telegram import` takes over.
type BotConfig struct {
	Token          string  `toml:"telegram_bot_token"`
	AllowedChatIDs []int64 `toml:"allowed_chat_ids"`
	TimeoutSeconds *int64  `toml:"timeout_seconds"`
}

// ConfigFile is where vibe-reachout reads its config in this process's
// environment ("" when there is no home).
func ConfigFile() string { return hookConfigFile(Env{Getenv: os.Getenv}) }

// ReadBotConfig reads the bot's keys from vibe-reachout's config file.
// Its errors name the file, a line or a key, never a value (the file
// holds the bot's token).
func ReadBotConfig(file string) (BotConfig, error) {
	var c BotConfig
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return c, fmt.Errorf("reading vibe-reachout's config %s: %w", file, err)
	}
	md, err := toml.Decode(string(b), &c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return BotConfig{}, fmt.Errorf("vibe-reachout's config %s: not valid TOML (line %d)", file, pe.Position.Line)
		}
		return BotConfig{}, fmt.Errorf("vibe-reachout's config %s: telegram_bot_token must be a string, allowed_chat_ids "+
			"an array of integers, timeout_seconds an integer", file)
	}
	switch {
	case !md.IsDefined("telegram_bot_token") || c.Token == "":
		return BotConfig{}, fmt.Errorf("vibe-reachout's config %s has no telegram_bot_token", file)
	case len(c.AllowedChatIDs) == 0:
		return BotConfig{}, fmt.Errorf("vibe-reachout's config %s has no allowed_chat_ids", file)
	case c.TimeoutSeconds != nil && (*c.TimeoutSeconds < 1 || *c.TimeoutSeconds > 3600):
		return BotConfig{}, fmt.Errorf("vibe-reachout's config %s: timeout_seconds is not between 1 and 3600", file)
	}
	return c, nil
}
