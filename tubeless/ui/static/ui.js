// tubeless ui: the only script. Every page works without it; it adds live updates on a run
// page that a host (tubeless serve) streams events for: on each event the page's main content
// is fetched again and swapped in, so the server stays the one place that renders.
"use strict";
(function () {
  const main = document.getElementById("main");
  const url = main && main.dataset.events;
  if (!url || !window.EventSource) return;
  let pending = null;
  let source = null;
  let ended = false;
  function refresh(final) {
    ended = ended || final;
    if (pending) return;
    pending = setTimeout(async function () {
      pending = null;
      try {
        const response = await fetch(window.location.href, { credentials: "same-origin" });
        if (!response.ok) return;
        const doc = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = doc.getElementById("main");
        if (!fresh) return;
        main.replaceChildren(...Array.from(fresh.childNodes).map((n) => document.importNode(n, true)));
        if (!fresh.dataset.events || ended) {
          delete main.dataset.events;
          let live = document.getElementById("live");
          if (!live) {
            live = document.createElement("p");
            live.id = "live";
            live.className = "live";
            live.setAttribute("role", "status");
            const heading = main.querySelector("h1");
            if (heading) heading.after(live); else main.prepend(live);
          }
          live.textContent = "The run ended.";
          if (source) source.close();
        }
      } catch (err) {
        // a failed refresh waits for the next event
      }
    }, 150);
  }
  source = new EventSource(url, { withCredentials: true });
  source.addEventListener("record", function () { refresh(false); });
  source.addEventListener("status", function () { refresh(false); });
  source.addEventListener("end", function () { refresh(true); source.close(); });
})();
