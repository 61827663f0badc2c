package ui

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
	"github.com/orchestrd/orchestrd/wire"
)

// The fleet: its nodes (cluster.nodes, as `orchestrd nodes` reads them),
// the node of a cluster job, and every node's events on the events page
// (cluster.events, as `orchestrd events --cluster` reads them). What a
// node publishes (its name, its lanes, its event lines) was written by
// another machine: it is shown escaped (html/template), bounded (shown)
// and never logged.

func init() {
	register(&page{Name: "nodes", Title: "Nodes", Pattern: "/ui/nodes", Nav: true,
		Kinds: append([]string{"cluster.*"}, "job.dispatched", "job.finished"), Data: nodesData})
	funcs["shown"] = shown
	funcs["endReason"] = endReason
	funcs["origin"] = lineOrigin
	funcs["bytes"] = humanBytes
}

// Bounds of what a node publishes, as the dashboard shows it.
const (
	maxNodesShown = 200 // nodes listed
	maxLanesShown = 32  // lanes of a node listed
	maxNameShown  = 64  // bytes of a node's or a lane's name
	// maxFleetLine: a longer event line from the fleet is not shown (its
	// fields would be clipped to 400 bytes anyway).
	maxFleetLine = 64 << 10
)

// nodeStatus is a node as cluster.nodes answers it (fleet.NodeStatus's
// JSON: the dashboard knows the fleet by its methods only).
type nodeStatus struct {
	Name        string         `json:"name"`
	State       string         `json:"state"` // alive, lost, stopped
	Lanes       []string       `json:"lanes"`
	Free        map[string]int `json:"free"`
	HeartbeatAt time.Time      `json:"heartbeat_at"`
	LostBy      string         `json:"lost_by"`
	LostAt      time.Time      `json:"lost_at"`
	Self        bool           `json:"self"`
	// Figures: a node alive's CPU count, memory and load, from its heartbeat.
	Figures *api.NodeFigures `json:"figures"`
}

// humanBytes is n in bytes, KiB, MiB, GiB or TiB, one decimal.
func humanBytes(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, i := float64(n), -1
	for v >= 1024 && i < 3 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + []string{"KiB", "MiB", "GiB", "TiB"}[i]
}

// nodeLane is a lane of a node and its free slots (-1: none told, the
// node being gone).
type nodeLane struct {
	Name string
	Free int
}

type nodeRow struct {
	nodeStatus
	Shown     []nodeLane
	LanesLeft int // lanes not listed (maxLanesShown)
	// HeartbeatMs: how long ago its last heartbeat was written (the
	// node's clock, as `orchestrd nodes` tells it; a lost node's is its
	// last); -1 for none.
	HeartbeatMs int64
}

// nodesView is the nodes page: the fleet as this daemon sees it, or that
// it is in none (Off, with the daemon's own words).
type nodesView struct {
	Off       string
	Cluster   string
	Node      string
	Mode      string
	URL       string
	Nodes     []nodeRow
	NodesLeft int
	Total     int // nodes, listed or not
	Alive     int
	Lost      int
	Stopped   int
}

func nodesData(ctx context.Context, s *Server, r *http.Request) (any, error) {
	var res struct {
		Cluster string       `json:"cluster"`
		Node    string       `json:"node"`
		Mode    string       `json:"mode"`
		URL     string       `json:"url"`
		Nodes   []nodeStatus `json:"nodes"`
	}
	var v nodesView
	if err := s.call(ctx, "cluster.nodes", nil, &res); err != nil {
		if notInFleet(err) {
			v.Off = err.Error()
			return v, nil
		}
		return v, err
	}
	v.Cluster, v.Node, v.Mode, v.URL = res.Cluster, res.Node, res.Mode, res.URL
	now := time.Now()
	v.Total = len(res.Nodes)
	for i, n := range res.Nodes {
		switch n.State {
		case "alive":
			v.Alive++
		case "lost":
			v.Lost++
		case "stopped":
			v.Stopped++
		}
		if i >= maxNodesShown {
			v.NodesLeft++
			continue
		}
		row := nodeRow{nodeStatus: n, HeartbeatMs: -1}
		if !n.HeartbeatAt.IsZero() {
			row.HeartbeatMs = max(0, now.Sub(n.HeartbeatAt).Milliseconds())
		}
		for j, l := range n.Lanes {
			if j >= maxLanesShown {
				row.LanesLeft = len(n.Lanes) - j
				break
			}
			free := -1
			if n.State == "alive" {
				free = n.Free[l]
			}
			row.Shown = append(row.Shown, nodeLane{Name: l, Free: free})
		}
		v.Nodes = append(v.Nodes, row)
	}
	return v, nil
}

