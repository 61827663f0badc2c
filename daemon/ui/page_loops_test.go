package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	_ "github.com/orchestrd/orchestrd/approvals" // registers the plan.* event kinds
	"github.com/orchestrd/orchestrd/clanker"
	_ "github.com/orchestrd/orchestrd/loops" // registers the loop.* event kinds
)

// answer makes the fake caller answer method with v as JSON.
func (h *harness) answer(method string, v any) {
	h.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		h.t.Fatal(err)
	}
	h.caller.mu.Lock()
	h.caller.answers[method] = string(b)
	h.caller.mu.Unlock()
}

// act posts an action the way the page's script does (the token in a
// header, a JSON answer).
func (h *harness) act(c *http.Client, tok, name string, form url.Values) (int, string) {
	h.t.Helper()
	resp, body := h.do(c, "POST", "/ui/act/"+name, form, map[string]string{"X-CSRF-Token": tok, "Accept": "application/json"})
	return resp.StatusCode, body
}

func ptr[T any](v T) *T { return &v }

// loopsCaller answers loop.list from loops as the loops domain does (by
// status, type and parent_id, oldest first as given), and every other
// method from the fake caller, which records every call.
type loopsCaller struct {
	*fakeCaller
	mu    sync.Mutex
	loops []api.LoopRecord
}

func (c *loopsCaller) Invoke(ctx context.Context, from api.Origin, method string, params any, push func(string, []byte, func(bool))) (json.RawMessage, error) {
	if method != "loop.list" {
		return c.fakeCaller.Invoke(ctx, from, method, params, push)
	}
	b, _ := json.Marshal(params)
	c.fakeCaller.mu.Lock()
	c.fakeCaller.calls = append(c.fakeCaller.calls, fakeCall{method, string(b)})
	c.fakeCaller.mu.Unlock()
	var p api.LoopListParams
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	res := api.LoopListResult{Loops: []api.LoopRecord{}}
	c.mu.Lock()
	for _, l := range c.loops {
		if p.Status != "" && l.Status != p.Status || p.LoopType != "" && l.LoopType != p.LoopType ||
			p.ParentID != "" && (l.ParentID == nil || *l.ParentID != p.ParentID) {
			continue
		}
		res.Loops = append(res.Loops, l)
	}
	c.mu.Unlock()
	return json.Marshal(res)
}

// setLoops makes loop.list answer loops.
func (h *harness) setLoops(loops []api.LoopRecord) {
	lc, ok := h.srv.opts.Caller.(*loopsCaller)
	if !ok {
		lc = &loopsCaller{fakeCaller: h.caller}
		h.srv.opts.Caller = lc
	}
	lc.mu.Lock()
	lc.loops = loops
	lc.mu.Unlock()
}

const (
	planID   = "1764100000000-aaaaaaaaaaaaaaaa"
	otherID  = "1764100000001-bbbbbbbbbbbbbbbb"
	approval = "a-7f3e1"
)

// loopTreeRecords is a plan approved into two specs, one with a phase and
// its code loop, and another root loop, failed.
func loopTreeRecords() []api.LoopRecord {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC).UnixMilli()
	rec := func(id string, lt api.LoopType, parent *string, st api.LoopStatus) api.LoopRecord {
		return api.LoopRecord{ID: id, LoopType: lt, ParentID: parent, Status: st, Iteration: 1, MaxIterations: 5,
			OutputArtifacts: []string{}, Context: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now,
			Repo: "/src/repo", Base: "main", Branch: "loop/" + id}
	}
	spec1, spec2 := api.ChildLoopID(planID, 1), api.ChildLoopID(planID, 2)
	phase := api.ChildLoopID(spec1, 1)
	plan := rec(planID, api.LoopPlan, nil, api.LoopRunning)
	plan.Stage, plan.Children = api.StageChildren, 2
	other := rec(otherID, api.LoopCode, nil, api.LoopFailed)
	other.Error = api.LoopErrMaxIterations
	// Siblings out of id order: the tree puts them in it.
	s1, ph := rec(spec1, api.LoopSpec, ptr(planID), api.LoopRunning), rec(phase, api.LoopPhase, ptr(spec1), api.LoopRunning)
	s1.Children, ph.Children = 1, 1
	// The second spec's merge conflicted with the first's: it rebases.
	s2 := rec(spec2, api.LoopSpec, ptr(planID), api.LoopRebasing)
	s2.RebaseOnto, s2.RebaseIterations = "loop/"+planID, 1
	return []api.LoopRecord{plan, other, s2, s1, ph,
		rec(api.ChildLoopID(phase, 1), api.LoopCode, ptr(phase), api.LoopPaused)}
}

