package main

import (
	"fmt"
	"io"
	"os"

	"github.com/orchestrd/orchestrd/platform/proc"
)

// cmdSandboxExec is how the daemon starts an executor in the sandbox
// (not for people: it is not in the usage): `orchestrd sandbox-exec --hide
// PATH... [--expose DIR...] -- CMD ARGS`, already in its own user, mount and
// pid namespaces, hides the paths (the daemon's home) and the cgroup tree
// but the directories exposed (the executor's own socket directory, inside
// the home), makes the --ro directories read-only but the --rw ones (a
// loop's repository and its worktree), mounts its /proc, drops every
// privilege and becomes CMD.
func cmdSandboxExec(args []string, stderr io.Writer) int {
	var h proc.Hidden
	for len(args) > 0 && args[0] != "--" {
		var to *[]string
		switch args[0] {
		case "--hide":
			to = &h.Hide
		case "--expose":
			to = &h.Expose
		case "--ro":
			to = &h.ReadOnly
		case "--rw":
			to = &h.Writable
		}
		if to == nil || len(args) < 2 {
			fmt.Fprintln(stderr, "orchestrd sandbox-exec: usage: sandbox-exec --hide PATH... [--expose DIR...] [--ro DIR...] [--rw DIR...] -- CMD [ARGS...]")
			return exitUsage
		}
		*to = append(*to, args[1])
		args = args[2:]
	}
	if len(args) < 2 {
		fmt.Fprintln(stderr, "orchestrd sandbox-exec: no command after --")
		return exitUsage
	}
	err := proc.ExecHidden(h, args[1:], os.Environ())
	fmt.Fprintf(stderr, "orchestrd sandbox-exec: %v\n", err)
	return 127
}
