package metrics_test

// The daemon's Prometheus metrics, driven through a whole daemon
// (internal/daemontest: daemon.Run in this process, its runners the real
// binary): GET /metrics on the HTTP API behind its key and on [metrics]
// listen without one, what jobs, tasks, approvals and clanker's repos make
// of them, promtool's verdict on the output, and a real Prometheus scraping
// a daemon the way examples/prometheus.yml says, queried through its own
// API. What needs the binary as a process (serve's exit on a refused
// listen) is cmd/orchestrd's.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/internal/daemontest"
)

// metricsLanes is a small daemon: one lane of one runner, the HTTP API
// and the metrics listener on free loopback ports.
const metricsLanes = `
[daemon]
shutdown_timeout = "2s"
[lanes.net]
runners = 1
slots = 4
spares = 0
network = "host"
`

const metricsFrontEnds = `
[http]
listen = "127.0.0.1:0"
[metrics]
listen = "127.0.0.1:0"
`

// metricsWeird is text a job writes and is given: it must never reach a
// label (nor anything else of the exposition).
const metricsWeird = "évil\"} 1\n# TYPE orchestrd_pwned counter\norchestrd_pwned{a=\"b\"} 9 \u202e/../etc/passwd"

// metricsD is a daemon with its two ways to /metrics.
type metricsD struct {
	*daemontest.Daemon
	t       *testing.T
	api     string // http://ADDR of the HTTP API
	local   string // http://ADDR of [metrics] listen
	key     string
	client  *http.Client
	scrapes sync.Mutex
}

func metricsDaemon(t *testing.T, config string) *metricsD {
	t.Helper()
	d := daemontest.Start(t, config)
	e := d.WaitEvent("http.listening", nil)
	key, err := os.ReadFile(filepath.Join(d.Home, "http.key"))
	if err != nil {
		t.Fatal(err)
	}
	var fe api.FrontEndList
	d.MustCall("frontend.list", nil, &fe)
	m := &metricsD{Daemon: d, t: t, api: "http://" + e["addr"].(string), key: strings.TrimSpace(string(key)),
		client: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableCompression: true}}}
	t.Cleanup(m.client.CloseIdleConnections)
	for _, f := range fe.FrontEnds {
		if f.Name == "metrics" && f.Address != "" {
			m.local = "http://" + f.Address
		}
	}
	return m
}

// get asks url with the Authorization header auth ("" for none) and
// returns the status, the headers and the body (gunzipped).
func (m *metricsD) get(method, url, auth string, hdr ...string) (int, http.Header, string) {
	m.t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := m.client.Do(req)
	if err != nil {
		m.t.Fatalf("%s %s: %v\n%s", method, url, err, daemontest.Tail(m.Log.String(), 3000))
	}
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		if r, err = gzip.NewReader(resp.Body); err != nil {
			m.t.Fatal(err)
		}
	}
	b, err := io.ReadAll(r)
	if err != nil {
		m.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// scrape is GET /metrics on the HTTP API with the key; it fails the test
// unless it is 200 in the text format.
func (m *metricsD) scrape() string {
	m.t.Helper()
	code, h, body := m.get("GET", m.api+"/metrics", "Bearer "+m.key)
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		m.t.Fatalf("GET /metrics: %d %s\n%.500s", code, h, body)
	}
	return body
}

