// dex dashboard: refresh the live parts of a page by short polling of HTML fragments, and
// ask before a form that changes a queue is sent.  No library, nothing fetched from elsewhere.
"use strict";
document.querySelectorAll("[data-poll]").forEach(function (el) {
  var every = parseInt(el.dataset.every || "2000", 10);
  var busy = false;
  setInterval(function () {
    if (busy || document.hidden) return;
    busy = true;
    fetch(el.dataset.poll, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) el.innerHTML = html; })
      .catch(function () {})
      .then(function () { busy = false; });
  }, every);
});
document.addEventListener("submit", function (e) {
  var msg = e.target.dataset && e.target.dataset.confirm;
  if (msg && !window.confirm(msg)) e.preventDefault();
});
