package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api/render"
)

// A tool call's input as the agent's values, wherever the dashboard
// shows one (a task's conversation, an approval): a shell command as
// code, an Edit's old_string and new_string as a diff of lines, a Write's
// content as added lines, any other tool's fields one by one, each
// string as the string it is (never its JSON: `&&`, not `\u0026\u0026`).
// Everything goes through html/template, which escapes it; control
// characters and the bidi controls that reorder what is read are shown as
// visible marks (render.Visible), so a command reads as what runs.

// Bounds: what one input shows (the rest is said cut).
const (
	toolValueMax  = 64 << 10 // bytes of one value
	toolDiffLines = 2000     // lines of one side of a diff
	toolDiffCells = 1 << 18  // old lines × new lines a line diff is computed for (a page renders often)
	// toolDiffPageCells: the same, of all the line diffs of one page
	// together (a conversation of 2000 tool calls renders as often); past
	// it a diff is its lines removed then added.
	toolDiffPageCells = 4 * toolDiffCells
	toolFieldsMax     = 40 // fields of one input
	toolJSONMax       = 256 << 10
	toolCommandKey    = "command"
)

// toolView is a tool call's input as a person reads it.
type toolView struct {
	Tool    string
	Command string     // a shell command (Bash's command, Codex's cmd...)
	Path    string     // the file an Edit, MultiEdit or Write touches
	Diff    []diffLine // an Edit's, a MultiEdit's (hunks apart), a Write's
	Fields  []toolField
	JSON    string // the input as JSON, indented, strings unescaped (withJSON): on demand
	JSONID  string // the id of its fold (kept open across a live reload)
	Cut     bool   // something was too long and is cut
	Raw     string // an input that is not a JSON object, as it is
}

// toolField is one field of an input: Value the string as it is, or any
// other JSON value compact; Code: shown as code (a path, a pattern).
type toolField struct {
	Name  string
	Value string
	Code  bool
}

// diffLine is one line of a diff: Op "-" removed, "+" added, " " the
// same, "@@" a new hunk (MultiEdit's next edit; Text says which).
type diffLine struct {
	Op   string
	Text string
}

// shellTools are the tools whose command field is a shell command.
var shellTools = map[string]string{"Bash": "command", "exec_command": "cmd", "run_shell_command": "command",
	"shell": "command", "local_shell": "command"}

// newToolView reads a tool call's input (nil or empty: none).
func newToolView(tool string, input json.RawMessage) toolView {
	cells := toolDiffCells
	return newToolViewIn(tool, input, &cells)
}