// inFleet says the daemon is in a fleet (cluster.nodes answers): a job
// of its lists may run on another node, whose changes tell this daemon's
// event stream nothing.
func (s *Server) inFleet(ctx context.Context) bool {
	return s.call(ctx, "cluster.nodes", nil, nil) == nil
}

// notInFleet says err is a daemon's answer that it is in no fleet (its
// cluster methods answer not found), or one too old to have them.
func notInFleet(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && (ae.Code == api.CodeNotFound || ae.Code == wire.CodeMethodNotFound)
}

// fleetEvents is the last n lines of every node's events (of node's
// only, if set) that q passes, oldest first, and whether older ones may
// match too: cluster.events with the filter `orchestrd events --cluster`
// gives it, each line checked again here as the CLI does (a node of an
// older version ignores the filter). Each line has "origin", its node.
func (s *Server) fleetEvents(ctx context.Context, q eventlog.Query, node string, n int) ([]eventlog.Line, bool, error) {
	params := struct {
		Last int    `json:"last"`
		Node string `json:"node,omitempty"`
		eventlog.Filter
	}{Last: n, Node: node, Filter: q.Filter()}
	match := q.Matcher()
	var (
		mu    sync.Mutex
		lines []eventlog.Line
		more  bool
	)
	rctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	_, err := s.opts.Caller.Invoke(rctx, from(ctx), "cluster.events", params, func(_ string, data []byte, taken func(bool)) {
		defer taken(true)
		if len(data) > maxFleetLine {
			return
		}
		l, err := eventlog.ParseLine(data)
		if err != nil || lineOrigin(l) == "" || !match(&l) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if len(lines) == n { // a node that pushes more than asked
			copy(lines, lines[1:])
			lines = lines[:n-1]
			more = true
		}
		lines = append(lines, l)
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	return lines, more || len(lines) == n, nil
}

// everyNode says the events page is asked for every node's events (or
// one node's): the fleet's, which this daemon's live updates do not
// carry; the page reads them again every 5 s instead.
func everyNode(r *http.Request) bool {
	q := r.URL.Query()
	return q.Get("cluster") != "" || strings.TrimSpace(q.Get("node")) != ""
}

// lineOrigin is the node a line of cluster.events came from ("" if it
// names none that is a node's name).
func lineOrigin(l eventlog.Line) string {
	o, _ := l.Fields["origin"].(string)
	if !validNode(o) {
		return ""
	}
	return o
}

// validNode says s is a fleet node's name as the fleet allows one
// (letters, digits, -, _ and .; at most 64 bytes).
func validNode(s string) bool { return len(s) <= maxNameShown && validID(s) }

// shown is what a node (or a job) published, as the dashboard shows it:
// at most n bytes (cut on a rune), controls and format characters (a
// bidirectional override could make a name read as another) as U+FFFD.
func shown(n int, s string) string {
	cut := false
	if len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s, cut = s[:n], true
	}
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if cut {
		s += "…"
	}
	return s
}

// endReasons are the ends of a job that did not end on its own which its
// state alone does not tell (a failed job's record says which).
var endReasons = map[string]bool{api.ErrNodeLost: true, api.ErrDaemonLost: true, api.ErrRunnerLost: true,
	api.ErrRunnerUnresponsive: true, api.ErrRunnerMemory: true, api.ErrLaneRemoved: true, api.ErrStdinLost: true,
	api.ErrSecretMissing: true, api.ErrDaemonShutdown: true}

// endReason is why a job ended that did not end on its own (node_lost:
// the fleet node it ran on was lost), "" for any other.
func endReason(j api.JobRecord) string {
	if j.State.Terminal() && endReasons[j.Error] {
		return j.Error
	}
	return ""
}
