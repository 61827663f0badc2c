// orchestrd dashboard: the charts page. Its content reloads on the events
// that change a chart (app.js); this reloads it once a minute besides, so
// the hour moves on when nothing happens. A hidden tab does not.
"use strict";
setInterval(() => { if (!document.hidden) document.dispatchEvent(new Event("orchestrd:reload")); }, 60000);
