package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api/render"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// page is one page of the dashboard: a bookmarkable URL, its template
// (templates/<Name>.html, defining "content") and what it shows (Data,
// through the method table). Kinds are the events that change what it
// shows: its stream carries them, and each makes the page reload its
// content (debounced). A domain's page registers itself (register).
type page struct {
	Name    string // the template's name, and the nav's key
	Title   string
	Pattern string // a net/http pattern under /ui/, without the method
	Nav     bool   // listed in the navigation
	Kinds   []string
	// ByID: the stream is only of records naming the page's {id}, in
	// whatever field (a job's, a task's, an approval's page).
	ByID bool
	// StreamKinds and StreamJob, when set, make the stream's kinds and
	// job filter from the request (the events page's filter).
	StreamKinds func(r *http.Request) string
	StreamJob   func(r *http.Request) string
	Data        func(ctx context.Context, s *Server, r *http.Request) (any, error)
}

var (
	pagesMu sync.Mutex
	pages   []*page
)

// register adds a page; called from init.
func register(p *page) {
	pagesMu.Lock()
	defer pagesMu.Unlock()
	for _, k := range p.Kinds {
		if k == "task.message" && p.ByID {
			// Always made (and logged): a task's page counts them, for its
			// task only, and reloads at most once a second.
			continue
		}
		if k == "*" || k == "job.output" || k == "job.*" || k == "task.message" || k == "task.*" {
			// A page's stream must not make the bus produce what only it
			// would read: job output is for a job's own page (an observer
			// reader), never a list's.
			panic(fmt.Sprintf("ui: page %s streams %q", p.Name, k))
		}
	}
	pages = append(pages, p)
}

// view is what every template gets: the page, the session's CSRF token,
// the nav, and the page's own data.
type view struct {
	Page     *page
	Nav      []*page
	CSRF     string
	Version  string
	Kinds    string
	StreamJ  string // the job id the stream is filtered on (job_id)
	StreamID string // the id the stream is filtered on (any field)
	Path     string // the request's path and query: where a form returns
	Now      time.Time
	Data     any
	Err      string
	Form     *formState // a start form refused, shown again (page_forms.go)
}

func (s *Server) parseTemplates() error {
	s.tmpl = map[string]*template.Template{}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/forms.html", "templates/part_*.html")
	if err != nil {
		return fmt.Errorf("ui: parsing the layout: %w", err)
	}
	for _, p := range append(pages, &page{Name: "login"}) {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+p.Name+".html")
		if err != nil {
			return fmt.Errorf("ui: parsing page %s: %w", p.Name, err)
		}
		s.tmpl[p.Name] = t
	}
	return nil
}

// navOrder is the navigation's order; a page it does not name comes
// after, by name.
var navOrder = []string{"overview", "approvals", "jobs", "agents", "chat", "loops", "clanker", "events"}

func navPages() []*page {
	var n []*page
	for _, p := range pages {
		if p.Nav {
			n = append(n, p)
		}
	}
	rank := func(p *page) int {
		for i, name := range navOrder {
			if name == p.Name {
				return i
			}
		}
		return len(navOrder)
	}
	sort.SliceStable(n, func(i, j int) bool {
		if ri, rj := rank(n[i]), rank(n[j]); ri != rj {
			return ri < rj
		}
		return n[i].Name < n[j].Name
	})
	return n
}

// pageHandler serves a page: the whole document, or with X-Fragment only
// its content (what the live reload swaps in).
func (s *Server) pageHandler(p *page) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		se := sessionOf(r.Context())
		v := view{Page: p, Nav: navPages(), CSRF: se.csrf, Version: s.opts.Version, Kinds: strings.Join(p.Kinds, ","),
			Path: r.URL.RequestURI(), Now: time.Now()}
		if p.ByID {
			v.StreamID = r.PathValue("id")
		}
		if p.StreamKinds != nil {
			v.Kinds = p.StreamKinds(r)
		}
		if p.StreamJob != nil {
			v.StreamJ = p.StreamJob(r)
		}
		status := http.StatusOK
		data, err := p.Data(ctx, s, r)
		if err != nil {
			v.Err = err.Error()
			status = httpStatus(err)
		}
		v.Data = data
		name := "page"
		if r.Header.Get("X-Fragment") != "" {
			name = "content"
		}
		s.render(w, status, p.Name, name, v)
	}
}

