package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	_ "github.com/orchestrd/orchestrd/fleet" // registers the cluster.* event kinds
)

// fleetCaller answers cluster.events with its lines, pushed as the fleet
// pushes them, and every other method from the fake caller, which
// records every call.
type fleetCaller struct {
	*fakeCaller
	lines []string
}

func (c *fleetCaller) Invoke(ctx context.Context, from api.Origin, method string, params any, push func(string, []byte, func(bool))) (json.RawMessage, error) {
	res, err := c.fakeCaller.Invoke(ctx, from, method, params, push)
	if method != "cluster.events" {
		return res, err
	}
	for _, l := range c.lines {
		push("x", []byte(l), func(bool) {})
	}
	return json.RawMessage(`{"lines":1}`), nil
}

// The nodes page of a daemon in no fleet says so; of one in a fleet, it
// lists each node: its state (lost since when and by whom), its lanes
// with their free slots (none for a node gone), its last heartbeat's age.
// A node's name and lanes are another machine's words: escaped, without
// controls or bidirectional overrides, and bounded.
func TestNodesPage(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	h.signIn(c)
	resp, page := h.do(c, "GET", "/ui/nodes", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="no-fleet"`) || !strings.Contains(page, "This daemon is not in a fleet") {
		t.Fatalf("the nodes page of a daemon in no fleet: %d\n%s", resp.StatusCode, page)
	}
	var many []string
	for i := range 100 {
		many = append(many, "l"+strings.Repeat("x", i))
	}
	many[1] = strings.Repeat("y", 10000)
	h.answer("cluster.nodes", map[string]any{"cluster": "AA2JYKNMBGBT", "node": "a", "mode": "external", "url": "nats://127.0.0.1:4222",
		"nodes": []map[string]any{
			{"name": "a", "state": "alive", "lanes": []string{"gpu"}, "free": map[string]int{"gpu": 2}, "self": true,
				"heartbeat_at": time.Now().Add(-1500 * time.Millisecond),
				"figures":      map[string]any{"cpus": 2, "mem_total_bytes": 8 << 30, "mem_available_bytes": 3 << 29, "load1": 0.25}},
			{"name": "b", "state": "lost", "lanes": []string{"gpu", "cpu"}, "heartbeat_at": time.Now().Add(-61500 * time.Millisecond), "lost_by": "a",
				"lost_at": "2026-11-26T10:00:00Z"},
			{"name": "<script>alert(1)</script>\u202egnp.exe\x07", "state": "alive", "lanes": many, "free": map[string]int{}},
		}})
	resp, page = h.do(c, "GET", "/ui/nodes", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("nodes page: %d\n%s", resp.StatusCode, page)
	}
	mustContain(t, page, `<table id="nodes" data-reread>`, "Cluster <code>AA2JYKNMBGBT</code>, this node <code>a</code> (external NATS):",
		"3 nodes, 2 alive, 1 lost.",
		`<tr data-node="a"><td class="id">a <span class="muted">(this one)</span></td>`,
		`<span class="state state-alive">alive</span>`, `gpu (2 free)`,
		`<tr data-node="b">`, `<span class="state state-lost">lost</span>`, `, by a</td>`, `<td>gpu, cpu</td>`, "1m01s ago", "<td>-</td>\n<td class=\"figures\">-</td></tr>", // b's age; none told by the third
		`<td class="figures">2 CPUs, 1.5 GiB of 8.0 GiB, load 0.25</td>`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`+"\uFFFDgnp.exe\uFFFD", ", and 68 more</td>", "y…")
	if !regexp.MustCompile(`<span class="age" data-ms="1\d{3}">1\.\ds ago</span>`).MatchString(page) {
		t.Fatalf("a's last heartbeat is not 1.x s ago:\n%s", page)
	}
	mustNotContain(t, page, "<script>alert", "\u202e", "\x07", strings.Repeat("y", 65), "cpu (")
	// The nav lists it.
	mustContain(t, page, `<a href="/ui/nodes" aria-current="page">Nodes</a>`)

	// A fleet of 10,000 nodes: the page counts them all, lists the first
	// maxNodesShown and says how many more.
	var fleet []map[string]any
	for i := range 10000 {
		fleet = append(fleet, map[string]any{"name": fmt.Sprintf("n%05d", i), "state": "alive", "lanes": []string{"cpu"}})
	}
	h.answer("cluster.nodes", map[string]any{"cluster": "AA2JYKNMBGBT", "node": "n00000", "nodes": fleet})
	resp, page = h.do(c, "GET", "/ui/nodes", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("nodes page of 10,000 nodes: %d", resp.StatusCode)
	}
	mustContain(t, page, "10000 nodes, 10000 alive.", `<tr data-node="n00199">`, "And 9800 more nodes")
	mustNotContain(t, page, `<tr data-node="n00200">`)
}

