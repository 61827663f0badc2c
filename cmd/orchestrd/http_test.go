package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// httpDaemon starts a daemon whose Loopsy API listens on a free loopback
// port, extra added to its [http] table; it returns the base URL and the
// daemon's key.
func httpDaemon(t *testing.T, extra string) (*testDaemon, string, string) {
	t.Helper()
	return httpDaemonAt(t, shortTemp(t), fastConfig, extra)
}

// httpDaemonAt is httpDaemon in a home the test prepared, with its own
// lanes config.
func httpDaemonAt(t *testing.T, home, lanes, extra string) (*testDaemon, string, string) {
	t.Helper()
	d := startDaemonAt(t, home, lanes+"\n[http]\nlisten = \"127.0.0.1:0\"\n"+extra)
	e := d.waitEvent("http.listening", nil)
	key, err := os.ReadFile(filepath.Join(d.home, "http.key"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(d.home, "http.key")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("http.key mode %v", fi.Mode().Perm())
	}
	return d, "http://" + e["addr"].(string) + "/api/v1", strings.TrimSpace(string(key))
}

type httpAnswer struct {
	status int
	body   map[string]any
	raw    string
}

func httpDo(t *testing.T, method, url, key, body string) httpAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := readAnswer(resp)
	return a
}

// readAnswer reads resp's body and closes it: the answer, with the body
// decoded where it is JSON, and the error of the read.
func readAnswer(resp *http.Response) (httpAnswer, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := httpAnswer{status: resp.StatusCode, raw: string(b)}
	_ = json.Unmarshal(b, &a.body)
	return a, err
}

func wantHTTPError(t *testing.T, a httpAnswer, status, code int) {
	t.Helper()
	e, _ := a.body["error"].(map[string]any)
	if a.status != status || e == nil || e["code"] != float64(code) || e["message"] == "" {
		t.Fatalf("answer %d %s, want %d with error code %d and a message", a.status, a.raw, status, code)
	}
}

// Loopsy's API: keys, errors, /execute through a lane, the denylist.
func TestHTTPExecute(t *testing.T) {
	t.Parallel()
	d, base, key := httpDaemon(t, "")
	if a := httpDo(t, "GET", base+"/health", "", ""); a.status != 200 || a.body["status"] != "ok" || a.body["nodeId"] == "" {
		t.Fatalf("health: %d %s", a.status, a.raw)
	}
	wantHTTPError(t, httpDo(t, "GET", base+"/status", "", ""), 401, 1001)
	wantHTTPError(t, httpDo(t, "GET", base+"/status", strings.Repeat("0", 64), ""), 403, 1002)
	d.waitEvent("http.auth_failed", func(e map[string]any) bool { return e["reason"] == "invalid_key" })
	if a := httpDo(t, "GET", base+"/status", key, ""); a.status != 200 || a.body["lanes"] == nil {
		t.Fatalf("status: %d %s", a.status, a.raw)
	}
	id := httpDo(t, "GET", base+"/identity", key, "")
	if id.body["nodeId"] == "" || id.body["platform"] != "linux" {
		t.Fatalf("identity: %s", id.raw)
	}
	// The node id is the store's: the same after a restart.
	if out, _, code := runCLI(t, "http", "key", "--home", d.home); code != 0 || strings.TrimSpace(out) != key {
		t.Fatalf("orchestrd http key: %d %q", code, out)
	}

	a := httpDo(t, "POST", base+"/execute", key, `{"command":"sh","args":["-c","printf 'out\\n'; printf 'err\\n' >&2; exit 3"]}`)
	if a.status != 200 || a.body["stdout"] != "out\n" || a.body["stderr"] != "err\n" || a.body["exitCode"] != 3.0 || a.body["killed"] != false {
		t.Fatalf("execute: %d %s", a.status, a.raw)
	}
	job := a.body["jobId"].(string)
	// It ran as an orchestrd job on the exec lane.
	var rec struct{ Job struct{ Lane, State string } }
	d.mustCall("job.get", map[string]any{"id": job}, &rec)
	if rec.Job.Lane != "net" || rec.Job.State != "failed" {
		t.Fatalf("job %s: %+v", job, rec.Job)
	}
	d.waitEvent("http.exec_started", func(e map[string]any) bool { return e["job_id"] == job && e["key_name"] == "self" })

	// A timeout kills it.
	a = httpDo(t, "POST", base+"/execute", key, `{"command":"sleep","args":["30"],"timeout":200}`)
	if a.status != 200 || a.body["killed"] != true {
		t.Fatalf("timeout: %d %s", a.status, a.raw)
	}

	wantHTTPError(t, httpDo(t, "POST", base+"/execute", key, `{"command":"/bin/rm","args":["-rf","/"]}`), 403, 3001)
	d.waitEvent("http.exec_denied", func(e map[string]any) bool { return e["command"] == "/bin/rm" })
	for _, e := range d.events() {
		if e["kind"] == "http.exec_started" && e["command"] == "/bin/rm" {
			t.Fatal("a denied command ran")
		}
	}
	wantHTTPError(t, httpDo(t, "POST", base+"/execute", key, `{"command":`), 400, 9003)
	wantHTTPError(t, httpDo(t, "POST", base+"/execute", key, `{"args":["x"]}`), 400, 9003)
	wantHTTPError(t, httpDo(t, "POST", base+"/execute", key, `{"command":"ls","cwd":"relative"}`), 400, 9003)
	wantHTTPError(t, httpDo(t, "POST", base+"/execute", key, `{"command":"`+strings.Repeat("a", 2<<20)+`"}`), 413, 9003)
	wantHTTPError(t, httpDo(t, "GET", base+"/nothing", key, ""), 404, 9003)
	wantHTTPError(t, httpDo(t, "DELETE", base+"/execute/j-none", key, ""), 404, 3006)
}

