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
    // A plain (not htmx) form's button that asks first: data-ask="question".
    var ask = event.target.closest("[data-ask]");
    if (ask && !window.confirm(ask.getAttribute("data-ask"))) { event.preventDefault(); }
  });

  // On-call bulk selection: a "select all" checkbox for the rows of the filtered set.
  document.addEventListener("change", function (event) {
    var all = event.target.closest("[data-select-all]");
    if (!all) { return; }
    var selector = all.getAttribute("data-select-all");
    document.querySelectorAll(selector).forEach(function (box) { box.checked = all.checked; });
  });

  // Self-refreshing sections (data-refresh-when-idle) poll only while nobody is typing, selecting or
  // reading in them: the poll is cancelled before it is sent. (htmx's trigger filters, "every 5s [...]",
  // need eval, which the Content-Security-Policy forbids: the browser dropped the filter.)
  function idle(section) {
    if (section.actions > 0) { return false; }  // an action sent from it is not answered yet (below)
    var box = errorBox();
    if (box && !box.hidden) { return false; }  // let the user read the refusal before the rows move
    var active = document.activeElement;
    if (active && section.contains(active) && /INPUT|TEXTAREA|SELECT/.test(active.tagName)) { return false; }
    if (section.querySelector("details[open]")) { return false; }  // an evidence pack being read
    var busy = false;
    section.querySelectorAll("input[type=text], textarea").forEach(function (f) { if (f.value) { busy = true; } });
    section.querySelectorAll("input[type=checkbox]:checked").forEach(function () { busy = true; });
    document.querySelectorAll("input[name=run]:checked").forEach(function () { busy = true; });  // bulk rows
    return !busy;
  }
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-refresh-when-idle") && !idle(elt)) {
      event.preventDefault();
    }
  });
  // A refresh under way when someone acts in the section was read before the action: its rows would undo
  // what the action's answer swapped in (a decided request shown pending again). The action aborts it,
  // and no refresh is sent until the action is answered. A refresh answered after someone began typing
  // or reading in the section is not swapped in either.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (event.defaultPrevented || !elt || !elt.closest || elt.hasAttribute("data-refresh-when-idle")) { return; }
    var section = elt.closest("[data-refresh-when-idle]");
    if (!section) { return; }
    section.actions = (section.actions || 0) + 1;  // first: the abort may send a refresh htmx queued
    elt.addEventListener("htmx:afterRequest", function () { section.actions -= 1; }, {once: true});
    htmx.trigger(section, "htmx:abort");
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    var config = event.detail && event.detail.requestConfig;
    var elt = config && config.elt;  // who sent the request (detail.elt is the swap's target)
    if (elt && elt.hasAttribute && elt.hasAttribute("data-refresh-when-idle") && !idle(elt)) {
      event.detail.shouldSwap = false;
    }
  });

  // Times chosen as "local": the server sends UTC; the browser knows its own zone.
  function localTimes(root) {
    (root || document).querySelectorAll("time[data-when=local]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d)) { t.textContent = d.toLocaleString(); }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { localTimes(); });
  document.addEventListener("htmx:afterSettle", function (event) { localTimes(event.target); });

  document.addEventListener("change", function (event) {
    if (event.target.matches("select[data-autosubmit]")) { event.target.form.submit(); }
  });

  // Approvals inbox: j/k move between the pending requests this user may decide (data-actionable), a
  // approves, r goes to the reject reason.
  var selectedId = null;
  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-keyboard-rows] tr[data-row][data-actionable]"));
  }
  function select(row) {
    rows().forEach(function (r) { r.classList.remove("selected"); r.removeAttribute("aria-selected"); });
    if (!row) { selectedId = null; return; }
    row.classList.add("selected");
    row.setAttribute("aria-selected", "true");
    selectedId = row.id;
    row.scrollIntoView({block: "nearest"});
  }
  document.addEventListener("htmx:afterSettle", function () {
    if (selectedId) { select(document.getElementById(selectedId)); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var target = event.target;
    if (target && /INPUT|TEXTAREA|SELECT/.test(target.tagName)) {
      if (event.key === "Escape") { target.blur(); }
      return;
    }
    var list = rows();
    if (!list.length) { return; }
    var current = list.indexOf(document.getElementById(selectedId));
    if (event.key === "j" || event.key === "k") {
      var next = event.key === "j" ? current + 1 : current - 1;
      if (current === -1) { next = 0; }
      select(list[Math.max(0, Math.min(list.length - 1, next))]);
      event.preventDefault();
    } else if ((event.key === "a" || event.key === "r") && current !== -1) {
      var row = list[current];
      if (event.key === "a") {
        var approve = row.querySelector("[data-action=approve]");
        if (approve) { approve.click(); }
      } else {
        var reason = row.querySelector("[data-reject-reason]");
        if (reason) { reason.focus(); }
      }
      event.preventDefault();
    }
  });

  // A copy button for a block of text (the workflow page's definition file); shown only where JS runs.
  function showCopyButtons() {
    document.querySelectorAll("[data-copy][hidden]").forEach(function (button) { button.hidden = false; });
  }
  showCopyButtons();
  document.addEventListener("htmx:afterSwap", showCopyButtons);
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    var block = button && document.querySelector(button.getAttribute("data-copy"));
    if (!block || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(block.textContent).then(function () { button.textContent = "Copied"; });
  });
})();
