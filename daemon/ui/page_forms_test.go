package ui

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// postMultipart posts fields as a browser posts a start form
// (multipart/form-data), with hdr.
func (h *harness) postMultipart(c *http.Client, path string, fields [][2]string, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, f := range fields {
		mw.WriteField(f[0], f[1])
	}
	mw.Close()
	req, err := http.NewRequestWithContext(h.t.Context(), "POST", h.http.URL+path, &b)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp, string(body)
}

func jsonHdr(tok string) map[string]string {
	return map[string]string{"X-CSRF-Token": tok, "Accept": "application/json"}
}

// Each form is answered by the method the CLI calls, with the params it
// sends (a job's command as its shell line, the browser's CRLF made LF),
// and lands on the page of what it started: a fetch is told where, a
// plain form is sent there.
func TestStartFormsCallTheCLIMethods(t *testing.T) {
	h := newHarness(t, Config{})
	h.caller.answers["job.submit"] = `{"job_id":"j-7"}`
	h.caller.answers["loop.create_plan"] = `{"loop_id":"l-3","id":"l-3","status":"created"}`
	h.caller.answers["loop.create"] = `{"loop_id":"l-4","id":"l-4","status":"created"}`
	h.caller.answers["task.execute"] = `{"task_id":"t-9","session_id":"s-1"}`
	c := h.client()
	tok := h.signIn(c)

	cases := []struct {
		form   string
		fields [][2]string
		method string
		params string
		land   string
	}{
		{"job", [][2]string{{"lane", "net"}, {"command", " make test && echo ok "}, {"cwd", "/tmp/w"}, {"timeout", "1.5"}, {"stdin", "line one\r\nline two\r\n"}},
			"job.submit", `{"lane":"net","command":"make test \u0026\u0026 echo ok","cwd":"/tmp/w","timeout_ms":1500,"stdin":"line one\nline two\n"}`, "/ui/jobs/j-7"},
		{"job", [][2]string{{"lane", "no-net"}, {"command", "true"}, {"timeout", "2m"}},
			"job.submit", `{"lane":"no-net","command":"true","timeout_ms":120000}`, "/ui/jobs/j-7"},
		{"loop", [][2]string{{"type", "plan"}, {"repo", "/srv/repo"}, {"base", "main"}, {"description", "build the widget\r\n"}},
			"loop.create_plan", `{"description":"build the widget","repo":"/srv/repo","base":"main"}`, "/ui/loops/l-3"},
		{"loop", [][2]string{{"type", "code"}, {"description", "fix the test"}},
			"loop.create", `{"loop_type":"code","description":"fix the test"}`, "/ui/loops/l-4"},
		{"prompt", [][2]string{{"executor", "claude"}, {"prompt", "say hi"}, {"cwd", "/srv/repo"}, {"mode", "acceptEdits"}, {"timeout", "10m"}},
			"task.execute", `{"executor":"claude","prompt":"say hi","cwd":"/srv/repo","permission_mode":"acceptEdits","timeout_ms":600000}`, "/ui/agents/tasks/t-9"},
	}
	for _, tc := range cases {
		resp, body := h.postMultipart(c, "/ui/start/"+tc.form, tc.fields, jsonHdr(tok))
		var res struct {
			OK       bool   `json:"ok"`
			Location string `json:"location"`
			Error    string `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil || resp.StatusCode != http.StatusOK || !res.OK || res.Location != tc.land {
			t.Fatalf("%s form %v: %d %s; want ok to %s", tc.form, tc.fields, resp.StatusCode, body, tc.land)
		}
		call, ok := h.caller.last(tc.method)
		if !ok || call.Params != tc.params {
			t.Fatalf("%s form: %s %s, want %s", tc.form, tc.method, call.Params, tc.params)
		}
	}

	// Without script: a plain form with its token, sent to the job's page.
	form := url.Values{"csrf": {tok}, "lane": {"net"}, "command": {"echo hi"}}
	resp, _ := h.do(c, "POST", "/ui/start/job", form, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/jobs/j-7" {
		t.Fatalf("a plain form: %d to %q, want 303 to /ui/jobs/j-7", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The pages have their forms.
	for page, want := range map[string]string{"/ui/jobs": `action="/ui/start/job"`, "/ui/loops": `action="/ui/start/loop"`,
		"/ui/agents": `action="/ui/start/prompt"`} {
		_, body := h.do(c, "GET", page, nil, nil)
		if !strings.Contains(body, want) || !strings.Contains(body, `name="csrf" value="`+tok+`"`) {
			t.Fatalf("%s has no start form with the session's token", page)
		}
	}
}

// A refused form says why in words (not JSON, not the method's code) and
// comes back with what was typed, escaped: an empty command, a stdin over
// its bound, a body over the forms' bound, a lane the daemon does not
// have, a timeout it cannot read, a control character. Nothing is
// started.
func TestStartFormRefused(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	tok := h.signIn(c)
	hostile := `"><script>alert(1)</script>`
	cases := []struct {
		fields [][2]string
		want   string
	}{
		{[][2]string{{"lane", "net"}, {"command", "   "}, {"stdin", hostile}}, "command: give a shell line to run (it is empty)"},
		{[][2]string{{"lane", "net"}, {"command", "cat"}, {"stdin", strings.Repeat("x", 64<<10+1)}}, "stdin: at most 64 KiB, got 65537 bytes"},
		{[][2]string{{"lane", "net"}, {"command", "cat"}, {"stdin", strings.Repeat("x", 300<<10)}}, "the form is over 256 KiB"},
		{[][2]string{{"lane", "net"}, {"command", "sleep 1"}, {"timeout", "soon"}}, "timeout: want seconds (30, 1.5) or a duration"},
		{[][2]string{{"lane", "net"}, {"command", "echo a\x1b[2Jb"}}, "command: has a control character (U+001B)"},
		{[][2]string{{"lane", "net"}, {"command", "true"}, {"cwd", "relative/dir"}}, "cwd: must be an absolute path"},
	}
	for _, tc := range cases {
		resp, body := h.postMultipart(c, "/ui/start/job", tc.fields, jsonHdr(tok))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Fatalf("form %.200v: %d %.300s; want 400 saying %q", tc.fields, resp.StatusCode, body, tc.want)
		}
	}
	if _, ok := h.caller.last("job.submit"); ok {
		t.Fatal("job.submit was called for a refused form")
	}

	// The daemon's refusal (no such lane here: the fake has no job.submit)
	// is its message, without its code.
	resp, body := h.postMultipart(c, "/ui/start/job", [][2]string{{"lane", "nope"}, {"command", "true"}}, jsonHdr(tok))
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"error":"job.submit: nothing here"`) {
		t.Fatalf("the daemon's refusal: %d %s", resp.StatusCode, body)
	}

	// Without script the page comes back: the form open, filled in, the
	// reason said, the hostile value escaped, and no live stream (its
	// address is the form's).
	resp, body = h.postMultipart(c, "/ui/start/job", [][2]string{{"csrf", tok}, {"lane", "net"}, {"command", hostile}, {"timeout", "soon"}, {"stdin", "keep\nme"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("a refused plain form: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{`id="start-job" data-keep open`, `role="alert" id="form-job-error" tabindex="-1">timeout: want seconds`,
		`value="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"`, ">keep\nme</textarea>", `data-kinds=""`, `<option selected>net</option>`} {
		if !strings.Contains(body, want) {
			t.Fatalf("the refused form's page has no %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Fatal("the refused form's page has the hostile value as markup")
	}
	// A plain form with a text box at its bound (the token read from the
	// form, past its 64 KiB) comes back the same, not refused for its token.
	resp, body = h.postMultipart(c, "/ui/start/job", [][2]string{{"csrf", tok}, {"lane", "net"}, {"command", "cat"}, {"timeout", "soon"},
		{"stdin", strings.Repeat("x", startTextMax)}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="form-job-error" tabindex="-1">timeout: want seconds`) {
		t.Fatalf("a refused plain form of 64 KiB: %d %.300s", resp.StatusCode, body)
	}
	// Its address, read again (a reload, the live reload), is its page.
	if resp, _ := h.do(c, "GET", "/ui/start/job", nil, map[string]string{"X-Fragment": "1"}); resp.StatusCode != http.StatusSeeOther ||
		resp.Header.Get("Location") != "/ui/jobs" {
		t.Fatalf("GET of the form's address: %d to %q, want the jobs page", resp.StatusCode, resp.Header.Get("Location"))
	}

	// Loops and prompts.
	for _, tc := range []struct {
		form   string
		fields [][2]string
		want   string
	}{
		{"loop", [][2]string{{"type", "spec"}, {"description", "x"}}, "type: want plan or code"},
		{"loop", [][2]string{{"type", "plan"}, {"description", " \r\n "}}, "description: say what the loop should do (it is empty)"},
		{"loop", [][2]string{{"type", "code"}, {"description", "x"}, {"repo", "repo"}}, "repo: must be an absolute path"},
		{"prompt", [][2]string{{"prompt", "hi"}}, "cwd: give an absolute path (it is empty)"},
		{"prompt", [][2]string{{"prompt", "hi"}, {"cwd", "/tmp"}, {"mode", "yolo"}}, "mode: want default, acceptEdits"},
		{"prompt", [][2]string{{"prompt", strings.Repeat("p", 64<<10+1)}, {"cwd", "/tmp"}}, "prompt: at most 64 KiB"},
	} {
		resp, body := h.postMultipart(c, "/ui/start/"+tc.form, tc.fields, jsonHdr(tok))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Fatalf("%s form %.200v: %d %.300s; want 400 saying %q", tc.form, tc.fields, resp.StatusCode, body, tc.want)
		}
	}
	for _, m := range []string{"loop.create", "loop.create_plan", "task.execute"} {
		if _, ok := h.caller.last(m); ok {
			t.Fatalf("%s was called for a refused form", m)
		}
	}
}