// scrapeUntil scrapes until n jobs of lane net are counted finished (the
// counters hear job.finished just after job.wait answers) and returns the
// exposition and its series.
func (m *metricsD) scrapeUntil(n int) (string, map[string]float64) {
	m.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		text := m.scrape()
		got := daemontest.MetricSeries(m.t, text)
		var finished float64
		for k, v := range got {
			if strings.HasPrefix(k, `orchestrd_jobs_finished_total{lane="net",`) {
				finished += v
			}
		}
		if finished >= float64(n) || time.Now().After(deadline) {
			return text, got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantSeries checks each series of want has its value in got.
func wantSeries(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := got[k]; !ok || v != want[k] {
			t.Errorf("%s = %v (present: %v), want %v", k, v, ok, want[k])
		}
	}
}

// metricsJob is a job of lane net whose command line and output are
// weird text; it exits with code.
func metricsJob(code int) api.JobSpec {
	return api.JobSpec{Lane: "net", Argv: []string{"sh", "-c", `printf '%s\n' "$0"; printf '%s' "$0" >&2; exit ` + strconv.Itoa(code), metricsWeird}}
}

// GET /metrics: the key on the HTTP API (none 401, a wrong one 403), none
// on [metrics] listen; the jobs' counters by lane and state; nothing a
// job was given or wrote, and no id, in the exposition; the series stay
// the same however many more jobs run; both ways listed as front-ends;
// the listener gone once the daemon has stopped.
func TestMetricsEndpoints(t *testing.T) {
	m := metricsDaemon(t, metricsLanes+metricsFrontEnds)
	if m.local == "" {
		t.Fatalf("frontend.list has no metrics address\n%s", daemontest.Tail(m.Log.String(), 3000))
	}

	// The key, as the rest of the API wants it.
	code, _, body := m.get("GET", m.api+"/metrics", "")
	if code != 401 || !strings.Contains(body, `"code":1001`) {
		t.Fatalf("no key: %d %s", code, body)
	}
	code, _, body = m.get("GET", m.api+"/metrics", "Bearer "+strings.Repeat("0", 64))
	if code != 403 || !strings.Contains(body, `"code":1002`) || strings.Contains(body, "orchestrd_") {
		t.Fatalf("a wrong key: %d %s", code, body)
	}
	if code, _, _ = m.get("POST", m.api+"/metrics", "Bearer "+m.key); code == 200 {
		t.Fatalf("POST /metrics on the API: %d", code)
	}
	code, h, body := m.get("GET", m.api+"/metrics", "Bearer "+m.key, "Accept-Encoding", "gzip")
	if code != 200 || h.Get("Content-Encoding") != "" || !strings.Contains(body, "orchestrd_build_info") {
		t.Fatalf("with the key, asking gzip: %d %s, want it plain", code, h)
	}
	// The listener of its own: no key, /metrics only.
	code, _, body = m.get("GET", m.local+"/metrics", "")
	if code != 200 || !strings.Contains(body, "orchestrd_jobs_finished_total") || !strings.Contains(body, "process_open_fds") {
		t.Fatalf("[metrics] listen: %d\n%.300s", code, body)
	}
	for _, c := range []struct {
		method, path string
		want         int
	}{{"POST", "/metrics", 405}, {"GET", "/api/v1/status", 404}, {"GET", "/", 404}} {
		if code, _, _ := m.get(c.method, m.local+c.path, "Bearer "+m.key); code != c.want {
			t.Errorf("%s %s on [metrics] listen: %d, want %d", c.method, c.path, code, c.want)
		}
	}
	// The ready line names it too.
	daemontest.Eventually(t, 20*time.Second, "the ready line", func() bool { return strings.Contains(m.Log.String(), `"orchestrd ready"`) }, nil)
	if !strings.Contains(m.Log.String(), `"metrics":"`+strings.TrimPrefix(m.local, "http://")+`"`) {
		t.Errorf("the ready line does not give the metrics address %s:\n%s", m.local, daemontest.Tail(m.Log.String(), 2000))
	}

	// Jobs: 3 succeed, 2 fail, 1 is cancelled; a submission to no lane is
	// refused before any lane.
	var ids []string
	for _, c := range []int{0, 0, 0, 3, 3} {
		ids = append(ids, m.Submit(metricsJob(c)))
	}
	long := m.Submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "60"}})
	ids = append(ids, long)
	if err := m.Call("job.submit", api.JobSpec{Lane: metricsWeird, Command: "true"}, nil); err == nil {
		t.Fatal("a job on no lane was accepted")
	}
	m.WaitEvent("job.dispatched", func(e map[string]any) bool { return e["job_id"] == long })
	m.MustCall("job.cancel", map[string]string{"id": long}, nil)
	for _, id := range ids {
		m.Wait(id)
	}
	// job.wait answers once the end is committed; job.finished, which the
	// counters hear, comes just after.
	text, got := m.scrapeUntil(6)
	wantSeries(t, got, map[string]float64{
		`orchestrd_jobs_submitted_total{lane="net"}`:                     6,
		`orchestrd_jobs_finished_total{lane="net",state="succeeded"}`:    3,
		`orchestrd_jobs_finished_total{lane="net",state="failed"}`:       2,
		`orchestrd_jobs_finished_total{lane="net",state="cancelled"}`:    1,
		`orchestrd_jobs_finished_total{lane="net",state="timeout"}`:      0,
		`orchestrd_job_duration_seconds_count{lane="net"}`:               6,
		`orchestrd_lane_queued_jobs{lane="net"}`:                         0,
		`orchestrd_lane_running_jobs{lane="net"}`:                        0,
		`orchestrd_lane_runners{lane="net",state="ready"}`:               1,
		`orchestrd_lane_degraded{lane="net"}`:                            0,
		`orchestrd_http_requests_total{code="401",route="GET /metrics"}`: 1,
		`orchestrd_http_requests_total{code="403",route="GET /metrics"}`: 1,
		`orchestrd_eventlog_dropped_total`:                               0,
		`orchestrd_approvals_pending{source="reachout"}`:                 0,
		`orchestrd_subscriber_dropped_events_total`:                      0,
		`orchestrd_loops{status="running",type="code"}`:                  0,
		`orchestrd_clanker_repos{state="served"}`:                        0,
	})
	for _, k := range []string{`orchestrd_state_commits_total`, `orchestrd_state_commit_duration_seconds_count`,
		`orchestrd_state_writes_total`, `orchestrd_control_connections_total`, `go_goroutines`, `process_resident_memory_bytes`,
		`orchestrd_build_info{version="` + orchestrdVersion(t, m.Daemon) + `"}`} {
		if got[k] <= 0 {
			t.Errorf("%s = %v, want > 0", k, got[k])
		}
	}
	metricsNothingOf(t, text, ids)

	// Many more jobs, each its own weird text: not one more series.
	before := metricsKeys(got)
	var more []string
	for i := range 60 {
		spec := metricsJob(i % 2)
		spec.Argv[3] = fmt.Sprintf("%s-%d-%x", metricsWeird, i, i*7919)
		spec.Env = map[string]string{fmt.Sprintf("V%d", i): metricsWeird}
		more = append(more, m.Submit(spec))
	}
	for _, id := range more {
		m.Wait(id)
	}
	text, got = m.scrapeUntil(66)
	if added := slices.DeleteFunc(slices.Collect(maps.Keys(metricsKeys(got))), func(k string) bool { return before[k] }); len(added) > 0 {
		t.Errorf("60 more jobs added series: %v", added)
	}
	if n := got[`orchestrd_jobs_finished_total{lane="net",state="succeeded"}`] + got[`orchestrd_jobs_finished_total{lane="net",state="failed"}`]; n != 65 {
		t.Errorf("succeeded+failed %v, want 65", n)
	}
	metricsNothingOf(t, text, append(ids, more...))

	// Stopped, the daemon takes its listener with it.
	addr := strings.TrimPrefix(m.local, "http://")
	m.client.CloseIdleConnections()
	m.Stop()
	if m.Err() != nil {
		t.Fatalf("daemon exit: %v\n%s", m.Err(), daemontest.Tail(m.Log.String(), 3000))
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("[metrics] listen %s still accepts after the daemon stopped", addr)
	}
}

