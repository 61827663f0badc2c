package daemon

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/actors"
	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/daemon/reachout"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

var _ reachout.Asker = (*approvals.Manager)(nil)

// hookFront is vibe-reachout's hook socket as a front-end.
type hookFront struct {
	srv *reachout.Server // nil: off
	fe  api.FrontEnd
	err error // why it failed, when it did
}

// listenReachout makes vibe-reachout's hook socket when
// [approvals.reachout] enabled is true: at the configured path, else where
// the hook itself looks (its config's socket_path, $XDG_RUNTIME_DIR,
// /tmp/vibe-reachout-{uid}.sock). It is made before any runner or
// executor starts, so that every sandbox hides it (hookHide), and answered
// once the approvals run (Serve). Its approvals end before the hook's own
// limit: the [approvals] timeout capped by the hook's timeout_seconds.
// When the socket cannot be made (reachout.unavailable): a FrontEndError
// when the config file turned it on (enabled = true, or a socket); on by
// default, it is off (said by warn, once every front-end is made; an
// error when another uid listens there).
func listenReachout(cfg Config, bus *eventlog.Bus, sys *actors.System, log zerolog.Logger) (*hookFront, error) {
	c := cfg.Approvals
	h := &hookFront{fe: api.FrontEnd{Name: "hook"}}
	if !c.Reachout.Enabled {
		h.fe.Off = "[approvals.reachout] enabled = false"
		return h, nil
	}
	explicit := explicitKey(cfg, "approvals.reachout", "enabled")
	if c.Reachout.Socket != "" {
		explicit = explicitKey(cfg, "approvals.reachout", "socket", "enabled")
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
		Bus: bus, System: sys, Logger: log})
	if err != nil { // reachout.unavailable emitted
		h.fe = api.FrontEnd{Name: "hook", Off: offReason(r.Path, err), Failed: true}
		h.err = err
		if explicit != "" {
			return h, &FrontEndError{What: "vibe-reachout's hook socket (" + explicit + ") cannot be made at " + r.Path, Err: err}
		}
		return h, nil
	}
	h.srv = srv
	h.fe.Address = srv.Path()
	return h, nil
}

// warn says that the hook socket, on by default, could not be made: an
// error when a process of another uid listens where the hook looks (that
// user, not the daemon, may answer Claude Code's permission requests),
// else a warning.
func (h *hookFront) warn(log zerolog.Logger) {
	var iu *proc.InUseError
	switch {
	case h.err == nil:
	case foreignSocket(h.err) && errors.As(h.err, &iu):
		ev := log.Error().Err(h.err).Str("socket", iu.Path).Uint32("uid", iu.UID)
		if iu.Pid > 0 {
			ev = ev.Int32("pid", iu.Pid)
		}
		ev.Msg("reachout: another user listens at vibe-reachout's hook socket, and may answer Claude Code's permission requests; " +
			"going on without the hook socket (stop that process, or set [approvals.reachout] socket to a path of your own)")
	default:
		log.Warn().Err(h.err).Msg("reachout: going on without vibe-reachout's hook socket")
	}
}

// close closes the socket, if it was made (a no-op once closed).
func (h *hookFront) close(log zerolog.Logger) {
	if h.srv != nil {
		if err := h.srv.Close(); err != nil {
			log.Error().Err(err).Msg("closing vibe-reachout's hook socket")
		}
	}
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