// A cluster job's node is on the jobs list and on its page; a job a lost
// node had ends failed with node_lost, and both say node_lost.
func TestJobsNode(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	h.signIn(c)
	h.answer("job.list", map[string]any{"jobs": []map[string]any{
		{"id": "c-1gpu-1", "lane": "gpu", "state": "failed", "error": "node_lost", "node": "b", "exit_code": nil, "created_at": "2026-11-26T10:00:00Z"},
		{"id": "c-1gpu-2", "lane": "gpu", "state": "succeeded", "node": "a\u202e<b>", "exit_code": 0, "created_at": "2026-11-26T10:00:00Z"},
		{"id": "j-3", "lane": "net", "state": "failed", "error": "exit status 1", "exit_code": 1, "created_at": "2026-11-26T10:00:00Z"},
		{"id": "c-1gpu-4", "lane": "gpu", "state": "running", "node": "b", "exit_code": nil, "created_at": "2026-11-26T10:00:00Z"},
	}})
	_, page := h.do(c, "GET", "/ui/jobs", nil, nil)
	mustContain(t, page, `<th scope="col">Node</th>`,
		`<span class="state state-failed">failed</span> <span class="state state-node_lost">node_lost</span></td><td class="node">b</td>`,
		`<td class="node">a`+"\uFFFD"+`&lt;b&gt;</td>`,
		`<span class="state state-failed">failed</span></td><td class="node">-</td>`,
		`<script src="/ui/assets/fleet.js" defer></script>`)
	// Not in a fleet: nothing but its own stream changes the list.
	mustNotContain(t, page, "data-reread")
	mustNotContain(t, page, "\u202e", "exit status 1")
	h.answer("job.get", map[string]any{"job": map[string]any{"id": "c-1gpu-1", "lane": "gpu", "state": "failed", "error": "node_lost",
		"node": "b", "exit_code": nil, "created_at": "2026-11-26T10:00:00Z"}})
	_, page = h.do(c, "GET", "/ui/jobs/c-1gpu-1", nil, nil)
	// Its run's end nobody saw: no duration, as the CLI says (its record's
	// 0 is not how long it ran).
	mustContain(t, page, `<span class="state state-failed">failed</span> <span class="state state-node_lost">node_lost</span></h1>`,
		`<dt>Node</dt><dd id="job-node"><a href="/ui/nodes">b</a></dd>`, `<dt>Took</dt><dd>-</dd>`)
	// In a fleet, another node's changes tell the stream nothing: the
	// list, and an unfinished job's page, are read again (fleet.js).
	h.answer("cluster.nodes", map[string]any{"cluster": "AA2JYKNMBGBT", "node": "a", "nodes": []any{}})
	_, page = h.do(c, "GET", "/ui/jobs", nil, nil)
	mustContain(t, page, `<table id="jobs" data-reread>`)
	mustNotContain(t, page, `<h2 id="output-h" data-reread>`)
	_, page = h.do(c, "GET", "/ui/jobs/c-1gpu-1", nil, nil)
	mustNotContain(t, page, "data-reread") // it has ended
	h.answer("job.get", map[string]any{"job": map[string]any{"id": "c-1gpu-4", "lane": "gpu", "state": "queued",
		"exit_code": nil, "created_at": "2026-11-26T10:00:00Z"}})
	_, page = h.do(c, "GET", "/ui/jobs/c-1gpu-4", nil, nil)
	mustContain(t, page, `<h2 id="output-h" data-reread>`)
}

