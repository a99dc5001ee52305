// pgq dashboard: live regions and confirmations. No framework, no build step; served from the
// dashboard's own origin, as its Content-Security-Policy requires (no inline script anywhere).
//
// A live region is an element with `data-live` (and `data-interval`, in seconds): every interval the
// page's own URL is fetched again with the header `X-Pgq-Live: 1`, which the server answers with the
// region's fragment only, rendered and escaped on the server, and the region's content is replaced
// by it. Refreshing pauses while the tab is hidden and backs off after a failed request.
(function () {
  "use strict";

  var status = document.getElementById("live-status");

  function setStatus(state, text) {
    if (!status) { return; }
    status.className = "live-status live-" + state;
    status.textContent = text;
  }

  function selectionInside(region) {
    var selection = window.getSelection && window.getSelection();
    return !!(selection && !selection.isCollapsed && selection.rangeCount &&
              region.contains(selection.getRangeAt(0).commonAncestorContainer));
  }

  function startLive(region) {
    var base = Math.max(1, parseFloat(region.getAttribute("data-interval")) || 5) * 1000;
    var delay = base;
    var timer = null;
    var busy = false;

    function schedule() {
      clearTimeout(timer);
      if (!document.hidden) { timer = setTimeout(refresh, delay); }
    }

    function refresh() {
      if (busy) { return; }
      if (selectionInside(region)) { schedule(); return; }  // do not pull text from under the reader
      busy = true;
      fetch(window.location.href, {
        headers: { "X-Pgq-Live": "1", "Accept": "text/html" },
        credentials: "same-origin",
        cache: "no-store",
      }).then(function (response) {
        if (!response.ok) { throw new Error(String(response.status)); }
        return response.text();
      }).then(function (html) {
        region.innerHTML = html;
        region.setAttribute("data-refreshed", new Date().toISOString());
        delay = base;
        setStatus("ok", "Live");
      }).catch(function (error) {
        delay = Math.min(delay * 2, 60000);
        setStatus("error", error.message === "401" ? "Signed out" : "Offline, retrying");
      }).then(function () {
        busy = false;
        schedule();
      });
    }

    document.addEventListener("visibilitychange", function () {
      if (document.hidden) {
        clearTimeout(timer);
        setStatus("paused", "Paused");
      } else {
        refresh();
      }
    });
    setStatus("ok", "Live");
    schedule();
  }

  // The jobs page's selection: a header checkbox (data-select-all="<form id>") selects every row's
  // checkbox of that form; the count of selected rows is shown in #selected-count.
  function countSelected(formId) {
    var shown = document.getElementById("selected-count");
    if (shown) {
      shown.textContent = String(document.querySelectorAll('input[name="id"][form="' + formId + '"]:checked').length);
    }
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box || box.type !== "checkbox") { return; }
    var formId = box.getAttribute("data-select-all") || box.getAttribute("form");
    if (!formId) { return; }
    if (box.hasAttribute("data-select-all")) {
      var rows = document.querySelectorAll('input[name="id"][form="' + formId + '"]');
      for (var i = 0; i < rows.length; i++) { rows[i].checked = box.checked; }
    }
    countSelected(formId);
  });

  // Forms with data-confirm ask first (delegated, so forms swapped in by a refresh ask too).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  // A notice after an action comes as ?done=...: drop it from the address once shown, so that a
  // reload or a bookmark does not show it again.
  if (window.history && window.history.replaceState && /[?&]done=/.test(window.location.search)) {
    var url = new URL(window.location.href);
    url.searchParams.delete("done");
    url.searchParams.delete("queue");
    window.history.replaceState(null, "", url.pathname + url.search + url.hash);
  }

  var regions = document.querySelectorAll("[data-live]");
  for (var i = 0; i < regions.length; i++) { startLive(regions[i]); }
})();
