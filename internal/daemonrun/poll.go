package daemonrun

import "time"

// Poller paces the polls of a wait on state that no push reports (a file,
// a socket's answer): the first pauses are short, as most waits end within
// milliseconds, and they grow to pollMax, so a wait of seconds (a loop's
// stage, an agent's turn, a cluster's election) asks a few times a second,
// not two hundred. Every poll costs the daemon a connection or the test a
// read of the whole event log, and on a loaded machine that CPU is what the
// wait waits for. The zero Poller is ready.
type Poller struct{ d time.Duration }

const (
	pollFirst = 2 * time.Millisecond
	pollMax   = 100 * time.Millisecond
)

// Pause sleeps before the next poll.
func (p *Poller) Pause() {
	if p.d == 0 {
		p.d = pollFirst
	} else {
		p.d = min(p.d*3/2, pollMax)
	}
	time.Sleep(p.d)
}
