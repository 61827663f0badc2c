// What another machine changes (the fleet's nodes, the state of a job
// running on another node) tells this daemon's event stream nothing: a
// page that shows some (an element with data-reread) is reloaded every
// 5 s while it is shown (app.js's orchestrd:reload: debounced, after
// typing). Each
// node's last heartbeat's age counts on in between, as the server writes
// it (1.2s, 3m04s, 2h05m).
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
  setInterval(() => {
    const now = Date.now();
    for (const el of document.querySelectorAll(".age[data-ms]")) {
      if (!el.dataset.at) el.dataset.at = String(now);
      el.textContent = fmt(Number(el.dataset.ms) + now - Number(el.dataset.at)) + " ago";
    }
  }, 1000);
  setInterval(() => {
    if (!document.hidden && document.querySelector("[data-reread]")) document.dispatchEvent(new Event("orchestrd:reload"));
  }, 5000);
})();