func (s *Server) render(w http.ResponseWriter, status int, page, name string, v any) {
	var buf bytes.Buffer
	if err := s.tmpl[page].ExecuteTemplate(&buf, name, v); err != nil {
		s.log.Error().Err(err).Str("page", page).Msg("ui: rendering a page")
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func (s *Server) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.render(w, status, "login", "page", view{Page: &page{Name: "login", Title: "Sign in"}, Version: s.opts.Version,
		Data: map[string]string{"Next": safeNext(r.URL.Query().Get("next")), "Msg": msg}})
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"usageLine": render.UsageLine,
	"taskUsage": render.TaskUsage,
	"ago": func(t any) string {
		var tt time.Time
		switch v := t.(type) {
		case time.Time:
			tt = v
		case *time.Time:
			if v == nil {
				return "-"
			}
			tt = *v
		case string:
			p, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return v
			}
			tt = p
		default:
			return "-"
		}
		if tt.IsZero() {
			return "-"
		}
		return render.Duration(time.Since(tt)) + " ago"
	},
	"ms": func(ms any) string {
		switch v := ms.(type) {
		case int64:
			return render.Duration(time.Duration(v) * time.Millisecond)
		case float64:
			return render.Duration(time.Duration(v) * time.Millisecond)
		case int:
			return render.Duration(time.Duration(v) * time.Millisecond)
		}
		return "-"
	},
	"when": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return render.When(v)
		case *time.Time:
			if v == nil {
				return "-"
			}
			return render.When(*v)
		}
		return fmt.Sprint(t)
	},
	// text shows what a job or an agent wrote: valid UTF-8 as it is
	// (html/template escapes it), anything else as what it is.
	"text": func(s string) string {
		if utf8.ValidString(s) {
			return s
		}
		return fmt.Sprintf("[binary: %d bytes, not shown]", len(s))
	},
	"clip": func(n int, s string) string {
		if len(s) <= n {
			return s
		}
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return s[:n] + "…"
	},
	"json": func(v any) string {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err.Error()
		}
		return string(b)
	},
	"join": strings.Join,
	"deref": func(p *int32) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	},
	"sortedKeys": func(m map[string]int) []string {
		ks := make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	},
	"add": func(a, b int) int { return a + b },
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// recentErrors keeps the last errors the daemon logged since it started,
// for the overview: the records of errorKinds that say something went
// wrong, as their log lines.
type recentErrors struct {
	mu   sync.Mutex
	keep int
	ring []errorLine
}

type errorLine struct {
	Kind string
	TS   time.Time
	Line string
}

const recentErrorsKept = 20

// errorKinds are the kinds that are, or may be, an error a person must act
// on: the daemon could not do its part (job.finished only in state error,
// a job the daemon could not run; loop.ended only failed). What a client
// or an agent got wrong is not (a job that failed or timed out, a bad
// request, an agent's task.error it went on after): that is theirs, on
// the jobs' and the agents' pages. errorHints says what each means.
var errorKinds = []string{"actor.panicked", "runner.spawn_failed", "lane.degraded", "job.finished", "job.orphaned",
	"executor.start_failed", "executor.protocol_error", "loop.git_failed", "loop.merge_conflicted",
	"loop.ended", "state.write_failed", "eventlog.dropped", "http.unavailable", "reachout.unavailable",
	"clanker.repo_failed", "clanker.write_failed", "approval.write_failed", "approval.notify_failed",
	"subscriber.overflowed", "terminal.open_failed", "process.orphan_killed"}

func newRecentErrors(n int) *recentErrors { return &recentErrors{keep: n} }

// EventsOnly: recentErrors reads a record's log line, never its Wire, so
// a job.finished is not marshalled for it with its output
// (eventlog.EventSink).
func (e *recentErrors) EventsOnly() {}

// Deliver keeps r if it is an error; it never blocks.
func (e *recentErrors) Deliver(r *eventlog.Record) {
	line := r.Line
	if !slices.Contains(errorKinds, r.Kind) {
		return
	}
	switch r.Kind {
	case "job.finished":
		if !bytes.Contains(line, []byte(`"state":"error"`)) {
			return
		}
	case "loop.ended":
		if !bytes.Contains(line, []byte(`"status":"failed"`)) {
			return
		}
	}
	el := errorLine{Kind: r.Kind, TS: r.TS, Line: string(line)}
	e.mu.Lock()
	if len(e.ring) >= e.keep {
		copy(e.ring, e.ring[1:])
		e.ring = e.ring[:len(e.ring)-1]
	}
	e.ring = append(e.ring, el)
	e.mu.Unlock()
}

// list is the errors kept, newest first.
func (e *recentErrors) list() []errorLine {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]errorLine, len(e.ring))
	for i, l := range e.ring {
		out[len(out)-1-i] = l
	}
	return out
}
