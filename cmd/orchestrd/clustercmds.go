package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/fleet"
)

// The fleet's commands: cluster init (the fleet's key and the first
// node's credentials), cluster add-node (another node's) and nodes (the
// fleet as this daemon sees it).

const clusterUsage = `orchestrd cluster init [--name NAME] [--lanes A,B] [--force] [--home DIR]
orchestrd cluster add-node NAME [--lanes A,B] [--out FILE] [--force] [--home DIR]

init makes a fleet: its key (cluster.key, 0600: keep it on this machine,
it makes the other nodes' credentials) and this node's credentials
(cluster.creds, 0600) under NAME (default: the hostname; it must be the
[cluster] name). add-node makes node NAME's credentials with the fleet's
key in the home (default FILE: <home>/cluster-NAME.creds): copy FILE to
NAME's home as cluster.creds. Each node has its own: a node cannot write
another's heartbeat, job records, events or job output. --lanes lists
the shared lanes the node may serve (take jobs of), in its certificate:
the other nodes refuse its take of a job of any other lane, and a node
configured to serve one does not start. Without --lanes: every lane. To
change a node's lanes, make its credentials again (add-node NAME --force,
or init --force for the first node, which remakes the fleet). Both print
the node's public key and the user to give it in an external NATS
server's configuration (its permissions follow the lanes). --force
replaces files already there (init: every node then needs new
credentials).`

func cmdCluster(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster")
	home := homeFlag(fs)
	force := fs.Bool("force", false, "replace the files already there")
	name := fs.String("name", "", "init: this node's name (default: the hostname)")
	out := fs.String("out", "", "add-node: where to write the node's credentials")
	lanesFlag := fs.String("lanes", "", "the shared lanes the node may serve, comma-separated (default: every lane)")
	pos, code, ok := parseInterspersed(fs, clusterUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	h := resolveHome(*home)
	var lanes []string // nil: every lane
	lanesGiven := false
	fs.Visit(func(fl *flag.Flag) { lanesGiven = lanesGiven || fl.Name == "lanes" })
	if lanesGiven {
		var err error
		if lanes, err = fleet.ParseLanes(*lanesFlag); err != nil {
			return usageError(fs, clusterUsage, stderr, "--lanes: %v (leave --lanes out for every lane)", err)
		}
	}
	switch {
	case len(pos) == 1 && pos[0] == "init":
		n := *name
		if n == "" {
			n = fleet.DefaultName()
		}
		keyPath, credsPath, err := fleet.InitFleet(h, n, lanes, *force)
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd cluster init: %v\n", err)
			return exitFailure
		}
		pub, lanes, err := fleet.NodeKey(credsPath)
		cluster := ""
		if err == nil {
			cluster, err = fleet.ClusterOf(credsPath)
		}
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd cluster init: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "wrote %s (the fleet's key: keep it here, never copy it)\nwrote %s (node %s's credentials)\n"+
			"the cluster: %s (so the ready line, status and cluster nodes name it)\n"+
			"make each other node's with `orchestrd cluster add-node NAME`, then set [cluster] enabled = true on each\n"+
			"node %s's key: %s\nits user in an external NATS server's authorization { users = [...] }:\n%s\n",
			keyPath, credsPath, n, cluster, n, pub, fleet.NATSUser(n, pub, lanes))
		return exitOK
	case len(pos) == 2 && pos[0] == "add-node":
		n := pos[1]
		path := *out
		if path == "" {
			path = filepath.Join(h, "cluster-"+n+".creds")
		}
		pub, err := fleet.AddNode(h, n, lanes, path, *force)
		if err != nil {
			fmt.Fprintf(stderr, "orchestrd cluster add-node: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "wrote %s (node %s's credentials): copy it to %s's home as cluster.creds (mode 0600)\n"+
			"node %s's key: %s\nits user in an external NATS server's authorization { users = [...] }:\n%s\n",
			path, n, n, n, pub, fleet.NATSUser(n, pub, lanes))
		return exitOK
	}
	return usageError(fs, clusterUsage, stderr, "want: cluster init, or cluster add-node NAME")
}

// clusterLine names the fleet and this node: "cluster AA2JYKNMBGBT, node
// a (embedded NATS, nats://127.0.0.1:4222): 3 nodes, 2 alive, 1 lost".
func clusterLine(res fleet.NodesAnswer) string {
	counts := map[string]int{}
	for _, n := range res.Nodes {
		counts[n.State]++
	}
	line := fmt.Sprintf("cluster %s, node %s (%s NATS, %s): %s", res.Cluster, res.Node, res.Mode, res.URL, api.Count(len(res.Nodes), "node"))
	for _, st := range []string{"alive", "lost", "stopped"} {
		if counts[st] > 0 {
			line += fmt.Sprintf(", %d %s", counts[st], st)
		}
	}
	return line
}

// nodeState is a node's state, and for a lost one since when and by
// whom: "lost 12s ago, by a".
func nodeState(n fleet.NodeStatus, now time.Time) string {
	if n.State != "lost" {
		return n.State
	}
	st := "lost"
	if !n.LostAt.IsZero() {
		st += " " + render.Age(now.Sub(n.LostAt)) + " ago"
	}
	if n.LostBy != "" {
		st += ", by " + n.LostBy
	}
	return st
}

const nodesUsage = "orchestrd nodes [--home DIR] [--json]"

func cmdNodes(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("nodes")
	home := homeFlag(fs)
	asJSON := fs.Bool("json", false, "print {\"cluster\", \"node\", \"mode\", \"url\", \"nodes\": [...]} as the daemon gives it")
	c, code, ok := parseNoArgsAndDial(fs, nodesUsage, args, home, stdout, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	var res fleet.NodesAnswer
	if err := call(c, "cluster.nodes", nil, &res); err != nil {
		return callErr(stderr, err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, res)
	}
	fmt.Fprintln(stdout, clusterLine(res))
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tLANES (FREE SLOTS)\tLAST HEARTBEAT\tCPUS\tMEM AVAILABLE\tLOAD")
	now := time.Now()
	for _, n := range res.Nodes {
		var ls []string
		for _, l := range n.Lanes {
			if n.State == "alive" {
				l += " (" + strconv.Itoa(n.Free[l]) + ")"
			}
			ls = append(ls, l) // a node gone has no free slot
		}
		cpus, avail, load := "-", "-", "-"
		if g := n.Figures; g != nil {
			cpus, avail = strconv.Itoa(g.CPUs), humanBytes(g.MemAvailBytes)+" of "+humanBytes(g.MemTotalBytes)
			load = strconv.FormatFloat(g.Load1, 'f', 2, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\t%s\t%s\n", n.Name, nodeState(n, now), dash(strings.Join(ls, ", ")),
			render.Age(now.Sub(n.HeartbeatAt)), cpus, avail, load)
	}
	tw.Flush()
	return exitOK
}
