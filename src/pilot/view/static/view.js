// Filtering and sorting of the run index, the run-id search, and the live page's refresh.
// Works the same from the live server and from file:// (filter state kept in the URL's hash, followed live).
"use strict";
(function () {
  function readHash() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("=");
      var k = decodeURIComponent(i < 0 ? kv : kv.slice(0, i));
      out[k] = i < 0 ? "" : decodeURIComponent(kv.slice(i + 1));
    });
    return out;
  }

  function rate(k, n) {
    return k + "/" + n + (n ? " (" + Math.round(100 * k / n) + "%)" : "");
  }

  function setupIndex(table) {
    var form = document.getElementById("filters");
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var selects = ["arm", "model", "scenario", "wave", "status", "S"];
    var runBox = document.getElementById("filter-run");
    var dev = document.getElementById("filter-dev");

    function state() {
      var s = { run: runBox.value.trim() };
      selects.forEach(function (k) { s[k] = document.getElementById("filter-" + k).value; });
      s.dev = dev.checked ? "1" : "";
      return s;
    }

    function apply() {
      var s = state();
      var shown = 0;
      var groups = {};
      rows.forEach(function (tr) {
        var d = tr.dataset;
        var ok = (!s.run || d.run.indexOf(s.run) === 0) && (!s.arm || d.arm === s.arm) && (!s.model || d.model === s.model) &&
          (!s.scenario || d.scenario === s.scenario) && (!s.wave || d.wave === s.wave) &&
          (!s.status || d.status === s.status) && (!s.dev || Number(d.dev) > 0) &&
          (!s.S || (s.S === "missing" ? d.s === "" : d.s === s.S));
        tr.hidden = !ok;
        if (!ok) return;
        shown += 1;
        var key = d.arm + "\u0000" + d.model;
        var c = groups[key] || (groups[key] = { runs: 0, accepted: 0, scored: 0 });
        c.runs += 1;
        if (d.s === "1") c.accepted += 1;
        if (d.s !== "") c.scored += 1;
      });
      document.getElementById("shown").textContent = shown + " of " + rows.length + " runs shown";
      Array.prototype.forEach.call(document.querySelectorAll("#arm-counts tbody tr"), function (tr) {
        var c = groups[tr.dataset.arm + "\u0000" + tr.dataset.model] || { runs: 0, accepted: 0, scored: 0 };
        tr.querySelector(".n-runs").textContent = c.runs;
        tr.querySelector(".rate").textContent = rate(c.accepted, c.scored);
      });
      return s;
    }

    function writeHash(s) {
      var parts = [];
      Object.keys(s).forEach(function (k) { if (s[k]) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(s[k])); });
      var hash = parts.length ? "#" + parts.join("&") : "";
      if (hash !== location.hash) history.replaceState(null, "", hash || location.pathname + location.search);
    }

    // A filter changed on the page: apply it and put it in the address (replaceState fires no hashchange).
    function changed() { writeHash(apply()); }

    // The address changed (loaded, a link followed, edited by hand, back/forward): the filters follow it.
    function fromHash() {
      var raw = location.hash.replace(/^#/, "");
      if (raw && raw.indexOf("=") < 0) { apply(); return; }  // an anchor on the page (#legend), not filters: left as it is
      var h = readHash();
      if (h.go !== undefined && h.run) {
        // The header's search: an exact run id opens that run's page; anything else filters by its start.
        var exact = rows.filter(function (tr) { return tr.dataset.run === h.run; });
        if (exact.length) { location.replace(exact[0].querySelector("a.run-link").href); return; }
      }
      runBox.value = h.run || "";
      selects.forEach(function (k) {
        var el = document.getElementById("filter-" + k);
        var v = h[k] || "";
        if (v && !Array.prototype.some.call(el.options, function (o) { return o.value === v; })) v = "";
        el.value = v;
      });
      dev.checked = h.dev === "1";
      changed();  // also drops "go" and any value no filter knows from the address
    }

    selects.forEach(function (k) { document.getElementById("filter-" + k).addEventListener("change", changed); });
    dev.addEventListener("change", changed);
    runBox.addEventListener("input", changed);
    form.addEventListener("submit", function (e) { e.preventDefault(); changed(); });
    window.addEventListener("hashchange", fromHash);

    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.querySelector("button").addEventListener("click", function () {
        var col = Number(th.dataset.col);
        var asc = !th.classList.contains("sorted-asc");
        Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(asc ? "sorted-asc" : "sorted-desc");
        var body = table.tBodies[0];
        var sorted = rows.slice().sort(function (a, b) {
          var x = a.cells[col].dataset.sort, y = b.cells[col].dataset.sort;
          if (x === "" && y !== "") return 1;  // missing last, either direction
          if (y === "" && x !== "") return -1;
          var nx = Number(x), ny = Number(y);
          var r = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
          return asc ? r : -r;
        });
        sorted.forEach(function (tr) { body.appendChild(tr); });
      });
    });
    fromHash();
  }

  function setupSearch() {
    var form = document.getElementById("search");
    if (!form) return;
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var id = document.getElementById("search-id").value.trim();
      if (!id) return;
      var target = document.body.dataset.index + "#run=" + encodeURIComponent(id) + "&go";
      // On the index itself only the hash changes, and its hashchange listener does the rest.
      location.href = target;
    });
  }

  function openTarget() {
    // Opening a link to an event opens every expander that holds it.
    if (location.hash.indexOf("#a") !== 0) return;
    var el = document.getElementById(location.hash.slice(1));
    if (!el) return;
    for (var det = el.closest("details"); det; det = det.parentElement && det.parentElement.closest("details")) det.open = true;
    el.scrollIntoView();
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupSearch();
    var table = document.getElementById("runs");
    if (table) setupIndex(table);
    var refresh = Number(document.body.dataset.refresh || 0);
    if (refresh > 0) setTimeout(function () { location.reload(); }, refresh * 1000);
    openTarget();
    window.addEventListener("hashchange", openTarget);
  });
})();