// The loops page draws the tree as `orchestrd loops` does: each loop under
// its parent, siblings in id order, "[type] id - status (i/max)", why a
// loop failed; each links to its page. Its filter goes to loop.list.
func TestLoopsPageTree(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	h.signIn(c)
	h.setLoops(loopTreeRecords())
	resp, body := h.do(c, "GET", "/ui/loops", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("loops: %d\n%s", resp.StatusCode, body)
	}
	spec1, spec2 := api.ChildLoopID(planID, 1), api.ChildLoopID(planID, 2)
	phase := api.ChildLoopID(spec1, 1)
	code := api.ChildLoopID(phase, 1)
	// Document order is the tree's: plan, spec-001, its phase, its code,
	// spec-002, then the other root.
	last := -1
	for _, id := range []string{planID, spec1, phase, code, spec2, otherID} {
		i := strings.Index(body, `<li id="loop-`+id+`"><a href="/ui/loops/`+id+`">`)
		if i < 0 || i < last {
			t.Fatalf("loop %s not in tree order (at %d, after %d):\n%s", id, i, last, body)
		}
		last = i
	}
	for _, want := range []string{
		"[plan] " + planID + "</a> - <span class=\"state state-running\">running</span> (1/5) <span class=\"note\">[waiting for its children]</span><ul>",
		"[code] " + otherID + "</a> - <span class=\"state state-failed\">failed</span> (1/5) <span class=\"note\">[max_iterations]</span></li>",
		"[code] " + code + "</a> - <span class=\"state state-paused\">paused</span> (1/5)</li></ul></li></ul></li>",
		"[spec] " + spec2 + "</a> - <span class=\"state state-rebasing\">rebasing</span> (1/5) <span class=\"note\">[rebasing onto loop/" + planID + ": 1 rebase iteration]</span></li>",
		`data-kinds="` + strings.Join(loopKinds, ",") + `"`,
		`<label for="f-status">Status</label>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the loops page lacks %q:\n%s", want, body)
		}
	}
	// The filter.
	resp, _ = h.do(c, "GET", "/ui/loops?status=failed&type=code", nil, nil)
	if call, _ := h.caller.last("loop.list"); resp.StatusCode != http.StatusOK || call.Params != `{"status":"failed","loop_type":"code","limit":1000}` {
		t.Fatalf("filtered: %d, loop.list %s", resp.StatusCode, call.Params)
	}
	if resp, body := h.do(c, "GET", "/ui/loops?status=<b>", nil, nil); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(body, "status: &#34;&lt;b&gt;&#34; is not a loop status") {
		t.Fatalf("a bad status: %d\n%s", resp.StatusCode, body)
	}
}

// A plan loop waiting for approval: its record, its iterations with each
// prompt and the feedback (what the agent and validation wrote escaped,
// clipped, binary as such), the plan with Approve, Reject and Iterate (a
// labelled text box) by the approval's id, Pause and Cancel.
func TestLoopPagePlanAwaitingApproval(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	tok := h.signIn(c)
	recs := loopTreeRecords()
	plan := recs[0]
	plan.Stage, plan.ApprovalID, plan.Iteration = api.StageApproval, approval, 2
	plan.Context = json.RawMessage(`{"task":"build the <b>widget</b>"}`)
	plan.Progress = "\n---\n## Iteration 1 Failed\n<img src=x onerror=alert(1)>\n"
	plan.ValidationCommand = "test -f plan.md"
	long := strings.Repeat("p", 20000) + "END-OF-PROMPT"
	h.answer("loop.get", api.LoopGetResult{Loop: plan, Iterations: []api.LoopIteration{
		{LoopID: planID, Iteration: 1, Prompt: "# Task\n<script>alert('prompt')</script>", TaskID: "t-1", JobID: "j-9", Status: "failed",
			Feedback: "\n---\n## Iteration 1 Failed\n<img src=x onerror=alert(1)>\n", StartedAt: plan.CreatedAt, FinishedAt: plan.CreatedAt + 65000},
		{LoopID: planID, Iteration: 2, Prompt: long, TaskID: "t-2", JobID: "j-10", Status: "passed", Passed: true, Commit: "0123456789abcdef0123",
			Feedback: "bad \xff\xfe bytes", StartedAt: plan.CreatedAt + 70000, FinishedAt: plan.CreatedAt + 80000},
	}})
	h.answer("plan.get_preview", map[string]any{"id": approval, "content": "# Plan\n<script>alert('plan')</script>\n## Specs to Create\n- spec-alpha",
		"specs": []string{"spec-alpha", "<i>spec-beta</i>"}, "status": "pending"})
	h.setLoops([]api.LoopRecord{plan, recs[1]}) // no children yet
	resp, body := h.do(c, "GET", "/ui/loops/"+planID, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a loop: %d\n%s", resp.StatusCode, body)
	}
	if call, _ := h.caller.last("plan.get_preview"); call.Params != `{"id":"`+approval+`"}` {
		t.Fatalf("plan.get_preview %s", call.Params)
	}
	if call, _ := h.caller.last("loop.get"); call.Params != `{"id":"`+planID+`"}` {
		t.Fatalf("loop.get %s", call.Params)
	}
	for _, bad := range []string{"<script>alert", "<img src=x", "<b>widget", "<i>spec-beta", "\xff", "END-OF-PROMPT"} {
		if strings.Contains(body, bad) {
			t.Errorf("the page shows %q as it is:\n%s", bad, body)
		}
	}
	for _, want := range []string{
		"&lt;script&gt;alert(&#39;plan&#39;)&lt;/script&gt;",   // the plan, escaped
		"&lt;script&gt;alert(&#39;prompt&#39;)&lt;/script&gt;", // a prompt
		"&lt;img src=x onerror=alert(1)&gt;",                   // feedback
		"build the &lt;b&gt;widget&lt;/b&gt;",                  // the task
		"bad \ufffd\ufffd bytes",                               // JSON carries no other bytes than UTF-8
		"Prompt (20013 bytes, the first 16 KiB shown)",         // clipped, and says so
		"pppp…</pre>", // the clip
		`<code>&lt;i&gt;spec-beta&lt;/i&gt;</code>`, // a spec
		"Approving creates 2 spec loops",            // the specs
		`<a href="/ui/jobs/j-9">j-9</a>`,            // the validation job
		`<td>1m05s</td>`,                            // took
		`<code>0123456789ab</code>`,                 // commit
		`<label for="plan-feedback">Feedback for the planner: what to change</label>`,
		`<textarea id="plan-feedback" name="feedback" required maxlength="8192"></textarea>`,
		`<label for="plan-reason">`,
		`<caption class="sr-only">The loop's iterations, oldest first</caption>`,
		`<th scope="col">Validation job</th>`,
		`<div class="scroll"><table id="iterations">`,
		"a plan's spec loops are created once it is approved",
		`<p class="note">plan awaiting approval</p>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the loop page lacks %q", want)
		}
	}
	// Each button is a form of the page's session, on the approval's id.
	for _, a := range []string{"loop.plan_approve", "loop.plan_reject", "loop.plan_iterate"} {
		form := `<form method="post" action="/ui/act/` + a + `" class="act`
		i := strings.Index(body, form)
		if i < 0 {
			t.Fatalf("no %s form:\n%s", a, body)
		}
		f := body[i : i+strings.Index(body[i:], "</form>")]
		if !strings.Contains(f, `name="csrf" value="`+tok+`"`) || !strings.Contains(f, `name="id" value="`+approval+`"`) ||
			!strings.Contains(f, `<button type="submit"`) {
			t.Errorf("%s's form: %s", a, f)
		}
	}
	for _, a := range []string{"loop.pause", "loop.cancel"} {
		if !strings.Contains(body, `action="/ui/act/`+a+`"`) {
			t.Errorf("no %s button", a)
		}
	}
	if strings.Contains(body, `action="/ui/act/loop.resume"`) {
		t.Error("a running loop offers Resume")
	}
	// The fragment the live reload swaps in.
	resp, frag := h.do(c, "GET", "/ui/loops/"+planID, nil, map[string]string{"X-Fragment": "1"})
	if resp.StatusCode != http.StatusOK || strings.Contains(frag, "<html") || !strings.Contains(frag, `id="plan-feedback"`) {
		t.Fatalf("fragment: %d\n%s", resp.StatusCode, frag)
	}
	// Iterate from the page's form.
	h.answer("plan.iterate", map[string]any{})
	code, res := h.act(c, tok, "loop.plan_iterate", url.Values{"id": {approval}, "feedback": {"  add a spec for tests\n"}})
	if call, _ := h.caller.last("plan.iterate"); code != http.StatusOK ||
		call.Params != `{"feedback":"add a spec for tests","id":"`+approval+`"}` {
		t.Fatalf("iterate: %d %s; plan.iterate %s", code, res, call.Params)
	}
}

