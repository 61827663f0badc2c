package daemon

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// pruneEvery is how often finished jobs and approvals past [state]
// retain_jobs and retain_for are pruned, after once at start.
const pruneEvery = time.Minute

// startPruning prunes the state store's finished jobs and approvals in the
// background: now, then every pruneEvery, each prune that removed
// something a jobs.pruned or approvals.pruned event. The returned stop ends it and waits for it (a prune
// under way is cut short between its small transactions).
func startPruning(st *state.Store, cfg StateConfig, bus *eventlog.Bus, log zerolog.Logger) (stop func()) {
	if cfg.RetainJobs <= 0 && cfg.RetainFor.Duration <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(pruneEvery)
		defer t.Stop()
		for {
			var before time.Time
			if cfg.RetainFor.Duration > 0 {
				before = time.Now().Add(-cfg.RetainFor.Duration)
			}
			n, err := st.Jobs().Prune(ctx, cfg.RetainJobs, before)
			if n > 0 {
				bus.Emit(JobsPruned{Count: n, RetainJobs: cfg.RetainJobs, RetainFor: cfg.RetainFor.String()})
			}
			if err != nil && ctx.Err() == nil {
				log.Error().Err(err).Msg("pruning finished jobs")
			}
			// Finished approvals by the same keys, counted apart from jobs.
			n, err = st.Approvals().Prune(ctx, cfg.RetainJobs, before)
			if n > 0 {
				bus.Emit(ApprovalsPruned{Count: n, RetainJobs: cfg.RetainJobs, RetainFor: cfg.RetainFor.String()})
			}
			if err != nil && ctx.Err() == nil {
				log.Error().Err(err).Msg("pruning finished approvals")
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
