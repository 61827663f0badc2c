package main

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
)

// orchestrd ui prints a link that signs a browser in once: the first GET
// sets the session cookie and goes to the overview; the same link again
// is refused; the cookie reads the dashboard; frontend.list names it.
func TestUILoginLink(t *testing.T) {
	t.Parallel()
	d, base, _ := httpDaemon(t, "")
	out, errOut, code := runCLI(t, "ui", "--home", d.home)
	if code != 0 {
		t.Fatalf("ui: exit %d: %s", code, errOut)
	}
	link := strings.TrimSpace(out)
	root := strings.TrimSuffix(base, "/api/v1")
	if !strings.HasPrefix(link, root+"/ui/login?token=") || !strings.Contains(errOut, "signs in once") {
		t.Fatalf("ui printed %q (stderr %q); want a link to %s/ui/login", link, errOut, root)
	}
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == uiCookieName(t, root) {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" || session == nil ||
		!session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.MaxAge <= 0 {
		t.Fatalf("the link: %d to %q, cookie %+v; want 303 to /ui/ with an HttpOnly SameSite=Strict cookie that expires",
			resp.StatusCode, resp.Header.Get("Location"), session)
	}
	again, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != http.StatusForbidden {
		t.Fatalf("the link used twice: %d, want 403", again.StatusCode)
	}
	page, err := cl.Get(root + "/ui/jobs")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusOK || !strings.Contains(page.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("/ui/jobs with the cookie: %d, CSP %q", page.StatusCode, page.Header.Get("Content-Security-Policy"))
	}
	d.waitEvent("ui.signed_in", func(e map[string]any) bool { return e["how"] == "link" })
	st, errOut, code := runCLI(t, "status", "--home", d.home)
	if code != 0 || frontEndLines(st)["ui"] != root+"/ui/" {
		t.Fatalf("status: exit %d, ui front-end %q, want %s/ui/\n%s%s", code, frontEndLines(st)["ui"], root, st, errOut)
	}
	if _, errOut, code := runCLI(t, "ui", "extra", "--home", d.home); code != exitUsage || !strings.Contains(errOut, "no arguments") {
		t.Fatalf("ui extra: exit %d: %s", code, errOut)
	}
}

// uiCookieName is the dashboard's session cookie's name at root: named for
// its port, so that two dashboards on one host keep their sessions.
func uiCookieName(t *testing.T, root string) string {
	t.Helper()
	u, err := url.Parse(root)
	if err != nil || u.Port() == "" {
		t.Fatalf("no port in the dashboard's address %q: %v", root, err)
	}
	return "orchestrd_ui_" + u.Port()
}
