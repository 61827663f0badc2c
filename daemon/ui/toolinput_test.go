package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
)

// A tool call's input reads as the agent's values: a command as the
// command (no JSON escapes), an Edit as a diff of lines, a Write as its
// added lines, a MultiEdit as hunks, any other tool's fields by name.
func TestToolView(t *testing.T) {
	bash := json.RawMessage(`{"command":"rm -rf build \u0026\u0026 make test","description":"clean <and> build"}`)
	v := newToolView("Bash", bash).withJSON(bash, "j")
	if v.Command != "rm -rf build && make test" || len(v.Fields) != 1 || v.Fields[0] != (toolField{Name: "description", Value: "clean <and> build"}) {
		t.Fatalf("Bash: %+v", v)
	}
	if strings.Contains(v.JSON, `\u0026`) || !strings.Contains(v.JSON, `"command": "rm -rf build && make test"`) {
		t.Fatalf("Bash's JSON keeps the escapes: %s", v.JSON)
	}
	v = newToolView("Edit", json.RawMessage(`{"file_path":"/w/a.go","old_string":"a\nb\nc\nd","new_string":"a\nB\nc\nd\ne","replace_all":false}`))
	if v.Path != "/w/a.go" || fmt.Sprint(v.Diff) != "[{  a} {- b} {+ B} {  c} {  d} {+ e}]" || len(v.Fields) != 0 {
		t.Fatalf("Edit: %+v", v)
	}
	v = newToolView("Write", json.RawMessage(`{"file_path":"/w/n.txt","content":"one\ntwo\n"}`))
	if v.Path != "/w/n.txt" || fmt.Sprint(v.Diff) != "[{+ one} {+ two}]" {
		t.Fatalf("Write: %+v", v)
	}
	v = newToolView("MultiEdit", json.RawMessage(`{"file_path":"/w/m","edits":[{"old_string":"x","new_string":"y"},{"old_string":"p","new_string":"q","replace_all":true}]}`))
	if fmt.Sprint(v.Diff) != "[{@@ edit 1 of 2} {- x} {+ y} {@@ edit 2 of 2, every occurrence} {- p} {+ q}]" {
		t.Fatalf("MultiEdit: %+v", v)
	}
	v = newToolView("Grep", json.RawMessage(`{"pattern":"a|b","-n":true,"path":"/w"}`))
	if fmt.Sprint(v.Fields) != "[{path /w true} {pattern a|b true} {-n true false}]" {
		t.Fatalf("Grep: %+v", v.Fields)
	}
	v = newToolView("exec_command", json.RawMessage(`{"cmd":["ls","-la"]}`))
	if v.Command != "ls -la" {
		t.Fatalf("Codex's argv: %+v", v)
	}
	if v = newToolView("X", json.RawMessage(`[1,2]`)); v.Raw != "[1,2]" {
		t.Fatalf("not an object: %+v", v)
	}
	if v = newToolView("X", nil).withJSON(nil, ""); v.Command != "" || v.Fields != nil || v.JSON != "" {
		t.Fatalf("no input: %+v", v)
	}
	// Huge: cut, and said so.
	big, _ := json.Marshal(map[string]string{"command": strings.Repeat("y", 1<<20)})
	if v = newToolView("Bash", big); len(v.Command) != toolValueMax || !v.Cut {
		t.Fatalf("a huge command: %d bytes, cut %v", len(v.Command), v.Cut)
	}
	lines, _ := json.Marshal(map[string]string{"file_path": "/f", "old_string": strings.Repeat("a\n", 5000), "new_string": strings.Repeat("b\n", 5000)})
	if v = newToolView("Edit", lines); len(v.Diff) != 2*toolDiffLines || !v.Cut {
		t.Fatalf("a huge edit: %d lines, cut %v", len(v.Diff), v.Cut)
	}
}