// metricsKeys are the series of orchestrd's own, but the HTTP API's
// (whose routes and codes the test's own requests add) and the ones
// promhttp counts.
func metricsKeys(s map[string]float64) map[string]bool {
	out := map[string]bool{}
	for k := range s {
		if strings.HasPrefix(k, "orchestrd_") && !strings.HasPrefix(k, "orchestrd_http_") {
			out[k] = true
		}
	}
	return out
}

// metricsNothingOf fails if the exposition holds a job id or any of the
// weird text the jobs were given and wrote.
func metricsNothingOf(t *testing.T, text string, ids []string) {
	t.Helper()
	for _, bad := range []string{"évil", "pwned", "passwd", "\u202e"} {
		if strings.Contains(text, bad) {
			t.Errorf("%q reached the exposition", bad)
		}
	}
	for _, id := range ids {
		if strings.Contains(text, id) {
			t.Errorf("job id %s reached the exposition", id)
		}
	}
}

// orchestrdVersion is what `orchestrd version` says (build_info's label).
func orchestrdVersion(t *testing.T, d *daemontest.Daemon) string {
	t.Helper()
	var r struct {
		Version string `json:"version"`
	}
	d.MustCall("status", nil, &r)
	return r.Version
}

// promtool check metrics passes on a real daemon's output after jobs of
// every end ran, on both ways to it.
func TestMetricsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian's prometheus package; .ci/run installs it)")
	}
	m := metricsDaemon(t, metricsLanes+metricsFrontEnds)
	var ids []string
	for _, c := range []int{0, 1, 0, 2} {
		ids = append(ids, m.Submit(metricsJob(c)))
	}
	ids = append(ids, m.Submit(api.JobSpec{Lane: "net", Argv: []string{"sleep", "60"}, TimeoutMs: 200}))
	for _, id := range ids {
		m.Wait(id)
	}
	m.scrapeUntil(len(ids))
	_, _, local := m.get("GET", m.local+"/metrics", "")
	for name, text := range map[string]string{"the HTTP API's": m.scrape(), "[metrics] listen's": local} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on %s /metrics: %v\n%s", name, err, out)
		}
		if !strings.Contains(text, `orchestrd_jobs_finished_total{lane="net",state="timeout"} 1`) {
			t.Errorf("%s /metrics has no timed-out job", name)
		}
	}
}

