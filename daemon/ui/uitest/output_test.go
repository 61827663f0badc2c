package uitest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// A running job's page follows its output's tail: it stays at the end
// as lines come, until the person scrolls up (then it stays where they
// are, and "Follow the output" shows); the button takes it back to the
// end, following again. The byte count goes up while it streams (not
// "0 bytes"), and ANSI colours and bold show as classes, their escape
// sequences gone.
func TestOutputFollowsAndColours(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{})
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	r := d.startCLI("run", "--lane", "net", "--", "sh", "-c", `echo "id=$ORCHESTRD_JOB_ID"
i=0; while [ $i -lt 300 ]; do printf '\033[31mred %d\033[0m and \033[1mbold\033[22m \033[38;5;46mgreen\033[m\n' $i; i=$((i+1)); done
while [ ! -e "$1" ]; do sleep 0.05; done
echo "after one"
while [ ! -e "$2" ]; do sleep 0.05; done
echo "the end"`, "sh", one, two)
	id := r.line(t, "id=")
	tb.open("/ui/jobs/" + id)
	tb.waitText("#output", "red 299")
	const atEnd = `(() => { const p = document.getElementById("output"); return p.scrollHeight > p.clientHeight + 100 && p.scrollTop + p.clientHeight >= p.scrollHeight - 4; })()`
	tb.waitJS("the output at its end", atEnd)
	if !eval[bool](tb, `document.getElementById("output-follow").hidden`) {
		t.Fatal("Follow shows while the page follows")
	}

	// The colours: spans with classes, no escape left in the text.
	// (A piece of output may end within a word: a word may be two spans.)
	spans := func(class string) string {
		return eval[string](tb, `[...document.querySelectorAll("#output span.`+class+`")].map(s => s.textContent).join("")`)
	}
	if got := spans("ansi-fg-1"); !strings.HasPrefix(got, "red 0red 1red 2") || !strings.HasSuffix(got, "red 299") {
		t.Fatalf("the red spans say %q", got)
	}
	if got := spans("ansi-bold"); got != strings.Repeat("bold", 300) {
		t.Fatalf("the bold spans say %q", got)
	}
	if got := spans("ansi-fg-10"); got != strings.Repeat("green", 300) { // 38;5;46
		t.Fatalf("the green spans say %q", got)
	}
	if text := eval[string](tb, `document.getElementById("output").textContent`); strings.ContainsAny(text, "\x1b\u009b") ||
		!strings.Contains(text, "red 7 and bold green\n") {
		t.Fatalf("the output's text keeps escapes or lost words: %q", tail(text, 200))
	}
	if c := eval[string](tb, `getComputedStyle(document.querySelector("#output span.ansi-fg-1")).color`); c == eval[string](tb, `getComputedStyle(document.getElementById("output")).color`) {
		t.Fatalf("a red span has the output's own colour %s", c)
	}

	// The byte count while it streams: what the page was given (and
	// told it missed, had it fallen behind).
	bytes := eval[string](tb, `document.getElementById("output").dataset.written`)
	tb.waitJS("the byte count", `document.getElementById("output-bytes").textContent === `+jsID(bytes))
	if n, _ := strconv.Atoi(bytes); n < 300*40 {
		t.Fatalf("the page counts %d bytes of output", n)
	}
	tb.shot("output-colours")

	// Scrolled up: new output leaves the view where it is.
	eval[chromedp.Void](tb, `document.getElementById("output").scrollTop = 0`)
	tb.waitJS("Follow shown", `!document.getElementById("output-follow").hidden`)
	if err := os.WriteFile(one, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tb.waitText("#output", "after one")
	if top := eval[int](tb, `document.getElementById("output").scrollTop`); top != 0 {
		t.Fatalf("scrolled up, the output moved to %d with new output", top)
	}
	if eval[string](tb, `document.getElementById("output").dataset.follow`) != "false" {
		t.Fatal("scrolled up, the output still follows")
	}
	tb.shot("output-scrolled-up")

	// The person scrolls back to the end just as a reload (orchestrd logs
	// reads the job: its job.stream_opened) takes the output out of the
	// page, before the scroll's event has come: the scroll is kept, the
	// view follows again. The page's fetch of its content is wrapped so
	// that the scroll is made as the reloaded content is read, with no
	// turn of the event loop (and so no scroll event) before the page
	// puts it in.
	eval[chromedp.Void](tb, `(() => {
		window.loadedBefore = document.body.dataset.loaded || "";
		const f = window.fetch;
		window.fetch = async (url, opts) => {
			const r = await f(url, opts);
			if (!opts || !opts.headers || !opts.headers["X-Fragment"]) return r;
			window.fetch = f;
			const html = await r.text();
			return { status: r.status, text: async () => { const p = document.getElementById("output"); p.scrollTop = p.scrollHeight; return html; } };
		};
	})()`)
	if _, errOut, code := d.cli("logs", id); code != 0 {
		t.Fatalf("orchestrd logs: exit %d: %s", code, errOut)
	}
	tb.waitJS("the page's reload", `(document.body.dataset.loaded || "") !== window.loadedBefore`)
	tb.waitJS("the scroll made as the page reloaded, kept: at the end, following", atEnd+` && document.getElementById("output").dataset.follow === "true"`)
	eval[chromedp.Void](tb, `document.getElementById("output").scrollTop = 0`)
	tb.waitJS("Follow shown again", `!document.getElementById("output-follow").hidden`)

	// Follow: back at the end, and following what comes.
	tb.click(chromedp.CSS(`#output-follow`))
	tb.waitJS("the output at its end again", atEnd+` && document.getElementById("output-follow").hidden`)
	if err := os.WriteFile(two, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tb.waitOutputEnd(id)
	tb.waitJS("the end, followed", atEnd+` && document.getElementById("output").textContent.endsWith("the end\n")`)
	if code := r.exit(t); code != 0 {
		t.Fatalf("orchestrd run: exit %d", code)
	}
	rec := d.job(id)
	if got := eval[string](tb, `document.getElementById("output").dataset.written`); got != strconv.FormatInt(rec.OutputBytes, 10) {
		t.Fatalf("the page counted %s bytes; the job wrote %d", got, rec.OutputBytes)
	}
}

// What a job writes is never markup and never runs: tags, escape
// sequences that try to become attributes, hyperlinks (OSC 8), titles,
// erases and cursor moves, control characters. They show as text or are
// dropped; the page keeps its title; every span's class is one of the
// output's own. The parser itself is fed a seeded stream of hostile
// pieces and keeps the same promises.
func TestOutputHostile(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{})
	out, errOut, code := d.cli("run", "--lane", "net", "--", "sh", "-c", `echo "id=$ORCHESTRD_JOB_ID"
printf '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>\n'
printf '\033[31;"><img src=x onerror=window.pwned=3>m after csi\n'
printf '\033]8;;javascript:window.pwned=4\033\\click me\033]8;;\033\\\n'
printf '\033]0;pwned title\007\033[2J\033[H\033[10;10Hmoved\033[K\n'
printf '\033[38;2;255;0;0mtrue red\033[0m \033P+q\033\\dcs gone\n'
printf 'bell\007 nul-less \010back \033[?1049h alt screen \033c reset\n'
printf '\033[1;31;42m' # a colour left open at the end`)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(out, "id="), "\n")
	title := ""
	tb.open("/ui/jobs/" + id)
	title = eval[string](tb, `document.title`)
	tb.waitOutputEnd(id)
	text := eval[string](tb, `document.getElementById("output").textContent`)
	for _, want := range []string{`<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`, "click me\n",
		"moved\n", "true red dcs gone\n", "bell nul-less back  alt screen  reset\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("the output has no %q: %q", want, text)
		}
	}
	if strings.ContainsAny(text, "\x1b\x07\x08\u009b") || strings.Contains(text, "pwned title") || strings.Contains(text, "javascript:") {
		t.Errorf("escape sequences show in the output: %q", text)
	}
	if ok := eval[bool](tb, `(() => { const o = document.getElementById("output");
		return o.querySelectorAll("*:not(span)").length === 0 && [...o.querySelectorAll("span")].every(s =>
			s.attributes.length <= 1 && [...s.classList].every(c => /^(stderr|gap|binary|ansi-(fg|bg)-([0-9]|1[0-5])|ansi-(bold|dim|italic|underline))$/.test(c))); })()`); !ok {
		t.Fatalf("the output holds an element or a class not its own: %s", eval[string](tb, `document.getElementById("output").innerHTML`))
	}
	if eval[string](tb, `document.title`) != title || eval[bool](tb, `window.pwned !== undefined`) {
		t.Fatalf("the job's output acted on the page: title %q, pwned %v", eval[string](tb, `document.title`), eval[any](tb, `window.pwned`))
	}
	if c := eval[string](tb, `document.querySelector("#output span.ansi-fg-9") && document.querySelector("#output span.ansi-fg-9").textContent`); c != "true red" {
		t.Errorf("24-bit red shows as %q", c)
	}
	tb.shot("output-hostile")

	// The parser, fed seeded hostile pieces: nothing it gives back holds
	// a control character, a class not its own, or a sequence kept past
	// the end.
	res := eval[string](tb, `(() => {
		let seed = 41;
		const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
		const alpha = ["\x1b", "[", "]", "\\", "m", ";", "3", "1", "8", "5", "2", ":", "\x07", "\u009b", "\u009c", "\u009d", "\u0090",
			"\r", "\n", "\t", "\x00", "a", "<", ">", "\"", "?", "P", "(", "9", "4", "0", "\x7f"];
		const cls = /^(ansi-((fg|bg)-([0-9]|1[0-5])|bold|dim|italic|underline))( ansi-((fg|bg)-([0-9]|1[0-5])|bold|dim|italic|underline))*$/;
		for (let n = 0; n < 20000; n++) {
			const a = window.orchestrdAnsi();
			const pieces = [];
			for (let k = 0; k < 3; k++) { let s = ""; for (let i = rnd(16); i > 0; i--) s += alpha[rnd(alpha.length)]; pieces.push(s); }
			let runs = [];
			pieces.forEach((p, i) => { runs = runs.concat(a.feed(p, i === 2)); });
			for (const r of runs) {
				if (/[\x00-\x08\x0b-\x1f\x7f-\x9f]/.test(r.text)) return "a control character in " + JSON.stringify(pieces);
				if (r.cls !== "" && !cls.test(r.cls)) return "class " + r.cls + " from " + JSON.stringify(pieces);
			}
			if (a.state.pending !== "") return "kept past the end: " + JSON.stringify(pieces);
		}
		const big = window.orchestrdAnsi();
		big.feed("\x1b]" + "x".repeat(100000), false);
		if (big.state.pending.length > 4096) return "an open sequence kept whole: " + big.state.pending.length;
		return "ok";
	})()`)
	if res != "ok" {
		t.Fatal(res)
	}
}

// A job that changes colour at every character does not make the tab
// hold a node a character: past 10,000 spans the rest is plain text,
// every character still shown.
func TestOutputSpansBounded(t *testing.T) {
	t.Parallel()
	d, tb := signedIn(t, config{})
	out, errOut, code := d.cli("run", "--lane", "net", "--", "sh", "-c", `echo "id=$ORCHESTRD_JOB_ID"
i=0; while [ $i -lt 15000 ]; do printf '\033[31ma\033[32mb'; i=$((i+1)); done; printf '\033[0m\nend\n'`)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(out, "id="), "\n")
	tb.open("/ui/jobs/" + id)
	tb.waitOutputEnd(id)
	if n := eval[int](tb, `document.getElementById("output").childElementCount`); n > 10000 {
		t.Fatalf("the output is %d elements", n)
	}
	if text := eval[string](tb, `document.getElementById("output").textContent`); !strings.HasSuffix(text, strings.Repeat("ab", 15000)+"\nend\n") {
		t.Fatalf("the output's text ends %q", text[max(0, len(text)-80):])
	}
	if c := eval[string](tb, `document.querySelector("#output span.ansi-fg-2").textContent`); c != "b" {
		t.Fatalf("the first green run is %q", c)
	}
}
