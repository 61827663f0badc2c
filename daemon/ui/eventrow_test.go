package ui

import (
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The events page lists the newest first, each event as a line of its
// fields (a job's id a link) with its JSON under it on demand; what a
// job or an agent wrote into a field (markup, control characters) shows
// as text.
func TestEventsNewestFirstReadable(t *testing.T) {
	h := newHarness(t, Config{})
	home := t.TempDir()
	h.srv.opts.Home = home
	log := strings.Join([]string{
		`{"ts":"2026-11-29T10:00:00Z","seq":1,"kind":"job.queued","job_id":"j-aa-1","lane":"net"}`,
		`{"ts":"2026-11-29T10:00:01Z","seq":2,"kind":"runner.spawned","lane":"net","runner_id":"net-0","pid":4242}`,
		`{"ts":"2026-11-29T10:00:02Z","seq":3,"kind":"job.finished","job_id":"j-aa-1","lane":"net","state":"failed",` +
			`"error":"<script>alert(1)</script>\u001b[31mred","exit_code":2,"duration_ms":12}`,
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(home, "events.ndjson"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	h.signIn(c)
	_, body := h.do(c, "GET", "/ui/events", nil, nil)
	first, second, third := strings.Index(body, "job.finished"), strings.Index(body, "runner.spawned"), strings.Index(body, "job.queued")
	if first < 0 || second < 0 || third < 0 || first > second || second > third {
		t.Fatalf("the events are not newest first (job.finished %d, runner.spawned %d, job.queued %d):\n%s", first, second, third, body)
	}
	for _, want := range []string{
		`<span class="field"><span class="key">runner_id</span> net-0</span>`,
		`<span class="field"><span class="key">exit_code</span> 2</span>`,
		`<a href="/ui/jobs/j-aa-1">j-aa-1</a>`,
		`<details class="json"><summary>JSON</summary><pre>{`,
		`&#34;pid&#34;: 4242`, // the JSON, indented
		`&lt;script&gt;alert(1)&lt;/script&gt;\x1b[31mred`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the events page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "\x1b") {
		t.Error("a field's markup or control character reached the page as it is")
	}
	if strings.Contains(body, `"seq":2`) || strings.Contains(body, `{"lane":"net"`) {
		t.Error("the page still shows the raw JSON as the line")
	}
}

// "Last errors" on the overview lists what a person must act on, each
// saying what it means: not a job that failed (its own business: a bad
// command a client sent), nor an error an agent reported and went on
// after.
func TestLastErrorsOnlyActionable(t *testing.T) {
	h := newHarness(t, Config{})
	ts := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, r := range []struct{ kind, line string }{
		{"job.finished", `{"ts":"2026-11-29T10:00:00Z","seq":1,"kind":"job.finished","job_id":"j-bad-1","state":"failed","error":"spawn: no such file"}`},
		{"job.finished", `{"ts":"2026-11-29T10:00:00Z","seq":2,"kind":"job.finished","job_id":"j-tmo-1","state":"timeout"}`},
		{"task.error", `{"ts":"2026-11-29T10:00:00Z","seq":3,"kind":"task.error","task_id":"t-1","code":"invalid_params"}`},
		{"job.finished", `{"ts":"2026-11-29T10:00:01Z","seq":4,"kind":"job.finished","job_id":"j-err-1","state":"error","error":"runner lost"}`},
		{"runner.spawn_failed", `{"ts":"2026-11-29T10:00:02Z","seq":5,"kind":"runner.spawn_failed","lane":"net","error":"exec format error"}`},
	} {
		h.srv.errs.Deliver(&eventlog.Record{Kind: r.kind, TS: ts, Line: []byte(r.line)})
	}
	c := h.client()
	h.signIn(c)
	_, body := h.do(c, "GET", "/ui/", nil, nil)
	i := strings.Index(body, `id="last-errors"`)
	if i < 0 {
		t.Fatalf("no last errors on the overview:\n%s", body)
	}
	errs := body[i:]
	errs = errs[:strings.Index(errs, "</section>")]
	for _, not := range []string{"j-bad-1", "j-tmo-1", "task.error", "invalid_params"} {
		if strings.Contains(errs, not) {
			t.Errorf("last errors list %s: nothing a person must act on", not)
		}
	}
	for _, want := range []string{"j-err-1", template.HTMLEscapeString(errorHints["job.finished"]), "runner.spawn_failed",
		template.HTMLEscapeString(errorHints["runner.spawn_failed"]),
		`<span class="key">error</span> exec format error`} {
		if !strings.Contains(errs, want) {
			t.Errorf("last errors lack %q:\n%s", want, errs)
		}
	}
	if strings.Index(errs, "runner.spawn_failed") > strings.Index(errs, "j-err-1") {
		t.Error("last errors are not newest first")
	}
}

// A line of any bytes renders as a row without a panic, its text
// showable (no control character, valid UTF-8).
func FuzzEventRow(f *testing.F) {
	for _, s := range []string{`{"ts":"2026-11-29T10:00:00Z","seq":1,"kind":"a.b","x":"\u001b[1m","n":1.5,"l":["a",1],"o":{"k":null}}`,
		`not json`, `{"kind":`, `[]`, `{"a":"\xff\xfe"}`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		row := eventRowOf(line)
		for _, fl := range row.Fields {
			for _, s := range []string{fl.Key, fl.Value} {
				if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) || !utf8Valid(s) {
					t.Fatalf("field %q=%q is not showable", fl.Key, fl.Value)
				}
			}
		}
		if len(row.Fields) > rowFields {
			t.Fatalf("%d fields on a line", len(row.Fields))
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
