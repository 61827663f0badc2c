package ui

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/state"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// The dead-letter throttle of protoactor ends on its own, after its period.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

const testKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fakeCaller answers methods from a table and records what it was asked.
type fakeCaller struct {
	mu      sync.Mutex
	answers map[string]string // method -> JSON result
	calls   []fakeCall
}

type fakeCall struct {
	Method string
	Params string
}

func (f *fakeCaller) Invoke(_ context.Context, _ api.Origin, method string, params any, _ func(string, []byte, func(bool))) (json.RawMessage, error) {
	b, _ := json.Marshal(params)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{method, string(b)})
	if a, ok := f.answers[method]; ok {
		return json.RawMessage(a), nil
	}
	if strings.HasSuffix(method, ".list") || method == "tree.get" || method == "metrics.get" || method == "lane.list" || method == "status" {
		return json.RawMessage(`{}`), nil
	}
	return nil, api.Errorf(api.CodeNotFound, "%s: nothing here", method)
}

func (f *fakeCaller) last(method string) (fakeCall, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.calls) - 1; i >= 0; i-- {
		if f.calls[i].Method == method {
			return f.calls[i], true
		}
	}
	return fakeCall{}, false
}

type harness struct {
	t      *testing.T
	srv    *Server
	caller *fakeCaller
	bus    *eventlog.Bus
	http   *httptest.Server
	events chan *eventlog.Record
}

type chanSink chan *eventlog.Record

func (c chanSink) Deliver(r *eventlog.Record) {
	select {
	case c <- r:
	default:
	}
}

// newHarness serves a dashboard; with a store (stores[0]) its sessions
// are kept there.
func newHarness(t *testing.T, cfg Config, stores ...*state.Store) *harness {
	t.Helper()
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeCaller{answers: map[string]string{
		"job.cancel": `{"was_running":true}`,
		"job.get":    `{"job":{"id":"j-1","lane":"net","state":"running","exit_code":null,"created_at":"2026-11-26T10:00:00Z","output_bytes":0}}`,
		"job.list":   `{"jobs":[{"id":"j-1","lane":"net","state":"running","exit_code":null,"command":"<script>alert(1)</script>","created_at":"2026-11-26T10:00:00Z"}]}`,
		"lane.list":  `{"lanes":[{"name":"net","network":"host","slots":4,"queue_limit":10,"queued":1,"running":2,"degraded":true,"runners":[{"id":"net-0","state":"ready","restarts":1}]}]}`,
	}}
	if cfg.StreamQueue == 0 {
		cfg = DefaultConfig()
	}
	opts := Options{Config: cfg, Caller: fc, Bus: bus, Key: testKey, Version: "test", Logger: zerolog.Nop(), Loopback: true}
	if len(stores) > 0 {
		opts.Store = stores[0]
	}
	h := &harness{t: t, caller: fc, bus: bus, events: make(chan *eventlog.Record, 64)}
	unsub := bus.Subscribe([]string{"ui.*"}, chanSink(h.events)) // before New: it may say what it restored
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = s
	mux := http.NewServeMux()
	mux.Handle("/ui/", s)
	h.http = httptest.NewServer(mux)
	t.Cleanup(func() {
		s.Close()
		h.http.Close()
		unsub()
		bus.Close()
	})
	return h
}

// client is a browser-like client: a cookie jar, no redirects followed.
// browser is a client as a browser is one: a cookie jar of its own, and
// redirects handed back, not followed.
func browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout: 10 * time.Second}
}

func (h *harness) client() *http.Client { return browser() }