// A start form without the session's CSRF token, with a wrong one, or
// from another origin is refused, and nothing is started.
func TestStartFormNeedsCSRF(t *testing.T) {
	h := newHarness(t, Config{})
	h.caller.answers["job.submit"] = `{"job_id":"j-7"}`
	c := h.client()
	tok := h.signIn(c)
	fields := [][2]string{{"lane", "net"}, {"command", "touch /tmp/pwned"}}
	for name, hdr := range map[string]map[string]string{
		"no token":     {"Accept": "application/json"},
		"wrong token":  {"X-CSRF-Token": strings.Repeat("0", 64)},
		"other origin": {"X-CSRF-Token": tok, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
	} {
		resp, _ := h.postMultipart(c, "/ui/start/job", fields, hdr)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	if resp, _ := h.postMultipart(c, "/ui/start/job", append(fields, [2]string{"csrf", "guessed"}), nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a plain form with a guessed token: %d, want 403", resp.StatusCode)
	}
	if resp, _ := h.postMultipart(h.client(), "/ui/start/job", fields, jsonHdr(tok)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a session: %d, want 401", resp.StatusCode)
	}
	if _, ok := h.caller.last("job.submit"); ok {
		t.Fatal("job.submit was called without the session's token")
	}
	// The positive control.
	if resp, body := h.postMultipart(c, "/ui/start/job", fields, jsonHdr(tok)); resp.StatusCode != http.StatusOK {
		t.Fatalf("with the token: %d %s", resp.StatusCode, body)
	}
}

func FuzzStartFormParams(f *testing.F) {
	f.Add("job", "net", "echo hi", "/tmp", "30", "in\r\n")
	f.Add("loop", "plan", "do it", "/srv/r", "main", "")
	f.Add("prompt", "pool", "hi", "/tmp", "1h", "bypassPermissions")
	f.Add("job", "", "\x00", "rel", "-1", "\xff")
	f.Fuzz(func(t *testing.T, form, a, b, c, d, e string) {
		sf, ok := startForms[form]
		if !ok {
			return
		}
		v := url.Values{"lane": {a}, "type": {a}, "executor": {a}, "command": {b}, "description": {b}, "prompt": {b},
			"cwd": {c}, "repo": {c}, "timeout": {d}, "base": {d}, "stdin": {e}, "mode": {e}}
		method, params, err := sf.Params(v)
		if err != nil {
			if method != "" || params != nil {
				t.Fatalf("refused with a method %q", method)
			}
			return
		}
		raw, jerr := json.Marshal(params)
		if jerr != nil || method == "" {
			t.Fatalf("%s %v: %v", method, params, jerr)
		}
		if bytes.Contains(raw, []byte(`\r\n`)) || bytes.Contains(raw, []byte(`\u0000`)) {
			t.Fatalf("params keep a CRLF or a NUL: %s", raw)
		}
	})
}
