package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/daemon"
	"github.com/orchestrd/orchestrd/daemon/control/client"
	"github.com/orchestrd/orchestrd/lanes"
)

const laneUsage = "orchestrd lane token [--home DIR] LANE"

// laneCommands are the subcommands of `orchestrd lane`.
var laneCommands = map[string]bool{"token": true}

// cmdLane is `orchestrd lane token LANE`: it prints the lane's join token,
// which a bring-your-own runner must present to join (orchestrd runner
// --token-file, or $ORCHESTRD_JOIN_TOKEN). It reads the token from the
// home, so it works whether or not the daemon is running; a lane that is
// neither the running daemon's nor, without one, its config's is unknown.
func cmdLane(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("lane")
	home := homeFlag(fs)
	// The subcommand may come before the flags (lane token --home H L) or
	// after them (--home H lane token L, as the global --home gives it).
	sub := ""
	if len(args) > 0 && laneCommands[args[0]] {
		sub, args = args[0], args[1:]
	}
	if code, ok := parseFlags(fs, laneUsage, args, stdout, stderr); !ok {
		return code
	}
	rest := fs.Args()
	if sub == "" && len(rest) > 0 {
		sub, rest = rest[0], rest[1:]
	}
	if !laneCommands[sub] {
		return usageError(fs, laneUsage, stderr, "unknown subcommand %q (want: token)", sub)
	}
	if len(rest) != 1 {
		return usageError(fs, laneUsage, stderr, "want exactly one LANE")
	}
	h, lane := resolveHome(*home), rest[0]
	if names, whose, ok := knownLanes(h); ok && !slices.Contains(names, lane) {
		fmt.Fprintf(stderr, "orchestrd lane token: unknown lane %q; %s are %s\n", lane, whose, strings.Join(names, ", "))
		return exitFailure
	}
	tok, err := lanes.ReadJoinToken(h, lane)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd lane token: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, tok)
	return exitOK
}

// knownLanes are the lanes of the daemon on home, sorted: the running
// daemon's, else those of the config it would read (HOME/config.toml, else
// the defaults). whose says which; ok is false when none can be told (a
// config that does not read).
func knownLanes(home string) (names []string, whose string, ok bool) {
	if c, err := client.Dial(socketPath(home)); err == nil {
		defer c.Close()
		var res struct {
			Lanes []api.LaneStatus `json:"lanes"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := c.Call(ctx, "lane.list", nil, &res); err == nil {
			for _, l := range res.Lanes {
				names = append(names, l.Name)
			}
			sort.Strings(names)
			return names, "the daemon's lanes", true
		}
	}
	cfg, whose := daemon.DefaultConfig(), "the default lanes"
	path := filepath.Join(home, "config.toml")
	if _, err := os.Stat(path); err == nil {
		c, err := daemon.LoadConfig(path)
		if err != nil {
			return nil, "", false
		}
		cfg, whose = c, "the lanes of "+path
	}
	for name := range cfg.Lanes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, whose, true
}
