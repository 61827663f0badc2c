// orchestrd dashboard: the forms that start work (run a job, start a
// loop, send a prompt; templates/forms.html). Each posts with fetch and
// the session's CSRF token; done, the tab goes to the page of what
// started; refused, the form stays as it was typed and says why in its
// alert. Without this script the forms post and come back.
"use strict";
(function () {
  if (window.orchestrdForms) return; // the script is in the page's content, which reloads
  window.orchestrdForms = true;
  const csrf = document.body.dataset.csrf || "";

  function say(f, msg) {
    const p = f.querySelector(".start-error");
    if (!p) return;
    p.textContent = msg;
    p.hidden = false;
    p.focus();
  }

  document.addEventListener("submit", async (e) => {
    const f = e.target;
    if (!(f instanceof HTMLFormElement) || !f.classList.contains("start")) return;
    e.preventDefault();
    const btn = f.querySelector("button[type=submit]");
    if (btn) { if (btn.disabled) return; btn.disabled = true; }
    f.setAttribute("aria-busy", "true");
    const p = f.querySelector(".start-error");
    if (p) { p.hidden = true; p.textContent = ""; }
    try {
      const r = await fetch(f.action, { method: "POST", body: new FormData(f), credentials: "same-origin",
        headers: { "Accept": "application/json", "X-CSRF-Token": csrf } });
      const text = await r.text();
      let res = null;
      try { res = JSON.parse(text); } catch (e2) { res = null; }
      if (res && res.ok && typeof res.location === "string" && res.location.startsWith("/ui/")) {
        location.assign(res.location);
        return;
      }
      if (r.status === 401) { say(f, "Your session ended: sign in again (what you typed is still here)."); return; }
      // A refusal before the form was read (its CSRF token, its origin) is
      // plain text.
      const plain = text.trim().slice(0, 300);
      say(f, res && res.error ? res.error : plain || "The daemon refused the form (HTTP " + r.status + ").");
      document.body.dataset.lastStart = "failed";
    } catch (err) {
      say(f, "Could not reach the daemon: " + err.message);
    } finally {
      if (btn) btn.disabled = false;
      f.removeAttribute("aria-busy");
    }
  });
})();