// newToolView takes any bytes: it never panics, stays within its
// bounds and gives valid UTF-8 to the page once render.Visible passed.
func FuzzToolView(f *testing.F) {
	for _, s := range []string{`{"command":"ls"}`, `{"file_path":"/a","old_string":"a\nb","new_string":"b\na"}`,
		`{"edits":[{"old_string":"x","new_string":"y"}]}`, `{"content":"\u001b[31m"}`, `[1]`, `"x"`, `{"cmd":["a"]}`, `{`, ``} {
		for _, tool := range []string{"Bash", "Edit", "Write", "MultiEdit", "exec_command", "Other"} {
			f.Add(tool, s)
		}
	}
	f.Fuzz(func(t *testing.T, tool, in string) {
		v := newToolView(tool, json.RawMessage(in)).withJSON(json.RawMessage(in), "j")
		if len(v.Command) > toolValueMax || len(v.Diff) > 4*toolDiffLines || len(v.Fields) > toolFieldsMax {
			t.Fatalf("over bounds: command %d, diff %d, fields %d", len(v.Command), len(v.Diff), len(v.Fields))
		}
		for _, s := range []string{v.Command, v.Path, v.Raw, v.JSON} {
			if !utf8.ValidString(render.Visible(s)) {
				t.Fatalf("render.Visible(%q) is not UTF-8", s)
			}
		}
	})
}

// An agent's conversation of many large Edits costs its page a bounded
// diff work: the first Edits' diffs are line by line (a longest common
// subsequence), and past the page's toolDiffPageCells the rest are their
// lines removed then added, each still whole.
func TestToolDiffPageBounded(t *testing.T) {
	var old, new []string
	for i := range 256 {
		old = append(old, fmt.Sprintf("c%d", i), fmt.Sprintf("a%d", i))
		new = append(new, fmt.Sprintf("c%d", i), fmt.Sprintf("b%d", i))
	}
	in, _ := json.Marshal(map[string]any{"name": "Edit", "input": map[string]string{"file_path": "/w/a",
		"old_string": strings.Join(old, "\n"), "new_string": strings.Join(new, "\n")}})
	var ms []api.SessionMessage
	for i := range 100 {
		ms = append(ms, api.SessionMessage{Sequence: int64(i + 1), EventType: "tool_use", EventData: in})
	}
	lcs, whole := 0, 0
	cells := toolDiffPageCells
	for _, it := range agentTaskItems(ms, &cells) {
		if it.Input == nil {
			continue
		}
		if len(it.Input.Diff) == 256+2*256 && slices.Contains(it.Input.Diff, diffLine{" ", "c1"}) {
			lcs++
		} else if len(it.Input.Diff) == 1+2*511 && it.Input.Diff[1] == (diffLine{"-", "a0"}) && it.Input.Diff[512] == (diffLine{"+", "b0"}) {
			whole++
		}
	}
	if lcs != toolDiffPageCells/(511*511) || whole != 100-lcs {
		t.Fatalf("%d Edits diffed line by line, %d removed then added; want %d and the rest", lcs, whole, toolDiffPageCells/(511*511))
	}
}

// The approvals inbox of many large Edits waiting is bounded the same:
// the page's first Edits line by line, the rest removed then added.
func TestApprovalsDiffPageBounded(t *testing.T) {
	h := newAPHarness(t)
	var old, new []string
	for i := range 256 {
		old = append(old, fmt.Sprintf("c%d", i), fmt.Sprintf("a%d", i))
		new = append(new, fmt.Sprintf("c%d", i), fmt.Sprintf("b%d", i))
	}
	for range 10 {
		h.request(map[string]any{"tool_name": "Edit", "tool_input": map[string]any{"file_path": "/w/a",
			"old_string": strings.Join(old, "\n"), "new_string": strings.Join(new, "\n")}})
	}
	_, page := h.get("/ui/approvals", http.StatusOK)
	lcs, whole := strings.Count(page, `<span class="diff-same">  c1</span>`), strings.Count(page, `<del class="diff-del">- a255</del>
<ins class="diff-add">+ b0</ins>`)
	if lcs != toolDiffPageCells/(511*511) || whole != 10-lcs {
		t.Fatalf("%d Edits diffed line by line, %d removed then added; want %d and the rest", lcs, whole, toolDiffPageCells/(511*511))
	}
}
