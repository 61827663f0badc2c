package daemon

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The event log's seq numbers come from the meta counter seqCounter, in
// ranges of seqBlock reserved ahead: a daemon killed with -9 wastes at most
// the rest of its range, and never hands a number out twice.
const (
	seqCounter = "eventlog.seq"
	seqBlock   = 1 << 16
)

// reserveSeq reserves the bus's first range of seq numbers (waiting: the
// daemon is starting) and sets o up to reserve the next ones as it goes
// (without waiting: from inside Emit). The bus continues above the end of
// the previous daemon's range, which is where this one starts.
func reserveSeq(ctx context.Context, st *state.Store, o *eventlog.Options) error {
	meta := st.Meta()
	first, err := meta.Reserve(ctx, seqCounter, seqBlock)
	if err != nil {
		return fmt.Errorf("reserving event log seq numbers: %w", err)
	}
	o.SeqFrom, o.SeqReserved, o.SeqBlock = uint64(first-1), uint64(first-1+seqBlock), seqBlock
	o.ReserveSeq = func(done func(last uint64, err error)) {
		err := meta.ReserveLater(seqCounter, seqBlock, func(first int64, err error) {
			done(uint64(first-1+seqBlock), err)
		})
		if err != nil {
			done(0, err)
		}
	}
	return nil
}

// releaseSeq gives back, once the bus is closed, the reserved numbers it
// did not use, so a clean restart continues the log without a gap (and
// daemon.started has no seq_skipped): every number above bus.Seq() was
// never handed out.
func releaseSeq(st *state.Store, bus *eventlog.Bus, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Meta().Set(ctx, seqCounter, strconv.FormatUint(bus.Seq(), 10)); err != nil {
		log.Warn().Err(err).Msg("giving back unused event log seq numbers: the next start skips them")
	}
}
