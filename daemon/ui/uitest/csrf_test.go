package uitest

import (
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orchestrd/orchestrd/api"
)

// attackerPages is another origin's site (127.0.0.1 on another port: the
// same site, so the SameSite=Strict cookie does go with its requests, but
// another origin). /read tries to read the dashboard and to act on it
// with fetch; /form posts a form that cancels a job, as soon as it loads.
var attackerPages = template.Must(template.New("").Parse(`
{{define "read"}}<!doctype html><title>another site</title><p>another site</p>
<script>
window.results = (async () => {
  const out = {};
  const try_ = async (name, f) => { try { out[name] = await f(); } catch (e) { out[name] = "failed: " + e; } };
  await try_("cors", async () => { const r = await fetch("{{.Dash}}/ui/", { credentials: "include" }); return "read " + r.status + ": " + (await r.text()).slice(0, 200); });
  await try_("nocors", async () => { const r = await fetch("{{.Dash}}/ui/", { mode: "no-cors", credentials: "include" }); return "opaque=" + (r.type === "opaque") + " status=" + r.status + " text=" + JSON.stringify(await r.text()); });
  await try_("post", async () => { const r = await fetch("{{.Dash}}/ui/act/job.cancel", { method: "POST", mode: "no-cors", credentials: "include",
      body: new URLSearchParams({ id: "{{.Job}}", force: "true", csrf: "guessed" }) }); return "opaque=" + (r.type === "opaque") + " status=" + r.status; });
  await try_("postcsrf", async () => { const r = await fetch("{{.Dash}}/ui/act/job.cancel", { method: "POST", credentials: "include",
      headers: { "X-CSRF-Token": "guessed", "Accept": "application/json" }, body: new URLSearchParams({ id: "{{.Job}}" }) }); return "read " + r.status + ": " + await r.text(); });
  return out;
})();
</script>{{end}}
{{define "form"}}<!doctype html><title>another site</title>
<form id="f" method="post" action="{{.Dash}}/ui/act/job.cancel">
<input name="id" value="{{.Job}}"><input name="force" value="true"><input name="return" value="/ui/jobs">
</form>
<script>document.getElementById("f").submit();</script>{{end}}
`))

// A page of another origin, open in the signed-in browser, can neither
// act nor read: its form that cancels a running job is refused (the job
// runs on, nothing asked to cancel it), and its fetches cannot read the
// dashboard or act. A POST with the session's cookie but without its
// CSRF token, or with another origin's Origin, is refused 403; with both
// (the positive control) it cancels the job.
func TestCrossOrigin(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{})
	r, id := d.runSleeper("net")

	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, rq *http.Request) {
		name := strings.TrimPrefix(rq.URL.Path, "/")
		if name != "read" && name != "form" {
			http.NotFound(w, rq)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		attackerPages.ExecuteTemplate(w, name, map[string]string{"Dash": d.base, "Job": id})
	}))
	t.Cleanup(evil.Close)
	if evil.URL == d.base || !strings.HasPrefix(evil.URL, "http://127.0.0.1:") {
		t.Fatalf("the other site is at %s, the dashboard at %s: want another port of 127.0.0.1", evil.URL, d.base)
	}

	// fetch() from the other origin reads nothing and cancels nothing.
	tb.do(chromedp.Navigate(evil.URL + "/read"))
	res := run(tb, chromedp.Evaluate[map[string]string](`window.results`, chromedp.EvalAwaitPromise))
	t.Logf("the other site's fetches: %q", res)
	for _, k := range []string{"cors", "postcsrf"} {
		if !strings.HasPrefix(res[k], "failed: ") {
			t.Errorf("fetch %s from another origin: %s; want it to fail (no CORS)", k, res[k])
		}
	}
	if r := res["nocors"]; !strings.HasPrefix(r, "failed: ") && r != `opaque=true status=0 text=""` {
		t.Errorf("a no-cors fetch of /ui/ from another origin: %s; want it failed or opaque", r)
	}
	for _, r := range res {
		if strings.Contains(r, "Overview") || strings.Contains(r, "csrf") {
			t.Errorf("another origin read the dashboard: %s", r)
		}
	}

	// A form that posts itself on load.
	tb.do(chromedp.Navigate(evil.URL + "/form"))
	tb.waitJS("the refusal", `location.href.startsWith(`+jsID(d.base+"/ui/act/job.cancel")+`) && document.body.innerText.includes("cross-origin request refused")`)
	tb.shot("cross-origin-refused")
	d.waitEvent("ui.sign_in_failed", func(e map[string]any) bool { return e["reason"] == "cross_origin" })

	// The job runs on; nothing asked for its cancel. The browser is still
	// signed in and shows it running.
	if rec := d.job(id); rec.State != api.StateRunning || rec.WasCancelled {
		t.Fatalf("job %s after the other site's posts: %+v", id, rec)
	}
	if d.hasEvent("job.cancel_requested", id) {
		t.Fatalf("the other site's post asked to cancel job %s", id)
	}
	tb.open("/ui/jobs/" + id)
	tb.waitText("h1 .state", "running")
	csrf := eval[string](tb, `document.body.dataset.csrf`)
	if len(csrf) < 32 {
		t.Fatalf("the page's CSRF token is %q", csrf)
	}

	// Outside the browser: the cookie alone does not act.
	cookie := sessionCookie(tb)
	c := &http.Cookie{Name: cookie.Name, Value: cookie.Value}
	cl := httpClient(t)
	post := func(form url.Values, header map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", d.base+"/ui/act/job.cancel", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(c)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Location")
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		header map[string]string
	}{
		{"no CSRF token", url.Values{"id": {id}}, nil},
		{"a wrong CSRF token", url.Values{"id": {id}, "csrf": {strings.Repeat("x", len(csrf))}}, nil},
		{"a wrong X-CSRF-Token", url.Values{"id": {id}}, map[string]string{"X-CSRF-Token": "x" + csrf[1:]}},
		{"the token, from another origin", url.Values{"id": {id}, "csrf": {csrf}}, map[string]string{"Origin": evil.URL}},
		{"the token, cross-site fetch metadata", url.Values{"id": {id}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		if code, _ := post(tc.form, tc.header); code != http.StatusForbidden {
			t.Fatalf("POST /ui/act/job.cancel with the cookie and %s: %d, want 403", tc.name, code)
		}
	}
	if rec := d.job(id); rec.State != api.StateRunning || d.hasEvent("job.cancel_requested", id) {
		t.Fatalf("job %s after refused posts: %+v", id, rec)
	}
	// The positive control: cookie, token and no other origin cancel it.
	if code, loc := post(url.Values{"id": {id}, "csrf": {csrf}, "return": {"/ui/jobs/" + id}}, nil); code != http.StatusSeeOther || loc != "/ui/jobs/"+id {
		t.Fatalf("POST with the cookie and the token: %d to %q, want 303 back to the job", code, loc)
	}
	tb.waitText("h1 .state", "cancelled")
	if rec := d.job(id); rec.State != api.StateCancelled {
		t.Fatalf("job %s after the good post: %+v", id, rec)
	}
	r.exit(t)
}
