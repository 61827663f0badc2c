package uitest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// tabDeadline bounds everything one test does in its tab; waitDeadline
// one condition waited for (generous: the daemon runs on a
// machine the other tests share).
const (
	tabDeadline  = 4 * time.Minute
	waitDeadline = 60 * time.Second
)

// tab is one test's browser tab, in a browser context of its own (its
// own cookies: each test's daemon is another port of 127.0.0.1, and
// cookies do not tell ports apart).
type tab struct {
	t   *testing.T
	d   *daemon
	ctx context.Context

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	shots   int
	waits   []func() // for what watches the tab, once it is closed
}

// signedIn starts a daemon with cfg and a tab signed in to its dashboard.
func signedIn(t *testing.T, cfg config) (*daemon, *tab) {
	t.Helper()
	needBrowser(t)
	d := startDaemon(t, cfg)
	tb := newTab(t, d)
	tb.signIn()
	return d, tb
}

// newTab opens a tab for t on d's dashboard (not signed in), at 1280x800.
// When the test ends the tab closes, and the test fails if a dashboard
// page threw an exception or broke its Content-Security-Policy.
func newTab(t *testing.T, d *daemon) *tab {
	t.Helper()
	needBrowser(t)
	tctx, closeTab := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	if err := chromedp.Do(tctx); err != nil {
		closeTab()
		t.Fatalf("opening a tab: %v", err)
	}
	ctx, cancel := context.WithTimeout(tctx, tabDeadline)
	tb := &tab{t: t, d: d, ctx: ctx}
	messages := chromedp.Console(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.console = append(tb.console, m)
			tb.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		cancel()
		closeTab()
		wg.Wait()
		tb.mu.Lock()
		waits := tb.waits
		tb.mu.Unlock()
		for _, w := range waits {
			w()
		}
		tb.checkConsole()
	})
	tb.do(chromedp.EmulateViewport(1280, 800))
	return tb
}

// acceptDialogs answers every confirm() the page asks with OK, and
// returns what they asked.
func (tb *tab) acceptDialogs() func() []string {
	var mu sync.Mutex
	var asked []string
	dialogs := chromedp.Events(tb.ctx, page.JavascriptDialogOpening)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			mu.Lock()
			asked = append(asked, ev.Message)
			mu.Unlock()
			chromedp.Call(tb.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	})
	tb.mu.Lock()
	tb.waits = append(tb.waits, wg.Wait) // once the tab is closed
	tb.mu.Unlock()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), asked...)
	}
}

// checkConsole fails the test for an exception or a CSP refusal on a page
// of the dashboard (another origin's page, the attacker's, may fail as it
// likes).
func (tb *tab) checkConsole() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, m := range tb.console {
		if tb.d != nil && m.URL != "" && !strings.HasPrefix(m.URL, tb.d.base+"/ui/") {
			continue
		}
		if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
			tb.t.Errorf("the page's console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
		}
	}
}

// consoleText is what the console got, for a failure's message.
func (tb *tab) consoleText() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var b strings.Builder
	for _, m := range tb.console {
		fmt.Fprintf(&b, "  %s: %s (%s:%d)\n", m.Type, m.Text, m.URL, m.Line+1)
	}
	return b.String()
}

// do runs actions in the tab, failing the test with what the page shows.
func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		tb.fatalf("%v", err)
	}
}

// click clicks the element sel finds, as a person does with the mouse.
// A live page may swap its content between chromedp's finding the node
// and clicking it (the node then is gone): the click is tried again on
// the content that replaced it, until the deadline.
func (tb *tab) click(sel chromedp.CSS) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, waitDeadline)
	defer cancel()
	for {
		err := chromedp.Do(ctx, chromedp.Click(sel, chromedp.NodeVisible))
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			tb.fatalf("clicking %s: %v", sel, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// fatalf fails the test with the page's address, text and console.
func (tb *tab) fatalf(format string, args ...any) {
	tb.t.Helper()
	tb.t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), tb.describe())
}

