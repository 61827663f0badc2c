// orchestrd dashboard: a job's live output (the job page). Every byte the
// daemon gives this tab (it is told of what it skipped when it fell
// behind); text shows as text, bytes that are not UTF-8 as a note of how
// many there were. ANSI SGR colours and bold/dim/italic/underline become
// spans with classes (ansi-*); every other escape sequence (cursor moves,
// erases, titles, hyperlinks: CSI, OSC, DCS, ...) and control character
// is dropped. Nothing a job wrote is ever markup: it goes in as
// textContent, under a class this script names. The view follows the
// output's tail unless the person scrolled up ("Follow the output" takes
// it back), and the job's byte count goes up as it streams.
"use strict";
(function () {
  // utf8Runs splits bytes into what is UTF-8 text ({text}) and what is
  // not ({binary: n}), in order. A sequence the end cuts in two is given
  // back as rest (it may go on in the next piece), unless final.
  const utf8 = new TextDecoder("utf-8");
  function utf8Runs(b, final) {
    const runs = [];
    let i = 0, start = 0, bad = 0;
    const text = (end) => { if (end > start) runs.push({ text: utf8.decode(b.subarray(start, end)) }); };
    while (i < b.length) {
      const c = b[i];
      let n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
      if (n > 1 && i + n > b.length) {
        let cont = true;
        for (let k = i + 1; k < b.length; k++) if ((b[k] & 0xc0) !== 0x80) cont = false;
        if (cont && !final) { if (bad) runs.push({ binary: bad }); else text(i); return { runs, rest: b.slice(i) }; }
        n = 0;
      }
      for (let k = 1; k < n; k++) if ((b[i + k] & 0xc0) !== 0x80) n = 0;
      if (n === 3 && ((c === 0xe0 && b[i + 1] < 0xa0) || (c === 0xed && b[i + 1] > 0x9f))) n = 0; // overlong, surrogate
      if (n === 4 && ((c === 0xf0 && b[i + 1] < 0x90) || (c === 0xf4 && b[i + 1] > 0x8f))) n = 0; // overlong, past U+10FFFF
      if (n === 0) {
        if (!bad) text(i);
        bad++; i++;
        continue;
      }
      if (bad) { runs.push({ binary: bad }); bad = 0; start = i; }
      i += n;
    }
    if (bad) runs.push({ binary: bad }); else text(i);
    return { runs, rest: null };
  }

  // ANSI: a parser of its own per stream; a sequence a piece's end cuts
  // in two waits for the next piece (at most ansiPendingMax characters:
  // longer, it is dropped as garbage).
  const ansiPendingMax = 4096;
  const spansMax = 10000; // spans of one output (put)
  function newAnsi() {
    const st = { fg: -1, bg: -1, bold: false, dim: false, italic: false, underline: false, pending: "" };
    function classes() {
      const c = [];
      if (st.fg >= 0) c.push("ansi-fg-" + st.fg);
      if (st.bg >= 0) c.push("ansi-bg-" + st.bg);
      if (st.bold) c.push("ansi-bold");
      if (st.dim) c.push("ansi-dim");
      if (st.italic) c.push("ansi-italic");
      if (st.underline) c.push("ansi-underline");
      return c.join(" ");
    }
    // A colour of the 256 or of 24 bits, as the nearest of the 16.
    function near(r, g, b) {
      const i = (r >= 128 ? 1 : 0) | (g >= 128 ? 2 : 0) | (b >= 128 ? 4 : 0);
      return Math.max(r, g, b) >= 200 || (i === 0 && Math.max(r, g, b) >= 64) ? i + 8 : i;
    }
    function color256(n) {
      if (n < 16) return n;
      if (n >= 232) { const v = 8 + (n - 232) * 10; return v < 100 ? 8 : v < 200 ? 7 : 15; }
      n -= 16;
      const lv = [0, 95, 135, 175, 215, 255];
      return near(lv[Math.floor(n / 36)], lv[Math.floor(n / 6) % 6], lv[n % 6]);
    }
    function sgr(params) {
      const p = params === "" ? [0] : params.split(/[;:]/).map((x) => (x === "" ? 0 : Math.min(Number(x), 1e6)));
      for (let i = 0; i < p.length; i++) {
        const n = p[i];
        if (n === 0) { st.fg = -1; st.bg = -1; st.bold = st.dim = st.italic = st.underline = false; }
        else if (n === 1) st.bold = true;
        else if (n === 2) st.dim = true;
        else if (n === 3) st.italic = true;
        else if (n === 4) st.underline = true;
        else if (n === 22) st.bold = st.dim = false;
        else if (n === 23) st.italic = false;
        else if (n === 24) st.underline = false;
        else if (n >= 30 && n <= 37) st.fg = n - 30;
        else if (n === 39) st.fg = -1;
        else if (n >= 40 && n <= 47) st.bg = n - 40;
        else if (n === 49) st.bg = -1;
        else if (n >= 90 && n <= 97) st.fg = n - 90 + 8;
        else if (n >= 100 && n <= 107) st.bg = n - 100 + 8;
        else if (n === 38 || n === 48) {
          let c = -1;
          if (p[i + 1] === 5 && i + 2 < p.length) { c = p[i + 2] <= 255 ? color256(p[i + 2]) : -1; i += 2; }
          else if (p[i + 1] === 2 && i + 4 < p.length) { c = near(p[i + 2], p[i + 3], p[i + 4]); i += 4; }
          else i = p.length; // malformed: the rest is not read
          if (n === 38) st.fg = c; else st.bg = c;
        }
        // anything else (blink, inverse, fonts...) is not shown
      }
    }
    // feed returns the runs of text in s ({text, cls}), what is left of
    // a cut sequence kept for the next piece; final: nothing comes after.
    function feed(s, final) {
      s = st.pending + s;
      st.pending = "";
      const runs = [];
      let text = "";
      const out = () => { if (text !== "") { runs.push({ text, cls: classes() }); text = ""; } };
      const cut = (from) => { // s[from:] is a sequence the end cut
        if (!final && s.length - from <= ansiPendingMax) st.pending = s.slice(from);
        return s.length;
      };
      let i = 0;
      while (i < s.length) {
        const c = s.charCodeAt(i);
        if (c === 0x0a || c === 0x09) { text += s[i]; i++; continue; }
        if (c === 0x0d) { // \r\n is \n; a \r alone (a progress line) a line of its own
          if (i + 1 === s.length && !final) { i = cut(i); continue; }
          if (s.charCodeAt(i + 1) !== 0x0a) text += "\n";
          i++;
          continue;
        }
        let kind = "";
        let j = i + 1;
        if (c === 0x1b) {
          if (j === s.length) { i = cut(i); continue; }
          const n = s[j];
          j++;
          if (n === "[") kind = "csi";
          else if (n === "]") kind = "osc";
          else if (n === "P" || n === "X" || n === "^" || n === "_") kind = "str";
          else if (n >= " " && n <= "/") { // intermediates, then one final
            while (j < s.length && s[j] >= " " && s[j] <= "/") j++;
            if (j === s.length) { i = cut(i); continue; }
            i = j + 1;
            continue;
          } else { i = j; continue; } // a two-character sequence
        } else if (c === 0x9b) kind = "csi";
        else if (c === 0x9d) kind = "osc";
        else if (c === 0x90 || c === 0x98 || c === 0x9e || c === 0x9f) kind = "str";
        else if (c < 0x20 || c === 0x7f || (c >= 0x80 && c <= 0x9f)) { i++; continue; } // a control character
        if (kind === "") { text += s[i]; i++; continue; }
        if (kind === "csi") {
          const start = j;
          while (j < s.length && s.charCodeAt(j) >= 0x30 && s.charCodeAt(j) <= 0x3f) j++;
          const params = s.slice(start, j);
          const ps = j;
          while (j < s.length && s.charCodeAt(j) >= 0x20 && s.charCodeAt(j) <= 0x2f) j++;
          if (j === s.length) { i = cut(i); continue; }
          const f = s.charCodeAt(j);
          if (f < 0x40 || f > 0x7e) { i = j; continue; } // not a sequence: dropped up to here
          if (f === 0x6d && ps === j && /^[0-9;:]*$/.test(params)) { out(); sgr(params); }
          i = j + 1;
          continue;
        }
        // osc and str: up to BEL (osc), ST (ESC \ or U+009C)
        let end = -1;
        for (let k = j; k < s.length; k++) {
          const d = s.charCodeAt(k);
          if ((kind === "osc" && d === 0x07) || d === 0x9c) { end = k + 1; break; }
          if (d === 0x1b && k + 1 < s.length && s[k + 1] === "\\") { end = k + 2; break; }
          if (d === 0x1b && k + 1 === s.length) break;
        }
        if (end < 0) { i = cut(i); continue; }
        i = end;
      }
      out();
      return runs;
    }
    return { feed, state: st };
  }
  window.orchestrdAnsi = newAnsi; // for the dashboard's browser tests

  // gen is the output stream this page reads now: a stream lost and read
  // again (openOutput anew) leaves the listeners of the one before idle.
  let gen = 0;
  function openOutput() {
    const pre = document.getElementById("output");
    if (!pre || !pre.dataset.job) return;
    const me = ++gen;
    const state = () => document.getElementById("output-state");
    const followBtn = () => document.getElementById("output-follow");
    const es = new EventSource("/ui/jobs/" + encodeURIComponent(pre.dataset.job) + "/output");
    const carry = { stdout: null, stderr: null }; // a UTF-8 sequence cut at a piece's end
    const ansi = { stdout: newAnsi(), stderr: newAnsi() };
    let bytes = 0, written = 0, ended = false;
    // Following: the view stays at the output's end as it grows, until
    // the person scrolls away from the end (and again once they scroll
    // back to it or press Follow).
    let follow = true;
    const atEnd = () => pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    function setFollow(on) {
      follow = on;
      pre.dataset.follow = on ? "true" : "false";
      const b = followBtn();
      if (b) b.hidden = on || ended;
    }
    // A scroll this script made (to the end) is not the person's: its
    // event may come after more output made the end move on.
    let ourTop = -1, lastTop = 0;
    function scrolled() {
      if (me !== gen || pre.scrollTop === ourTop) return;
      ourTop = -1;
      lastTop = pre.scrollTop;
      setFollow(atEnd());
    }
    pre.addEventListener("scroll", scrolled);
    // A reload takes the output out of the page (it is back at the top
    // when put back): where the person scrolled to is taken first, so a
    // scroll whose event has not come yet is not lost.
    document.addEventListener("orchestrd:reloading", scrolled);
    document.addEventListener("click", (e) => {
      if (me !== gen || !e.target.closest || !e.target.closest("#output-follow")) return;
      setFollow(true);
      toEnd();
      pre.focus();
    });
    function toEnd() {
      if (pre.scrollTop + pre.clientHeight < pre.scrollHeight) { pre.scrollTop = pre.scrollHeight; ourTop = pre.scrollTop; }
    }
    // The page resized (a window, a phone turned): lines wrap anew, and
    // the output's end moves; a view that follows goes with it.
    if (window.ResizeObserver) new ResizeObserver(() => { if (me === gen && follow) toEnd(); }).observe(pre);
    function count() {
      const b = document.getElementById("output-bytes");
      if (b && !ended) b.textContent = String(written);
      pre.dataset.bytes = String(bytes); // shown
      pre.dataset.written = String(written); // and what the tab was told it missed
    }
    // A reload of the page's content takes the output out and puts it
    // back: where it was scrolled to is put back too.
    document.addEventListener("orchestrd:reloaded", () => {
      if (me !== gen) return;
      count();
      if (follow) toEnd();
      else if (pre.scrollTop !== lastTop) { pre.scrollTop = lastTop; ourTop = pre.scrollTop; }
      setFollow(follow);
    });
    function mark(text, cls) {
      const s = document.createElement("span");
      s.className = cls;
      s.textContent = text;
      pre.append(s);
    }
    // A run of the same class as the last goes in its span; past
    // spansMax spans (a job that changes colour every character) the rest
    // is plain text: what a tab holds stays its bytes, not a node each.
    let lastRun = null;
    function put(aruns, stream) {
      for (const a of aruns) {
        const cls = ((stream === "stderr" ? "stderr " : "") + a.cls).trim();
        const last = pre.lastChild;
        if (pre.childElementCount >= spansMax) {
          if (last && last.nodeType === Node.TEXT_NODE) last.appendData(a.text); else pre.append(a.text);
          continue;
        }
        if (last && last === lastRun && last.className === cls) { last.append(a.text); continue; }
        const span = document.createElement("span");
        if (cls !== "") span.className = cls;
        span.textContent = a.text;
        pre.append(span);
        lastRun = span;
      }
    }
    function show(runs, stream, final) {
      for (const r of runs) {
        if (r.binary) { mark("[" + r.binary + " bytes of binary output]", "binary"); continue; }
        if (r.text !== "") put(ansi[stream].feed(r.text, final), stream);
      }
      if (follow) toEnd();
      count();
    }
    function flush(stream) {
      if (carry[stream]) {
        const { runs } = utf8Runs(carry[stream], true);
        carry[stream] = null;
        show(runs, stream, true);
      }
      put(ansi[stream].feed("", true), stream); // what a cut sequence left
      if (follow) toEnd();
    }
    es.addEventListener("out", (m) => {
      const p = JSON.parse(m.data);
      const stream = p.stream === "stderr" ? "stderr" : "stdout";
      if (p.gap) {
        flush(stream);
        written += Number(p.gap) || 0;
        mark("[" + p.gap + " bytes not shown: " + (p.reason === "behind" ? "this tab fell behind" : "not kept") + "]\n", "gap");
        count();
        return;
      }
      let raw;
      if (p.data_b64 !== undefined) {
        const bin = atob(p.data_b64);
        raw = new Uint8Array(bin.length);
        for (let i = 0; i < bin.length; i++) raw[i] = bin.charCodeAt(i);
      } else {
        raw = new TextEncoder().encode(p.data || "");
      }
      if (raw.length === 0) return;
      bytes += raw.length;
      written += raw.length;
      if (carry[stream]) {
        const joined = new Uint8Array(carry[stream].length + raw.length);
        joined.set(carry[stream]);
        joined.set(raw, carry[stream].length);
        raw = joined;
      }
      const { runs, rest } = utf8Runs(raw, false);
      carry[stream] = rest;
      show(runs, stream, false);
    });
    es.addEventListener("end", (m) => {
      es.close();
      flush("stdout");
      flush("stderr");
      ended = true;
      setFollow(follow);
      let missed = 0;
      try { missed = JSON.parse(m.data).missed || 0; } catch (e) { /* none */ }
      pre.dataset.ended = "true";
      const s = state();
      if (s) s.textContent = "ended: " + bytes + " bytes shown" + (missed ? ", " + missed + " not shown" : "");
      document.dispatchEvent(new Event("orchestrd:reload"));
    });
    es.addEventListener("failed", (m) => {
      es.close();
      const s = state();
      let msg = "";
      try { msg = JSON.parse(m.data).error; } catch (e) { msg = m.data; }
      if (s) s.textContent = "output unavailable: " + msg;
    });
    es.onerror = () => {
      if (pre.dataset.ended) return;
      es.close();
      pre.dataset.lost = "true";
      const s = state();
      if (s) s.textContent = "the output stream was lost: read again once the daemon answers";
    };
    setFollow(true);
    const s = state();
    if (s) s.textContent = "streaming…";
  }

  // The daemon is back (app.js reconnected): an output whose stream was
  // lost is read again from its start.
  document.addEventListener("orchestrd:back", () => {
    const pre = document.getElementById("output");
    if (!pre || pre.dataset.lost !== "true") return;
    delete pre.dataset.lost;
    pre.textContent = "";
    openOutput();
  });

  openOutput();
})();
