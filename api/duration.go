package api

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written in TOML (and other text formats) as a
// Go duration string ("500ms", "5s"). It lives here, below every domain,
// because the daemon's config file and each domain's own tables use it.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration like \"500ms\" or \"5s\": %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
