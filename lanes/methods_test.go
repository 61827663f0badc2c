package lanes

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
	"github.com/orchestrd/orchestrd/internal/testio"

	"github.com/orchestrd/orchestrd/wire"
)

// methodTimeout bounds the wait for a method's answer.
const methodTimeout = 30 * time.Second

// testMux collects the methods registered with it.
type testMux struct{ apitest.Mux }

// call hands a call of method with params (encoded as JSON unless nil) to
// its handler.
func (mx testMux) call(t *testing.T, method string, params any) *apitest.Call {
	t.Helper()
	return mx.Start(t, method, params)
}

// mustAnswer waits for a result and decodes it into v.
func (mx testMux) mustAnswer(t *testing.T, method string, params, v any) {
	t.Helper()
	res, err := mx.call(t, method, params).Wait(t, methodTimeout)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if v != nil {
		if err := json.Unmarshal(res, v); err != nil {
			t.Fatalf("%s: result %s: %v", method, res, err)
		}
	}
}

// mustFail waits for an error.
func (mx testMux) mustFail(t *testing.T, method string, params any) *api.Error {
	t.Helper()
	res, err := mx.call(t, method, params).Wait(t, methodTimeout)
	if err == nil {
		t.Fatalf("%s: result %s, want an error", method, res)
	}
	return err
}

// waiters counts the store's pending waits.
func waiters(m *Manager) int {
	s := m.sh.store
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.jobs {
		n += len(e.waiters)
	}
	return n
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testio.Eventually(t, 30*time.Second, what, cond)
}

// startMethodLanes starts the default lane, with one runner and one slot,
// and lane "idle", with no runner (its jobs stay queued) and room for two
// queued jobs; it registers the lane methods.
func startMethodLanes(t *testing.T) (*Manager, testMux) {
	lc := defaultLane(1, 1, NetworkHost, 0)
	lc.Spares = 0
	idle := defaultLane(0, 1, NetworkHost, 0)
	idle.Spares, idle.QueueLimit = 0, 2
	m, _ := startTestLanes(t, map[string]LaneConfig{api.DefaultLane: lc, "idle": idle})
	mx := testMux{apitest.Mux{}}
	m.Register(mx)
	return m, mx
}

func TestRegisterLaneMethods(t *testing.T) {
	_, mx := startMethodLanes(t)
	var names []string
	for n := range mx.Mux {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"job.cancel", "job.get", "job.list", "job.stdin", "job.stream", "job.submit", "job.wait", "lane.list"}; !slices.Equal(names, want) {
		t.Fatalf("registered %v, want %v", names, want)
	}
}

