// The run index: filters, search, sort and the column choice; the CSV of the rows shown; prev/next on run
// pages; downloads from a static export opened from disk. The same from the live server and from file://:
// the filters and the sort live in the address's hash (a link reproduces the list), followed as it changes.
"use strict";
(function () {
  var LIST_KEY = "pilot-view-list";      // sessionStorage: the ordered runs the index last showed, for prev/next
  var COLUMNS_KEY = "pilot-view-columns"; // localStorage: the columns a reader chose

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

  function store(kind) {
    try { return kind === "local" ? window.localStorage : window.sessionStorage; } catch (e) { return null; }
  }

  // Filters that come from a link (the "why" page) and have no control of their own: shown as chips.
  var HIDDEN = { failed: "failed criterion", fkind: "failed a criterion of kind", devfam: "deviation family", viol: "critical violation" };
  var SELECTS = ["arm", "model", "scenario", "wave", "status", "S", "cap", "recovery", "sc1", "sessions"];

  function setupIndex(table) {
    var form = document.getElementById("filters");
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var original = rows.slice();
    var runBox = document.getElementById("filter-run");
    var dev = document.getElementById("filter-dev");
    var chips = document.getElementById("chips");
    var hidden = {};
    var sort = { key: "", dir: "" };
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);

    function state() {
      var s = { run: runBox.value.trim() };
      SELECTS.forEach(function (k) { s[k] = document.getElementById("filter-" + k).value; });
      s.dev = dev.checked ? "1" : "";
      Object.keys(HIDDEN).forEach(function (k) { s[k] = hidden[k] || ""; });
      s.sort = sort.key;
      s.dir = sort.key ? sort.dir : "";
      return s;
    }

    function matches(d, s) {
      var caps = d.caps ? d.caps.split(" ") : [];
      return (!s.run || d.run.toLowerCase().indexOf(s.run.toLowerCase()) >= 0) &&
        (!s.arm || d.arm === s.arm) && (!s.model || d.model === s.model) &&
        (!s.scenario || d.scenario === s.scenario) && (!s.wave || d.wave === s.wave) &&
        (!s.status || d.status === s.status) && (!s.dev || Number(d.dev) > 0) &&
        (!s.S || (s.S === "missing" ? d.s === "" : d.s === s.S)) &&
        (!s.cap || (s.cap === "any" ? caps.length > 0 : s.cap === "none" ? (caps.length === 0 && d.sessions !== "") : caps.indexOf(s.cap) >= 0)) &&
        (!s.recovery || d.recovery === s.recovery) && (!s.sc1 || d.sc1 === s.sc1) &&
        (!s.sessions || d.sessions === s.sessions) &&
        (!s.failed || d.failed.indexOf("|" + s.failed + "|") >= 0) &&
        (!s.fkind || d.fkind.indexOf("|" + s.fkind + "|") >= 0) &&
        (!s.devfam || d.devfam.indexOf("|" + s.devfam + "|") >= 0) &&
        (!s.viol || d.viol.indexOf("|" + s.viol + "|") >= 0);
    }

    function showChips(s) {
      chips.textContent = "";
      Object.keys(HIDDEN).forEach(function (k) {
        if (!s[k]) return;
        var b = document.createElement("button");
        b.type = "button";
        b.className = "chip";
        b.dataset.key = k;
        b.title = "remove this filter";
        b.textContent = HIDDEN[k] + ": " + s[k] + " ✕";
        b.addEventListener("click", function () { delete hidden[k]; changed(); });
        chips.appendChild(b);
      });
    }

    function visible() { return rows.filter(function (tr) { return !tr.hidden; }); }

    function remember() {
      var st = store("session");
      if (!st) return;
      var ids = visible().map(function (tr) { return tr.dataset.run; });
      try {
        st.setItem(LIST_KEY, JSON.stringify({ study: table.dataset.study, ids: ids, index: location.href }));
      } catch (e) { /* storage full or refused: prev/next falls back to the study's order */ }
    }

    function apply() {
      var s = state();
      var shown = 0;
      var groups = {};
      rows.forEach(function (tr) {
        var d = tr.dataset;
        var ok = matches(d, s);
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
      var csv = document.getElementById("download-csv");
      if (csv) csv.textContent = "download CSV of the " + shown + " run" + (shown === 1 ? "" : "s") + " shown";
      Array.prototype.forEach.call(document.querySelectorAll("#arm-counts tbody tr"), function (tr) {
        var c = groups[tr.dataset.arm + "\u0000" + tr.dataset.model] || { runs: 0, accepted: 0, scored: 0 };
        tr.querySelector(".n-runs").textContent = c.runs;
        tr.querySelector(".rate").textContent = rate(c.accepted, c.scored);
      });
      showChips(s);
      return s;
    }

    function writeHash(s) {
      var parts = [];
      Object.keys(s).forEach(function (k) { if (s[k]) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(s[k])); });
      var hash = parts.length ? "#" + parts.join("&") : "";
      if (hash !== location.hash) history.replaceState(null, "", hash || location.pathname + location.search);
    }

    // A filter changed on the page: apply it and put it in the address (replaceState fires no hashchange).
    function changed() { writeHash(apply()); remember(); }

    function sortBy(key, dir) {
      heads.forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
      var th = heads.filter(function (h) { return h.dataset.key === key; })[0];
      if (!th) {
        // No sort in the address: the run table's own order.
        sort = { key: "", dir: "" };
        original.forEach(function (tr) { table.tBodies[0].appendChild(tr); });
        rows = original.slice();
        return;
      }
      sort = { key: key, dir: dir === "desc" ? "desc" : "asc" };
      th.classList.add(sort.dir === "asc" ? "sorted-asc" : "sorted-desc");
      var col = Number(th.dataset.col);
      var asc = sort.dir === "asc";
      var body = table.tBodies[0];
      var sorted = rows.slice().sort(function (a, b) {
        var x = a.cells[col].dataset.sort, y = b.cells[col].dataset.sort;
        if (x === "" && y !== "") return 1;  // missing last, either direction
        if (y === "" && x !== "") return -1;
        var nx = Number(x), ny = Number(y);
        var r = (x !== "" && y !== "" && !isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return asc ? r : -r;
      });
      sorted.forEach(function (tr) { body.appendChild(tr); });
      rows = sorted;
    }

    // The address changed (loaded, a link followed, edited by hand, back/forward): the filters follow it.
    function fromHash() {
      var raw = location.hash.replace(/^#/, "");
      if (raw && raw.indexOf("=") < 0) { apply(); return; }  // an anchor on the page (#legend), not filters
      var h = readHash();
      if (h.go !== undefined && h.run) {
        // The header's search: an exact run id (any case) opens that run's page; anything else filters by it.
        var want = h.run.toLowerCase();
        var exact = rows.filter(function (tr) { return tr.dataset.run.toLowerCase() === want; });
        if (exact.length) { location.replace(exact[0].querySelector("a.run-link").href); return; }
      }
      runBox.value = h.run || "";
      SELECTS.forEach(function (k) {
        var el = document.getElementById("filter-" + k);
        var v = h[k] || "";
        if (v && !Array.prototype.some.call(el.options, function (o) { return o.value === v; })) v = "";
        el.value = v;
      });
      dev.checked = h.dev === "1";
      hidden = {};
      Object.keys(HIDDEN).forEach(function (k) { if (h[k]) hidden[k] = h[k]; });
      if (h.sort) sortBy(h.sort, h.dir); else if (sort.key) sortBy("", "");
      changed();  // also drops "go" and any value no filter knows from the address
    }

    SELECTS.forEach(function (k) { document.getElementById("filter-" + k).addEventListener("change", changed); });
    dev.addEventListener("change", changed);
    runBox.addEventListener("input", changed);
    form.addEventListener("submit", function (e) { e.preventDefault(); changed(); });
    window.addEventListener("hashchange", fromHash);

    heads.forEach(function (th) {
      th.querySelector("button").addEventListener("click", function () {
        var dir = sort.key === th.dataset.key && sort.dir === "asc" ? "desc" : "asc";
        sortBy(th.dataset.key, dir);
        changed();
      });
    });
    table.addEventListener("click", function (e) {
      if (e.target.closest && e.target.closest("a.run-link")) remember();
    });
    setupColumns(table);
    setupCsv(table, visible);
    fromHash();
  }

  function setupColumns(table) {
    var chooser = document.getElementById("column-chooser");
    if (!chooser) return;
    var boxes = Array.prototype.slice.call(chooser.querySelectorAll("input[data-col]"));
    var narrow = window.matchMedia && window.matchMedia("(max-width: 700px)").matches;
    var defaults = (narrow ? table.dataset.narrowColumns : table.dataset.defaultColumns).split(" ");

    function show(cols) {
      boxes.forEach(function (b) {
        var on = cols.indexOf(b.dataset.col) >= 0;
        b.checked = on;
        Array.prototype.forEach.call(table.querySelectorAll(".col-" + b.dataset.col), function (el) { el.hidden = !on; });
      });
    }

    function chosen() { return boxes.filter(function (b) { return b.checked; }).map(function (b) { return b.dataset.col; }); }

    var st = store("local");
    var saved = null;
    try { saved = st && JSON.parse(st.getItem(COLUMNS_KEY) || "null"); } catch (e) { saved = null; }
    show(Array.isArray(saved) ? saved : defaults);
    boxes.forEach(function (b) {
      b.addEventListener("change", function () {
        var cols = chosen();
        show(cols);
        if (st) try { st.setItem(COLUMNS_KEY, JSON.stringify(cols)); } catch (e) { /* not kept */ }
      });
    });
    document.getElementById("columns-default").addEventListener("click", function () {
      if (st) try { st.removeItem(COLUMNS_KEY); } catch (e) { /* nothing kept */ }
      show(defaults);
    });
    // The chooser floats over the table: a click elsewhere or Escape closes it.
    document.addEventListener("click", function (e) { if (chooser.open && !chooser.contains(e.target)) chooser.open = false; });
    document.addEventListener("keydown", function (e) { if (e.key === "Escape") chooser.open = false; });
  }

  function csvField(v) {
    var s = v === null || v === undefined ? "" : String(v);
    return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  }

  function saveBlob(name, blob) {
    var url = URL.createObjectURL(blob);
    var a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 30000);
  }

  function setupCsv(table, visible) {
    var button = document.getElementById("download-csv");
    var data = document.getElementById("runs-data");
    if (!button || !data) return;
    var payload = JSON.parse(data.textContent);
    var byRun = {};
    var idCol = payload.columns.indexOf("run_id");
    payload.rows.forEach(function (r) { byRun[r[idCol]] = r; });
    button.addEventListener("click", function () {
      var lines = [payload.columns.map(csvField).join(",")];
      visible().forEach(function (tr) {
        var r = byRun[tr.dataset.run];
        if (r) lines.push(r.map(csvField).join(","));
      });
      // A dry run's or a rehearsal's file says so in its name, as every table of it does.
      var label = table.dataset.label ? "_" + table.dataset.label : "";
      saveBlob(table.dataset.study + "_runs_shown" + label + ".csv", new Blob([lines.join("\r\n") + "\r\n"], { type: "text/csv" }));
    });
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

  // A run page: prev/next follow the list the index last showed (its filters and sort), when it holds this run.
  function setupPrevNext() {
    var nav = document.getElementById("prev-next");
    if (!nav) return;
    var st = store("session");
    var saved = null;
    try { saved = st && JSON.parse(st.getItem(LIST_KEY) || "null"); } catch (e) { saved = null; }
    if (!saved || saved.study !== nav.dataset.study || !Array.isArray(saved.ids)) return;
    var here = saved.ids.indexOf(nav.dataset.run);
    if (here < 0) return;
    var template = nav.dataset.runHref;  // this run's own address: a neighbour's is the same with its id
    function href(id) { return template.replace(encodeURIComponent(nav.dataset.run), encodeURIComponent(id)); }
    var prev = nav.querySelector(".prev"), next = nav.querySelector(".next"), where = nav.querySelector(".where");
    function set(a, id) {
      if (!a) return;
      if (id) { a.href = href(id); a.textContent = a.classList.contains("prev") ? "← " + id : id + " →"; a.hidden = false; }
      else a.hidden = true;
    }
    set(prev, here > 0 ? saved.ids[here - 1] : null);
    set(next, here < saved.ids.length - 1 ? saved.ids[here + 1] : null);
    if (where) {
      where.textContent = (here + 1) + " of " + saved.ids.length + " in the list you filtered";
      var back = document.createElement("a");
      back.href = saved.index;
      back.textContent = "back to that list";
      where.appendChild(document.createTextNode(" · "));
      where.appendChild(back);
    }
  }

  // From a static export opened from disk a browser shows a PDF or JSON in the tab and ignores the link's
  // download attribute; the export keeps a script copy of such files, which becomes a download here.
  function setupDownloads() {
    if (location.protocol !== "file:") return;
    window.pilotFile = function (name, b64) {
      var bin = atob(b64);
      var bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      saveBlob(name, new Blob([bytes], { type: "application/octet-stream" }));
    };
    Array.prototype.forEach.call(document.querySelectorAll("a.download[data-wrapper]"), function (a) {
      a.addEventListener("click", function (e) {
        e.preventDefault();
        var s = document.createElement("script");
        s.src = a.dataset.wrapper;
        s.onload = s.onerror = function () { s.remove(); };
        document.head.appendChild(s);
      });
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
    setupPrevNext();
    setupDownloads();
    var refresh = Number(document.body.dataset.refresh || 0);
    if (refresh > 0) setTimeout(function () { location.reload(); }, refresh * 1000);
    openTarget();
    window.addEventListener("hashchange", openTarget);
  });
})();
