// The grade page's own script (the site's CSP allows this file and nothing inline).
// - Active seconds: the page is visible and the grader used mouse, keyboard or scrolling within the last minute.
//   The server caps what it records at the time since it served the page.
// - The draft saves itself a few seconds after the grader stops typing, shows when it was saved, retries while the
//   site cannot be reached, and warns before the grader leaves with changes not yet saved.
// - Two tabs on one package: a tab that opens the package tells the others (BroadcastChannel); the server refuses
//   a save based on an older revision, and the page says so instead of overwriting.
// - Submit checks the whole form first (every score, every critique's length, the decision), then asks "final?".
// - Time with a downloaded file: when the grader comes back after a download, the page asks how long.
"use strict";
(function () {
  var IDLE_MS = 60 * 1000;
  var SAVE_AFTER_MS = 2500;
  var RETRY_MS = 5000;
  var AWAY_MIN_MS = 30 * 1000;
  var form = document.getElementById("grade-form");
  var field = document.getElementById("active_s");
  if (!form || !field || form.classList.contains("readonly")) return;

  var autosaveUrl = form.dataset.autosave;
  var fileTimeUrl = form.dataset.fileTime;
  var assignment = form.dataset.assignment;
  var minCritique = parseInt(form.dataset.minCritique, 10) || 0;
  var stateEl = document.getElementById("save-state");
  var errorsEl = document.getElementById("form-errors");
  var staleEl = document.getElementById("stale");
  var otherTabEl = document.getElementById("other-tab");
  var tabField = document.getElementById("tab");
  var revisionField = document.getElementById("revision");
  var pageField = form.querySelector("input[name=page]");
  var tab = Math.random().toString(36).slice(2) + Date.now().toString(36);
  var opened = Date.now();
  tabField.value = tab;

  // ---------------------------------------------------------------- active time
  var active = parseFloat(field.value) || 0;  // carried over when the server refused a save
  var lastUse = Date.now();
  ["pointerdown", "pointermove", "keydown", "input", "wheel", "scroll", "touchstart", "focusin"].forEach(function (kind) {
    window.addEventListener(kind, function () { lastUse = Date.now(); }, { capture: true, passive: true });
  });
  window.setInterval(function () {
    if (document.visibilityState === "visible" && Date.now() - lastUse < IDLE_MS) {
      active += 1;
      field.value = String(active);
    }
  }, 1000);

  // ---------------------------------------------------------------- saving
  var dirty = false;
  var saving = false;
  var stale = false;
  var timer = null;
  var edits = 0;

  function show(text, kind) {
    if (!stateEl) return;
    stateEl.textContent = text;
    stateEl.dataset.state = kind;
  }

  function clock(iso) {
    var d = iso ? new Date(iso) : new Date();
    return isNaN(d.getTime()) ? String(iso) : d.toLocaleTimeString();
  }

  function body(action) {
    field.value = String(active);
    var data = new FormData(form);
    data.set("action", action);
    return data;
  }

  function post(action) {
    return fetch(autosaveUrl, { method: "POST", body: body(action), credentials: "same-origin" }).then(function (resp) {
      return resp.json().catch(function () { return { ok: false, error: "the site answered " + resp.status }; })
        .then(function (json) { json.httpStatus = resp.status; return json; });
    });
  }

  function markStale(message) {
    stale = true;
    dirty = true;
    if (timer) window.clearTimeout(timer);
    staleEl.textContent = message + " ";
    var reload = document.createElement("a");
    reload.href = window.location.pathname;
    reload.id = "stale-reload";
    reload.textContent = "Reload this package";
    staleEl.appendChild(reload);
    staleEl.hidden = false;
    show("Not saved: another tab or window saved this package", "stale");
  }

  function save() {
    timer = null;
    if (stale || saving || !dirty) return;
    saving = true;
    var seen = edits;
    show("Saving…", "saving");
    post("save").then(function (json) {
      saving = false;
      if (json.page) pageField.value = json.page;
      if (json.ok) {
        revisionField.value = String(json.revision);
        if (edits === seen) dirty = false;
        show("Saved " + clock(json.saved_at), "saved");
        if (dirty) schedule();
      } else if (json.kind === "stale") {
        markStale(json.error);
      } else if (json.kind === "signed_out") {
        show("Not saved: you are signed out. Open your sign-in link in another tab, then come back here.", "error");
        retry();
      } else {
        show("Not saved: " + ((json.errors || [json.error]).join("; ")), "error");
        if (json.httpStatus >= 500 || json.httpStatus === 429) retry();
      }
    }, function () {
      saving = false;
      show("Not saved yet: the site cannot be reached. Retrying; keep this page open.", "offline");
      retry();
    });
  }

  function retry() {
    if (!timer && !stale) timer = window.setTimeout(save, RETRY_MS);
  }

  function schedule() {
    if (stale) return;
    if (timer) window.clearTimeout(timer);
    timer = window.setTimeout(save, SAVE_AFTER_MS);
  }

  form.addEventListener("input", function () {
    dirty = true;
    edits += 1;
    show("Unsaved changes", "dirty");
    schedule();
  });
  form.addEventListener("change", function () {
    dirty = true;
    edits += 1;
    schedule();
  });

  window.addEventListener("beforeunload", function (event) {
    if (dirty) {
      event.preventDefault();
      event.returnValue = "";
    }
  });

  // ---------------------------------------------------------------- checking before submit
  function problems() {
    var found = [];
    form.querySelectorAll("fieldset.criterion").forEach(function (fs) {
      var id = fs.id.replace(/^criterion-/, "");
      if (!fs.querySelector("input[type=radio]:checked")) found.push({ el: fs, text: id + ": choose a score from 0 to 4" });
      var critique = fs.querySelector("textarea");
      var length = critique.value.split(/\s+/).join(" ").trim().length;
      if (length < minCritique) {
        found.push({ el: critique, text: id + ": write a critique of at least " + minCritique + " characters (" + length + " so far)" });
      }
    });
    if (!form.querySelector("input[name=accept]:checked")) {
      found.push({ el: document.getElementById("accept"), text: "say whether a demanding manager would accept the package" });
    }
    return found;
  }

  function listProblems(found) {
    errorsEl.textContent = "";
    form.querySelectorAll(".invalid").forEach(function (el) { el.classList.remove("invalid"); });
    if (!found.length) { errorsEl.hidden = true; return; }
    var p = document.createElement("p");
    p.textContent = "Before you can submit:";
    var ul = document.createElement("ul");
    found.forEach(function (f) {
      var li = document.createElement("li");
      li.textContent = f.text;
      ul.appendChild(li);
      f.el.classList.add("invalid");
    });
    errorsEl.appendChild(p);
    errorsEl.appendChild(ul);
    errorsEl.hidden = false;
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var button = event.submitter;
    var action = button && button.value === "submit" ? "submit" : "save";
    if (stale) return;
    if (action === "save") {
      if (timer) window.clearTimeout(timer);
      dirty = true;
      save();
      return;
    }
    var found = problems();
    listProblems(found);
    if (found.length) {
      found[0].el.scrollIntoView({ block: "center" });
      return;
    }
    if (!window.confirm("Submit this grade? A submitted grade is final and cannot be changed.")) return;
    if (timer) window.clearTimeout(timer);
    show("Submitting…", "saving");
    post("submit").then(function (json) {
      if (json.ok) {
        dirty = false;
        window.location.assign(window.location.pathname + "?done=submitted");
      } else if (json.kind === "stale") {
        markStale(json.error);
      } else {
        show("Not submitted: " + ((json.errors || [json.error]).join("; ")), "error");
      }
    }, function () {
      show("Not submitted: the site cannot be reached. Your grade is still here; try again in a moment.", "offline");
    });
  });

  // ---------------------------------------------------------------- another tab on this package
  if (window.BroadcastChannel) {
    var channel = new BroadcastChannel("pilot-grading");
    channel.onmessage = function (msg) {
      var m = msg.data || {};
      if (m.assignment !== assignment || m.tab === tab) return;
      if (m.kind === "opened") {
        otherTabEl.hidden = false;
        channel.postMessage({ kind: "here", assignment: assignment, tab: tab, opened: opened });
      } else if (m.kind === "here") {
        otherTabEl.hidden = false;
      }
    };
    channel.postMessage({ kind: "opened", assignment: assignment, tab: tab, opened: opened });
  }

  // ---------------------------------------------------------------- time with a downloaded file
  var away = null;
  var dialog = document.getElementById("file-time");
  document.querySelectorAll("a.download").forEach(function (a) {
    a.addEventListener("click", function () { away = { file: a.dataset.file, since: null, clicked: Date.now() }; });
  });
  function left() { if (away && away.since === null) away.since = Date.now(); }
  function back() {
    if (!away || away.since === null) return;
    var ms = Date.now() - away.since;
    if (ms < AWAY_MIN_MS) { away.since = null; return; }
    var minutes = Math.round(ms / 60000);
    document.getElementById("file-time-name").textContent = away.file;
    document.getElementById("file-time-away").textContent = String(minutes);
    document.getElementById("file-time-minutes").value = String(minutes);
    dialog.dataset.file = away.file;
    dialog.hidden = false;
    away = null;
  }
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "hidden") left(); else back();
  });
  window.addEventListener("blur", left);
  window.addEventListener("focus", back);
  function record(minutes) {
    var data = new FormData();
    data.set("csrf", form.querySelector("input[name=csrf]").value);
    data.set("file", dialog.dataset.file || "");
    data.set("minutes", String(minutes));
    fetch(fileTimeUrl, { method: "POST", body: data, credentials: "same-origin" }).then(function (resp) {
      if (resp.ok) dialog.hidden = true;
    });
  }
  document.getElementById("file-time-record").addEventListener("click", function () {
    record(parseFloat(document.getElementById("file-time-minutes").value) || 0);
  });
  document.getElementById("file-time-none").addEventListener("click", function () { dialog.hidden = true; });
})();
