package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orchestrd/orchestrd/api"
)

// Forms that start work: run a job (the jobs page), start a loop (the
// loops page), send a prompt to an agent pool (the agents page). Each
// posts to /ui/start/{form} with the session's CSRF token and is
// answered by the method the CLI calls, with the params it sends:
// job.submit with the api.JobSpec `orchestrd run` builds (run follows it
// with job.stream {submit}; a page follows it on the job's page),
// loop.create_plan or loop.create {loop_type: code} as `orchestrd loop
// plan|code`, task.execute with the api.TaskSpec of `orchestrd prompt`.
// Done, the browser lands on the new job's, loop's or task's page;
// refused, the form comes back with its values and the reason in words.
//
// Starting work is a person's act here: like the buttons that answer for
// a person, a form is refused (403, conn.refused) to a process the daemon
// started, whatever cookie and token it holds (admitPeer). A job or an
// agent that got hold of a session could otherwise start jobs on any lane,
// loops and prompts on any pool (bypassPermissions included) in the
// person's name.

// Bounds of what the forms take (each refused past it, naming the field
// and the bound). The body of a start form is bounded by startFormBytes.
const (
	startTextMax   = 64 << 10 // stdin, a prompt, a loop's description
	startLineMax   = 16 << 10 // a job's command line
	startPathMax   = 4096     // a directory, a repository
	startNameMax   = 256      // a lane, a pool, a branch, a timeout
	startFormBytes = 256 << 10
	// startMaxTimeout bounds a timeout typed in a form: a week.
	startMaxTimeout = 7 * 24 * time.Hour
)

// startForm is one form that starts work.
type startForm struct {
	Name string // its path: /ui/start/{Name}
	Page string // the page it is on (where a refused form comes back)
	// Params turns the form into the method to call and its params,
	// refusing a field it cannot take (the error names it).
	Params func(f url.Values) (method string, params any, err error)
	// Land is the page of what the method started, from its answer.
	Land func(res json.RawMessage) (string, error)
}

var startForms = map[string]*startForm{}

func init() {
	for _, f := range []*startForm{
		{Name: "job", Page: "jobs", Params: jobFormParams, Land: landOn("job_id", "/ui/jobs/")},
		{Name: "loop", Page: "loops", Params: loopFormParams, Land: landOn("id", "/ui/loops/")},
		{Name: "prompt", Page: "agents", Params: promptFormParams, Land: landOn("task_id", "/ui/agents/tasks/")},
	} {
		startForms[f.Name] = f
	}
	funcs["formValue"] = func(fs *formState, form, field string) string {
		if fs == nil || fs.Name != form {
			return ""
		}
		return fs.Values.Get(field)
	}
	funcs["formLimit"] = func(n int) string { return byteSize(n) }
	funcs["startHead"] = func(fs *formState, csrf, form, title string) startHead {
		h := startHead{Name: form, Title: title, CSRF: csrf}
		if fs != nil && fs.Name == form {
			h.Err = fs.Err
		}
		return h
	}
	funcs["startField"] = func(fs *formState, form, name, label string, max int, hint string) startField {
		id := form + "-" + name
		v := ""
		if fs != nil && fs.Name == form {
			v = fs.Values.Get(name)
		}
		return startField{ID: id, Name: name, Label: label, Max: max, Hint: hint, Value: v}
	}
	funcs["startLimits"] = func() startLimits {
		return startLimits{Text: startTextMax, Line: startLineMax,
			Modes: []string{api.ModeDefault, api.ModeAcceptEdits, api.ModeBypass, api.ModePlan}}
	}
}

// startHead is what a start form begins with: its box, its token and
// its alert (template start-head).
type startHead struct{ Name, Title, CSRF, Err string }

// startField is a one-line text field of a start form, its value the
// refused form's (template start-field).
type startField struct {
	ID, Name, Label, Hint, Value string
	Max                          int
}

// startLimits are the forms' bounds, for their fields' maxlength and
// hints.
type startLimits struct {
	Text, Line int
	Modes      []string
}

// formState is a refused form, shown again: its values and why.
type formState struct {
	Name   string
	Values url.Values
	Err    string
}

// landOn reads the id at field of a method's answer and makes the page's
// address.
func landOn(field, prefix string) func(json.RawMessage) (string, error) {
	return func(res json.RawMessage) (string, error) {
		var m map[string]any
		if err := json.Unmarshal(res, &m); err != nil {
			return "", fmt.Errorf("reading the answer: %w", err)
		}
		id, _ := m[field].(string)
		if !validID(id) {
			return "", fmt.Errorf("the answer names no %s", field)
		}
		return prefix + id, nil
	}
}

