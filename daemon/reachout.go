package daemon

import (
	"os"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/daemon/reachout"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

var _ reachout.Asker = (*approvals.Manager)(nil)

// startReachout serves vibe-reachout's hook socket when
// [approvals.reachout] enabled is true: at the configured path, else where
// the hook itself looks (its config's socket_path, $XDG_RUNTIME_DIR,
// /tmp/vibe-reachout-{uid}.sock). Its approvals end before the hook's own
// limit: the [approvals] timeout capped by the hook's timeout_seconds.
// nil when it is off or the socket cannot be made (warned, and
// reachout.unavailable): the daemon goes on without it.
func startReachout(c approvals.Config, asker reachout.Asker, bus *eventlog.Bus, log zerolog.Logger) *reachout.Server {
	if !c.Reachout.Enabled {
		return nil
	}
	r := reachout.Resolve(c.Reachout.Socket, reachout.Env{Getenv: os.Getenv, ReadFile: os.ReadFile, UID: os.Getuid()})
	if r.Warning != "" {
		log.Warn().Msg("reachout: " + r.Warning)
	}
	timeout := c.Timeout.Duration
	if timeout <= 0 {
		timeout = approvals.DefaultConfig().Timeout.Duration
	}
	srv, err := reachout.Start(reachout.Options{Path: r.Path, Asker: asker, Timeout: min(timeout, r.HookTimeout),
		Bus: bus, Logger: log})
	if err != nil {
		return nil // warned, and reachout.unavailable emitted
	}
	return srv
}
