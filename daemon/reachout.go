package daemon

import (
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/daemon/reachout"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

var _ reachout.Asker = (*approvals.Manager)(nil)

// listenReachout makes vibe-reachout's hook socket when
// [approvals.reachout] enabled is true: at the configured path, else where
// the hook itself looks (its config's socket_path, $XDG_RUNTIME_DIR,
// /tmp/vibe-reachout-{uid}.sock). It is made before any runner or
// executor starts, so that every sandbox hides it (hookHide), and answered
// once the approvals run (Serve). Its approvals end before the hook's own
// limit: the [approvals] timeout capped by the hook's timeout_seconds.
// nil when it is off or the socket cannot be made (warned, and
// reachout.unavailable): the daemon goes on without it.
func listenReachout(c approvals.Config, bus *eventlog.Bus, log zerolog.Logger) *reachout.Server {
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
	srv, err := reachout.Listen(reachout.Options{Path: r.Path, Timeout: min(timeout, r.HookTimeout),
		Bus: bus, Logger: log})
	if err != nil {
		return nil // warned, and reachout.unavailable emitted
	}
	return srv
}

// hookHide is what every sandbox hides beside the daemon's home: the hook
// socket (nil: none), by the path the kernel resolves it to, so that no
// job and no executor can connect to it, remove it or bind in its place.
func hookHide(srv *reachout.Server) []string {
	if srv == nil {
		return nil
	}
	p := srv.Path()
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		p = filepath.Join(dir, filepath.Base(p))
	}
	return []string{p}
}
