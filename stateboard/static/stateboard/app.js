// Stateboard page behaviour: no inline scripts.
// htmx 2 does not swap 4xx/5xx responses, so a refused action would look like nothing happened:
// show the server's message (plain text, or the JSON `detail`) in the error area instead.
(function () {
  "use strict";

  function errorBox() {
    return document.getElementById("htmx-error");
  }

  function showError(text) {
    var box = errorBox();
    if (!box) { return; }
    box.querySelector("[data-error-text]").textContent = text;
    box.hidden = false;
  }

  function hideError() {
    var box = errorBox();
    if (box) { box.hidden = true; }
  }

  function messageFrom(xhr) {
    var type = (xhr.getResponseHeader("Content-Type") || "").toLowerCase();
    var body = xhr.responseText || "";
    if (type.indexOf("application/json") !== -1) {
      try {
        var data = JSON.parse(body);
        if (data && data.detail) { return data.detail; }
      } catch (e) { /* fall through */ }
    }
    if (type.indexOf("text/plain") !== -1 && body.trim()) {
      return body.trim().slice(0, 1000);
    }
    if (xhr.status === 403) { return "Refused (403): you may not do this, or your session expired."; }
    return "The request failed (" + xhr.status + " " + (xhr.statusText || "error") + ").";
  }

  document.addEventListener("htmx:responseError", function (event) {
    showError(messageFrom(event.detail.xhr));
  });

  document.addEventListener("htmx:sendError", function () {
    showError("The server could not be reached; the page may be out of date.");
  });

  // A new user action (a form) clears the previous error; background polls leave it visible.
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (event.detail.elt && event.detail.elt.tagName === "FORM") { hideError(); }
  });

  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-dismiss-error]")) { hideError(); }
  });

  // On-call bulk selection: a "select all" checkbox for the rows of the filtered set.
  document.addEventListener("change", function (event) {
    var all = event.target.closest("[data-select-all]");
    if (!all) { return; }
    var selector = all.getAttribute("data-select-all");
    document.querySelectorAll(selector).forEach(function (box) { box.checked = all.checked; });
  });
})();
