package uitest

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/fleetrun"
)

// gpuLane is the lane node b shares with the fleet; node a has none, so
// a job submitted on a runs on b.
const gpuLane = "[lanes.gpu]\nshared = true\nrunners = 1\nslots = 1\nnetwork = \"host\"\n"

// startFleet starts a fleet of two daemons, a and b, on one operator's
// NATS server (Debian's nats-server: a node killed leaves the fleet's
// streams with the server, and the other node declares it lost), each
// with its credentials made by the CLI. b serves lane gpu.
func startFleet(t *testing.T) (a, b *daemon) {
	t.Helper()
	needBrowser(t)
	bin := fleetrun.NATSBinary(t)
	keyHome := t.TempDir() // no socket in it: any length will do
	creds := map[string]string{"a": filepath.Join(keyHome, "cluster.creds"), "b": filepath.Join(keyHome, "b.creds")}
	for _, args := range [][]string{{"cluster", "init", "--name", "a"}, {"cluster", "add-node", "b", "--out", creds["b"]}} {
		kd := &daemon{t: t, home: keyHome}
		if out, errOut, code := kd.cli(args...); code != 0 {
			t.Fatalf("orchestrd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	url, _ := fleetrun.StartNATS(t, bin, 1, fleetrun.NATSUsers(t, creds["a"], creds["b"]), t.TempDir)
	a = startDaemon(t, config{extra: fleetrun.ClusterTable("a", 0, 0, nil, url), files: map[string]string{"cluster.creds": creds["a"]}})
	b = startDaemon(t, config{extra: fleetrun.ClusterTable("b", 0, 0, nil, url) + gpuLane,
		files: map[string]string{"cluster.creds": creds["b"]}})
	return a, b
}

// A fleet of two, seen from a's dashboard: the nodes page lists both,
// alive, with b's lane and its free slot; a job submitted on a runs on b,
// and the jobs list (open before, so live) and the job's page name b; the events page with
// "Every node" shows b's events (b took the job), which a's own log has
// not. b killed (SIGKILL) while the job runs: the nodes page shows b
// lost, by a, and the job failed, node_lost.
func TestFleetNodes(t *testing.T) {
	t.Parallel()
	a, b := startFleet(t)
	tb := newTab(t, a)
	tb.signIn()

	tb.open("/ui/nodes")
	row := func(n string) string { return `document.querySelector('#nodes tr[data-node="` + n + `"]')` }
	tb.waitJS("both nodes alive, b serving gpu with its slot free",
		row("a")+` && `+row("a")+`.textContent.includes("alive") && `+row("b")+` && `+row("b")+`.textContent.includes("alive") && `+
			row("b")+`.textContent.includes("gpu (1 free)")`)
	tb.waitText("#fleet-line", "2 nodes, 2 alive.")
	if got := eval[string](tb, row("a")+`.querySelector("td.id").textContent`); got != "a (this one)" {
		t.Fatalf("a's row names it %q", got)
	}
	tb.shot("nodes-alive")

	// The jobs page open before the job is submitted: b's start of it
	// tells a's event stream nothing, and the page reads it again.
	tb.open("/ui/jobs")
	tb.waitJS("the jobs page's live stream", `document.body.dataset.page === "jobs" && document.body.dataset.stream === "open"`)
	r, id := a.runSleeper("gpu")
	jrow := `document.getElementById(` + jsID("job-"+id) + `)`
	tb.waitJS("job "+id+" running on b", jrow+` && `+jrow+`.querySelector(".state").textContent === "running" && `+
		jrow+`.querySelector("td.node").textContent === "b"`)
	tb.shot("jobs-on-b")
	tb.open("/ui/jobs/" + id)
	tb.waitText("#job-node", "b")
	tb.waitText("#output", "id="+id)

	// b's own events, through the fleet: it took the job.
	if a.hasEvent("cluster.job_taken", id) {
		t.Fatalf("a's own log has cluster.job_taken of %s: the check below would not tell the fleet's events", id)
	}
	tb.open("/ui/events?cluster=1&kind=cluster.job_taken&node=b")
	tb.waitJS("b's cluster.job_taken of "+id, `[...document.querySelectorAll("#events li")].some((li) => `+
		`li.querySelector(".node") && li.querySelector(".node").textContent === "b" && li.textContent.includes("cluster.job_taken") && `+
		`li.textContent.includes(`+jsID(id)+`))`)
	tb.shot("events-every-node")
	// The CLI, with the same filter, prints that line too.
	out, errOut, code := a.cli("events", "--cluster", "--node", "b", "--kind", "cluster.job_taken", "--json")
	if code != 0 || !strings.Contains(out, `{"origin":"b",`) || !strings.Contains(out, `"job_id":"`+id+`"`) {
		t.Fatalf("orchestrd events --cluster --node b: exit %d\n%s%s", code, out, errOut)
	}
	tb.open("/ui/events?kind=cluster.job_taken")
	tb.waitJS("a's own events page", `document.querySelector("#events") && document.querySelector("#events").dataset.follow === "true"`)
	if eval[bool](tb, `document.getElementById("events").textContent.includes(`+jsID(id)+`)`) {
		t.Fatalf("a's own events page shows b's cluster.job_taken of %s", id)
	}

	// b is killed with the job running.
	if err := syscall.Kill(b.proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.proc.Done()
	tb.open("/ui/nodes")
	tb.waitJS("b lost", row("b")+` && `+row("b")+`.querySelector(".state").textContent === "lost" && `+
		row("b")+`.textContent.includes("by a") && !`+row("b")+`.textContent.includes("free")`)
	tb.waitText("#fleet-line", "2 nodes, 1 alive, 1 lost.")
	// Its last heartbeat's age is that of its last one: older than the 2 s
	// after which a node is lost.
	if ms := eval[int](tb, `Number(`+row("b")+`.querySelector(".age").dataset.ms)`); ms < 2000 {
		t.Fatalf("lost b's last heartbeat is %d ms old", ms)
	}
	tb.shot("nodes-b-lost")
	tb.open("/ui/jobs")
	tb.waitJS("job "+id+" failed, node_lost", jrow+` && `+jrow+`.querySelector(".state").textContent === "failed" && `+
		jrow+`.querySelector(".state-node_lost") && `+jrow+`.querySelector(".state-node_lost").textContent === "node_lost" && `+
		jrow+`.querySelector("td.node").textContent === "b"`)
	tb.shot("jobs-node-lost")
	if rec := a.job(id); rec.State != api.StateFailed || rec.Error != api.ErrNodeLost || rec.Node != "b" {
		t.Fatalf("job %s after b was lost: %+v", id, rec)
	}
	if code := r.exit(t); code == 0 {
		t.Fatalf("orchestrd run of a job whose node was lost: exit 0")
	}
}

// A daemon in no fleet says so on its nodes page, and on the events page
// asked for every node's events, in the daemon's own words.
func TestNodesWithoutFleet(t *testing.T) {
	t.Parallel()
	_, tb := signedIn(t, config{})
	tb.open("/ui/nodes")
	tb.waitText("#no-fleet", "This daemon is not in a fleet")
	tb.waitText("#no-fleet", "[cluster] enabled = false")
	if n := eval[int](tb, `document.querySelectorAll("#nodes").length`); n != 0 {
		t.Fatalf("the nodes page of a daemon in no fleet has a table of nodes")
	}
	tb.shot("no-fleet")
	tb.open("/ui/events?cluster=1")
	tb.waitText(".error", "not in a fleet")
	tb.shot("events-no-fleet")
}
