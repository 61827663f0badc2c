package uitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"github.com/orchestrd/orchestrd/internal/daemonrun"
	"github.com/orchestrd/orchestrd/internal/testio"
)

var (
	// binary is the orchestrd binary, built once for every
	// test; chromium is the browser's path, "" when there is none.
	binary   string
	chromium string

	browserOnce   sync.Once
	browserCtx    context.Context // the one browser: tests open tabs in it
	browserErr    error
	browserStop   func()
	browserOutput testio.SyncBuffer // what Chromium wrote
	profileDir    string
)

// findChromium is $CHROMIUM when set, else /usr/bin/chromium, when it is
// there.
func findChromium() string {
	p := os.Getenv("CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if lp, err := exec.LookPath(p); err == nil {
		return lp
	}
	return ""
}

// chromiumWanted is where findChromium looked.
func chromiumWanted() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

func TestMain(m *testing.M) {
	// Every test at once: each spends its time waiting on a tab and a
	// daemon (a minute of wall clock for seconds of CPU).
	testio.Parallel(16)
	chromium = findChromium()
	if chromium == "" {
		// Every test skips, saying why: nothing to build.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "orchui")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "orchestrd")
	tools.Dir = dir
	profileDir = filepath.Join(dir, "chromium-profile")
	// No daemon of these tests may take the user's vibe-reachout socket.
	if err := daemonrun.PrivateXDG(dir); err != nil {
		panic(err)
	}
	// A plain build: these tests are about the browser; the daemon's races
	// are the business of the tests that run it race-built (cmd/orchestrd's
	// underRace, the domains' own tests).
	if err := daemonrun.Build("", "github.com/orchestrd/orchestrd/cmd/orchestrd", binary); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if browserStop != nil {
		browserStop()
	}
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startBrowser starts the one headless Chromium of this test binary.
// This machine may have no network: the background-networking flags keep
// Chromium from trying its services and flooding refused connections.
func startBrowser() {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests may run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profileDir),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		// Tabs run side by side: none is throttled for being in the
		// background (a test freezes the one it wants slow itself).
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.WindowSize(1280, 800),
		chromedp.CombinedOutput(&browserOutput),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	browserStop = func() { bcancel(); acancel() }
	if err := chromedp.Do(bctx); err != nil {
		browserErr = fmt.Errorf("starting %s: %w\n%s", chromium, err, tail(browserOutput.String(), 3000))
		return
	}
	browserCtx = bctx
}

// needBrowser skips t when there is no Chromium and fails it when the
// browser did not start.
func needBrowser(t *testing.T) {
	t.Helper()
	if chromium == "" {
		t.Skipf("no Chromium at %s: set CHROMIUM to its path or install Debian's chromium package (/usr/bin/chromium)", chromiumWanted())
	}
	browserOnce.Do(startBrowser)
	if browserErr != nil {
		t.Fatal(browserErr)
	}
}

// tools are the helper programs some tests run (vibe-reachout's hook, the
// test executor), each built once, next to the binary, when first asked
// for.
var tools daemonrun.Builds

// tool is the program of package pkg (an import path in this module),
// built.
func tool(t *testing.T, pkg string) string {
	t.Helper()
	needBrowser(t) // and so the binary, next to which tools go
	p, err := tools.Build(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