// sseEvent is one server-sent event of /execute/stream.
type sseEvent struct {
	Type   string `json:"type"`
	Data   string `json:"data"`
	JobID  string `json:"jobId"`
	Killed bool   `json:"killed"`
	Error  string `json:"error"`
}

// readSSE reads events until the stream ends (or n events, if n > 0).
func readSSE(t *testing.T, body io.Reader, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "data: ") {
			continue
		}
		var e sseEvent
		if err := json.Unmarshal([]byte(l[6:]), &e); err != nil {
			t.Fatalf("event %q: %v", l, err)
		}
		out = append(out, e)
		if n > 0 && len(out) == n {
			break
		}
	}
	return out
}

// drainSSE reads a stream to its end and returns its last event, decoding
// no other: a long stream's JSON (6 bytes of it for each NUL of
// /dev/zero) costs the race-built test far more than the daemon that sent
// it.
func drainSSE(t *testing.T, body io.Reader) sseEvent {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var last []byte
	for sc.Scan() {
		if l := sc.Bytes(); bytes.HasPrefix(l, []byte("data: ")) {
			last = append(last[:0], l[6:]...)
		}
	}
	var e sseEvent
	if err := json.Unmarshal(last, &e); err != nil {
		t.Fatalf("the stream's last event %q: %v (read error: %v)", last, err, sc.Err())
	}
	return e
}

func startStream(t *testing.T, ctx context.Context, base, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/execute/stream", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	return resp
}

// /execute/stream sends every chunk in order, then exit; a streamed job
// is cancelled by DELETE or by its client going away; max_concurrent holds.
func TestHTTPStream(t *testing.T) {
	t.Parallel()
	d, base, key := httpDaemon(t, "max_concurrent = 2\n")
	resp := startStream(t, context.Background(), base, key, `{"command":"sh","args":["-c","for i in 1 2 3 4 5; do echo line$i; done; echo oops >&2; exit 4"]}`)
	evs := readSSE(t, resp.Body, 0)
	resp.Body.Close()
	var out strings.Builder
	for _, e := range evs[:len(evs)-1] {
		if e.Type == "stdout" {
			out.WriteString(e.Data)
		}
	}
	last := evs[len(evs)-1]
	if out.String() != "line1\nline2\nline3\nline4\nline5\n" || last.Type != "exit" || last.Data != "4" || last.JobID == "" {
		t.Fatalf("stream: %q, last %+v", out.String(), last)
	}
	for _, e := range evs {
		if e.JobID != last.JobID {
			t.Fatalf("event %+v without the job's id %s", e, last.JobID)
		}
	}

	// DELETE cancels a streamed job; its stream ends with killed.
	resp = startStream(t, context.Background(), base, key, `{"command":"sh","args":["-c","echo started; exec sleep 60"]}`)
	first := readSSE(t, resp.Body, 1)
	job := first[0].JobID
	jobs := httpDo(t, "GET", base+"/execute/jobs", key, "")
	if !strings.Contains(jobs.raw, job) {
		t.Fatalf("jobs %s lack %s", jobs.raw, job)
	}
	// Two running (this one and the next): the third is refused.
	ctx2, cancel2 := context.WithCancel(context.Background())
	resp2 := startStream(t, ctx2, base, key, `{"command":"sh","args":["-c","echo started; exec sleep 60"]}`)
	job2 := readSSE(t, resp2.Body, 1)[0].JobID
	wantHTTPError(t, httpDo(t, "POST", base+"/execute", key, `{"command":"true"}`), 429, 3003)
	if a := httpDo(t, "DELETE", base+"/execute/"+job, key, ""); a.status != 200 || a.body["success"] != true {
		t.Fatalf("cancel: %d %s", a.status, a.raw)
	}
	rest := readSSE(t, resp.Body, 0)
	resp.Body.Close()
	if len(rest) == 0 || rest[len(rest)-1].Type != "exit" || !rest[len(rest)-1].Killed {
		t.Fatalf("after the cancel: %+v", rest)
	}
	// A client that goes away cancels its job.
	cancel2()
	resp2.Body.Close()
	e := d.waitEvent("job.finished", func(e map[string]any) bool { return e["job_id"] == job2 })
	if e["state"] != "cancelled" {
		t.Fatalf("the gone client's job: %v", e)
	}
	d.waitEvent("http.exec_cancelled", func(e map[string]any) bool { return e["job_id"] == job2 && e["reason"] == "client_gone" })
	eventually(t, 10*time.Second, "no execution running", func() bool {
		return !strings.Contains(httpDo(t, "GET", base+"/execute/jobs", key, "").raw, "jobId")
	})
}

// A port already taken, named by [http] listen: the daemon says why in
// one line and its event log, and exits 2 before it starts anything (on
// by default only, it goes on without the API: TestSecondDaemonFrontEndsOff).
func TestHTTPPortTaken(t *testing.T) {
	t.Parallel()
	_, base, _ := httpDaemon(t, "")
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/api/v1")
	home := startupHome(t, fmt.Sprintf("[http]\nlisten = %q\n", addr))
	cmd := serveCmd(home, nil)
	out, code := serveOutput(t, cmd)
	want := "orchestrd serve: the HTTP API ([http] listen) cannot listen on " + addr + ": in use by another process\n"
	if code != 2 || out != want {
		t.Fatalf("serve: exit %d, output %q; want exit 2 and %q", code, out, want)
	}
	var unavailable map[string]any
	for _, e := range readEvents(t, home) {
		if e["kind"] == "http.unavailable" {
			unavailable = e
		}
	}
	if msg, _ := unavailable["error"].(string); !strings.Contains(msg, "address already in use") {
		t.Fatalf("http.unavailable %v", unavailable)
	}
}