// newToolViewIn is newToolView whose diffs take from cells, what is left
// of their page's toolDiffPageCells.
func newToolViewIn(tool string, input json.RawMessage, cells *int) toolView {
	v := toolView{Tool: tool}
	input = bytes.TrimSpace(input)
	if len(input) == 0 || string(input) == "null" {
		return v
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(input, &fields) != nil {
		v.Raw, v.Cut = clipValue(string(input))
		return v
	}
	str := func(k string) (string, bool) {
		var s string
		if json.Unmarshal(fields[k], &s) != nil {
			return "", false
		}
		return s, true
	}
	used := map[string]bool{}
	if key, ok := shellTools[tool]; ok {
		if c, ok := str(key); ok {
			v.Command, v.Cut = clipValue(c)
			used[key] = true
		} else if raw, ok := fields[key]; ok && key == "cmd" {
			// Codex's cmd may be an argv.
			var argv []string
			if json.Unmarshal(raw, &argv) == nil {
				v.Command, v.Cut = clipValue(strings.Join(argv, " "))
				used[key] = true
			}
		}
	}
	switch tool {
	case "Edit":
		o, ok1 := str("old_string")
		n, ok2 := str("new_string")
		if ok1 && ok2 {
			v.Path, _ = str("file_path")
			v.Diff, v.Cut = lineDiff(o, n, cells)
			used["file_path"], used["old_string"], used["new_string"] = true, true, true
		}
	case "Write":
		if c, ok := str("content"); ok {
			v.Path, _ = str("file_path")
			v.Diff, v.Cut = lineDiff("", c, cells)
			used["file_path"], used["content"] = true, true
		}
	case "MultiEdit":
		var edits []struct {
			Old        *string `json:"old_string"`
			New        *string `json:"new_string"`
			ReplaceAll bool    `json:"replace_all"`
		}
		if json.Unmarshal(fields["edits"], &edits) == nil && len(edits) > 0 {
			v.Path, _ = str("file_path")
			lines := 0
			for i, e := range edits {
				if e.Old == nil || e.New == nil {
					continue
				}
				if lines >= toolDiffLines {
					v.Cut = true
					break
				}
				head := fmt.Sprintf("edit %d of %d", i+1, len(edits))
				if e.ReplaceAll {
					head += ", every occurrence"
				}
				d, cut := lineDiff(*e.Old, *e.New, cells)
				v.Diff = append(v.Diff, diffLine{Op: "@@", Text: head})
				v.Diff = append(v.Diff, d...)
				v.Cut = v.Cut || cut
				lines += len(d)
			}
			used["file_path"], used["edits"] = true, true
		}
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		if !used[k] {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	// What says what the call does first.
	sort.SliceStable(names, func(i, j int) bool { return fieldRank(names[i]) < fieldRank(names[j]) })
	for i, k := range names {
		if i == toolFieldsMax {
			v.Cut = true
			break
		}
		f := toolField{Name: k, Code: fieldRank(k) == 0}
		var s string
		if json.Unmarshal(fields[k], &s) == nil {
			f.Value = s
		} else {
			f.Value = compactJSON(fields[k])
		}
		var cut bool
		f.Value, cut = clipValue(f.Value)
		v.Cut = v.Cut || cut
		if k == "replace_all" && f.Value == "false" {
			continue
		}
		v.Fields = append(v.Fields, f)
	}
	return v
}

// withJSON is v with its input's JSON too (an approval's page shows it
// on demand; a conversation does not).
func (v toolView) withJSON(input json.RawMessage, id string) toolView {
	v.JSONID = id
	if input = bytes.TrimSpace(input); len(input) > 0 && string(input) != "null" && v.Raw == "" {
		v.JSON = toolJSON(input)
	}
	return v
}

// fieldRank puts the fields that say what a call touches first (shown
// as code).
func fieldRank(k string) int {
	switch k {
	case "command", "cmd", "file_path", "notebook_path", "path", "url", "pattern", "query", "glob":
		return 0
	}
	return 1
}

// clipValue cuts s at toolValueMax bytes (on a rune's start).
func clipValue(s string) (string, bool) {
	if len(s) <= toolValueMax {
		return s, false
	}
	n := toolValueMax
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// compactJSON is raw on one line, strings unescaped as they were written
// (no \u0026 for &).
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return unescapeJSON(b.Bytes(), "")
}

// toolJSON is the input indented, strings unescaped as compactJSON's.
func toolJSON(raw json.RawMessage) string {
	if len(raw) > toolJSONMax {
		s, _ := clipValue(string(raw))
		return s
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return unescapeJSON(b.Bytes(), "  ")
}

// unescapeJSON re-encodes valid JSON without HTML escaping: Go's encoder
// (and the store's) writes < > & as \u003c \u003e \u0026, which is not
// what the agent wrote. The page escapes for HTML itself.
func unescapeJSON(b []byte, indent string) string {
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return string(b)
	}
	var out bytes.Buffer
	e := json.NewEncoder(&out)
	e.SetEscapeHTML(false)
	e.SetIndent("", indent)
	if e.Encode(v) != nil {
		return string(b)
	}
	return strings.TrimSuffix(out.String(), "\n")
}

// lineDiff is the lines of old and new as a diff: the lines both have
// at their start and end are the same, the middle a longest common
// subsequence of lines when it is small enough (at most toolDiffCells
// and what is left of cells, which it takes), else all removed then all
// added. cut: a side had more than toolDiffLines lines (or a value over
// toolValueMax), and what is shown stops there.
func lineDiff(old, new string, cells *int) ([]diffLine, bool) {
	old, c1 := clipValue(old)
	new, c2 := clipValue(new)
	a, c3 := splitLines(old)
	b, c4 := splitLines(new)
	cut := c1 || c2 || c3 || c4
	var out []diffLine
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	for _, l := range a[:p] {
		out = append(out, diffLine{" ", l})
	}
	ma, mb := a[p:len(a)-s], b[p:len(b)-s]
	if n := len(ma) * len(mb); n > min(toolDiffCells, *cells) || n == 0 {
		for _, l := range ma {
			out = append(out, diffLine{"-", l})
		}
		for _, l := range mb {
			out = append(out, diffLine{"+", l})
		}
	} else {
		*cells -= len(ma) * len(mb)
		out = append(out, lcsDiff(ma, mb)...)
	}
	for _, l := range a[len(a)-s:] {
		out = append(out, diffLine{" ", l})
	}
	return out, cut
}

// splitLines is s's lines (none for ""), at most toolDiffLines.
func splitLines(s string) ([]string, bool) {
	if s == "" {
		return nil, false
	}
	ls := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(ls) > toolDiffLines {
		return ls[:toolDiffLines], true
	}
	return ls, false
}

// lcsDiff is the diff of a and b by a longest common subsequence of their
// lines (len(a)*len(b) is bounded by the caller).
func lcsDiff(a, b []string) []diffLine {
	n, m := len(a), len(b)
	t := make([]int32, (n+1)*(m+1))
	at := func(i, j int) *int32 { return &t[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				*at(i, j) = *at(i+1, j+1) + 1
			} else {
				*at(i, j) = max(*at(i+1, j), *at(i, j+1))
			}
		}
	}
	var out []diffLine
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			out = append(out, diffLine{" ", a[i]})
			i++
			j++
		case *at(i+1, j) >= *at(i, j+1):
			out = append(out, diffLine{"-", a[i]})
			i++
		default:
			out = append(out, diffLine{"+", b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		out = append(out, diffLine{"-", a[i]})
	}
	for ; j < m; j++ {
		out = append(out, diffLine{"+", b[j]})
	}
	return out
}

func init() {
	funcs["visible"] = render.Visible
	funcs["toolMultiline"] = func(s string) bool { return strings.Contains(s, "\n") }
}

// askCardView is a pending approval's answers as a page shows them: the
// approval, what its forms carry (the session's CSRF token, the page to
// come back to), Prefix the ids its buttons are described by (Prefix-h
// its heading, Prefix-sN a suggestion) and ReplyID its reply's box.
type askCardView struct {
	apprItem
	CSRF    string
	Path    string
	Prefix  string
	ReplyID string
}

func init() {
	// A card among others (the inbox, a conversation), and an approval's
	// own page.
	funcs["askCard"] = func(v view, a apprItem) askCardView {
		return askCardView{apprItem: a, CSRF: v.CSRF, Path: v.Path, Prefix: "appr-" + a.ID, ReplyID: "reply-" + a.ID}
	}
	funcs["apprPageAnswer"] = func(v view, a apprItem) askCardView {
		return askCardView{apprItem: a, CSRF: v.CSRF, Path: v.Path, Prefix: "appr", ReplyID: "reply"}
	}
}