// send makes c's request of method to target with form in its body
// (url-encoded; nil: no body) and the headers hdr (a "Host" one sets the
// request's host); it returns the answer and its body, read to the end.
func send(t testing.TB, c *http.Client, method, target string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (h *harness) do(c *http.Client, method, path string, form url.Values, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	return send(h.t, c, method, h.http.URL+path, form, hdr)
}

// signIn signs c in with the key and returns the session's CSRF token.
func (h *harness) signIn(c *http.Client) string {
	h.t.Helper()
	resp, _ := h.do(c, "POST", "/ui/login", url.Values{"key": {testKey}, "next": {"/ui/jobs"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/jobs" {
		h.t.Fatalf("sign in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, page := h.do(c, "GET", "/ui/jobs", nil, nil)
	i := strings.Index(page, `data-csrf="`)
	if i < 0 {
		h.t.Fatalf("no csrf token on the page:\n%s", page)
	}
	tok := page[i+len(`data-csrf="`):]
	return tok[:strings.IndexByte(tok, '"')]
}

func (h *harness) waitEvent(kind string, match func(string) bool) {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-h.events:
			if r.Kind == kind && (match == nil || match(string(r.Line))) {
				return
			}
		case <-deadline:
			h.t.Fatalf("no %s event", kind)
		}
	}
}

// Without a session nothing works: pages send the browser to sign in,
// the stream and the actions are refused, a wrong key is refused and
// logged (without the key), and the right one gives a cookie that is
// HttpOnly, SameSite=Strict, scoped to /ui/ and expires.
func TestSignIn(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	resp, _ := h.do(c, "GET", "/ui/jobs?state=failed", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login?next=") {
		t.Fatalf("a page without a session: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, p := range []string{"/ui/stream?kinds=job.queued", "/ui/jobs/j-1/output"} {
		if resp, _ := h.do(c, "GET", p, nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET %s without a session: %d, want 401", p, resp.StatusCode)
		}
	}
	if resp, _ := h.do(c, "POST", "/ui/act/job.cancel", url.Values{"id": {"j-1"}}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an action without a session: %d, want 401", resp.StatusCode)
	}
	if _, ok := h.caller.last("job.cancel"); ok {
		t.Fatal("job.cancel was called without a session")
	}
	resp, body := h.do(c, "POST", "/ui/login", url.Values{"key": {strings.Repeat("f", 64)}}, nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not this daemon") || len(resp.Cookies()) != 0 {
		t.Fatalf("a wrong key: %d, cookies %v\n%s", resp.StatusCode, resp.Cookies(), body)
	}
	h.waitEvent("ui.sign_in_failed", func(l string) bool {
		return strings.Contains(l, `"reason":"wrong_key"`) && !strings.Contains(l, "ffff")
	})
	resp, _ = h.do(c, "POST", "/ui/login", url.Values{"key": {testKey}, "next": {"//evil.example/x"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("sign in with next=//evil: %d to %q, want /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == sessionCookieName(t, h.http.URL) {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui/" || ck.MaxAge != int((12*time.Hour).Seconds()) {
		t.Fatalf("session cookie %+v", ck)
	}
	h.waitEvent("ui.signed_in", func(l string) bool { return strings.Contains(l, `"how":"key"`) && !strings.Contains(l, ck.Value) })
	resp, body = h.do(c, "GET", "/ui/jobs", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `href="/ui/jobs/j-1"`) {
		t.Fatalf("jobs with a session: %d\n%s", resp.StatusCode, body)
	}
	// What a job wrote is escaped.
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatalf("the job's command is not escaped:\n%s", body)
	}
}

// A POST needs its session's CSRF token and must come from the
// dashboard's own origin; a loopback listener answers only loopback Host
// names.
func TestActionsNeedCSRFAndSameOrigin(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	tok := h.signIn(c)
	form := url.Values{"id": {"j-1"}}
	if resp, _ := h.do(c, "POST", "/ui/act/job.cancel", form, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("without the token: %d, want 403", resp.StatusCode)
	}
	bad := url.Values{"id": {"j-1"}, "csrf": {tok[:len(tok)-1] + "x"}}
	if resp, _ := h.do(c, "POST", "/ui/act/job.cancel", bad, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("with a wrong token: %d, want 403", resp.StatusCode)
	}
	withTok := url.Values{"id": {"j-1"}, "csrf": {tok}}
	resp, _ := h.do(c, "POST", "/ui/act/job.cancel", withTok, map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("from another origin with the token: %d, want 403", resp.StatusCode)
	}
	if _, ok := h.caller.last("job.cancel"); ok {
		t.Fatal("job.cancel was called by a refused request")
	}
	withTok.Set("return", "/ui/jobs/j-1")
	resp, _ = h.do(c, "POST", "/ui/act/job.cancel", withTok, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/jobs/j-1" {
		t.Fatalf("a good form: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if call, ok := h.caller.last("job.cancel"); !ok || call.Params != `{"force":false,"id":"j-1"}` {
		t.Fatalf("job.cancel called with %+v", call)
	}
	// fetch's way: the token in a header, a JSON answer.
	resp, body := h.do(c, "POST", "/ui/act/job.cancel", url.Values{"id": {"j-1"}, "force": {"true"}},
		map[string]string{"X-CSRF-Token": tok, "Accept": "application/json"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("fetch: %d %s", resp.StatusCode, body)
	}
	resp, body = h.do(c, "POST", "/ui/act/job.cancel", url.Values{"id": {"../x y"}},
		map[string]string{"X-CSRF-Token": tok, "Accept": "application/json"})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "id: not an id") {
		t.Fatalf("a bad id: %d %s", resp.StatusCode, body)
	}
	resp, _ = h.do(c, "POST", "/ui/act/daemon.stop", url.Values{}, map[string]string{"X-CSRF-Token": tok})
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an action nobody registered: %d, want 404", resp.StatusCode)
	}
	resp, _ = h.do(c, "GET", "/ui/jobs", nil, map[string]string{"Host": "evil.example:8080"})
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a foreign Host: %d, want 421", resp.StatusCode)
	}
	h.waitEvent("ui.sign_in_failed", func(l string) bool { return strings.Contains(l, `"reason":"csrf"`) })
	// Signed out, the cookie is worth nothing.
	if resp, _ := h.do(c, "POST", "/ui/logout", url.Values{"csrf": {tok}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	if resp, _ := h.do(c, "GET", "/ui/jobs", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after signing out: %d, want 303 to sign in", resp.StatusCode)
	}
}

// Every page renders with what its methods answer, as a whole page and
// as the fragment the live reload swaps in.
func TestPagesRender(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	h.signIn(c)
	for _, p := range pages {
		path := strings.ReplaceAll(strings.TrimSuffix(p.Pattern, "{$}"), "{id}", "j-1")
		resp, body := h.do(c, "GET", path, nil, nil)
		if resp.StatusCode >= 500 || !strings.Contains(body, "<main") {
			t.Errorf("%s: %d\n%s", path, resp.StatusCode, body)
		}
		resp, frag := h.do(c, "GET", path, nil, map[string]string{"X-Fragment": "1"})
		if resp.StatusCode >= 500 || strings.Contains(frag, "<html") {
			t.Errorf("%s fragment: %d\n%s", path, resp.StatusCode, frag)
		}
	}
}

// A stream's queue is bounded: what does not fit is counted, and the
// page hears how many it missed.
func TestStreamQueueBounded(t *testing.T) {
	st := newStream(4)
	for i := 0; i < 10; i++ {
		st.Deliver(&eventlog.Record{Kind: "job.queued", Line: []byte(`{"kind":"job.queued"}`)})
	}
	q, missed := st.take()
	if len(q) != 4 || missed != 6 {
		t.Fatalf("queued %d, missed %d; want 4 and 6", len(q), missed)
	}
	if q, missed := st.take(); len(q) != 0 || missed != 0 {
		t.Fatalf("after take: %d, %d", len(q), missed)
	}
	big := make([]byte, streamQueueBytes)
	st.Deliver(&eventlog.Record{Kind: "job.queued", Line: big})
	if q, missed := st.take(); len(q) != 0 || missed != 1 {
		t.Fatalf("a record over the byte bound: queued %d, missed %d", len(q), missed)
	}
}

// The stream serves the bus's records as SSE, with the job filter, and
// ends when the dashboard closes.
func TestStreamServes(t *testing.T) {
	h := newHarness(t, Config{})
	c := h.client()
	h.signIn(c)
	if resp, body := h.do(c, "GET", "/ui/stream?kinds=nope.kind", nil, nil); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(body, "unknown event kind") {
		t.Fatalf("an unknown kind: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", h.http.URL+"/ui/stream?kinds=ui.signed_out,test.ui_job&job=j-2", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				lines <- string(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	all := ""
	want := func(sub string) {
		t.Helper()
		got := ""
		defer func() { all += got }()
		deadline := time.After(10 * time.Second)
		for !strings.Contains(got, sub) {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the stream ended without %q: %q", sub, got)
				}
				got += l
			case <-deadline:
				t.Fatalf("no %q in %q", sub, got)
			}
		}
	}
	want("event: hello")
	h.bus.Emit(SignedOut{Session: "not-j-2"})
	h.bus.Emit(SignedOut{Session: `","job_id":"j-2"`}) // the filter is on the JSON, escaped: not matched
	h.bus.Emit(testJobEvent{JobID: "j-2"})
	h.bus.Emit(SignedOut{Session: "j-2-end"})
	// Only the record naming j-2 passes: the sign-outs do not name it.
	want(`"job_id":"j-2"`)
	h.srv.Close()
	want("event: bye")
	for l := range lines {
		all += l
	}
	if strings.Contains(all, "not-j-2") || strings.Contains(all, "j-2-end") {
		t.Fatalf("a record not naming the job passed the filter: %q", all)
	}
}

type testJobEvent struct {
	JobID string `json:"job_id"`
}

func (testJobEvent) Kind() string { return "test.ui_job" }

// Sessions expire, the oldest goes past the bound, a link signs in once
// and not after it expires.
func TestSessionsAndLinks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSessions = 2
	ss := newSessions(cfg, testKey)
	now := time.Unix(1_800_000_000, 0)
	ss.now = func() time.Time { return now }
	a, _ := ss.start()
	now = now.Add(time.Second)
	b, _ := ss.start()
	now = now.Add(time.Second)
	c, _ := ss.start()
	if _, ok := ss.get(a); ok {
		t.Fatal("the oldest session outlived the bound")
	}
	if _, ok := ss.get(b); !ok {
		t.Fatal("a live session was lost")
	}
	now = now.Add(cfg.SessionTTL.Duration)
	if _, ok := ss.get(c); ok {
		t.Fatal("a session outlived its ttl")
	}
	l, _ := ss.newLink()
	if !ss.useLink(l) || ss.useLink(l) {
		t.Fatal("a link must sign in exactly once")
	}
	l2, _ := ss.newLink()
	now = now.Add(cfg.LinkTTL.Duration)
	if ss.useLink(l2) || ss.useLink("") || ss.useLink("made-up") {
		t.Fatal("an expired, empty or unknown link signed in")
	}
}

func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/ui/", "//evil", "/ui/../x", "https://evil/ui/", "/ui/\\evil", "/ui/jobs?x=1", "\n/ui/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		u, err := url.Parse(got)
		if !strings.HasPrefix(got, "/ui/") || strings.HasPrefix(got, "//") || err != nil || u.Host != "" || u.Scheme != "" {
			t.Fatalf("safeNext(%q) = %q: not a path of the dashboard", next, got)
		}
	})
}

func FuzzParseKinds(f *testing.F) {
	for _, s := range []string{"job.queued", "job.*", "*", "a,b", ",,", "job.queued,nope"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		kinds, err := parseKinds(v)
		if err != nil {
			return
		}
		if len(kinds) == 0 || len(kinds) > maxStreamKinds {
			t.Fatalf("parseKinds(%q) = %d kinds", v, len(kinds))
		}
		for _, k := range kinds {
			if !eventlog.Known(k) {
				t.Fatalf("parseKinds(%q) let %q through", v, k)
			}
		}
	})
}

func FuzzValidID(f *testing.F) {
	for _, s := range []string{"j-abc-1", "../x", "a\"b", "", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if !validID(id) {
			return
		}
		if url.PathEscape(id) != id || strings.ContainsAny(id, `"\<>&'/ `) {
			t.Fatalf("validID(%q) but it needs escaping", id)
		}
	})
}

func init() { eventlog.Register(testJobEvent{}) }

// sessionCookieName is the session cookie's name on the dashboard at base:
// named for its port ("orchestrd_ui_PORT").
func sessionCookieName(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil || u.Port() == "" {
		t.Fatalf("no port in %q: %v", base, err)
	}
	return "orchestrd_ui_" + u.Port()
}

// The session cookie is named for the port in the request's Host, the
// port the browser reached the dashboard on; a Host without a port is
// the scheme's; one that is not a port gets the bare prefix.
func TestCookieNamedForPort(t *testing.T) {
	for _, c := range []struct {
		host string
		tls  bool
		want string
	}{
		{"127.0.0.1:19532", false, "orchestrd_ui_19532"},
		{"localhost:8001", false, "orchestrd_ui_8001"},
		{"[::1]:9000", true, "orchestrd_ui_9000"},
		{"localhost", false, "orchestrd_ui_80"},
		{"localhost", true, "orchestrd_ui_443"},
		{"localhost:", false, "orchestrd_ui"},
		{"localhost:80a", false, "orchestrd_ui"},
		{"localhost:123456", false, "orchestrd_ui"},
		{"a:b:c", false, "orchestrd_ui_80"},
	} {
		s := &Server{opts: Options{TLS: c.tls}}
		r := httptest.NewRequest("GET", "/ui/", nil)
		r.Host = c.host
		if got := s.cookieName(r); got != c.want {
			t.Errorf("Host %q (TLS %v): cookie %q, want %q", c.host, c.tls, got, c.want)
		}
	}
}