// Once the plan is approved its children show on its page; a merge
// awaiting approval offers Approve and Do not merge, not Iterate; a paused
// loop Resume; an ended one nothing.
func TestLoopPageStates(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	h.signIn(c)
	recs := loopTreeRecords()
	h.setLoops(recs)
	h.answer("loop.get", api.LoopGetResult{Loop: recs[0], Iterations: []api.LoopIteration{}})
	_, body := h.do(c, "GET", "/ui/loops/"+planID, nil, nil)
	spec1 := api.ChildLoopID(planID, 1)
	for _, want := range []string{`<ul class="tree loops" id="children"><li id="loop-` + spec1 + `">`,
		`<li id="loop-` + api.ChildLoopID(spec1, 1) + `">`, `<li id="loop-` + api.ChildLoopID(planID, 2) + `">`} {
		if !strings.Contains(body, want) {
			t.Fatalf("the approved plan's page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, otherID) || strings.Contains(body, "plan_approve") {
		t.Fatalf("the plan's page shows another root or a plan to approve:\n%s", body)
	}
	if _, ok := h.caller.last("plan.get_preview"); ok {
		t.Fatal("plan.get_preview called for a loop that waits for no approval")
	}
	// It read the loops under it a level at a time, each loop that spawned
	// some: not every loop of the daemon.
	var lists []string
	h.caller.mu.Lock()
	for _, c := range h.caller.calls {
		if c.Method == "loop.list" {
			lists = append(lists, c.Params)
		}
	}
	h.caller.calls = nil
	h.caller.mu.Unlock()
	if want := []string{`{"parent_id":"` + planID + `","limit":1000}`, `{"parent_id":"` + spec1 + `","limit":1000}`,
		`{"parent_id":"` + api.ChildLoopID(spec1, 1) + `","limit":1000}`}; !reflect.DeepEqual(lists, want) {
		t.Fatalf("loop.list calls %q, want %q", lists, want)
	}

	// A child's page: the path to it.
	code := recs[5]
	h.answer("loop.get", api.LoopGetResult{Loop: code})
	_, body = h.do(c, "GET", "/ui/loops/"+code.ID, nil, nil)
	if !strings.Contains(body, `<a href="/ui/loops">Loops</a> › <a href="/ui/loops/`+*code.ParentID+`" rel="up">`+*code.ParentID+`</a> › <span aria-current="page">`) ||
		!strings.Contains(body, `action="/ui/act/loop.resume"`) || strings.Contains(body, `action="/ui/act/loop.pause"`) {
		t.Fatalf("a paused code loop's page:\n%s", body)
	}

	merge := recs[0]
	merge.Stage, merge.ApprovalID = api.StageMerge, "a-merge"
	h.answer("loop.get", api.LoopGetResult{Loop: merge})
	h.answer("plan.get_preview", map[string]any{"id": "a-merge", "content": "Merge loop x's branch loop/x into main?", "specs": []string{}, "status": "pending"})
	_, body = h.do(c, "GET", "/ui/loops/"+planID, nil, nil)
	if !strings.Contains(body, "Merge awaiting approval") || !strings.Contains(body, `name="id" value="a-merge"><button type="submit" class="primary">Approve the merge`) ||
		!strings.Contains(body, "Do not merge") || strings.Contains(body, "plan_iterate") {
		t.Fatalf("a merge awaiting approval:\n%s", body)
	}

	// Waiting to merge into a dirty checkout: says which files (escaped:
	// they are the user's) and offers Merge now.
	waiting := recs[0]
	waiting.Stage = api.StageMergeWaiting
	waiting.MergeWait = &api.MergeWait{Into: "main", Checkout: "/r", Files: []string{"README", "<b>x"}, Total: 2}
	h.answer("loop.get", api.LoopGetResult{Loop: waiting})
	_, body = h.do(c, "GET", "/ui/loops/"+planID, nil, nil)
	if !strings.Contains(body, "merge_waiting: checkout has uncommitted changes in README, &lt;b&gt;x") ||
		!strings.Contains(body, `action="/ui/act/loop.merge"`) || strings.Contains(body, "<b>x") {
		t.Fatalf("a loop waiting to merge:\n%s", body)
	}

	// An approval already answered (the page was behind): no buttons.
	h.answer("plan.get_preview", map[string]any{"id": "a-merge", "content": "x", "specs": []string{}, "status": "allowed"})
	if _, body = h.do(c, "GET", "/ui/loops/"+planID, nil, nil); strings.Contains(body, "plan_approve") {
		t.Fatalf("an answered approval offers Approve:\n%s", body)
	}

	failed := recs[1]
	failed.Message = "validation did not pass in 5 iterations"
	h.answer("loop.get", api.LoopGetResult{Loop: failed})
	_, body = h.do(c, "GET", "/ui/loops/"+otherID, nil, nil)
	for _, a := range []string{"loop.pause", "loop.resume", "loop.cancel"} {
		if strings.Contains(body, "/ui/act/"+a) {
			t.Errorf("a failed loop offers %s", a)
		}
	}
	if !strings.Contains(body, "validation did not pass in 5 iterations") || !strings.Contains(body, "max_iterations") {
		t.Fatalf("a failed loop's page:\n%s", body)
	}

	// A loop that is not there, an id that is not one.
	h.caller.mu.Lock()
	delete(h.caller.answers, "loop.get")
	h.caller.mu.Unlock()
	if resp, body := h.do(c, "GET", "/ui/loops/nope", nil, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "nothing here") {
		t.Fatalf("an unknown loop: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := h.do(c, "GET", "/ui/loops/a%22b", nil, nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad id: %d", resp.StatusCode)
	}
}

// Each action builds its method's params from the form, and refuses a
// form it cannot make sense of, naming the field, without calling.
func TestLoopAndClankerActionParams(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	tok := h.signIn(c)
	for m, v := range map[string]any{"loop.pause": map[string]any{"loop": api.LoopRecord{ID: planID}}, "loop.resume": map[string]any{"loop": api.LoopRecord{ID: planID}},
		"loop.cancel": map[string]any{"cancelled": true}, "plan.approve": map[string]any{"specs_spawned": 2, "approved": true},
		"plan.reject": map[string]bool{"rejected": true}, "plan.iterate": map[string]any{},
		"clanker.resume": map[string]any{"path": "/src/repo", "resumed": true}} {
		h.answer(m, v)
	}
	good := []struct {
		action, method string
		form           url.Values
		params         string
	}{
		{"loop.pause", "loop.pause", url.Values{"id": {planID}}, `{"id":"` + planID + `"}`},
		{"loop.resume", "loop.resume", url.Values{"id": {planID}}, `{"id":"` + planID + `"}`},
		{"loop.cancel", "loop.cancel", url.Values{"id": {" " + planID + " "}}, `{"id":"` + planID + `"}`},
		{"loop.plan_approve", "plan.approve", url.Values{"id": {approval}}, `{"id":"` + approval + `"}`},
		{"loop.plan_reject", "plan.reject", url.Values{"id": {approval}}, `{"id":"` + approval + `"}`},
		{"loop.plan_reject", "plan.reject", url.Values{"id": {approval}, "reason": {" not now "}}, `{"id":"` + approval + `","reason":"not now"}`},
		{"loop.plan_iterate", "plan.iterate", url.Values{"id": {approval}, "feedback": {"split spec 2\nin two"}},
			`{"feedback":"split spec 2\nin two","id":"` + approval + `"}`},
		{"clanker.resume", "clanker.resume", url.Values{"path": {"/src/my repo"}}, `{"path":"/src/my repo"}`},
	}
	for _, g := range good {
		code, body := h.act(c, tok, g.action, g.form)
		call, _ := h.caller.last(g.method)
		if code != http.StatusOK || !strings.Contains(body, `"ok":true`) || call.Params != g.params {
			t.Errorf("%s %v: %d %s; %s called with %s, want %s", g.action, g.form, code, body, g.method, call.Params, g.params)
		}
	}
	bad := []struct {
		action string
		form   url.Values
		why    string
	}{
		{"loop.pause", url.Values{}, "id: not an id"},
		{"loop.cancel", url.Values{"id": {"../x"}}, "id: not an id"},
		{"loop.plan_approve", url.Values{"id": {"a b"}}, "id: not an id"},
		{"loop.plan_reject", url.Values{"id": {approval}, "reason": {strings.Repeat("r", maxPlanReason+1)}}, "reason: at most 2048 bytes"},
		{"loop.plan_reject", url.Values{"id": {approval}, "reason": {"\xff"}}, "reason: not UTF-8"},
		{"loop.plan_iterate", url.Values{"id": {approval}}, "feedback: say what the planner should change"},
		{"loop.plan_iterate", url.Values{"id": {approval}, "feedback": {" \n\t"}}, "feedback: say what the planner should change"},
		{"loop.plan_iterate", url.Values{"id": {approval}, "feedback": {strings.Repeat("f", maxPlanFeedback+1)}}, "feedback: at most 8192 bytes"},
		{"loop.plan_iterate", url.Values{"id": {approval}, "feedback": {"\xfe"}}, "feedback: not UTF-8"},
		{"clanker.resume", url.Values{}, "path: missing"},
		{"clanker.resume", url.Values{"path": {"src/repo"}}, "path: not an absolute, clean path"},
		{"clanker.resume", url.Values{"path": {"/src/../etc"}}, "path: not an absolute, clean path"},
		{"clanker.resume", url.Values{"path": {"/src/repo\n"}}, "path: not a printable path"},
		{"clanker.resume", url.Values{"path": {"/" + strings.Repeat("d", maxRepoPath)}}, "path: at most 4096 bytes"},
	}
	h.caller.mu.Lock()
	before := len(h.caller.calls)
	h.caller.mu.Unlock()
	for _, b := range bad {
		code, body := h.act(c, tok, b.action, b.form)
		if code != http.StatusBadRequest || !strings.Contains(body, b.why) {
			t.Errorf("%s %v: %d %s, want 400 saying %q", b.action, b.form, code, body, b.why)
		}
	}
	h.caller.mu.Lock()
	defer h.caller.mu.Unlock()
	if len(h.caller.calls) != before {
		t.Fatalf("a refused form called %+v", h.caller.calls[before:])
	}
}

// A method's refusal reaches the person (a plan answered meanwhile).
func TestLoopActionRefused(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	tok := h.signIn(c)
	code, body := h.act(c, tok, "loop.plan_approve", url.Values{"id": {approval}})
	if code != http.StatusNotFound || !strings.Contains(body, `"ok":false`) || !strings.Contains(body, "plan.approve: nothing here") {
		t.Fatalf("refused: %d %s", code, body)
	}
	// Without script: the form comes back to the page it was on.
	h.answer("loop.pause", map[string]any{})
	resp, _ := h.do(c, "POST", "/ui/act/loop.pause", url.Values{"id": {planID}, "csrf": {tok}, "return": {"/ui/loops/" + planID}},
		map[string]string{"Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/loops/"+planID {
		t.Fatalf("a plain form: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// clankerRepos are two repos as the clanker domain shows them: one paused
// by a pod's usage limit, with a stale pod and a refused file.
func clankerRepos(now time.Time) []clanker.RepoStatus {
	return []clanker.RepoStatus{
		{Path: "/src/a", Socket: "/src/a/.clanker/ipc.sock", Tasks: map[string]int{"done": 3, "queued": 2, "running": 1, "weird": 1},
			Pods: []clanker.PodStatus{{ID: "pod-<1>", Role: "slave", Pid: 4242, LastSeenMs: 2000}, {ID: "pod-2", Role: "judge", LastSeenMs: 95000, Stale: true}},
			Paused: &clanker.PauseStatus{Pod: "pod-<1>", Role: "slave", Message: "<script>alert('limit')</script>", Since: now.Add(-3 * time.Minute),
				Until: now.Add(27 * time.Minute)},
			Spool:   clanker.SpoolStatus{PendingBytes: 10, DrainingBytes: 20, DeadBytes: 30},
			Refused: []clanker.FileRefusal{{Path: "/src/a/.clanker/state.json", Reason: "symlink"}}, OutboxPending: 4},
		{Path: "/src/b", Socket: "/src/b/.clanker/ipc.sock", Tasks: map[string]int{}, Pods: []clanker.PodStatus{}},
	}
}

// The clanker page: each repo with its tasks by status (clanker's order),
// its pods and their last heartbeats, its spool, a refused file, and a
// pause with Resume; what pods wrote escaped.
func TestClankerPage(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	tok := h.signIn(c)
	h.answer("clanker.repos", map[string]any{"repos": clankerRepos(time.Now())})
	resp, body := h.do(c, "GET", "/ui/clanker", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("clanker: %d\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "pod-<1>") {
		t.Fatalf("what a pod wrote is not escaped:\n%s", body)
	}
	for _, want := range []string{
		"2 repos served, <strong>1 paused</strong>",
		`<code>/src/a</code> <span class="state state-paused">paused</span>`,
		"reported a usage limit 3m00s ago: <q>&lt;script&gt;alert(&#39;limit&#39;)&lt;/script&gt;</q>",
		`<input type="hidden" name="path" value="/src/a"><button type="submit" class="primary" aria-label="Resume the repo /src/a">Resume</button>`,
		`name="csrf" value="` + tok + `"`,
		"<td><code>pod-&lt;1&gt;</code></td><td>slave</td><td>4242</td>",
		`s ago)</td><td><span class="state state-live">live</span>`,
		`(1m35s ago)</td><td><span class="state state-stale">stale</span>`,
		"10 bytes waiting, 20 draining, <span class=\"error-text\">30 dead-lettered</span>",
		"4 lines committed and not yet in their files",
		"<code>/src/a/.clanker/state.json</code>: symlink",
		`<caption class="sr-only">Tasks of /src/a by status</caption>`,
		`<th scope="col">Last heartbeat</th>`,
		"<td>all</td><td>7</td>",
		"No tasks.",
		"No pod has been heard from since the daemon started.",
		`data-kinds="` + strings.Join(clankerKinds, ",") + `"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the clanker page lacks %q", want)
		}
	}
	// Tasks in clanker's order: queued, running, done, then the others.
	q, r, d, w := strings.Index(body, "state-queued"), strings.Index(body, "state-running"), strings.Index(body, "state-done"), strings.Index(body, "state-weird")
	if q < 0 || !(q < r && r < d && d < w) {
		t.Fatalf("task statuses out of order: %d %d %d %d", q, r, d, w)
	}
	if n := strings.Count(body, `action="/ui/act/clanker.resume"`); n != 1 {
		t.Fatalf("%d Resume buttons, want one (the paused repo's)", n)
	}
	if !strings.Contains(body, "None among the daemon's last 20 errors.") {
		t.Fatalf("errors before any:\n%s", body)
	}
	// A repo that did not start is not among clanker.repos: its error is
	// listed (the overview's last errors, no read of the log).
	h.answer("clanker.repos", map[string]any{"repos": []clanker.RepoStatus{}})
	h.bus.Emit(clanker.RepoFailed{Repo: "/src/c", Error: "<b>socket in use</b>"})
	h.bus.Emit(clanker.Note{Repo: "/src/c", TaskID: "t1", Role: "slave", Via: "ipc"}) // no error
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body = h.do(c, "GET", "/ui/clanker", nil, nil)
		if strings.Contains(body, "<code>clanker.repo_failed</code>") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(body, "No clanker repos") || !strings.Contains(body, "<code>clanker.repo_failed</code>") ||
		!strings.Contains(body, `&lt;b&gt;socket in use&lt;/b&gt;`) || strings.Contains(body, "clanker.note") {
		t.Fatalf("no repos, one failed:\n%s", body)
	}
}

// The page's view of clanker.repos is the domain's RepoStatus, field for
// field: what the domain answers is what the page decodes.
func TestClankerRepoMatchesDomain(t *testing.T) {
	want, err := json.Marshal(clankerRepos(time.Unix(1_800_000_000, 0).UTC()))
	if err != nil {
		t.Fatal(err)
	}
	var mine []clankerRepo
	dec := json.NewDecoder(bytes.NewReader(want))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&mine); err != nil {
		t.Fatalf("the page cannot decode clanker.RepoStatus: %v", err)
	}
	got, _ := json.Marshal(mine)
	if !bytes.Equal(got, want) {
		t.Fatalf("the page's RepoStatus differs from the domain's:\n got %s\nwant %s", got, want)
	}
	if reflect.TypeOf(clanker.RepoStatus{}).NumField() != 8 {
		t.Fatal("clanker.RepoStatus changed: look at the clanker page")
	}
}

// Every kind the pages stream is one the daemon emits (else their stream
// is refused), and none is the job output's.
func TestLoopAndClankerKindsKnown(t *testing.T) {
	for _, p := range pages {
		if p.Name != "loops" && p.Name != "loop" && p.Name != "clanker" {
			continue
		}
		if _, err := parseKinds(strings.Join(p.Kinds, ",")); err != nil {
			t.Errorf("page %s: %v", p.Name, err)
		}
	}
}
