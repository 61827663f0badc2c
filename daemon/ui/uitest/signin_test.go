package uitest

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Sign-in: the dashboard without a cookie is the sign-in page; a wrong
// key is refused and says so; the key signs in to the overview and its
// lanes; the session cookie is HttpOnly and SameSite=Strict; nothing
// under /ui/ answers without it (a page, the stream, a job's output, an
// action), a cookie made up answers nothing either, and signing out ends
// the session.
func TestSignIn(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	d := startDaemon(t, config{})
	tb := newTab(t, d)

	tb.open("/ui/")
	tb.waitJS("the sign-in page", `document.body.dataset.page === "login" && !!document.getElementById("key")`)
	if loc := run(tb, chromedp.Location()); loc != d.base+"/ui/login?next=%2Fui%2F" {
		t.Fatalf("/ui/ without a cookie went to %s, want the sign-in page with next=/ui/", loc)
	}
	tb.shot("sign-in")

	tb.do(chromedp.SendKeys(chromedp.ID("key"), strings.Repeat("0", 64)), chromedp.Submit(chromedp.ID("key")))
	tb.waitText(`p.error[role=alert]`, "not this daemon's API key")
	if page := eval[string](tb, `document.body.dataset.page`); page != "login" {
		t.Fatalf("a wrong key led to page %q", page)
	}
	tb.shot("wrong-key")
	d.waitEvent("ui.sign_in_failed", func(e map[string]any) bool { return e["reason"] == "wrong_key" })

	tb.do(chromedp.SendKeys(chromedp.ID("key"), d.key), chromedp.Submit(chromedp.ID("key")))
	tb.waitJS("the overview", `document.body.dataset.page === "overview"`)
	// The lanes, each a row linking to its jobs.
	tb.waitJS("the lanes table", `["net", "no-net"].every(l => !!document.querySelector('section[aria-labelledby=lanes-h] a[href="/ui/jobs?lane=' + l + '"]'))`)
	if loc := run(tb, chromedp.Location()); loc != d.base+"/ui/" {
		t.Fatalf("signed in at %s, want %s/ui/", loc, d.base)
	}
	tb.shot("overview")
	d.waitEvent("ui.signed_in", func(e map[string]any) bool { return e["how"] == "key" })

	cookie := sessionCookie(tb)
	if !cookie.HTTPOnly || cookie.SameSite != network.CookieSameSiteStrict || cookie.Path != "/ui/" || cookie.Session {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, path /ui/, and an expiry", cookie)
	}
	if js := eval[string](tb, `document.cookie`); strings.Contains(js, cookie.Value) {
		t.Fatalf("the page's script reads the session cookie: %q", js)
	}

	// Without the cookie, or with one made up, nothing answers.
	cl := httpClient(t)
	for _, c := range []*http.Cookie{nil, {Name: cookie.Name, Value: strings.Repeat("A", len(cookie.Value))}} {
		for _, rq := range []struct {
			method, path string
			fragment     bool
			want         int
		}{
			{"GET", "/ui/", false, http.StatusSeeOther},
			{"GET", "/ui/jobs", false, http.StatusSeeOther},
			{"GET", "/ui/events?kind=job.finished", false, http.StatusSeeOther},
			{"GET", "/ui/jobs", true, http.StatusUnauthorized}, // what the live reload fetches
			{"GET", "/ui/stream?kinds=job.queued", false, http.StatusUnauthorized},
			{"GET", "/ui/jobs/j-1/output", false, http.StatusUnauthorized},
			{"POST", "/ui/act/job.cancel", false, http.StatusUnauthorized},
			{"POST", "/ui/logout", false, http.StatusUnauthorized},
		} {
			resp, body := do(t, cl, rq.method, d.base+rq.path, c, rq.fragment, url.Values{"id": {"j-1"}})
			if resp.StatusCode != rq.want {
				t.Fatalf("%s %s (cookie %v): %d, want %d\n%s", rq.method, rq.path, c != nil, resp.StatusCode, rq.want, body)
			}
			if rq.want == http.StatusSeeOther && !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login?next=") {
				t.Fatalf("%s %s: sent to %q, want the sign-in page", rq.method, rq.path, resp.Header.Get("Location"))
			}
			if strings.Contains(body, "data-csrf") || strings.Contains(body, "Lanes") {
				t.Fatalf("%s %s without a session shows the dashboard:\n%s", rq.method, rq.path, body)
			}
		}
	}
	// The browser's cookie does read them (what refused them was its
	// absence).
	real := &http.Cookie{Name: cookie.Name, Value: cookie.Value}
	if resp, body := do(t, cl, "GET", d.base+"/ui/jobs", real, false, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="jobs"`) {
		t.Fatalf("GET /ui/jobs with the session cookie: %d\n%s", resp.StatusCode, body)
	}

	// Signing out ends the session: the page goes to the sign-in, and
	// the old cookie opens nothing.
	tb.click(chromedp.CSS(`form.signout button`))
	tb.waitJS("the sign-in page after signing out", `document.body.dataset.page === "login"`)
	d.waitEvent("ui.signed_out", nil)
	if resp, _ := do(t, cl, "GET", d.base+"/ui/jobs", real, false, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET /ui/jobs with a signed-out cookie: %d, want 303 to the sign-in", resp.StatusCode)
	}
	tb.open("/ui/jobs")
	tb.waitJS("the sign-in page", `document.body.dataset.page === "login"`)

	// Browsing the dashboard asked the HTTP API for nothing (a browser
	// asks /favicon.ico of a page that names no icon: the API refuses it
	// and logs an http.auth_failed each time).
	for _, e := range d.events() {
		if e["kind"] == "http.auth_failed" {
			t.Fatalf("the browser's visit logged %v", e)
		}
	}
}

// sessionCookie is the tab's dashboard session cookie, as the browser
// keeps it.
func sessionCookie(tb *tab) *network.Cookie {
	tb.t.Helper()
	res, err := chromedp.Call(tb.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{tb.d.base + "/ui/"}})
	if err != nil {
		tb.fatalf("Network.getCookies: %v", err)
	}
	u, err := url.Parse(tb.d.base)
	if err != nil {
		tb.fatalf("the daemon's base %q: %v", tb.d.base, err)
	}
	name := "orchestrd_ui_" + u.Port() // named for the port: two dashboards on one host
	for _, c := range res.Cookies {
		if c.Name == name {
			return c
		}
	}
	tb.fatalf("no %s cookie for %s/ui/: %+v", name, tb.d.base, res.Cookies)
	return nil
}

// Two dashboards on one host (two daemons here; two machines' forwarded by
// SSH to two local ports alike) keep their sessions side by side in one
// browser: signing in to one does not sign the other out, nor does a
// kill -9 and restart of one, and signing out of one leaves the other
// signed in.
func TestTwoDashboardsOneHost(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	d1, d2 := startDaemon(t, config{samePort: true}), startDaemon(t, config{})
	tb := newTab(t, d1) // one tab: one cookie jar for both
	tb.signIn()
	tb.d = d2
	tb.signIn()
	for i, d := range []*daemon{d1, d2, d1, d2} {
		if i == 2 {
			d1.restart(true) // killed: both stay signed in
		}
		tb.d = d
		tb.open("/ui/")
		if page := eval[string](tb, `document.body.dataset.page`); page != "overview" {
			t.Fatalf("%s's dashboard shows %q after signing in to both (check %d, after a kill -9 of the first: %v), want the overview",
				d.base, page, i, i >= 2)
		}
	}
	tb.shot("second-dashboard")
	// Signing out of the second leaves the first signed in.
	tb.click(`form.signout button`)
	tb.waitJS("the sign-in page", `document.body.dataset.page === "login"`)
	tb.d = d1
	tb.open("/ui/")
	if page := eval[string](tb, `document.body.dataset.page`); page != "overview" {
		t.Fatalf("%s's dashboard shows %q after signing out of the other, want the overview", d1.base, page)
	}
}

// do makes one request: a POST sends form (and an Origin of the daemon's
// own, so that only the session and the CSRF token decide); fragment adds
// X-Fragment, as the page's live reload does.
func do(t *testing.T, cl *http.Client, method, u string, c *http.Cookie, fragment bool, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if method == "POST" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c != nil {
		req.AddCookie(c)
	}
	if fragment {
		req.Header.Set("X-Fragment", "1")
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
