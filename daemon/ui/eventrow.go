package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// eventRow is one event of the log as a page shows it: its time and kind,
// its fields as a line a person reads (in the order the log has them,
// each value short), and its whole JSON, indented, on demand.
type eventRow struct {
	TS     time.Time
	Node   string // the node whose log it is (every node's events); "" for this daemon's own
	Kind   string
	Hint   string // for an error: what it means for a person, when known
	Job    string // the job it names (job_id), for a link
	Fields []eventField
	More   int    // fields left off the line
	JSON   string // the line, indented
}

type eventField struct{ Key, Value string }

const (
	rowFields     = 8     // fields on the line; the JSON has them all
	rowValue      = 120   // bytes of one value on the line
	rowJSON       = 16384 // bytes of the indented JSON
	rowJSONIndent = "  "
)

// nodeEventRowOf is eventRowOf for a line of every node's events
// (cluster.events): its "origin", the node's name, is the row's Node, not
// one of its fields.
func nodeEventRowOf(l eventlog.Line) eventRow {
	row := eventRowOf(l)
	row.Node = lineOrigin(l)
	if len(row.Fields) > 0 && row.Fields[0].Key == "origin" {
		row.Fields = row.Fields[1:]
	}
	return row
}

// eventRowOf reads a log line (eventlog.Line, its raw []byte or a string)
// into a row. A line that does not parse shows as its text.
func eventRowOf(v any) eventRow {
	var raw []byte
	switch l := v.(type) {
	case eventlog.Line:
		raw = l.Raw
	case errorLine:
		raw = []byte(l.Line)
	case []byte:
		raw = l
	case string:
		raw = []byte(l)
	}
	row := eventRow{JSON: clipText(string(raw), rowJSON)}
	var ind bytes.Buffer
	if json.Indent(&ind, raw, "", rowJSONIndent) == nil {
		row.JSON = clipText(ind.String(), rowJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return row
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return row
		}
		key, _ := kt.(string)
		var val any
		if err := dec.Decode(&val); err != nil {
			return row
		}
		switch key {
		case "ts":
			if s, ok := val.(string); ok {
				row.TS, _ = time.Parse(time.RFC3339Nano, s)
			}
			continue
		case "seq":
			continue
		case "kind":
			if s, ok := val.(string); ok {
				row.Kind = showable(s, 80)
			}
			continue
		case "job_id":
			if s, ok := val.(string); ok && validID(s) {
				row.Job = s
			}
		}
		if val == nil {
			continue
		}
		if len(row.Fields) == rowFields {
			row.More++
			continue
		}
		row.Fields = append(row.Fields, eventField{Key: showable(key, 40), Value: fieldValue(val)})
	}
	row.Hint = errorHints[row.Kind]
	return row
}

// fieldValue is a value as the line shows it: text as it is (shortened,
// control characters shown as escapes), numbers and booleans as JSON
// writes them, a list or an object as how many it holds.
func fieldValue(v any) string {
	switch x := v.(type) {
	case string:
		return showable(x, rowValue)
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case []any:
		if len(x) == 0 {
			return "none"
		}
		var parts []string
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return fmt.Sprintf("%d items", len(x))
			}
			parts = append(parts, s)
		}
		return showable(strings.Join(parts, ", "), rowValue)
	case map[string]any:
		return fmt.Sprintf("{%d fields}", len(x))
	}
	return "?"
}

// showable is s for a person to read: at most n bytes (cut on a
// character), invalid UTF-8 and control characters written as escapes,
// never interpreted (html/template escapes the rest).
func showable(s string, n int) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || (!unicode.IsPrint(r) && r != ' ') {
			clean = false
			break
		}
	}
	if !clean {
		q := strconv.QuoteToGraphic(s)
		s = q[1 : len(q)-1]
	}
	return clipText(s, n)
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// errorHints say what an error on the overview means for a person.
var errorHints = map[string]string{
	"actor.panicked":          "A part of the daemon crashed and was restarted: report it with the log.",
	"runner.spawn_failed":     "A lane could not start a runner: check the lane's configuration and the machine.",
	"lane.degraded":           "A lane runs short of runners: its jobs wait or fail.",
	"job.finished":            "The daemon could not run a job (state error).",
	"job.orphaned":            "A job's runner went away while it ran.",
	"executor.start_failed":   "An agent executor could not start: check its pool's configuration.",
	"executor.protocol_error": "An agent executor sent what the daemon cannot use.",
	"loop.git_failed":         "A loop's git command failed: look at its repository.",
	"loop.merge_conflicted":   "A loop's merge conflicted: it needs a person.",
	"loop.ended":              "A loop failed.",
	"state.write_failed":      "The state store could not record something: check the disk.",
	"eventlog.dropped":        "Events were not written to the log.",
	"http.unavailable":        "The HTTP listener could not start.",
	"reachout.unavailable":    "vibe-reachout's socket is unavailable: approvals from hooks cannot arrive.",
	"clanker.repo_failed":     "A Clanker repository failed.",
	"clanker.write_failed":    "Clanker could not write a repository's files.",
	"approval.write_failed":   "An approval could not be recorded.",
	"approval.notify_failed":  "A notification of an approval could not be sent.",
	"subscriber.overflowed":   "A client fell behind and was cut off.",
	"terminal.open_failed":    "A terminal could not be opened.",
	"process.orphan_killed":   "A process a previous daemon left running was killed.",
}
