package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/clanker"
	"github.com/orchestrd/orchestrd/lanes"
	"github.com/orchestrd/orchestrd/platform/proc"
)

// The front-ends are the ways into the daemon. The control socket and the
// lanes' sockets are the home's: they start or the daemon does not. The
// HTTP API and vibe-reachout's hook socket are on by default, at an
// address another process may hold (a second daemon, on another home,
// finds the first one's port and hook path): on by default only, the
// daemon goes on without one, with a warning and `off: REASON` in its
// ready line, its STATUS= and frontend.list; turned on by the config
// file, it stops the daemon (FrontEndError: exit 2), before anything is
// started when it is the address. clanker's repos are the operator's
// directories: one that cannot be served is left out, as it always was
// (clanker.repo_failed), and listed off.

// FrontEndError is Run's error when a front-end the config file turns on
// cannot start: no restart fixes it, serve says it in one line and exits 2.
type FrontEndError struct {
	What string // "the HTTP API ([http] listen) cannot listen on 127.0.0.1:19532"
	Err  error
}

func (e *FrontEndError) Error() string { return e.What + ": " + startFailure(e.Err) }
func (e *FrontEndError) Unwrap() error { return e.Err }

// startFailure is why a front-end could not start, in few words: "in use
// by another process" for an address or a socket another process holds,
// a system call's error without the call, else the error.
func startFailure(err error) string {
	if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, proc.ErrInUse) {
		return inUseBy(err)
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	return err.Error()
}

// offReason is the off: reason of a front-end at address that failed
// with err: "127.0.0.1:19532 in use by another process", or the error.
func offReason(address string, err error) string {
	if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, proc.ErrInUse) {
		return address + " " + inUseBy(err)
	}
	return err.Error()
}

// inUseBy says who holds an address: "in use by another process", and
// for a socket, who listens there: "(uid 1000, pid 4242)", "another
// user's process" when that is not the daemon's uid.
func inUseBy(err error) string {
	var iu *proc.InUseError
	switch {
	case !errors.As(err, &iu):
		return "in use by another process"
	case foreignSocket(err):
		return "in use by another user's process (" + iu.Who() + ")"
	}
	return "in use by another process (" + iu.Who() + ")"
}

// foreignSocket reports whether err says that a process of another uid
// listens on a socket the daemon wanted.
func foreignSocket(err error) bool {
	var iu *proc.InUseError
	return errors.As(err, &iu) && iu.UID != uint32(os.Getuid())
}

// explicitKey is the first of keys the config file set to turn a
// front-end on, as "[table] key"; "" when it is on by default only.
func explicitKey(cfg Config, table string, keys ...string) string {
	for _, k := range keys {
		if cfg.Set(table + "." + k) {
			return "[" + table + "] " + k
		}
	}
	return ""
}

// frontEnds are the daemon's front-ends as Run started them; clanker's
// repos are asked at each call (repos come and go at run time).
type frontEnds struct {
	control api.FrontEnd
	http    api.FrontEnd
	ui      api.FrontEnd // the dashboard, on http's listener
	hook    api.FrontEnd
	metrics api.FrontEnd     // [metrics] listen: off unless the config file sets it
	lanes   []api.FrontEnd   // those that take bring-your-own runners
	clanker *clanker.Manager // nil before it starts
	sandbox api.FrontEnd     // not a front-end: what jobs and agents run in, or why not (probeSandbox)
	// The connections open to each, when it lists them: the control
	// socket's, the hook's, the HTTP API's and the dashboard's streams.
	controlConns, hookConns, httpConns, uiConns connLister
	// laneConns lists a lane socket's connections: its bring-your-own
	// runners' and those still handshaking.
	laneConns func(lane string, max int) ([]api.ConnInfo, int)
}

// connLister lists at most max of a front-end's connections open now,
// the oldest first, and how many are open.
type connLister func(max int) ([]api.ConnInfo, int)

// withConns is fe with its connections, at most api.MaxListedConns.
func withConns(fe api.FrontEnd, l connLister) api.FrontEnd {
	if l == nil || fe.Off != "" {
		return fe
	}
	fe.Conns, fe.ConnsOpen = l(api.MaxListedConns)
	fe.ConnsLeftOff = fe.ConnsOpen - len(fe.Conns)
	return fe
}

// laneFrontEnds are the lanes that take bring-your-own runners, by name:
// their sockets in the home.
func laneFrontEnds(home string, names []string, cfgs map[string]lanes.LaneConfig) []api.FrontEnd {
	var out []api.FrontEnd
	for _, n := range slices.Sorted(slices.Values(names)) {
		if l, ok := cfgs[n]; ok && l.AcceptsExternal() {
			out = append(out, api.FrontEnd{Name: "lane " + n, Address: filepath.Join(home, "runner-"+n+".sock")})
		}
	}
	return out
}

// list is every front-end: control, http, hook, metrics, clanker's repos,
// the lanes that take bring-your-own runners.
func (f *frontEnds) list() []api.FrontEnd {
	out := []api.FrontEnd{withConns(f.control, f.controlConns), withConns(f.http, f.httpConns), withConns(f.ui, f.uiConns),
		withConns(f.hook, f.hookConns), f.metrics}
	if f.clanker != nil {
		for _, r := range f.clanker.Sockets() {
			fe := api.FrontEnd{Name: "clanker " + r.Path, Address: r.Socket}
			if r.Error != "" {
				fe = api.FrontEnd{Name: fe.Name, Off: r.Error, Failed: true}
			} else if r.Conns != nil {
				fe = withConns(fe, r.Conns.Conns)
			}
			out = append(out, fe)
		}
	}
	for _, fe := range f.lanes {
		if f.laneConns != nil {
			lane := strings.TrimPrefix(fe.Name, "lane ")
			fe = withConns(fe, func(max int) ([]api.ConnInfo, int) { return f.laneConns(lane, max) })
		}
		out = append(out, fe)
	}
	if f.sandbox.Name != "" {
		out = append(out, f.sandbox)
	}
	return out
}

// readyValue is a front-end in the ready line: its address, or "off:
// REASON".
func readyValue(fe api.FrontEnd) string {
	if fe.Off != "" {
		return "off: " + fe.Off
	}
	return fe.Address
}

// clankerSockets are the sockets of the repos served, for the ready line.
func (f *frontEnds) clankerSockets() []string {
	var out []string
	if f.clanker != nil {
		for _, r := range f.clanker.Sockets() {
			if r.Error == "" {
				out = append(out, r.Socket)
			}
		}
	}
	return out
}

// failedStatus is what STATUS= adds after "serving ...": the front-ends
// that failed to start, "; http off: 127.0.0.1:19532 in use by another
// process"; "" when none did.
func (f *frontEnds) failedStatus() string {
	var b strings.Builder
	for _, fe := range f.list() {
		if fe.Failed {
			fmt.Fprintf(&b, "; %s off: %s", fe.Name, fe.Off)
		}
	}
	return b.String()
}
