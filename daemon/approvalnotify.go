package daemon

import (
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/approvals"
	"github.com/orchestrd/orchestrd/approvals/notify"
	"github.com/orchestrd/orchestrd/platform/proc"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// startNotifier runs [approvals] notify_command for each new pending
// approval: Run hands its Notify to approvals.Options.OnPending and
// closes it after approvals.Manager.Shutdown. Without a command it runs
// nothing.
func startNotifier(cfg approvals.Config, reaper *proc.Reaper, bus *eventlog.Bus, log zerolog.Logger) *notify.Notifier {
	return notify.New(notify.Options{Command: cfg.NotifyCommand, Timeout: cfg.NotifyTimeout.Duration, Reaper: reaper,
		Bus: bus, Logger: log.With().Str("component", "notify").Logger()})
}
