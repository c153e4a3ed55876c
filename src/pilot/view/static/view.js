// Filtering and sorting of the run index, and the live page's refresh.
// Works the same from the live server and from file:// (state kept in the URL's hash).
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

  function setupIndex(table) {
    var form = document.getElementById("filters");
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var keys = ["arm", "scenario", "wave", "status", "S"];

    function state() {
      var s = {};
      keys.forEach(function (k) { s[k] = document.getElementById("filter-" + k).value; });
      s.dev = document.getElementById("filter-dev").checked ? "1" : "";
      return s;
    }

    function apply() {
      var s = state();
      var shown = 0;
      var perArm = {};
      rows.forEach(function (tr) {
        var d = tr.dataset;
        var ok = (!s.arm || d.arm === s.arm) && (!s.scenario || d.scenario === s.scenario) && (!s.wave || d.wave === s.wave) &&
          (!s.status || d.status === s.status) && (!s.dev || Number(d.dev) > 0) &&
          (!s.S || (s.S === "missing" ? d.s === "" : d.s === s.S));
        tr.hidden = !ok;
        if (!ok) return;
        shown += 1;
        var c = perArm[d.arm] || (perArm[d.arm] = { runs: 0, accepted: 0, judged: 0 });
        c.runs += 1;
        if (d.s === "1") c.accepted += 1;
        if (d.s !== "") c.judged += 1;
      });
      document.getElementById("shown").textContent = shown + " of " + rows.length + " runs shown";
      Array.prototype.forEach.call(document.querySelectorAll("#arm-counts tbody tr"), function (tr) {
        var c = perArm[tr.dataset.arm] || { runs: 0, accepted: 0, judged: 0 };
        tr.querySelector(".n-runs").textContent = c.runs;
        tr.querySelector(".n-accepted").textContent = c.accepted;
        tr.querySelector(".n-judged").textContent = c.judged;
      });
      var parts = [];
      Object.keys(s).forEach(function (k) { if (s[k]) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(s[k])); });
      var hash = parts.length ? "#" + parts.join("&") : "";
      if (hash !== location.hash) history.replaceState(null, "", hash || location.pathname + location.search);
    }

    var initial = readHash();
    keys.forEach(function (k) {
      var el = document.getElementById("filter-" + k);
      if (initial[k] !== undefined) el.value = initial[k];
      el.addEventListener("change", apply);
    });
    var dev = document.getElementById("filter-dev");
    dev.checked = initial.dev === "1";
    dev.addEventListener("change", apply);
    form.addEventListener("submit", function (e) { e.preventDefault(); apply(); });

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
    apply();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var table = document.getElementById("runs");
    if (table) setupIndex(table);
    var refresh = Number(document.body.dataset.refresh || 0);
    if (refresh > 0) setTimeout(function () { location.reload(); }, refresh * 1000);
    // Opening a link to an event opens the attempt that holds it.
    if (location.hash.indexOf("#a") === 0) {
      var el = document.getElementById(location.hash.slice(1));
      if (el) { var det = el.closest("details"); if (det) det.open = true; el.scrollIntoView(); }
    }
  });
})();