// The events page with "every node" reads cluster.events with the filter
// `orchestrd events --cluster` gives it (conn.* left out unless a kind is
// asked for; kinds, lane, job, one node), checks each line again as the
// CLI does, and shows each line's node. What a node published is shown
// escaped, and a line without a node's name, or too long, is not shown.
func TestEventsEveryNode(t *testing.T) {
	h := newHarness(t, Config{})
	fc := &fleetCaller{fakeCaller: h.caller, lines: []string{
		`{"origin":"b","ts":"2026-11-26T10:00:00Z","seq":1,"kind":"job.finished","lane":"gpu","job_id":"c-1gpu-1","state":"succeeded"}`,
		`{"origin":"b","ts":"2026-11-26T10:00:01Z","seq":2,"kind":"conn.opened","lane":"gpu"}`,
		`{"origin":"c","ts":"2026-11-26T10:00:02Z","seq":3,"kind":"job.queued","lane":"cpu"}`,
		`{"origin":"<i>x","ts":"2026-11-26T10:00:03Z","seq":4,"kind":"job.queued","lane":"gpu","note":"no node"}`,
		`{"origin":"c","ts":"2026-11-26T10:00:04Z","seq":5,"kind":"job.queued","lane":"gpu","note":"` + strings.Repeat("z", 70000) + `"}`,
		`{"origin":"c","ts":"2026-11-26T10:00:05Z","seq":6,"kind":"cluster.node_lost","lane":"gpu","node":"<img src=x onerror=alert(1)>"}`,
	}}
	h.srv.opts.Caller = fc
	c := h.client()
	h.signIn(c)
	_, page := h.do(c, "GET", "/ui/events?cluster=1&lane=gpu", nil, nil)
	call, ok := h.caller.last("cluster.events")
	if !ok || call.Params != `{"last":200,"exclude":["conn.opened","conn.closed"],"lane":"gpu"}` {
		t.Fatalf("cluster.events asked with %q (called: %v)", call.Params, ok)
	}
	mustContain(t, page, `data-follow="false" data-reread`, `data-kinds=""`, `id="f-cluster" name="cluster" value="1" checked`,
		`<span class="node">b</span> <code class="kind">job.finished</code>`, `<span class="node">c</span> <code class="kind">cluster.node_lost</code>`,
		`&lt;img src=x onerror=alert(1)&gt;`)
	mustNotContain(t, page, "conn.opened</code>", `<span class="node">c</span> <code class="kind">job.queued`, "no node", "zzzz", "<img")

	_, page = h.do(c, "GET", "/ui/events?node=b&kind=cluster.*", nil, nil)
	call, _ = h.caller.last("cluster.events")
	if call.Params != `{"last":200,"node":"b","kinds":["cluster.*"]}` {
		t.Fatalf("cluster.events asked with %q", call.Params)
	}
	mustContain(t, page, `<span class="node">c</span> <code class="kind">cluster.node_lost</code>`, `id="f-node" name="node" value="b"`)
	mustNotContain(t, page, "job.finished</code>")
	resp, page := h.do(c, "GET", "/ui/events?node=../x", nil, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "node: not a node") {
		t.Fatalf("a node that is no name: %d\n%s", resp.StatusCode, page)
	}
	// This node's own log, as before: no node named, following.
	_, page = h.do(c, "GET", "/ui/events", nil, nil)
	mustContain(t, page, `data-follow="true"`, `data-kinds="approval.*,`)
	mustNotContain(t, page, `checked`, "data-reread")
}

// The nodes page streams the fleet's kinds (the job kinds are checked
// with the jobs page's).
func TestNodesKindsKnown(t *testing.T) {
	for _, p := range pages {
		if p.Name != "nodes" {
			continue
		}
		if _, err := parseKinds(p.Kinds[0]); p.Kinds[0] != "cluster.*" || err != nil {
			t.Errorf("page %s streams %v: %v", p.Name, p.Kinds, err)
		}
	}
}

func FuzzShown(f *testing.F) {
	for _, s := range []string{"", "a", "<b>", "\u202e", "é", strings.Repeat("é", 40), "\xff\xfe", "a\x00b"} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = (n%200+200)%200 + 1
		out := shown(n, s)
		// Each byte kept may become U+FFFD, 3 bytes.
		if trimmed := strings.TrimSuffix(out, "…"); len(trimmed) > 3*n || !utf8.ValidString(out) {
			t.Fatalf("shown(%d, %q) = %q", n, s, out)
		}
		for _, r := range out {
			if r < 0x20 || r == 0x7f || r == '\u202e' || r == '\u200b' {
				t.Fatalf("shown(%d, %q) = %q keeps %U", n, s, out, r)
			}
		}
	})
}

// The overview shows this node's figures as status gives them; a daemon
// that cannot read them says why.
func TestOverviewNodeFigures(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	h.signIn(c)
	h.answer("status", map[string]any{"running": true, "node": map[string]any{"cpus": 4, "mem_total_bytes": 16 << 30,
		"mem_available_bytes": 5 << 29, "load1": 0.5, "load5": 0.25, "load15": 0.125, "home_free_bytes": 100 << 30}})
	resp, page := h.do(c, "GET", "/ui/", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("overview: %d\n%s", resp.StatusCode, page)
	}
	mustContain(t, page, `<li id="node-figures">this node: 4 CPUs, memory 2.5 GiB available of 16.0 GiB, load 0.50 0.25 0.12, home 100.0 GiB free</li>`)
	h.answer("status", map[string]any{"running": true, "node_error": "reading the node's memory: no /proc"})
	_, page = h.do(c, "GET", "/ui/", nil, nil)
	mustContain(t, page, "Could not read the node&#39;s figures: reading the node&#39;s memory: no /proc")
	mustNotContain(t, page, `id="node-figures"`)
}
