// orchestrd dashboard: live updates for server-rendered pages. Each page
// has one event stream (/ui/stream) of the kinds that change what it shows;
// an event reloads the page's content (debounced). When the stream says the
// tab missed events, or the stream is lost, the page says so and reloads
// what it shows rather than showing stale state as current. When the
// daemon goes away (a restart, a crash) the tab tries again by itself and,
// once the daemon is back, reloads what it shows and listens again.
"use strict";
(function () {
  const body = document.body;
  const live = document.getElementById("live");
  const csrf = body.dataset.csrf || "";
  let refreshTimer = null, refreshing = false, again = false, stale = false;

  function say(msg, kind) {
    if (!live) return;
    live.textContent = msg;
    live.className = kind || "";
  }

  function main() { return document.getElementById("main"); }

  function editing() {
    const a = document.activeElement;
    return a && main().contains(a) && (a.tagName === "TEXTAREA" || (a.tagName === "INPUT" && a.type === "text")) && a.value !== "";
  }

  // A press on the page's content holds its reload until the button is
  // let go: content swapped between the press and the release takes the
  // button pressed away, and the click (a Cancel, an Approve) is lost.
  // A press held longer than pressHold (its release lost: let go outside
  // the window, a drag) holds no more.
  const pressHold = 5000;
  let pressedAt = 0;
  const pressedNow = () => pressedAt !== 0 && Date.now() - pressedAt < pressHold;
  document.addEventListener("pointerdown", (e) => { if (main() && main().contains(e.target)) pressedAt = Date.now(); }, true);
  const release = () => {
    if (pressedAt === 0) return;
    pressedAt = 0;
    // After this press's click and submit have run (they follow the
    // release in the same task).
    if (again && !refreshing) { again = false; setTimeout(schedule, 0); }
  };
  document.addEventListener("pointerup", release, true);
  document.addEventListener("pointercancel", release, true);

  async function refresh() {
    if (refreshing) { again = true; return; }
    if (pressedNow()) { again = true; body.dataset.held = "true"; setTimeout(schedule, pressHold); return; } // once the button is let go
    if (editing()) { again = true; return; } // after the person is done typing
    refreshing = true;
    try {
      const r = await fetch(location.href, { headers: { "X-Fragment": "1" }, credentials: "same-origin" });
      if (r.status === 401) { location.assign("/ui/login?next=" + encodeURIComponent(location.pathname + location.search)); return; }
      const html = await r.text();
      if (pressedNow()) { again = true; body.dataset.held = "true"; return; } // pressed while it was fetched
      const m = main();
      const focused = focusKey(m, document.activeElement);
      // A job's output and what its stream said of it are this tab's
      // own: the reloaded content has them empty ("loading…").
      const own = ["output", "output-state", "output-follow"].map((id) => document.getElementById(id));
      own.push(...m.querySelectorAll("[data-keep][id]")); // a form being filled in (forms.js)
      const kept = keep(m);
      document.dispatchEvent(new Event("orchestrd:reloading")); // output.js: where its view is
      m.innerHTML = html;
      restore(kept);
      for (const old of own) { if (!old) continue; const n = document.getElementById(old.id); if (n) n.replaceWith(old); }
      refocus(m, focused);
      m.classList.remove("stale");
      body.dataset.loaded = String(Date.now());
      if (stale) { stale = false; }
      appendFollow.reset();
      document.dispatchEvent(new Event("orchestrd:reloaded")); // output.js: what it keeps live
      notifyButton();
    } catch (e) {
      say("Could not reload this page: " + e, "warn");
    } finally {
      refreshing = false;
      if (again) { again = false; schedule(); }
    }
  }

  // The control that has focus has it again after a reload (a keyboard
  // user on a job's Cancel presses Enter on it, whatever the stream
  // brought meanwhile): found by its id, else by its tag and accessible
  // name (a row's button: "Cancel job j-…").
  function focusKey(m, el) {
    if (!el || !m.contains(el)) return null;
    if (el.id) return { id: el.id };
    const label = el.getAttribute("aria-label");
    return label ? { tag: el.tagName, label } : null;
  }
  function refocus(m, k) {
    if (!k) return;
    if (k.id) { const f = document.getElementById(k.id); if (f) f.focus(); return; }
    for (const e of m.querySelectorAll(k.tag)) {
      if (e.getAttribute("aria-label") === k.label) { e.focus(); return; }
    }
  }

  // What the person opened or typed survives a reload: the <details>
  // open and the text boxes' text, by id (a box the new content has not
  // is dropped with it).
  function keep(m) {
    const open = [], text = [];
    m.querySelectorAll("details[open][id]").forEach((d) => open.push(d.id));
    m.querySelectorAll("textarea[id], input[type=text][id]").forEach((t) => { if (t.value !== "") text.push([t.id, t.value]); });
    return { open, text };
  }

  function restore(k) {
    k.open.forEach((id) => { const d = document.getElementById(id); if (d && d.tagName === "DETAILS") d.open = true; });
    k.text.forEach(([id, v]) => { const t = document.getElementById(id); if (t && "value" in t && t.value === "") t.value = v; });
  }

  // A burst of events is one reload, and a page reloads at most once a
  // second (what a busy daemon costs a tab is bounded, and a change shows
  // within a second).
  let lastRefresh = 0;
  function schedule() {
    if (refreshTimer) return;
    const wait = Math.max(100, 1000 - (Date.now() - lastRefresh));
    refreshTimer = setTimeout(() => { refreshTimer = null; lastRefresh = Date.now(); refresh(); }, wait);
  }

  document.addEventListener("focusout", () => { if (again && !editing()) { again = false; schedule(); } });

  // The events page follows: new lines are added (at the top: newest
  // first), not the page reloaded. Each reads as the server renders it
  // (layout.html's "event"): its fields on a line, its JSON on demand.
  const idRe = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
  function fieldText(v) {
    if (typeof v === "string") return clipText(v.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0")), 120);
    if (typeof v === "number" || typeof v === "boolean") return String(v);
    if (Array.isArray(v)) return v.length === 0 ? "none" : v.every((e) => typeof e === "string") ? clipText(v.join(", "), 120) : v.length + " items";
    if (v && typeof v === "object") return "{" + Object.keys(v).length + " fields}";
    return "?";
  }
  function clipText(s, n) { return s.length <= n ? s : s.slice(0, n) + "…"; }
  const appendFollow = {
    reset() {},
    add(ev) {
      const list = document.getElementById("events");
      if (!list || list.dataset.follow !== "true") return false;
      const none = list.querySelector(".none");
      if (none) none.remove();
      const d = ev.data || {};
      const li = document.createElement("li");
      li.className = "event";
      const t = document.createElement("time");
      const w = new Date(d.ts || Date.now()), p2 = (n) => String(n).padStart(2, "0"); // as the server writes it
      t.textContent = w.getFullYear() + "-" + p2(w.getMonth() + 1) + "-" + p2(w.getDate()) + " " + p2(w.getHours()) + ":" + p2(w.getMinutes()) + ":" + p2(w.getSeconds());
      const k = document.createElement("code");
      k.className = "kind";
      k.textContent = ev.event;
      li.append(t, " ", k);
      // An event that carries one record (job.finished: {job: ...}) reads
      // as the record's fields.
      const own = Object.keys(d).filter((key) => key !== "ts" && key !== "seq" && key !== "kind");
      const rec = own.length === 1 && d[own[0]] && typeof d[own[0]] === "object" && !Array.isArray(d[own[0]]) ? d[own[0]] : d;
      const job = typeof rec.job_id === "string" ? rec.job_id : own[0] === "job" && typeof rec.id === "string" ? rec.id : "";
      if (idRe.test(job)) {
        const a = document.createElement("a");
        a.href = "/ui/jobs/" + encodeURIComponent(job);
        a.textContent = job;
        li.append(" ", a);
      }
      const f = document.createElement("span");
      f.className = "fields";
      let n = 0, more = 0;
      for (const [key, v] of Object.entries(rec)) {
        if (key === "ts" || key === "seq" || key === "kind" || v === null || v === undefined) continue;
        if (n === 8) { more++; continue; }
        n++;
        const fe = document.createElement("span");
        fe.className = "field";
        const ke = document.createElement("span");
        ke.className = "key";
        ke.textContent = clipText(key, 40);
        fe.append(ke, " " + fieldText(v));
        f.append(fe, " ");
      }
      if (more) { const m = document.createElement("span"); m.className = "muted"; m.textContent = "+" + more + " more"; f.append(m); }
      const det = document.createElement("details");
      det.className = "json";
      const sum = document.createElement("summary");
      sum.textContent = "JSON";
      const pre = document.createElement("pre");
      pre.textContent = clipText(JSON.stringify(d, null, 2), 16384);
      det.append(sum, pre);
      li.append("\n", f, "\n", det);
      list.prepend(li);
      while (list.children.length > 1000) list.lastElementChild.remove();
      return true;
    },
  };

  function notify(ev) {
    if (ev.event !== "approval.requested" || !("Notification" in window) || Notification.permission !== "granted") return;
    try { new Notification("orchestrd: an approval is waiting", { body: "Open the approvals inbox to answer it.", tag: "orchestrd-approval" }); } catch (e) { /* not shown */ }
  }

  // A browser keeps at most six connections to one host over HTTP/1.1:
  // a tab that is hidden lets its stream go (it reloads when shown again),
  // but for the approvals inbox while notifications are on.
  let es = null;
  function keepWhenHidden() {
    return body.dataset.page === "approvals" && "Notification" in window && Notification.permission === "granted";
  }
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) {
      if (es && !keepWhenHidden()) { es.close(); es = null; body.dataset.stream = "paused"; }
    } else if (!es && !retry) {
      openStream();
      refresh();
    }
  });

  function openStream() {
    const kinds = body.dataset.kinds;
    if (!kinds) return;
    // A page that follows (the events page) takes the records; the others
    // only hear that something changed, and reload.
    const follow = !!document.querySelector("[data-follow=true]");
    let url = "/ui/stream?kinds=" + encodeURIComponent(kinds) + (follow ? "" : "&mode=signal");
    if (body.dataset.job) url += "&job=" + encodeURIComponent(body.dataset.job);
    else if (body.dataset.id) url += "&id=" + encodeURIComponent(body.dataset.id);
    es = new EventSource(url);
    let first = true;
    es.addEventListener("hello", () => {
      body.dataset.stream = "open";
      tries = 0; // back for good: the next loss starts over at 250 ms
      if (back) { back = false; first = false; say("The daemon is back: reloaded what this page shows.", "ok"); refresh(); return; }
      // What changed between the page's render and its subscription
      // came on no stream: read it once now that the stream is open.
      if (first) refresh();
      first = false;
    });
    es.onmessage = (m) => {
      let ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      notify(ev);
      if (!appendFollow.add(ev)) schedule();
    };
    es.addEventListener("changed", (m) => {
      let c = {};
      try { c = JSON.parse(m.data); } catch (e) { /* reload anyway */ }
      if ((c.kinds || []).includes("approval.requested")) notify({ event: "approval.requested" });
      body.dataset.changes = String((Number(body.dataset.changes) || 0) + (Number(c.n) || 1));
      schedule();
    });
    es.addEventListener("missed", (m) => {
      let n = "some";
      try { n = JSON.parse(m.data).missed; } catch (e) { /* keep "some" */ }
      // Told in bursts, one after another: the page says them all, not
      // the last one.
      const total = (Number(body.dataset.missed) || 0) + (Number(n) || 0);
      body.dataset.missed = String(total);
      say("This tab fell behind and missed " + (total || n) + (total === 1 ? " event" : " events") + ": reloaded what it shows.", "warn");
      refresh();
    });
    es.addEventListener("bye", () => reconnect("The daemon is stopping: live updates ended until it is back."));
    const mine = es;
    // Lost (the daemon restarted, crashed, or refused the stream): the
    // tab reconnects by itself, its way (the browser's own retry would
    // not tell a lost session from a daemon still away).
    es.onerror = () => { if (es === mine) reconnect("Live updates lost."); };
  }

  // reconnect waits for the daemon to be back (a restart, a crash, a
  // stream refused): it asks for this page again, less often the longer
  // the daemon is away (up to every 5 s), and once it answers listens
  // again; the stream's hello then reloads what the page shows. A stream
  // lost again before its hello (refused while the pages answer) does not
  // start the waits over: a tab never asks more often than they say. A
  // daemon that no longer knows this tab's session (it expired, the API
  // key changed) sends it to sign in.
  let back = false, retry = null, tries = 0;
  const backoff = () => Math.min(5000, 250 * 2 ** Math.min(tries, 5));
  function reconnect(why) {
    if (es) { es.close(); es = null; }
    stale = true;
    body.dataset.stream = "reconnecting";
    main().classList.add("stale");
    say(why + " Reconnecting; what you see may be out of date.", "warn");
    if (retry) return;
    const attempt = async () => {
      let r = null;
      try { r = await fetch(location.href, { headers: { "X-Fragment": "1" }, credentials: "same-origin", cache: "no-store" }); } catch (e) { r = null; }
      if (r && r.status === 401) { location.assign("/ui/login?next=" + encodeURIComponent(location.pathname + location.search)); return; }
      // Away, or stopping (503): again later. Any other answer is the
      // daemon's: back (a page gone since shows its error).
      if (!r || r.status >= 500) { tries++; retry = setTimeout(attempt, backoff()); return; }
      retry = null; tries++; back = true;
      body.dataset.reconnected = String((Number(body.dataset.reconnected) || 0) + 1);
      if (document.hidden && !keepWhenHidden()) { body.dataset.stream = "paused"; return; } // shown again: it opens
      openStream();
      if (!es) { back = false; tries = 0; say("The daemon is back: reloaded what this page shows.", "ok"); refresh(); } // a page with no stream
      document.dispatchEvent(new Event("orchestrd:back")); // output.js reads a lost output again
    };
    retry = setTimeout(attempt, backoff());
  }

  // Forms that act (class act) post with fetch and reload the content;
  // without script they post and come back.
  document.addEventListener("submit", async (e) => {
    const f = e.target;
    if (!(f instanceof HTMLFormElement) || !f.classList.contains("act")) return;
    e.preventDefault();
    if (f.dataset.confirm && !window.confirm(f.dataset.confirm)) return;
    const btn = f.querySelector("button[type=submit]");
    if (btn) btn.disabled = true;
    try {
      const r = await fetch(f.action, { method: "POST", body: new URLSearchParams(new FormData(f)), credentials: "same-origin",
        headers: { "Accept": "application/json", "X-CSRF-Token": csrf } });
      let res = {};
      try { res = await r.json(); } catch (e2) { res = { ok: false, error: "HTTP " + r.status }; }
      if (res.ok) { say((f.dataset.done || "Done") + ".", "ok"); f.reset(); }
      else say("Failed: " + res.error, "error");
      body.dataset.lastAction = res.ok ? "ok" : "failed";
    } catch (err) {
      say("Failed: " + err, "error");
    } finally {
      if (btn) btn.disabled = false;
      refresh();
    }
  });

  document.addEventListener("click", (e) => {
    const b = e.target.closest && e.target.closest("#enable-notifications");
    if (!b || !("Notification" in window)) return;
    Notification.requestPermission().then(notifyButton);
  });

  // The notifications button says what the browser allows (the page's
  // content, and so the button, is reloaded on each event).
  function notifyButton() {
    const b = document.getElementById("enable-notifications");
    if (!b) return;
    if (!("Notification" in window)) { b.textContent = "Notifications: not in this browser"; b.disabled = true; return; }
    if (Notification.permission === "granted") b.textContent = "Notifications on";
    else if (Notification.permission === "denied") b.textContent = "Notifications blocked (the browser's site settings)";
  }

  // Another script of the page's (output.js) asks for a reload.
  document.addEventListener("orchestrd:reload", () => schedule());

  openStream();
  notifyButton();
})();
