package main

import (
	"fmt"
	"io"

	"github.com/orchestrd/orchestrd/lanes"
)

const laneUsage = "orchestrd lane token [--home DIR] LANE"

// laneCommands are the subcommands of `orchestrd lane`.
var laneCommands = map[string]bool{"token": true}

// cmdLane is `orchestrd lane token LANE`: it prints the lane's join token,
// which a bring-your-own runner must present to join (orchestrd runner
// --token-file, or $ORCHESTRD_JOIN_TOKEN). It reads the token from the
// home, so it works whether or not the daemon is running.
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
	tok, err := lanes.ReadJoinToken(resolveHome(*home), rest[0])
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd lane token: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, tok)
	return exitOK
}
