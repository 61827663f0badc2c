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
	home := fs.String("home", "", "daemon home `DIR` (default $ORCHESTRD_HOME or ~/.orchestrd)")
	if len(args) > 0 && laneCommands[args[0]] {
		args = args[1:]
	} else if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "-help" {
		return usageError(fs, laneUsage, stderr, "unknown subcommand %q (want: token)", args[0])
	}
	if code, ok := parseFlags(fs, laneUsage, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(fs, laneUsage, stderr, "want exactly one LANE")
	}
	tok, err := lanes.ReadJoinToken(resolveHome(*home), fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd lane token: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, tok)
	return exitOK
}
