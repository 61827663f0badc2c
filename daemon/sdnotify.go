package daemon

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/lanes"
)

// EnvNotifySocket is where systemd (Type=notify) listens for sd_notify(3)
// messages from the service's main process.
const EnvNotifySocket = "NOTIFY_SOCKET"

// notifier tells systemd how the daemon is doing: READY=1 once every
// socket answers, STOPPING=1 when it begins to stop, and STATUS= lines
// for `systemctl --user status`. Without $NOTIFY_SOCKET it does nothing.
//
// It is sd_notify(3) itself (one datagram to a unix socket, '@' naming an
// abstract one) rather than go-systemd's daemon.SdNotify, which reads the
// variable again at every call and so needs it in the environment for the
// whole run, where every runner, and through them every job, would
// inherit it. Here it is read once and removed from the environment before
// any process is started.
type notifier struct {
	addr *net.UnixAddr // nil: not run by systemd (or an address it cannot use)
	log  zerolog.Logger
}

// newNotifier takes $NOTIFY_SOCKET out of the environment and returns the
// notifier for it.
func newNotifier(log zerolog.Logger) *notifier {
	n := &notifier{log: log}
	path := os.Getenv(EnvNotifySocket)
	_ = os.Unsetenv(EnvNotifySocket)
	switch {
	case path == "":
	case path[0] != '/' && path[0] != '@':
		log.Warn().Str("notify_socket", path).Msg("$NOTIFY_SOCKET is neither a path nor an abstract socket (@name): systemd is not told when the daemon is ready")
	default:
		// Go's net package turns a leading '@' into the NUL byte of an
		// abstract address, as systemd means it.
		n.addr = &net.UnixAddr{Name: path, Net: "unixgram"}
	}
	return n
}

// notify sends one message of newline-separated KEY=VALUE lines. A failure
// is logged, never fatal: the daemon serves whether or not systemd hears.
func (n *notifier) notify(lines ...string) {
	if n.addr == nil {
		return
	}
	if err := n.send(strings.Join(lines, "\n")); err != nil {
		n.log.Warn().Err(err).Str("notify_socket", n.addr.Name).Strs("message", lines).Msg("telling systemd")
	}
}

func (n *notifier) send(msg string) error {
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("connecting to $NOTIFY_SOCKET: %w", err)
	}
	defer c.Close()
	// A datagram socket whose reader is stuck must not hold the daemon up.
	if err := c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// servingStatus is the STATUS= line of a daemon that serves: its lanes and
// how many runners they serve with (spares not counted), e.g. "serving 3
// lanes (heavy, net, no-net), 4 runners".
func servingStatus(names []string, cfgs map[string]lanes.LaneConfig) string {
	names = slices.Sorted(slices.Values(names))
	runners := 0
	for _, n := range names {
		l, ok := cfgs[n]
		if !ok {
			l = lanes.DefaultFor(n)
		}
		runners += l.Runners
	}
	return fmt.Sprintf("STATUS=serving %s (%s), %s", api.Count(len(names), "lane"), strings.Join(names, ", "), api.Count(runners, "runner"))
}

// stoppingStatus is the STATUS= line of a daemon that stops: "stopping:
// SIGTERM", or why it stops when no signal stopped it.
func stoppingStatus(sig os.Signal, why string) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := unix.SignalName(s); name != "" {
			why = name
		}
	}
	return "STATUS=stopping: " + why
}
