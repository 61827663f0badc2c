// The nodes page: each node's last heartbeat's age counts on between
// reloads (as the server writes it: 1.2s, 3m04s, 2h05m), and the fleet's
// table is read again every 5 s, since a node another node declared lost
// tells this daemon's event stream nothing.
(() => {
  "use strict";
  const two = (n) => (n < 10 ? "0" : "") + n;
  function fmt(ms) {
    if (ms < 1000) return Math.max(0, Math.floor(ms)) + "ms";
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + two(Math.floor(s) % 60) + "s";
    if (s < 48 * 3600) return Math.floor(s / 3600) + "h" + two(Math.floor(s / 60) % 60) + "m";
    return Math.floor(s / 86400) + "d";
  }
  function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll(".age[data-ms]")) {
      if (!el.dataset.at) el.dataset.at = String(now);
      el.textContent = fmt(Number(el.dataset.ms) + now - Number(el.dataset.at)) + " ago";
    }
  }
  async function reread() {
    if (document.hidden || !document.getElementById("nodes")) return;
    try {
      const r = await fetch(location.href, { headers: { "X-Fragment": "1" }, credentials: "same-origin" });
      if (!r.ok) return;
      const doc = new DOMParser().parseFromString(await r.text(), "text/html");
      for (const id of ["fleet-line", "nodes"]) {
        const fresh = doc.getElementById(id), old = document.getElementById(id);
        if (fresh && old) old.replaceWith(document.importNode(fresh, true));
      }
      tick();
    } catch (e) { /* the next try */ }
  }
  setInterval(tick, 1000);
  setInterval(reread, 5000);
})();
