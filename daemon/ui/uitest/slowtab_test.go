package uitest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/debugger"
	"github.com/chromedp/chromedp"
)

// A tab that falls behind misses events and says so. The events page
// follows job.output, with [ui] stream_queue = 4; the tab's script is
// held (paused in the debugger, as a page busy with a long script is:
// the tab stays shown and its stream open) while a job writes without
// end. Chromium stops reading the stream's socket; once the kernel shows
// the daemon's side of it full and the job has written a good deal more,
// the tab goes on: the page says how many events it missed, reloads what
// it shows, and its stream is still the one it had (the daemon did not
// drop it).
//
// What does not make a tab fall behind: network throttling
// (Network.emulateNetworkConditionsByRule: Chromium reads an event stream
// at full speed under any download throughput), and freezing the page
// (Page.setWebLifecycleState frozen hides it first, and a hidden tab lets
// its stream go: it reloads when shown).
func TestSlowTabMissesEvents(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	d := startDaemon(t, config{extra: "[ui]\nstream_queue = 4\n"})
	port, err := strconv.Atoi(d.addr[strings.LastIndexByte(d.addr, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	tb := newTab(t, d)
	tb.signIn()
	tb.open("/ui/events?kind=job.output")
	// The page reads itself once when its stream opens: after that, a
	// reload is what the missed events make.
	tb.waitJS("the events page's stream", `document.body.dataset.page === "events" && document.body.dataset.stream === "open" && !!document.body.dataset.loaded`)
	eval[chromedp.Void](tb, `window.loadedBefore = document.body.dataset.loaded`)

	dir := t.TempDir()
	count, stop := filepath.Join(dir, "count"), filepath.Join(dir, "stop")
	hold := func(paused bool) {
		t.Helper()
		var err error
		if paused {
			if _, err = chromedp.Call(tb.ctx, debugger.Enable, debugger.EnableParams{}); err == nil {
				_, err = chromedp.Call(tb.ctx, debugger.Pause, cdp.Empty{})
			}
		} else {
			if _, err = chromedp.Call(tb.ctx, debugger.Resume, debugger.ResumeParams{}); err == nil {
				_, err = chromedp.Call(tb.ctx, debugger.Disable, cdp.Empty{})
			}
		}
		if err != nil {
			tb.fatalf("holding the tab's script (%v): %v", paused, err)
		}
	}
	// The tab pauses at the first statement it runs: the handler of the
	// first event the job's output brings.
	hold(true)
	held := true
	defer func() {
		if held {
			hold(false)
		}
	}()

	// 64 KiB at a time until told to stop, counting.
	r := d.startCLI("run", "--lane", "net", "--", "sh", "-c", `i=0; while [ ! -e "$2" ]; do
		yes 'a line of output, printed many times over' | head -c 65536; i=$((i+1)); echo $i > "$1.new"; mv "$1.new" "$1"; done`, "sh", count, stop)
	chunks := func() int {
		b, _ := os.ReadFile(count)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	// The daemon's side of the tab's stream is full when its send queue
	// stays as it is while the job writes a good deal more (512 KiB).
	deadline := time.Now().Add(2 * waitDeadline)
	var full, lastQ, since int
	for full == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the held tab's stream never filled: send queue %d after %d chunks\n%s", lastQ, chunks(), tail(r.stderr.String(), 2000))
		}
		q, n := sendQueue(port), chunks()
		switch {
		case q < 256<<10 || q != lastQ:
			lastQ, since = q, n
		case n >= since+8:
			full = n
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What the job writes now cannot reach the tab: 32 chunks (64 events
	// at least) into a queue of 4.
	for chunks() < full+32 {
		if time.Now().After(deadline) {
			t.Fatalf("the job stopped writing at chunk %d", chunks())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the stream's socket was full (%d bytes queued) at chunk %d; let go at chunk %d", lastQ, full, chunks())
	hold(false)
	held = false
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := r.exit(t); code != 0 {
		t.Fatalf("the job: exit %d", code)
	}

	tb.waitJS("the page to say it missed events", `Number(document.body.dataset.missed) > 0`)
	if live := eval[string](tb, `document.getElementById("live").textContent`); !regexp.MustCompile(`^This tab fell behind and missed \d+ events?: reloaded what it shows\.$`).MatchString(live) {
		t.Fatalf("the page says %q", live)
	}
	tb.waitJS("the reload after the missed events", `(document.body.dataset.loaded || "") !== window.loadedBefore`)
	if st := eval[string](tb, `document.body.dataset.stream`); st != "open" || strings.Contains(eval[string](tb, `document.getElementById("live").textContent`), "lost") {
		t.Fatalf("the stream was lost (%s): the daemon dropped the slow tab instead of telling it what it missed", st)
	}
	said := eval[[]string](tb, `[document.body.dataset.missed, document.getElementById("live").textContent]`)
	missed, live := said[0], said[1]
	if !strings.Contains(live, " missed "+missed+" events:") {
		t.Fatalf("the page says %q; it missed %s events in all", live, missed)
	}
	if n, _ := strconv.Atoi(missed); n < 16 {
		t.Fatalf("the page missed %s events; the job wrote 32 chunks of 64 KiB past a full socket into a queue of 4", missed)
	}
	t.Logf("missed %s events; the page says %q", missed, live)
	tb.shot("events-missed")
}

// sendQueue is the largest send queue of the TCP sockets on this
// machine's local port (the daemon's side of its connections), from
// /proc/net/tcp.
func sendQueue(port int) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	want := fmt.Sprintf(":%04X", port)
	most := 0
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 5 || !strings.HasSuffix(f[1], want) {
			continue
		}
		tx, _, _ := strings.Cut(f[4], ":")
		if n, err := strconv.ParseInt(tx, 16, 64); err == nil && int(n) > most {
			most = int(n)
		}
	}
	return most
}
