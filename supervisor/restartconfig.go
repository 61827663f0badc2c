package supervisor

import "github.com/orchestrd/orchestrd/api"

// RestartConfig is a config file's restart table ([lanes.NAME.restart],
// [executors.NAME.restart]): a Policy written in TOML. Every domain that
// restarts processes takes the same keys.
type RestartConfig struct {
	Stable    api.Duration `toml:"stable"`
	BaseDelay api.Duration `toml:"base_delay"`
	MaxDelay  api.Duration `toml:"max_delay"`
	MaxR      int          `toml:"max_r"`
	MaxT      api.Duration `toml:"max_t"`
}

// Policy converts the table to a Policy.
func (r RestartConfig) Policy() Policy {
	return Policy{Stable: r.Stable.Duration, BaseDelay: r.BaseDelay.Duration,
		MaxDelay: r.MaxDelay.Duration, MaxR: r.MaxR, MaxT: r.MaxT.Duration}
}

// DefaultRestartConfig is DefaultPolicy as a table.
func DefaultRestartConfig() RestartConfig {
	p := DefaultPolicy()
	return RestartConfig{Stable: api.Duration{Duration: p.Stable}, BaseDelay: api.Duration{Duration: p.BaseDelay},
		MaxDelay: api.Duration{Duration: p.MaxDelay}, MaxR: p.MaxR, MaxT: api.Duration{Duration: p.MaxT}}
}