// startWork serves POST /ui/start/{form}. A fetch (Accept:
// application/json, forms.js) gets {ok, location} or {ok: false, error};
// a plain form is sent to the new page, or gets its page again with the
// form filled in and the error said.
func (s *Server) startWork(w http.ResponseWriter, r *http.Request) {
	wantsJSON := strings.Contains(r.Header.Get("Accept"), "application/json")
	sf, ok := startForms[r.PathValue("form")]
	if !ok {
		http.Error(w, "no such form: "+clipForm(r.PathValue("form")), http.StatusNotFound)
		return
	}
	fail := func(status int, values url.Values, err error) {
		msg := errText(err)
		if wantsJSON {
			writeJSON(w, status, map[string]any{"ok": false, "error": msg})
			return
		}
		s.renderForm(w, r, status, sf, &formState{Name: sf.Name, Values: values, Err: msg})
	}
	if err := parseStartForm(w, r); err != nil {
		fail(http.StatusBadRequest, r.PostForm, err)
		return
	}
	f := r.PostForm
	method, params, err := sf.Params(f)
	if err != nil {
		fail(http.StatusBadRequest, f, err)
		return
	}
	if err := s.admitPeer(r, method); err != nil {
		fail(http.StatusForbidden, f, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	o := from(ctx)
	o.Admit = func() error { return s.admitPeer(r, method) }
	res, err := s.opts.Caller.Invoke(ctx, o, method, params, nil)
	if err != nil {
		fail(httpStatus(err), f, err)
		return
	}
	loc, err := sf.Land(res)
	if err != nil {
		fail(http.StatusBadGateway, f, fmt.Errorf("%s answered, but %w", method, err))
		return
	}
	if wantsJSON {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "location": loc})
		return
	}
	http.Redirect(w, r, loc, http.StatusSeeOther)
}

// startFormPage serves GET /ui/start/{form}: the page the form is on (a
// refused form's page, reloaded, or read again by the live reload).
func (s *Server) startFormPage(w http.ResponseWriter, r *http.Request) {
	sf, ok := startForms[r.PathValue("form")]
	if !ok {
		http.Error(w, "no such form: "+clipForm(r.PathValue("form")), http.StatusNotFound)
		return
	}
	for _, p := range pages {
		if p.Name == sf.Page {
			http.Redirect(w, r, strings.TrimSuffix(p.Pattern, "{$}"), http.StatusSeeOther)
			return
		}
	}
	http.NotFound(w, r)
}

// parseStartForm reads a start form's body (multipart, as the forms send
// it, or urlencoded), at most startFormBytes, and no files.
func parseStartForm(w http.ResponseWriter, r *http.Request) error {
	if r.PostForm == nil {
		r.Body = http.MaxBytesReader(w, r.Body, startFormBytes)
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		var err error
		if mt == "multipart/form-data" {
			err = r.ParseMultipartForm(startFormBytes)
		} else {
			err = r.ParseForm()
		}
		if err != nil {
			if r.PostForm == nil {
				r.PostForm = url.Values{}
			}
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return fmt.Errorf("the form is over %s; a text box takes at most %s (larger input belongs in a file the job reads)",
					byteSize(startFormBytes), byteSize(startTextMax))
			}
			return fmt.Errorf("reading the form: %w", err)
		}
	}
	if r.MultipartForm != nil && len(r.MultipartForm.File) > 0 {
		return errors.New("the form takes no files")
	}
	return nil
}