func TestLaneMethods(t *testing.T) {
	m, mx := startMethodLanes(t)

	// submit: the lane defaults to no-net.
	var sub jobIDResult
	mx.mustAnswer(t, "job.submit", api.JobSpec{Argv: []string{"echo", "hi"}, Cwd: "/tmp"}, &sub)
	if sub.JobID == "" {
		t.Fatal("job.submit: empty job_id")
	}
	var got jobRecordResult
	mx.mustAnswer(t, "job.get", idParams{ID: sub.JobID}, &got)
	if got.Job.ID != sub.JobID || got.Job.Lane != api.DefaultLane {
		t.Fatalf("job.get = %+v", got.Job)
	}
	mx.mustAnswer(t, "job.get", map[string]string{"job_id": sub.JobID}, &got)
	if got.Job.ID != sub.JobID {
		t.Fatalf("job.get by job_id = %+v", got.Job)
	}
	var sub2 jobIDResult
	mx.mustAnswer(t, "job.submit", api.JobSpec{Lane: "idle", Command: "true"}, &sub2)

	unknownField := wire.DecodeParams(wire.Request{Method: "job.submit", Params: []byte(`{"argv":["x"],"nope":1}`)}, &api.JobSpec{})
	for _, tc := range []struct {
		name   string
		method string
		params any
		code   int
		msg    string
	}{
		{"submit unknown field", "job.submit", map[string]any{"argv": []string{"x"}, "nope": 1}, api.CodeInvalidParams, unknownField.Message},
		{"submit unknown lane", "job.submit", api.JobSpec{Lane: "moon", Argv: []string{"x"}}, api.CodeNotFound, `unknown lane "moon"; the daemon's lanes are idle, no-net`},
		{"submit nothing to run", "job.submit", api.JobSpec{}, api.CodeInvalidParams, "job needs command or argv"},
		{"submit wrong type", "job.submit", map[string]any{"argv": "x"}, api.CodeInvalidParams, "argv"},
		{"submit bad env", "job.submit", api.JobSpec{Argv: []string{"x"}, Env: map[string]string{"A=B": "c"}}, api.CodeInvalidParams, `env key "A=B" contains '='`},
		{"get missing", "job.get", idParams{ID: "j-404"}, api.CodeNotFound, "job j-404 not found"},
		{"get no id", "job.get", nil, api.CodeInvalidParams, "invalid params for job.get: id is required (job_id is taken too)"},
		{"get two ids", "job.get", idParams{ID: "j-1", JobID: "j-2"}, api.CodeInvalidParams, `invalid params for job.get: id "j-1" and job_id "j-2" differ; give one`},
		{"get unknown field", "job.get", map[string]any{"id": "j-1", "x": 1}, api.CodeInvalidParams, `unknown field "x"`},
		{"list bad state", "job.list", map[string]any{"state": "sleeping"}, api.CodeInvalidParams, `invalid params for job.list: unknown state "sleeping"`},
		{"list unknown field", "job.list", map[string]any{"status": "queued"}, api.CodeInvalidParams, "status"},
		{"cancel missing", "job.cancel", idParams{ID: "j-404"}, api.CodeNotFound, `no job "j-404"`},
		{"cancel no id", "job.cancel", map[string]any{}, api.CodeInvalidParams, "invalid params for job.cancel: id is required"},
		{"wait missing", "job.wait", waitParams{ID: "j-404"}, api.CodeNotFound, `no job "j-404"`},
		{"wait no id", "job.wait", nil, api.CodeInvalidParams, "invalid params for job.wait: id is required"},
		{"lane.list params", "lane.list", map[string]any{"x": 1}, api.CodeInvalidParams, `unknown field "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mx.mustFail(t, tc.method, tc.params)
			if e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("%s: error %d %q, want %d containing %q", tc.method, e.Code, e.Message, tc.code, tc.msg)
			}
		})
	}

	// list and its filters.
	var all jobsResult
	mx.mustAnswer(t, "job.list", nil, &all)
	if len(all.Jobs) != 2 {
		t.Fatalf("job.list: %d jobs, want 2", len(all.Jobs))
	}
	var idleOnly jobsResult
	mx.mustAnswer(t, "job.list", api.Filter{Lane: "idle"}, &idleOnly)
	if len(idleOnly.Jobs) != 1 || idleOnly.Jobs[0].ID != sub2.JobID {
		t.Fatalf("job.list lane=idle: %+v", idleOnly.Jobs)
	}
	res, e := mx.call(t, "job.list", api.Filter{State: "timeout"}).Wait(t, methodTimeout)
	if e != nil || string(res) != `{"jobs":[]}` {
		t.Fatalf("job.list state=timeout: %s %v", res, e)
	}

	// cancel: queued, then running, then already finished.
	var cr cancelResult
	mx.mustAnswer(t, "job.cancel", idParams{ID: sub2.JobID}, &cr)
	if cr.WasRunning {
		t.Fatal("cancel of a queued job says was_running")
	}
	var sleeper jobIDResult
	mx.mustAnswer(t, "job.submit", api.JobSpec{Argv: []string{"sleep", "60"}}, &sleeper)
	eventually(t, "the sleeper runs", func() bool {
		rec, _ := m.Get(sleeper.JobID)
		return rec.State == api.StateRunning
	})
	mx.mustAnswer(t, "job.cancel", idParams{JobID: sleeper.JobID}, &cr)
	if !cr.WasRunning {
		t.Fatal("cancel of a running job says not was_running")
	}
	var ended jobRecordResult
	mx.mustAnswer(t, "job.wait", idParams{ID: sleeper.JobID}, &ended)
	if ended.Job.State != api.StateCancelled {
		t.Fatalf("cancelled job ended %+v", ended.Job)
	}
	if e := mx.mustFail(t, "job.cancel", idParams{ID: sleeper.JobID}); e.Code != api.CodeInvalidState {
		t.Fatalf("second cancel: %+v", e)
	}

	// queue full: lane idle keeps two queued jobs.
	for i := 0; i < 2; i++ {
		mx.mustAnswer(t, "job.submit", api.JobSpec{Lane: "idle", Argv: []string{"x"}}, nil)
	}
	if e := mx.mustFail(t, "job.submit", api.JobSpec{Lane: "idle", Argv: []string{"x"}}); e.Code != api.CodeQueueFull ||
		e.Message != "lane idle queue is full (2 jobs waiting, queue_limit 2)" {
		t.Fatalf("queue full: %+v", e)
	}

	var ll lanesResult
	mx.mustAnswer(t, "lane.list", nil, &ll)
	if len(ll.Lanes) != 2 || ll.Lanes[0].Name != "idle" || ll.Lanes[1].Name != api.DefaultLane || len(ll.Lanes[1].Runners) != 1 ||
		ll.Lanes[0].Queued != 2 {
		t.Fatalf("lane.list = %+v", ll)
	}
}

func TestJobWaitMethod(t *testing.T) {
	m, mx := startMethodLanes(t)

	// A job that ends: answered with its record once it has.
	var a jobIDResult
	mx.mustAnswer(t, "job.submit", api.JobSpec{Argv: []string{"sh", "-c", "exit 3"}}, &a)
	var w jobRecordResult
	mx.mustAnswer(t, "job.wait", waitParams{ID: a.JobID, TimeoutMs: 60000}, &w)
	if w.Job.ID != a.JobID || w.Job.State != api.StateFailed || w.Job.ExitCode == nil || *w.Job.ExitCode != 3 {
		t.Fatalf("wait = %+v", w.Job)
	}
	// Already ended: at once, on the handler's own goroutine.
	if c := mx.call(t, "job.wait", waitParams{JobID: a.JobID}); !c.Answered() {
		t.Fatal("wait on a finished job is not answered at once")
	}

	// output: false answers the record without its output, whether the
	// wait was pending or the job had ended; by default it is there.
	var o jobIDResult
	mx.mustAnswer(t, "job.submit", api.JobSpec{Argv: []string{"sh", "-c", "read x; echo out"}, StdinStream: true}, &o)
	no := false
	quiet := mx.call(t, "job.wait", waitParams{ID: o.JobID, Output: &no})
	if quiet.Answered() {
		t.Fatal("wait on a running job answered at once")
	}
	mx.mustAnswer(t, "job.stdin", stdinParams{ID: o.JobID, EOF: true}, nil)
	res, e := quiet.Wait(t, methodTimeout)
	if e != nil || json.Unmarshal(res, &w) != nil || w.Job.ID != o.JobID || w.Job.Output != "" || w.Job.OutputBytes != 4 ||
		strings.Contains(string(res), `"output"`) {
		t.Fatalf("wait without output = %s (%v)", res, e)
	}
	for _, c := range []struct {
		output *bool
		want   string
	}{{&no, ""}, {nil, "out\n"}} {
		var ended jobRecordResult
		mx.mustAnswer(t, "job.wait", waitParams{ID: o.JobID, Output: c.output}, &ended)
		if ended.Job.State != api.StateSucceeded || ended.Job.Output != c.want {
			t.Fatalf("wait on the ended job (output %v): %+v", c.output, ended.Job)
		}
	}

	// Wake-up: pending until the job ends (here: cancelled), then the
	// store's wait is gone.
	var b jobIDResult
	mx.mustAnswer(t, "job.submit", api.JobSpec{Lane: "idle", Argv: []string{"b"}}, &b)
	pending := mx.call(t, "job.wait", waitParams{ID: b.JobID, TimeoutMs: 60000})
	if pending.Answered() || waiters(m) != 1 {
		t.Fatalf("wait on a queued job: answered %v, %d store waits", pending.Answered(), waiters(m))
	}
	mx.mustAnswer(t, "job.cancel", idParams{ID: b.JobID}, nil)
	res, e = pending.Wait(t, methodTimeout)
	if e != nil || json.Unmarshal(res, &w) != nil || w.Job.ID != b.JobID || w.Job.State != api.StateCancelled {
		t.Fatalf("woken wait: %s %v", res, e)
	}
	if n := waiters(m); n != 0 {
		t.Fatalf("%d store waits left", n)
	}

	// Timeout: 1002 with the job as data, and the store's wait is gone.
	var d jobIDResult
	mx.mustAnswer(t, "job.submit", api.JobSpec{Lane: "idle", Argv: []string{"d"}}, &d)
	e = mx.mustFail(t, "job.wait", waitParams{ID: d.JobID, TimeoutMs: 50})
	if want := "job " + d.JobID + " is still queued after 50 ms"; e.Code != api.CodeInvalidState || e.Message != want {
		t.Fatalf("wait timeout: %+v, want 1002 %q", e, want)
	}
	data, _ := json.Marshal(e.Data)
	var wd jobRecordResult
	if err := json.Unmarshal(data, &wd); err != nil || wd.Job.ID != d.JobID || wd.Job.State != api.StateQueued {
		t.Fatalf("wait timeout data = %s", data)
	}
	if n := waiters(m); n != 0 {
		t.Fatalf("%d store waits left after a timeout", n)
	}

	// A client that goes away cancels its wait: nothing is left pending
	// and the job's end answers nothing.
	left := mx.call(t, "job.wait", waitParams{ID: d.JobID, TimeoutMs: 60000})
	if waiters(m) != 1 {
		t.Fatal("the wait is not registered")
	}
	left.Close()
	if n := waiters(m); n != 0 {
		t.Fatalf("%d store waits left after the client went away", n)
	}
	mx.mustAnswer(t, "job.cancel", idParams{ID: d.JobID}, nil)
	if left.Answered() {
		t.Fatal("a wait whose client went away was answered")
	}
	// A wait registered after its client went away is cancelled at once.
	var e2 jobIDResult
	mx.mustAnswer(t, "job.submit", api.JobSpec{Lane: "idle", Argv: []string{"e"}}, &e2)
	gone := apitest.NewClosedCall("job.wait", []byte(`{"id":"`+e2.JobID+`"}`))
	mx.Mux["job.wait"](gone)
	if n := waiters(m); n != 0 || gone.Answered() {
		t.Fatalf("a wait for a client already gone: %d store waits, answered %v", n, gone.Answered())
	}
}

// streamOut joins a job.stream's pushed lines: stdout and stderr, and the
// id of the first line.
func streamOut(t *testing.T, c *apitest.Call) (id string, stdout, stderr string) {
	t.Helper()
	for _, l := range c.Lines() {
		if l.Event != StreamEvent {
			t.Fatalf("pushed %s", l.Event)
		}
		var v struct {
			JobID   string  `json:"job_id"`
			Stream  string  `json:"stream"`
			Data    *string `json:"data"`
			DataB64 []byte  `json:"data_b64"`
		}
		if err := json.Unmarshal(l.Data, &v); err != nil {
			t.Fatal(err)
		}
		id = v.JobID
		d, _ := wire.BytesField("data", v.Data, v.DataB64)
		if v.Stream == StreamStderr {
			stderr += d
		} else {
			stdout += d
		}
	}
	return id, stdout, stderr
}

// job.stream submits a job and pushes its output, its stdin streamed with
// job.stdin, and answers with the record and what it delivered; job.stream
// of a finished job gives its record's output.
func TestStreamMethods(t *testing.T) {
	_, mx := startMethodLanes(t)
	c := mx.call(t, "job.stream", map[string]any{"submit": api.JobSpec{Command: "cat; echo done >&2"}, "stdin": true})
	var id string
	eventually(t, "the first line", func() bool { id, _, _ = streamOut(t, c); return id != "" })
	mx.mustAnswer(t, "job.stdin", map[string]any{"id": id, "data": "hello "}, nil)
	mx.mustAnswer(t, "job.stdin", map[string]any{"id": id, "data_b64": []byte("\xffworld\n"), "eof": true}, nil)
	res, aerr := c.Wait(t, methodTimeout)
	if aerr != nil {
		t.Fatal(aerr)
	}
	var ans streamResult
	if err := json.Unmarshal(res, &ans); err != nil {
		t.Fatal(err)
	}
	_, out, errOut := streamOut(t, c)
	if out != "hello \xffworld\n" || errOut != "done\n" || ans.Bytes != 18 || ans.Missed != 0 || ans.Job.State != api.StateSucceeded {
		t.Fatalf("stdout %q stderr %q, answer %+v", out, errOut, ans)
	}
	// The record's output, a finished job's stream.
	c = mx.call(t, "job.stream", map[string]any{"id": id})
	if _, aerr := c.Wait(t, methodTimeout); aerr != nil {
		t.Fatal(aerr)
	}
	// stdout and stderr are two pipes read by two pumps: the record keeps
	// the chunks as they came, each stream's in order, and "done" may come
	// before, between or after stdout's two.
	if _, out, _ := streamOut(t, c); strings.Count(out, "done\n") != 1 || strings.Replace(out, "done\n", "", 1) != "hello \xffworld\n" {
		t.Fatalf("finished job's stream %q", out)
	}
	if e := mx.mustFail(t, "job.stdin", map[string]any{"id": id, "data": "late"}); e.Code != api.CodeInvalidState {
		t.Fatalf("stdin of a finished job: %+v", e)
	}
	if e := mx.mustFail(t, "job.stream", map[string]any{"id": "j-none-1"}); e.Code != api.CodeNotFound {
		t.Fatalf("stream of no job: %+v", e)
	}
	if e := mx.mustFail(t, "job.stream", map[string]any{}); e.Code != api.CodeInvalidParams {
		t.Fatalf("stream of nothing: %+v", e)
	}
	plain := mx.call(t, "job.submit", api.JobSpec{Command: "sleep 5"})
	res, _ = plain.Wait(t, methodTimeout)
	var sub struct {
		JobID string `json:"job_id"`
	}
	json.Unmarshal(res, &sub)
	if e := mx.mustFail(t, "job.stdin", map[string]any{"id": sub.JobID, "data": "x"}); e.Code != api.CodeInvalidState ||
		!strings.Contains(e.Message, "stdin_stream") {
		t.Fatalf("stdin of a job without stdin_stream: %+v", e)
	}
	mx.mustAnswer(t, "job.cancel", map[string]any{"id": sub.JobID}, nil)
}

// A stream whose client goes away is detached at once, and the stdin it
// streamed ends: the job reading it ends too.
func TestStreamClientGone(t *testing.T) {
	_, mx := startMethodLanes(t)
	c := mx.call(t, "job.stream", map[string]any{"submit": api.JobSpec{Command: "cat"}, "stdin": true})
	var id string
	eventually(t, "the first line", func() bool { id, _, _ = streamOut(t, c); return id != "" })
	c.Close()
	w := mx.call(t, "job.wait", map[string]any{"id": id})
	res, aerr := w.Wait(t, methodTimeout)
	if aerr != nil {
		t.Fatal(aerr)
	}
	var r struct{ Job api.JobRecord }
	json.Unmarshal(res, &r)
	if r.Job.State != api.StateSucceeded {
		t.Fatalf("job after its stdin's client went: %+v", r.Job)
	}
}
