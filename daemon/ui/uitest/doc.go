// Package uitest tests the web dashboard (daemon/ui) in a real browser:
// headless Chromium driven through the DevTools protocol (chromedp),
// against real daemons (the orchestrd binary, built once) and
// the real CLI. It holds only tests, beside the dashboard's code; its
// daemons are processes (not daemontest's in-process one) so that several
// run at once and a test can kill one as a person's machine would.
//
// The tests skip when no Chromium is found: $CHROMIUM, else
// /usr/bin/chromium (Debian's chromium package, which .ci/run installs).
// With $ORCHESTRD_SCREENSHOTS set to a directory, each test writes there
// full-page screenshots of the pages it visits, at 1280x800 and at a
// phone's 390x844, for a person to look at (the test's log names its
// folder); without it none are taken. What the tests check of a phone's
// width they check themselves, shots or not.
package uitest