// metricsTestExecutor is the scripted test executor, built once.
func metricsTestExecutor(t *testing.T) string {
	return daemontest.Tool(t, "github.com/orchestrd/orchestrd/internal/testexecutor")
}

// metricsPod is one clanker pod request on the repo's socket: one line,
// one answer.
func metricsPod(t *testing.T, sock, typ string, payload any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"v": 1, "id": fmt.Sprintf("r-%d", time.Now().UnixNano()), "type": typ, "payload": payload})
	c, err := net.DialTimeout("unix", sock, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	var r map[string]any
	if err := json.Unmarshal(line, &r); err != nil || r["ok"] != true {
		t.Fatalf("%s answered %s (%v)", typ, line, err)
	}
	return r
}

// The other domains' metrics on a real daemon: an executor task's
// messages and end, the approval it asked (pending, then its time to
// resolution), clanker's tasks by status and its pause.
func TestMetricsDomains(t *testing.T) {
	exe := metricsTestExecutor(t)
	repo := daemontest.ShortTemp(t)
	cfg := metricsLanes + metricsFrontEnds + fmt.Sprintf(`
[executors.scripted]
command = [%q]
instances = 1
[[clanker.repos]]
path = %q
tick = "50ms"
usage_limit_pause = "1h"
`, exe, repo)
	m := metricsDaemon(t, cfg)
	m.WaitEvent("clanker.repo_started", nil)
	local := func() map[string]float64 {
		_, _, body := m.get("GET", m.local+"/metrics", "")
		return daemontest.MetricSeries(t, body)
	}
	waitSeries := func(what string, want map[string]float64) map[string]float64 {
		t.Helper()
		var got map[string]float64
		daemontest.Eventually(t, 30*time.Second, what, func() bool {
			got = local()
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		}, func() string {
			var b strings.Builder
			for k := range want {
				fmt.Fprintf(&b, "%s = %v, want %v\n", k, got[k], want[k])
			}
			return b.String()
		})
		return got
	}

	// clanker: three tasks, one taken by a pod, then a usage limit.
	sock := filepath.Join(repo, ".clanker", "ipc.sock")
	for _, id := range []string{"t1", "t2", "t3"} {
		metricsPod(t, sock, "task_create", map[string]any{"task": map[string]any{"id": id, "prompt": metricsWeird}})
	}
	metricsPod(t, sock, "task_request", map[string]any{"podId": "slave-1"})
	metricsPod(t, sock, "usage_limit", map[string]any{"podId": "slave-1", "role": "slave"})
	waitSeries("clanker's tasks and pause", map[string]float64{
		`orchestrd_clanker_tasks{status="queued"}`:  2,
		`orchestrd_clanker_tasks{status="running"}`: 1,
		`orchestrd_clanker_repos_paused`:            1,
		`orchestrd_clanker_pauses_total`:            1,
		`orchestrd_clanker_repos{state="served"}`:   1,
	})

	// An executor task: five messages, then a permission a person is asked
	// (an approval of source executor), allowed.
	var r struct {
		TaskID string `json:"task_id"`
	}
	prompt, _ := json.Marshal(map[string]any{"steps": []map[string]any{
		{"op": "message", "n": 5, "text": metricsWeird},
		{"op": "permission", "tool": "Bash", "input": map[string]any{"command": "git push " + metricsWeird}},
		{"op": "usage", "input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 7, "cost_usd": 0.25}}})
	m.MustCall("task.execute", api.TaskSpec{Executor: "scripted", Cwd: m.Home, Prompt: string(prompt)}, &r)
	var appr api.Approval
	daemontest.Eventually(t, 30*time.Second, "the task's approval pending", func() bool {
		var l struct {
			Approvals []api.Approval `json:"approvals"`
		}
		m.MustCall("approval.list", map[string]any{}, &l)
		for _, a := range l.Approvals {
			if a.TaskID == r.TaskID {
				appr = a
				return true
			}
		}
		return false
	}, func() string {
		var task struct {
			Task api.TaskRecord `json:"task"`
		}
		m.Call("task.get", map[string]any{"id": r.TaskID}, &task)
		return fmt.Sprintf("task %+v\n%s", task.Task, daemontest.Tail(m.Log.String(), 4000))
	})
	waitSeries("the approval pending", map[string]float64{
		`orchestrd_approvals_pending{source="executor"}`:            1,
		`orchestrd_approvals_requested_total{source="executor"}`:    1,
		`orchestrd_executor_tasks{pool="scripted",state="running"}`: 1,
		`orchestrd_executors{pool="scripted",state="busy"}`:         1,
	})
	m.MustCall("approval.resolve", map[string]any{"id": appr.ID, "decision": "Allow", "by": "cli"}, nil)
	var done struct {
		Task api.TaskRecord `json:"task"`
	}
	m.Check(m.CallWithin(daemontest.WaitTimeout+daemontest.CallTimeout, "task.wait", map[string]any{"id": r.TaskID, "timeout_ms": daemontest.WaitTimeout.Milliseconds()}, &done))
	if done.Task.State != api.TaskCompleted {
		t.Fatalf("task %+v", done.Task)
	}
	got := waitSeries("the task's end", map[string]float64{
		`orchestrd_approvals_pending{source="executor"}`:                                    0,
		`orchestrd_executor_tasks_finished_total{pool="scripted",state="completed"}`:        1,
		`orchestrd_approval_resolution_seconds_count{decision="allowed",source="executor"}`: 1,
		`orchestrd_executor_tasks{pool="scripted",state="running"}`:                         0,
		`orchestrd_agent_tokens_total{kind="input",pool="scripted"}`:                        100,
		`orchestrd_agent_tokens_total{kind="output",pool="scripted"}`:                       20,
		`orchestrd_agent_tokens_total{kind="cache_read",pool="scripted"}`:                   7,
		`orchestrd_agent_tokens_total{kind="cache_write",pool="scripted"}`:                  0,
		`orchestrd_agent_cost_usd_total{pool="scripted"}`:                                   0.25,
	})
	if n := got[`orchestrd_executor_messages_total{pool="scripted"}`]; n < 5 {
		t.Errorf("executor_messages_total %v, want at least the task's 5", n)
	}
	_, _, body := m.get("GET", m.local+"/metrics", "")
	metricsNothingOf(t, body, []string{r.TaskID, appr.ID, "slave-1"})
}

// promAPI is a running Prometheus's HTTP API.
type promAPI struct {
	t      *testing.T
	base   string
	client *http.Client
}

// startPrometheus runs the prometheus binary on config with its own
// storage under dir, on a free loopback port (it takes no port 0: a free
// one is chosen, and another tried if it is taken meanwhile), until the
// test ends: then it is stopped (SIGTERM, SIGKILL after 20 s) and waited
// for.
func startPrometheus(t *testing.T, bin, dir, config string) *promAPI {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		var out bytes.Buffer
		var outMu sync.Mutex
		w := writerFunc(func(p []byte) (int, error) { outMu.Lock(); defer outMu.Unlock(); return out.Write(p) })
		cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data-%d", attempt)),
			"--web.listen-address="+addr, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = w, w
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		pid := cmd.Process.Pid
		stop := func() {
			syscall.Kill(-pid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				syscall.Kill(-pid, syscall.SIGKILL)
				<-exited
			}
		}
		p := &promAPI{t: t, base: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
		deadline := time.Now().Add(60 * time.Second)
		for {
			if resp, err := p.client.Get(p.base + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					t.Cleanup(func() { p.client.CloseIdleConnections(); stop() })
					return p
				}
			}
			select {
			case <-exited:
				outMu.Lock()
				log := out.String()
				outMu.Unlock()
				if strings.Contains(log, "address already in use") && attempt < 3 {
					break
				}
				t.Fatalf("prometheus exited: %v\n%s", cmd.ProcessState, log)
			case <-time.After(100 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				stop()
				t.Fatalf("prometheus not ready within 60 s\n%s", out.String())
			}
			break
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// promSample is one series of an instant query's answer.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query; ok is false when Prometheus refused it.
func (p *promAPI) query(q string) (samples []promSample, errMsg string) {
	p.t.Helper()
	resp, err := p.client.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		p.t.Fatalf("query %s: %v", q, err)
	}
	if r.Status != "success" {
		return nil, r.Error
	}
	if r.Data.ResultType == "vector" {
		if err := json.Unmarshal(r.Data.Result, &samples); err != nil {
			p.t.Fatalf("query %s: %v", q, err)
		}
	}
	return samples, ""
}

// value is the value of q's one sample, or -1 when it has none.
func (p *promAPI) value(q string) float64 {
	p.t.Helper()
	s, e := p.query(q)
	if e != "" {
		p.t.Fatalf("query %s: %s", q, e)
	}
	if len(s) != 1 {
		return -1
	}
	v, _ := strconv.ParseFloat(fmt.Sprint(s[0].Value[1]), 64)
	return v
}

// promWait polls cond every 250 ms until it holds, failing after within.
func promWait(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// metricsDashboardExprs are the queries of examples/grafana-orchestrd.json,
// its variables replaced as Grafana would for "all".
func metricsDashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../examples/grafana-orchestrd.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("$__rate_interval", "1m", "$job", ".+", "$lane", ".+", "$pool", ".+")
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, r.Replace(tg.Expr))
		}
	}
	if len(out) < 20 {
		t.Fatalf("the dashboard has %d queries", len(out))
	}
	return out
}

var metricName = regexp.MustCompile(`\b(?:orchestrd|go|process)_[a-z_]+\b`)

// A real Prometheus scrapes a real daemon both ways examples/prometheus.yml
// says (the Bearer key from the home's http.key, and [metrics] listen);
// the jobs a test runs show in orchestrd_jobs_finished_total through
// Prometheus's own query API; every query of the example Grafana
// dashboard is valid there, and the ones on series the daemon has answer.
func TestMetricsPrometheusScrapes(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (Debian's prometheus package; .ci/run installs it)")
	}
	m := metricsDaemon(t, metricsLanes+metricsFrontEnds+"[executors.idle]\ncommand = [\"/bin/true\"]\ninstances = 0\n")

	// examples/prometheus.yml, on this daemon, its second job (commented
	// out) uncommented, with examples/orchestrd-alerts.yml beside it.
	example, err := os.ReadFile("../../examples/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(example)
	for _, r := range [][2]string{
		{"scrape_interval: 15s", "scrape_interval: 1s"},
		{"evaluation_interval: 15s", "evaluation_interval: 1s"},
		{"/home/USER/.orchestrd/http.key", filepath.Join(m.Home, "http.key")},
		{`targets: ["127.0.0.1:19532"]`, `targets: [` + strconv.Quote(strings.TrimPrefix(m.api, "http://")) + `]`},
		{"  # - job_name: orchestrd-local\n  #   metrics_path: /metrics\n  #   static_configs:\n  #     - targets: [\"127.0.0.1:9464\"]\n",
			"  - job_name: orchestrd-local\n    metrics_path: /metrics\n    static_configs:\n      - targets: [" + strconv.Quote(strings.TrimPrefix(m.local, "http://")) + "]\n"},
		{"rule_files:\n  - orchestrd-alerts.yml\n", "rule_files:\n  - orchestrd-alerts.yml\n"},
	} {
		if strings.Count(cfg, r[0]) != 1 {
			t.Fatalf("examples/prometheus.yml has %q %d times, want once", r[0], strings.Count(cfg, r[0]))
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile("../../examples/orchestrd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "orchestrd-alerts.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, promtool, "check", "config", config).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("promtool check config on examples/prometheus.yml: %v\n%s", err, out)
		}
	}
	p := startPrometheus(t, bin, dir, config)

	const jobs = 5
	var ids []string
	for i := range jobs {
		ids = append(ids, m.Submit(metricsJob(i%2)))
	}
	for _, id := range ids {
		m.Wait(id)
	}
	for _, job := range []string{"orchestrd", "orchestrd-local"} {
		q := fmt.Sprintf(`sum(orchestrd_jobs_finished_total{job=%q,lane="net"})`, job)
		promWait(t, 60*time.Second, "Prometheus to see the jobs through "+job, func() bool { return p.value(q) == jobs })
		if v := p.value(fmt.Sprintf(`up{job=%q}`, job)); v != 1 {
			t.Errorf("up{job=%q} = %v", job, v)
		}
		if v := p.value(fmt.Sprintf(`orchestrd_jobs_finished_total{job=%q,lane="net",state="failed"}`, job)); v != 2 {
			t.Errorf("failed jobs through %s: %v, want 2", job, v)
		}
	}

	// The dashboard's queries: valid PromQL; on the series this daemon
	// has (every name a query uses known to Prometheus), an answer.
	resp, err := p.client.Get(p.base + "/api/v1/label/__name__/values")
	if err != nil {
		t.Fatal(err)
	}
	var names struct {
		Data []string `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&names)
	resp.Body.Close()
	known := map[string]bool{}
	for _, n := range names.Data {
		known[n] = true
	}
	answered := 0
	for _, q := range metricsDashboardExprs(t) {
		if _, e := p.query(q); e != "" {
			t.Errorf("the dashboard's %s: %s", q, e)
			continue
		}
		all := true
		for _, n := range metricName.FindAllString(q, -1) {
			all = all && known[n]
		}
		if !all {
			continue // a histogram or counter nothing has touched yet
		}
		promWait(t, 30*time.Second, "an answer to the dashboard's "+q, func() bool { s, _ := p.query(q); return len(s) > 0 })
		answered++
	}
	t.Logf("%d of the dashboard's %d queries answered (the others wait for a series nothing has touched yet)", answered, len(metricsDashboardExprs(t)))
	if answered < 20 {
		t.Errorf("only %d of the dashboard's queries answered", answered)
	}

	// The alerting rules: every one loaded, evaluated without an error on
	// this daemon's series, and none pending or firing (nothing is wrong).
	alerts := alertRules(t)
	var rs struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name           string `json:"name"`
					Type           string `json:"type"`
					Health         string `json:"health"`
					State          string `json:"state"`
					LastError      string `json:"lastError"`
					LastEvaluation string `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	promWait(t, 60*time.Second, "Prometheus to evaluate every alerting rule", func() bool {
		rs.Data.Groups = nil
		resp, err := p.client.Get(p.base + "/api/v1/rules?type=alert")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&rs) != nil {
			return false
		}
		n := 0
		for _, g := range rs.Data.Groups {
			for _, r := range g.Rules {
				if r.Health == "unknown" || strings.HasPrefix(r.LastEvaluation, "0001-") {
					return false
				}
				n++
			}
		}
		return n == len(alerts)
	})
	for _, g := range rs.Data.Groups {
		for _, r := range g.Rules {
			if _, ok := alerts[r.Name]; !ok || r.Health != "ok" || r.LastError != "" || r.State != "inactive" {
				t.Errorf("the alerting rule %s: health %s, state %s, error %q (want ok, inactive)", r.Name, r.Health, r.State, r.LastError)
			}
		}
	}
}

// alertRules are examples/orchestrd-alerts.yml's alerts: name -> expr.
func alertRules(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../examples/orchestrd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^\s+- alert: (\S+)\n\s+expr: (.+)$`).FindAllStringSubmatch(string(b), -1)
	if n := strings.Count(string(b), "- alert:"); n != len(names) || n == 0 {
		t.Fatalf("examples/orchestrd-alerts.yml has %d alerts, %d of them with a one-line expr on the next line", n, len(names))
	}
	out := map[string]string{}
	for _, m := range names {
		out[m[1]] = m[2]
	}
	return out
}

// examples/orchestrd-alerts.yml: promtool check rules passes; it alerts on
// what an operator must know (a lane degraded, runners restarting,
// approvals waiting long or piling up, a queue near its limit, events
// dropped, a fleet node lost); each rule's expression, on series where
// some things are wrong, returns those and no other (promtool test rules).
// daemon/metrics' TestAlertNamesExist checks every metric they name is one
// the daemon exports; TestMetricsPrometheusScrapes evaluates them in a
// real Prometheus on a real daemon.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	alerts := alertRules(t)
	for _, a := range []string{"OrchestrdLaneDegraded", "OrchestrdRunnerRestarts", "OrchestrdApprovalsWaiting", "OrchestrdApprovalsPiling",
		"OrchestrdQueueNearLimit", "OrchestrdEventLogDrops", "OrchestrdSubscriberDrops", "OrchestrdNodeLost"} {
		if _, ok := alerts[a]; !ok {
			t.Errorf("examples/orchestrd-alerts.yml has no alert %s", a)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian's prometheus package; .ci/run installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "rules", "../../examples/orchestrd-alerts.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", len(alerts))) {
		t.Fatalf("promtool check rules examples/orchestrd-alerts.yml: %v\n%s", err, out)
	}

	// Each rule's expression picks out what it is about and nothing else,
	// on series where some things are wrong (promtool test rules): by the
	// labels of each series it returns at the 30th minute.
	fires := map[string][]string{
		"OrchestrdDown":               {`instance="a"`},
		"OrchestrdLaneDegraded":       {`instance="a",lane="net"`},
		"OrchestrdRunnerRestarts":     {`instance="a",lane="net"`},
		"OrchestrdApprovalsWaiting":   {`instance="a"`, `instance="c"`},
		"OrchestrdApprovalsPiling":    {`instance="a"`},
		"OrchestrdQueueNearLimit":     {`instance="a",lane="net"`},
		"OrchestrdJobsRejected":       {`instance="a",lane="net",reason="queue_full"`},
		"OrchestrdEventLogDrops":      {`instance="a"`},
		"OrchestrdSubscriberDrops":    {`instance="b"`},
		"OrchestrdStoreWriteFailures": {`instance="b"`},
		"OrchestrdNodeLost":           {`reason="heartbeat_expired"`},
	}
	var test strings.Builder
	test.WriteString("rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n")
	for _, in := range [][2]string{
		{`up{instance="a"}`, "0x30"}, {`up{instance="b"}`, "1x30"},
		{`orchestrd_lane_degraded{instance="a",lane="net"}`, "1x30"}, {`orchestrd_lane_degraded{instance="a",lane="gpu"}`, "0x30"},
		{`orchestrd_runner_restarts_total{instance="a",lane="net",reason="killed_memory_limit"}`, "0+1x30"},
		{`orchestrd_runner_restarts_total{instance="a",lane="gpu",reason="exited"}`, "0x25 1x5"},
		{`orchestrd_approvals_pending{instance="a",source="plan"}`, "25x30"},
		{`orchestrd_approvals_pending{instance="b",source="plan"}`, "0x30"},
		{`orchestrd_approvals_pending{instance="c",source="executor"}`, "3x30"},
		{`orchestrd_lane_queued_jobs{instance="a",lane="net"}`, "90x30"}, {`orchestrd_lane_queue_limit{instance="a",lane="net"}`, "100x30"},
		{`orchestrd_lane_queued_jobs{instance="a",lane="gpu"}`, "5x30"}, {`orchestrd_lane_queue_limit{instance="a",lane="gpu"}`, "0x30"},
		{`orchestrd_lane_queued_jobs{instance="a",lane="heavy"}`, "10x30"}, {`orchestrd_lane_queue_limit{instance="a",lane="heavy"}`, "100x30"},
		{`orchestrd_jobs_rejected_total{instance="a",lane="net",reason="queue_full"}`, "0+1x30"},
		{`orchestrd_jobs_rejected_total{instance="a",lane="gpu",reason="queue_full"}`, "3x30"},
		{`orchestrd_eventlog_dropped_total{instance="a"}`, "0+5x30"}, {`orchestrd_eventlog_dropped_total{instance="b"}`, "7x30"},
		{`orchestrd_subscriber_dropped_events_total{instance="a"}`, "0x30"}, {`orchestrd_subscriber_dropped_events_total{instance="b"}`, "0x25 40x5"},
		{`orchestrd_state_write_failures_total{instance="a"}`, "0x30"}, {`orchestrd_state_write_failures_total{instance="b"}`, "0x25 1x5"},
		{`orchestrd_cluster_nodes_lost_total{instance="a",reason="heartbeat_expired"}`, "0x20 1x10"},
		{`orchestrd_cluster_nodes_lost_total{instance="a",reason="restarted"}`, "1x30"},
	} {
		series := strings.Replace(in[0], "{", `{job="orchestrd",`, 1)
		fmt.Fprintf(&test, "      - series: '%s'\n        values: '%s'\n", series, in[1])
	}
	test.WriteString("    promql_expr_test:\n")
	for _, a := range slices.Sorted(maps.Keys(alerts)) {
		want, ok := fires[a]
		if !ok {
			t.Fatalf("the alert %s is not tested here: say which series it picks out", a)
		}
		fmt.Fprintf(&test, "      - expr: '(%s) * 0 + 1'\n        eval_time: 30m\n        exp_samples:\n", strings.ReplaceAll(alerts[a], "'", "''"))
		for _, l := range want {
			fmt.Fprintf(&test, "          - labels: '{job=\"orchestrd\",%s}'\n            value: 1\n", l)
		}
	}
	file := filepath.Join(t.TempDir(), "alerts-test.yml")
	if err := os.WriteFile(file, []byte(test.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules on examples/orchestrd-alerts.yml's expressions: %v\n%s\n%s", err, out, test.String())
	}
}