// describe is where the tab is and what it shows.
func (tb *tab) describe() string {
	// The same tab, even when the test's deadline has passed (the tab
	// itself closes only when the test ends).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.ctx), 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	live, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(document.body ? document.body.dataset : {})`))
	return fmt.Sprintf("page %s (body data %s):\n%s\nconsole:\n%s", loc, live, tail(text, 3000), tb.consoleText())
}

// open navigates to path (under the daemon's base) and waits for its
// load.
func (tb *tab) open(path string) {
	tb.t.Helper()
	tb.do(chromedp.Navigate(tb.d.base + path))
}

// waitJS waits until the JavaScript expression expr is truthy in the
// page. It is evaluated again and again (every 25ms) until the deadline:
// the page may navigate or reload its content in between, and an
// evaluation that fails because the document went away is tried again.
func (tb *tab) waitJS(what, expr string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, waitDeadline)
	defer cancel()
	var lastErr error
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		if err == nil && ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			tb.fatalf("waiting for %s (%s): %v (last error: %v)", what, expr, ctx.Err(), lastErr)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// waitText waits until the element sel (a CSS selector) exists and its
// text contains want.
func (tb *tab) waitText(sel, want string) {
	tb.t.Helper()
	tb.waitJS(fmt.Sprintf("%s to say %q", sel, want),
		fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want))
}

// eval evaluates expr in the page.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// run runs one action that returns a value.
func run[T any](tb *tab, a chromedp.Action[T]) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, a)
	if err != nil {
		tb.fatalf("%v", err)
	}
	return v
}

// signIn signs the tab in with the daemon's key through the sign-in page
// and waits for the overview. The key is put in the field, not typed:
// typing its 64 characters cost the browser over a CPU-second a test
// (TestSignIn types it, as a person does).
func (tb *tab) signIn() {
	tb.t.Helper()
	tb.open("/ui/login")
	tb.do(chromedp.SetValue(chromedp.ID("key"), tb.d.key),
		chromedp.Submit(chromedp.ID("key")))
	tb.waitJS("the overview", `document.body.dataset.page === "overview"`)
}

// shotsDir is where the screenshots go: $ORCHESTRD_SCREENSHOTS, made if
// need be; none are taken without it. They are for a person to look at,
// and a test run nobody looks at spent a third of its browser's CPU on
// them (two full-page PNGs a shot, rendered in software).
var (
	shotsOnce sync.Once
	shotsDir  string
	shotsErr  error
)

func screenshotDir() (string, error) {
	shotsOnce.Do(func() {
		if shotsDir = os.Getenv("ORCHESTRD_SCREENSHOTS"); shotsDir != "" {
			shotsErr = os.MkdirAll(shotsDir, 0o755)
		}
	})
	return shotsDir, shotsErr
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// shot writes full-page PNGs of what the tab shows, at 1280x800 and at a
// phone's 390x844, under $ORCHESTRD_SCREENSHOTS when it is set; the tab is
// left at 1280x800.
func (tb *tab) shot(name string) {
	tb.t.Helper()
	root, err := screenshotDir()
	if err != nil {
		tb.t.Fatalf("screenshots: %v", err)
	}
	if root == "" {
		return
	}
	dir := filepath.Join(root, unsafeName.ReplaceAllString(tb.t.Name(), "_"))
	tb.mu.Lock()
	tb.shots++
	n := tb.shots
	tb.mu.Unlock()
	if n == 1 {
		os.RemoveAll(dir) // an earlier run's, in $ORCHESTRD_SCREENSHOTS
		tb.t.Logf("screenshots in %s", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.t.Fatal(err)
	}
	for _, size := range []struct {
		w, h   int64
		mobile bool
	}{{1280, 800, false}, {390, 844, true}} {
		opts := []chromedp.EmulateViewportOption{}
		if size.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		tb.do(chromedp.EmulateViewport(size.w, size.h, opts...))
		png := run(tb, chromedp.FullScreenshot(100))
		p := filepath.Join(dir, fmt.Sprintf("%02d-%s-%dx%d.png", n, unsafeName.ReplaceAllString(name, "_"), size.w, size.h))
		if err := os.WriteFile(p, png, 0o644); err != nil {
			tb.t.Fatal(err)
		}
	}
	tb.do(chromedp.EmulateViewport(1280, 800))
}
