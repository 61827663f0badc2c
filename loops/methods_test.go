package loops

import (
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
)

// Bad params get a clear error naming what is wrong; unknown ids 1001.
func TestMethodErrors(t *testing.T) {
	h := newHarness(t, testConfig(), &fakeAgents{work: completes}, &fakeJobs{result: passes})
	mux := apitest.Mux{}
	h.m.Register(mux)
	for _, tc := range []struct {
		method string
		params any
		code   int
		says   string
	}{
		{"loop.get", map[string]any{}, api.CodeInvalidParams, "id is missing"},
		{"loop.get", map[string]any{"id": "nope"}, api.CodeNotFound, "no loop"},
		{"loop.list", map[string]any{"status": "sleeping"}, api.CodeInvalidParams, "status"},
		{"loop.list", map[string]any{"loop_type": "epic"}, api.CodeInvalidParams, "loop_type"},
		{"loop.list", map[string]any{"cursor": "x"}, api.CodeInvalidParams, "cursor"},
		{"loop.list", map[string]any{"bogus": 1}, api.CodeInvalidParams, "bogus"},
		{"loop.create_plan", map[string]any{"description": " "}, api.CodeInvalidParams, "description is empty"},
		{"loop.create_plan", map[string]any{"description": "x"}, api.CodeInvalidParams, "set [loops] repo"},
		{"loop.create_plan", map[string]any{"description": "x", "repo": "rel/dir"}, api.CodeInvalidParams, "absolute"},
		{"loop.create_plan", map[string]any{"description": "x", "repo": h.repo}, api.CodeInvalidParams, "not a git repository"},
		{"loop.create_plan", map[string]any{"description": "x", "repo": h.repo, "base": "--force"}, api.CodeInvalidParams, "not a branch name"},
		{"loop.create", map[string]any{"loop_type": "epic", "description": "x"}, api.CodeInvalidParams, "loop_type"},
		{"loop.pause", map[string]any{}, api.CodeInvalidParams, "id is missing"},
		{"loop.cancel", map[string]any{"id": "nope"}, api.CodeNotFound, "no loop"},
	} {
		call := mux.Start(t, tc.method, tc.params)
		select {
		case <-call.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not answer", tc.method)
		}
		e := call.Err()
		if e == nil || e.Code != tc.code || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s %v: %v, want %d saying %q", tc.method, tc.params, e, tc.code, tc.says)
		}
	}
	// The list pages oldest first.
	a := h.create(api.LoopCode, "a")
	time.Sleep(2 * time.Millisecond)
	b := h.create(api.LoopCode, "b")
	call := mux.Start(t, "loop.list", map[string]any{"limit": 1})
	<-call.Done()
	var page api.LoopListResult
	if err := jsonUnmarshal(call.Result(), &page); err != nil || len(page.Loops) != 1 || page.Loops[0].ID != a || page.NextCursor == "" {
		t.Fatalf("first page: %+v %v", page, err)
	}
	call = mux.Start(t, "loop.list", map[string]any{"limit": 1, "cursor": page.NextCursor})
	<-call.Done()
	if err := jsonUnmarshal(call.Result(), &page); err != nil || len(page.Loops) != 1 || page.Loops[0].ID != b {
		t.Fatalf("second page: %+v %v", page, err)
	}
	h.waitStatus(a, api.LoopComplete)
	h.waitStatus(b, api.LoopComplete)
}