// renderForm shows sf's page again, the refused form filled in and its
// error said. The page does not stream: its address is the form's (a
// GET of it goes to the page, startFormPage).
func (s *Server) renderForm(w http.ResponseWriter, r *http.Request, status int, sf *startForm, fs *formState) {
	var p *page
	for _, q := range pages {
		if q.Name == sf.Page {
			p = q
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	v := view{Page: p, Nav: navPages(), CSRF: sessionOf(r.Context()).csrf, Version: s.opts.Version,
		Path: strings.TrimSuffix(p.Pattern, "{$}"), Now: time.Now(), Form: fs}
	data, err := p.Data(ctx, s, r)
	if err != nil {
		v.Err = err.Error()
	}
	v.Data = data
	s.render(w, status, p.Name, "page", v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// errText is what a person reads of err: a method's message without its
// code.
func errText(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Message
	}
	return err.Error()
}

// byteSize says n bytes as a person reads it: 64 KiB.
func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " bytes"
}

// formReader reads a form's fields: each reader names the field it
// refuses, and after the first refusal (err) the others read nothing.
type formReader struct {
	f   url.Values
	err error
}

func (r *formReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

// line is a one-line field: at most max bytes of UTF-8 without control
// characters, trimmed.
func (r *formReader) line(field string, max int) string {
	v := strings.TrimSpace(r.f.Get(field))
	if r.err != nil {
		return ""
	}
	if len(v) > max {
		r.fail("%s: at most %s, got %d bytes", field, byteSize(max), len(v))
		return ""
	}
	if !utf8.ValidString(v) {
		r.fail("%s: not UTF-8 text", field)
		return ""
	}
	for _, c := range v {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == '\u2028' || c == '\u2029' {
			r.fail("%s: has a control character (%U)", field, c)
			return ""
		}
	}
	return v
}

// block is a text box: at most max bytes of UTF-8 (the browser's CRLF
// line ends, and a lone CR, made LF), without NUL. empty, when set, is
// what to say of a box left blank.
func (r *formReader) block(field string, max int, empty string) string {
	v := strings.ReplaceAll(strings.ReplaceAll(r.f.Get(field), "\r\n", "\n"), "\r", "\n")
	switch {
	case r.err != nil:
		return ""
	case len(v) > max:
		r.fail("%s: at most %s, got %d bytes", field, byteSize(max), len(v))
	case !utf8.ValidString(v):
		r.fail("%s: not UTF-8 text", field)
	case strings.ContainsRune(v, 0):
		r.fail("%s: has a NUL byte", field)
	case empty != "" && strings.TrimSpace(v) == "":
		r.fail("%s: %s (it is empty)", field, empty)
	default:
		return v
	}
	return ""
}

// dir is an absolute directory, or "" when required is false.
func (r *formReader) dir(field string, required bool) string {
	v := r.line(field, startPathMax)
	switch {
	case r.err != nil:
	case v == "" && required:
		r.fail("%s: give an absolute path (it is empty)", field)
	case v != "" && !path.IsAbs(v):
		r.fail("%s: must be an absolute path, got %q", field, clipForm(v))
	default:
		return v
	}
	return ""
}

// oneOf is a choice among choices ("" among them: may be left out).
func (r *formReader) oneOf(field string, choices ...string) string {
	v := r.f.Get(field)
	if r.err != nil || slices.Contains(choices, v) {
		return v
	}
	named := slices.DeleteFunc(slices.Clone(choices), func(c string) bool { return c == "" })
	want := named[len(named)-1]
	if len(named) > 1 {
		want = strings.Join(named[:len(named)-1], ", ") + " or " + want
	}
	r.fail("%s: want %s, got %q", field, want, clipForm(v))
	return ""
}

// timeout is a timeout as the CLI's --timeout takes it: seconds (30,
// 1.5) or a duration (500ms, 2m, 1h30m); "" is 0 (the default).
func (r *formReader) timeout(field string) time.Duration {
	v := r.line(field, startNameMax)
	if r.err != nil || v == "" {
		return 0
	}
	d, perr := time.ParseDuration(v)
	if secs, err := strconv.ParseFloat(v, 64); err == nil && !strings.ContainsAny(v, "xXpPnNiI") {
		secs = math.Min(secs, math.MaxInt64/float64(time.Second))
		d, perr = time.Duration(secs*float64(time.Second)), nil
	}
	switch {
	case perr != nil:
		r.fail("%s: want seconds (30, 1.5) or a duration (500ms, 2m, 1h30m), got %q", field, clipForm(v))
	case d < 0:
		r.fail("%s: must not be negative, got %s", field, v)
	case d > startMaxTimeout:
		r.fail("%s: at most a week (168h), got %s", field, v)
	case d > 0 && d < time.Millisecond:
		r.fail("%s: at least 1ms, got %s", field, v)
	default:
		return d
	}
	return 0
}

// jobFormParams is job.submit's: the command as a shell line (run by the
// runner as /bin/sh -c, as `orchestrd run -- sh -c LINE` would), its
// stdin text, lane, directory and timeout.
func jobFormParams(f url.Values) (string, any, error) {
	r := &formReader{f: f}
	spec := api.JobSpec{Lane: r.line("lane", startNameMax), Command: r.line("command", startLineMax)}
	if r.err == nil && spec.Command == "" {
		r.fail("command: give a shell line to run (it is empty)")
	}
	spec.Cwd = r.dir("cwd", false)
	spec.TimeoutMs = uint64(r.timeout("timeout").Milliseconds())
	spec.Stdin = r.block("stdin", startTextMax, "")
	if r.err != nil {
		return "", nil, r.err
	}
	return "job.submit", spec, nil
}

// loopFormParams is `orchestrd loop plan|code`'s call: loop.create_plan,
// or loop.create of a code loop.
func loopFormParams(f url.Values) (string, any, error) {
	r := &formReader{f: f}
	typ := r.oneOf("type", string(api.LoopPlan), string(api.LoopCode))
	p := api.LoopCreatePlanParams{Description: strings.TrimSpace(r.block("description", startTextMax, "say what the loop should do")),
		Repo: r.dir("repo", false), Base: r.line("base", startNameMax)}
	switch {
	case r.err != nil:
		return "", nil, r.err
	case typ == string(api.LoopPlan):
		return "loop.create_plan", p, nil
	}
	return "loop.create", api.LoopCreateParams{LoopType: api.LoopCode, Description: p.Description, Repo: p.Repo, Base: p.Base}, nil
}

// promptFormParams is `orchestrd prompt`'s task.execute.
func promptFormParams(f url.Values) (string, any, error) {
	r := &formReader{f: f}
	spec := api.TaskSpec{Executor: r.line("executor", startNameMax), Prompt: r.block("prompt", startTextMax, "say what the agent should do"),
		Cwd: r.dir("cwd", true), PermissionMode: r.oneOf("mode", "", api.ModeDefault, api.ModeAcceptEdits, api.ModeBypass, api.ModePlan)}
	spec.TimeoutMs = r.timeout("timeout").Milliseconds()
	if r.err != nil {
		return "", nil, r.err
	}
	return "task.execute", spec, nil
}
