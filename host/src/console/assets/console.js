// The outbox console's only script: parts of a page marked `data-live="URL"` are refreshed from
// URL every few seconds while the page is visible. Nothing runs on a hidden tab or a closed page.
"use strict";
(function () {
  const EVERY_MS = 3000;
  function refresh(element) {
    if (document.hidden) return;
    fetch(element.dataset.live, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected || response.status === 401 || response.status === 403) {
          window.location = "/console/login";
          return null;
        }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null) return;
        const next = new DOMParser().parseFromString(html, "text/html").body.firstElementChild;
        if (next) element.replaceChildren(...next.childNodes);
        element.dataset.refreshedAt = new Date().toISOString();
      })
      .catch(function () { /* the host is restarting: try again at the next tick */ });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(function (element) {
      window.setInterval(function () { refresh(element); }, EVERY_MS);
    });
    // A "select all" box ticks every row box of its table.
    document.querySelectorAll("input[data-select-all]").forEach(function (box) {
      box.addEventListener("change", function () {
        document.querySelectorAll("input[name='" + box.dataset.selectAll + "']").forEach(function (row) {
          row.checked = box.checked;
        });
      });
    });
  });
})();
