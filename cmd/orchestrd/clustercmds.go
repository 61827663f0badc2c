package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orchestrd/orchestrd/fleet"
)

// The fleet's commands: cluster init (the credentials every node shares)
// and nodes (the fleet as this daemon sees it).

const clusterUsage = `orchestrd cluster init [--force] [--home DIR]

init makes the fleet's credentials in the home (cluster.creds, 0600): copy
that file into the home of every other node; the nodes of a fleet all use
the same. --force replaces credentials already there (every node then needs
the new file).`

func cmdCluster(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster")
	home := homeFlag(fs)
	force := fs.Bool("force", false, "replace the credentials already in the home")
	pos, code, ok := parseInterspersed(fs, clusterUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 || pos[0] != "init" {
		return usageError(fs, clusterUsage, stderr, "want: cluster init")
	}
	h := resolveHome(*home)
	path, err := fleet.InitCredentials(h, *force)
	if err != nil {
		fmt.Fprintf(stderr, "orchestrd cluster init: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "wrote %s\ncopy it to every other node's home (mode 0600), then set [cluster] enabled = true on each\n", path)
	return exitOK
}

const nodesUsage = "orchestrd nodes [--home DIR] [--json]"

func cmdNodes(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("nodes")
	home := homeFlag(fs)
	asJSON := fs.Bool("json", false, "print {\"nodes\": [...]} as the daemon gives it")
	c, code, ok := parseNoArgsAndDial(fs, nodesUsage, args, home, stdout, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	var res struct {
		Nodes []fleet.NodeStatus `json:"nodes"`
	}
	if err := call(c, "cluster.nodes", nil, &res); err != nil {
		return callErr(stderr, err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, res)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tLANES (FREE SLOTS)\tLAST HEARTBEAT")
	now := time.Now()
	for _, n := range res.Nodes {
		var ls []string
		for _, l := range n.Lanes {
			ls = append(ls, l+" ("+strconv.Itoa(n.Free[l])+")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\n", n.Name, n.State, dash(strings.Join(ls, ", ")), formatAge(now.Sub(n.HeartbeatAt)))
	}
	tw.Flush()
	return exitOK
}
