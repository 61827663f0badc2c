package main

import (
	"fmt"
	"io"
	"os"

	"github.com/orchestrd/orchestrd/supervisor/proc"
)

// cmdSandboxExec is how the daemon starts an executor in the sandbox
// (not for people: it is not in the usage): `orchestrd sandbox-exec --hide
// PATH... -- CMD ARGS`, already in its own user, mount and pid namespaces,
// hides the paths (the daemon's home), mounts its /proc, drops every
// privilege and becomes CMD.
func cmdSandboxExec(args []string, stderr io.Writer) int {
	var hide []string
	for len(args) > 0 && args[0] != "--" {
		if args[0] != "--hide" || len(args) < 2 {
			fmt.Fprintln(stderr, "orchestrd sandbox-exec: usage: sandbox-exec --hide PATH... -- CMD [ARGS...]")
			return exitUsage
		}
		hide, args = append(hide, args[1]), args[2:]
	}
	if len(args) < 2 {
		fmt.Fprintln(stderr, "orchestrd sandbox-exec: no command after --")
		return exitUsage
	}
	err := proc.ExecHidden(hide, args[1:], os.Environ())
	fmt.Fprintf(stderr, "orchestrd sandbox-exec: %v\n", err)
	return 127
}
