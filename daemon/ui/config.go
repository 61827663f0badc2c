package ui

import (
	"fmt"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

// Config is the [ui] table.
type Config struct {
	// Enabled serves the dashboard under /ui/ on the HTTP listener (when
	// the HTTP API is on).
	Enabled bool `toml:"enabled"`
	// SessionTTL is how long a sign-in lasts (12h).
	SessionTTL api.Duration `toml:"session_ttl"`
	// LinkTTL is how long a one-time sign-in link of `orchestrd ui` is
	// good for (2m).
	LinkTTL api.Duration `toml:"link_ttl"`
	// StreamQueue bounds the events one open page may have waiting
	// (256); past it the page is told how many it missed and reloads.
	StreamQueue int `toml:"stream_queue"`
	// MaxSessions bounds the signed-in sessions (64): the oldest goes.
	MaxSessions int `toml:"max_sessions"`
}

// DefaultConfig is the embedded [ui].
func DefaultConfig() Config {
	return Config{Enabled: true, SessionTTL: api.Duration{Duration: 12 * time.Hour},
		LinkTTL: api.Duration{Duration: 2 * time.Minute}, StreamQueue: 256, MaxSessions: 64}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SessionTTL.Duration <= 0 {
		c.SessionTTL = d.SessionTTL
	}
	if c.LinkTTL.Duration <= 0 {
		c.LinkTTL = d.LinkTTL
	}
	if c.StreamQueue <= 0 {
		c.StreamQueue = d.StreamQueue
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	return c
}

// Validate checks [ui] (key is the table's name), one error per problem.
func Validate(key string, c Config) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(key+"."+format, args...)) }
	if c.SessionTTL.Duration < time.Minute || c.SessionTTL.Duration > 30*24*time.Hour {
		bad("session_ttl must be between 1m and 720h, got %s", c.SessionTTL)
	}
	if c.LinkTTL.Duration < 5*time.Second || c.LinkTTL.Duration > time.Hour {
		bad("link_ttl must be between 5s and 1h, got %s", c.LinkTTL)
	}
	if c.StreamQueue < 4 || c.StreamQueue > 65536 {
		bad("stream_queue must be between 4 and 65536, got %d", c.StreamQueue)
	}
	if c.MaxSessions < 1 || c.MaxSessions > 4096 {
		bad("max_sessions must be between 1 and 4096, got %d", c.MaxSessions)
	}
	return errs
}
